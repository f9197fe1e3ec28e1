"""A deployment's record under `$SHIPYARD_HOME/serve/deployments/`: what runs, and what was asked.

`<name>.json` is the controller's view (spec, versions and their replicas, the rollout, the
controller's pid and the router's URL), rewritten atomically, so `shipyard serve status` reads it
from any process. Other commands (`rollout`, `rollback`) leave a request in the same record; every
read-modify-write holds `<name>.lock` (flock), so the controller and a command never lose each
other's change. `<name>.decisions.jsonl` is the autoscaler's and the canary's decision log.
"""

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shipyard.durable import write_atomic
from shipyard.errors import InvalidInput, NotFound, StorageError
from shipyard.home import shipyard_home
from shipyard.serve.deploy.spec import NAME

MAX_RECORD = 4 << 20


def deployments_dir(home: Path | None = None) -> Path:
    return (home or shipyard_home()) / "serve" / "deployments"


class Records:
    """The deployment records of one `$SHIPYARD_HOME`."""

    def __init__(self, home: Path | None = None) -> None:
        self.root = deployments_dir(home)

    def path(self, name: str, suffix: str = ".json") -> Path:
        if not NAME.fullmatch(name):
            raise InvalidInput(f"deployment name {name[:60]!r}: allowed lowercase a-z 0-9 . _ -")
        return self.root / f"{name}{suffix}"

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json") if NAME.fullmatch(p.stem))

    def read(self, name: str) -> dict[str, Any]:
        path = self.path(name)
        try:
            with path.open("rb") as file:
                raw = file.read(MAX_RECORD + 1)
        except FileNotFoundError:
            raise NotFound(f"no deployment named {name!r} (under {self.root})") from None
        except OSError as exc:
            raise StorageError(f"deployment record {path}: {exc.strerror}") from None
        try:
            record = json.loads(raw)
        except ValueError as exc:
            raise StorageError(f"deployment record {path} is damaged ({exc})") from None
        if not isinstance(record, dict) or len(raw) > MAX_RECORD:
            raise StorageError(f"deployment record {path} is damaged (not one JSON object)")
        return record

    def write(self, name: str, record: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        record["updated"] = time.time()
        write_atomic(self.path(name), json.dumps(record, indent=1, sort_keys=True).encode())

    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[None]:
        """Hold the record's lock: between processes, and between threads of one process."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path(name, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def update(self, name: str, change: Any) -> dict[str, Any]:
        """Apply `change(record) -> None` to the record under its lock; returns the new record."""
        with self.locked(name):
            record = self.read(name)
            change(record)
            self.write(name, record)
            return record

    def log(self, name: str, entry: dict[str, Any]) -> None:
        """Append one decision (JSON line) to the deployment's log."""
        self.root.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"time": round(time.time(), 3), "deployment": name, **entry})
        with self.path(name, ".decisions.jsonl").open("a") as file:
            file.write(line + "\n")

    def decisions(self, name: str) -> list[dict[str, Any]]:
        path = self.path(name, ".decisions.jsonl")
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
