"""What a sandbox may use (`Limits`) and how an exec ended (`Result`, with an explicit outcome).

Both cross the service's socket as JSON, so both are parsed from hostile dicts: every field is
checked for type and range and a bad one is refused by name (InvalidInput), never coerced.
"""

import base64
import math
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

from shipyard.errors import InvalidInput

MIB = 1 << 20


class Outcome(StrEnum):
    """How an exec ended. Exactly one; the first that applies in this order wins."""

    OUTPUT_LIMIT = "output-limit"  # stdout+stderr passed the cap; the command was killed
    MEMORY_LIMIT = "memory-limit"  # the memory cap's OOM killer fired during the exec
    PIDS_LIMIT = "pids-limit"  # a fork was refused at the process cap
    TIMEOUT = "timeout"  # the wall-clock timeout passed; the command was killed
    DISK_LIMIT = "disk-limit"  # the writable layer is full (bytes or files)
    KILLED = "killed"  # ended by a signal, or the sandbox was closed or reaped under it
    NONZERO_EXIT = "nonzero-exit"
    OK = "ok"


@dataclass(frozen=True)
class Limits:
    """Caps for one sandbox. Memory and pids are enforced by cgroups (rlimits where cgroups are
    unavailable); disk and files are the writable tmpfs's size and inode count (every file,
    directory and link is one); output is per exec (stdout + stderr)."""

    memory_mib: int = 256
    pids: int = 64
    cpus: float = 1.0
    disk_mib: int = 64
    files: int = 16384
    output_bytes: int = 1 * MIB
    network: bool = False  # True is refused: no sandbox gets a network in this version

    def __post_init__(self) -> None:
        _int_in(self.memory_mib, "memory_mib", 16, 1 << 20)
        _int_in(self.pids, "pids", 1, 1 << 16)
        _int_in(self.disk_mib, "disk_mib", 1, 1 << 20)
        _int_in(self.files, "files", 16, 1 << 20)
        _int_in(self.output_bytes, "output_bytes", 0, 1 << 30)
        cpus = self.cpus
        if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not math.isfinite(cpus):
            raise InvalidInput(f"limits.cpus: expected a number, not {cpus!r}")
        if not 0.01 <= cpus <= 1024:
            raise InvalidInput(f"limits.cpus: {cpus} is outside 0.01..1024")
        if self.network is not False:
            raise InvalidInput("limits.network: sandboxes have no network (only false is allowed)")

    @classmethod
    def from_json(cls, raw: Any) -> "Limits":
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise InvalidInput(f"limits: expected an object, not {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidInput(f"limits: unknown field {unknown[0]!r} (known: {sorted(known)})")
        return cls(**raw)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def key(self) -> tuple[Any, ...]:
        return tuple(asdict(self).values())


def _int_in(value: Any, name: str, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"limits.{name}: expected an integer, not {value!r}")
    if not low <= value <= high:
        raise InvalidInput(f"limits.{name}: {value} is outside {low}..{high}")


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    exit_code: int | None  # None when a signal ended it
    signal: int | None
    stdout: bytes
    stderr: bytes
    seconds: float
    detail: str = ""  # why, in words, when the outcome is not ok
    leftover_killed: int = 0  # background processes still running when the command ended

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["outcome"] = self.outcome.value
        out["stdout"] = base64.b64encode(self.stdout).decode()
        out["stderr"] = base64.b64encode(self.stderr).decode()
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Result":
        try:
            return cls(
                outcome=Outcome(raw["outcome"]),
                exit_code=raw["exit_code"],
                signal=raw["signal"],
                stdout=base64.b64decode(raw["stdout"]),
                stderr=base64.b64decode(raw["stderr"]),
                seconds=float(raw["seconds"]),
                detail=str(raw.get("detail", "")),
                leftover_killed=int(raw.get("leftover_killed", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"exec result: malformed ({exc})") from None
