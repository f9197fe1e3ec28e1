"""Replica processes: start one (the engine's `python -m shipyard.serve.replica`), wait for its
`listening` line, read its /health, stop it."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from shipyard.children import forget, keep
from shipyard.errors import StorageError
from shipyard.secretfile import ensure_private_dir
from shipyard.serve.deploy.spec import DeploymentSpec

_LISTENING = re.compile(r"listening (http://127\.0\.0\.1:\d{1,5})\s*$")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Replica:
    name: str
    version: str
    artifact: str
    process: subprocess.Popen[str] | None  # None: an external server (engine openai)
    url: str = ""
    started: float = field(default_factory=time.time)
    load_s: float = 0.0  # from start to `listening`

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.url,
            "pid": self.pid,
            "started": self.started,
            "load_s": round(self.load_s, 3),
        }


def replica_command(
    spec: DeploymentSpec, artifact: str, name: str, key_hashes: tuple[str, ...] = ()
) -> list[str]:
    """The replica's command line; `key_hashes`: the API keys it accepts (none: open)."""
    command = [sys.executable, "-m", "shipyard.serve.replica", "--model", artifact]
    for key_hash in key_hashes:
        command += ["--api-key-hash", key_hash]
    command += ["--port", "0", "--name", name, "--served-model-name", spec.name]
    for adapter, ref in sorted(spec.adapters.items()):
        command += ["--adapter", f"{adapter}={ref}"]
    if spec.engine.max_batch is not None:
        command += ["--max-batch", str(spec.engine.max_batch)]
    if spec.engine.kv_cache_mib is not None:
        command += ["--kv-cache-mib", str(spec.engine.kv_cache_mib)]
    return command


def launch(
    command: list[str], name: str, version: str, artifact: str, logs: Path, home: Path
) -> Replica:
    """Start a replica process on `home`'s workspace, one thread for torch, nothing from a hub;
    its stderr goes to `logs/<name>.log`."""
    ensure_private_dir(logs)  # a replica's log may quote prompts: its user's alone
    env = {**os.environ, "SHIPYARD_HOME": str(home), "OMP_NUM_THREADS": "1"}
    env.update(MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(logs / f"{name}.log", flags, 0o600), "ab") as log:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
            env=env, start_new_session=True,
        )  # fmt: skip
    # Dies with the controller, whichever thread started it (so no parent-death signal, which
    # follows the thread): nothing adopts a replica after a restart, so one left would leak.
    keep(process.pid, signal.SIGTERM)
    return Replica(name, version, artifact, process)


def wait_listening(replica: Replica, timeout: float) -> Replica:
    """Block until the replica prints `listening URL`; StorageError if it exits or times out."""
    process = replica.process
    assert process is not None and process.stdout is not None
    found: list[str] = []
    ready = threading.Event()
    threading.Thread(target=_read, args=(process.stdout, found, ready), daemon=True).start()
    if not ready.wait(timeout) or not found:
        stop(replica)
        why = "timed out" if not ready.is_set() else f"exited with {process.wait()}"
        raise StorageError(
            f"replica {replica.name} {why} before listening (after {timeout:g} s at most); "
            "see its log under $SHIPYARD_HOME/serve/logs/"
        )
    replica.url = found[0]
    replica.load_s = time.time() - replica.started
    return replica


def _read(stream: IO[str], found: list[str], ready: threading.Event) -> None:
    """Find the `listening` line, then keep draining stdout so the replica never blocks on it."""
    for line in stream:
        match = _LISTENING.search(line) if not found else None
        if match:
            found.append(match.group(1))
            ready.set()
    ready.set()


def stop(replica: Replica, grace: float = 5.0) -> None:
    process = replica.process
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    forget(process.pid)


def health(url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """The replica's /health JSON, or None when it does not answer sensibly."""
    try:
        with _OPENER.open(f"{url}/health", timeout=timeout) as response:
            data = json.loads(response.read(1 << 20))
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def start_router(home: Path, timeout: float = 60.0) -> Replica:
    """A router process (`python -m shipyard.serve.router`) on a free loopback port."""
    command = [sys.executable, "-m", "shipyard.serve.router", "--port", "0"]
    return wait_listening(launch(command, "router", "", "", logs_dir(home), home), timeout)


def logs_dir(home: Path) -> Path:
    return home / "serve" / "logs"
