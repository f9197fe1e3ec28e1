"""Memory, pids and CPU caps from cgroups: v2 where the host has it, v1 where that is what it has.

`Confinement.detect` finds, per controller, a hierarchy this process can make child groups in
(under its own group, so the host's limits on the service still hold), proves it by making a
probe group and writing a limit, and records exactly why a controller is missing otherwise. Each
sandbox gets one `Group` per controller under `<own>/shipyard-sandbox-<tag>/`; released groups are
kept (emptied, counters read as deltas) and handed to the next sandbox, so a start pays a few
writes, not a mkdir per controller.
"""

import contextlib
import errno
import os
import resource
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from shipyard.sandbox.limits import Limits
from shipyard.sandbox.state import alive

CONTROLLERS = ("memory", "pids", "cpu")
OVERHEAD_PIDS = 2  # bubblewrap outside, the agent (the namespace's init)
_CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Hierarchy:
    controller: str
    version: int  # 1 or 2
    parent: Path  # sandbox groups are made here


@dataclass
class Confinement:
    """Which mechanism enforces each cap on this host, and why a cgroup one is missing."""

    hierarchies: dict[str, Hierarchy] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @classmethod
    def detect(cls, tag: str, root: Path | None = None) -> "Confinement":
        """Probe each controller; `root` replaces /sys/fs/cgroup (tests point it elsewhere)."""
        found = cls()
        mounts = _cgroup_mounts()
        own = _own_groups()
        for name in CONTROLLERS:
            try:
                hierarchy = _hierarchy(name, mounts, own, tag, root)
                _probe(hierarchy)
                found.hierarchies[name] = hierarchy
            except _Missing as exc:
                found.missing[name] = str(exc)
            except OSError as exc:
                found.missing[name] = f"cannot use the {name} cgroup: {exc}"
        return found

    def mechanism(self, controller: str) -> str:
        hierarchy = self.hierarchies.get(controller)
        if hierarchy:
            return f"cgroup v{hierarchy.version}"
        return {"memory": "RLIMIT_AS", "pids": "RLIMIT_NPROC", "cpu": "RLIMIT_CPU"}[controller]

    def describe(self) -> list[str]:
        """One line per cap: what enforces it, and for a fallback what was missing."""
        lines = []
        for name in CONTROLLERS:
            line = f"{name}: {self.mechanism(name)}"
            if name in self.hierarchies:
                line += f" ({self.hierarchies[name].parent})"
            else:
                line += f" (fallback: {self.missing[name]})"
            lines.append(line)
        return lines

    def rlimits(self, limits: Limits, timeout: float) -> dict[int, int]:
        """Rlimits for one exec: always core and file size; the fallbacks for missing cgroups."""
        out = {resource.RLIMIT_CORE: 0, resource.RLIMIT_FSIZE: limits.disk_mib << 20}
        if "memory" not in self.hierarchies:
            out[resource.RLIMIT_AS] = limits.memory_mib << 20
        if "pids" not in self.hierarchies:
            out[resource.RLIMIT_NPROC] = limits.pids + OVERHEAD_PIDS
        if "cpu" not in self.hierarchies:
            out[resource.RLIMIT_CPU] = int(timeout * limits.cpus) + 1
        return out


class _Missing(Exception):
    pass


def _cgroup_mounts() -> list[tuple[str, Path, set[str]]]:
    """(fstype, mount point, options) of every cgroup and cgroup2 mount, from mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as file:
        for line in file:
            left, _, right = line.partition(" - ")
            fstype, _, options = [*right.split(), "", "", ""][:3]
            if fstype in ("cgroup", "cgroup2"):
                out.append((fstype, Path(left.split()[4]), set(options.split(","))))
    return out


def _own_groups() -> dict[str, str]:
    """controller (or "" for v2) → this process's group path, from /proc/self/cgroup."""
    out = {}
    with open("/proc/self/cgroup") as file:
        for line in file:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                out[name] = path
    return out


def _hierarchy(
    name: str,
    mounts: list[tuple[str, Path, set[str]]],
    own: dict[str, str],
    tag: str,
    root: Path | None,
) -> Hierarchy:
    def relocate(point: Path) -> Path:
        return root / point.relative_to("/sys/fs/cgroup") if root else point

    for fstype, point, options in mounts:
        if fstype == "cgroup" and name in options and name in own:
            return Hierarchy(name, 1, relocate(point) / own[name].lstrip("/") / tag)
    for fstype, point, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        mine = relocate(point) / own[""].lstrip("/")
        available = (mine / "cgroup.controllers").read_text().split()
        if name not in available:
            continue
        _enable(mine, name)
        parent = mine / tag
        parent.mkdir(exist_ok=True)
        _enable(parent, name)
        return Hierarchy(name, 2, parent)
    if any(fstype == "cgroup2" for fstype, _, _ in mounts):
        raise _Missing(
            f"no cgroup v1 {name} hierarchy is mounted and the cgroup v2 hierarchy does not offer "
            f"{name} to this process's group (is it bound to v1, or not delegated?)"
        )
    raise _Missing(f"no cgroup hierarchy with the {name} controller is mounted")


def _enable(group: Path, name: str) -> None:
    control = group / "cgroup.subtree_control"
    if name in control.read_text().split():
        return
    try:
        control.write_text(f"+{name}")
    except OSError as exc:
        hint = (
            "the group has processes of its own (cgroup v2 allows controllers only for groups "
            "without them): run the service in a delegated group, e.g. `systemd-run --user "
            "--scope -p Delegate=yes shipyard sandbox serve`"
            if exc.errno == errno.EBUSY
            else exc.strerror
        )
        raise _Missing(f"cannot enable {name} in {control}: {hint}") from None


def _probe(hierarchy: Hierarchy) -> None:
    """Make a group, write a limit, read it back, remove it: what every sandbox will do."""
    try:
        hierarchy.parent.mkdir(exist_ok=True)
        probe = hierarchy.parent / f"probe-{os.getpid()}-{secrets.token_hex(3)}"
        probe.mkdir()
    except OSError as exc:
        raise _Missing(f"cannot make a {hierarchy.controller} group in {hierarchy.parent}: "
                       f"{exc.strerror}") from None  # fmt: skip
    try:
        group = Group(hierarchy, probe)
        group.apply(Limits(memory_mib=64, pids=8, cpus=0.5))
    except OSError as exc:
        raise _Missing(f"cannot set a {hierarchy.controller} limit in {probe}: {exc}") from None
    finally:
        probe.rmdir()


@dataclass(frozen=True)
class Group:
    hierarchy: Hierarchy
    path: Path

    def apply(self, limits: Limits) -> None:
        v1 = self.hierarchy.version == 1
        match self.hierarchy.controller:
            case "memory":
                cap = str(limits.memory_mib << 20)
                if v1:
                    self._write("memory.limit_in_bytes", cap)
                    with contextlib.suppress(FileNotFoundError):  # no swap accounting
                        self._write("memory.memsw.limit_in_bytes", cap)
                else:
                    self._write("memory.max", cap)
                    with contextlib.suppress(FileNotFoundError):
                        self._write("memory.swap.max", "0")
            case "pids":
                self._write("pids.max", str(limits.pids + OVERHEAD_PIDS))
            case "cpu":
                quota = max(1000, int(limits.cpus * _CPU_PERIOD_US))
                if v1:
                    self._write("cpu.cfs_period_us", str(_CPU_PERIOD_US))
                    self._write("cpu.cfs_quota_us", str(quota))
                else:
                    self._write("cpu.max", f"{quota} {_CPU_PERIOD_US}")

    def _write(self, name: str, value: str) -> None:
        path = self.path / name
        path.write_text(value)
        if self.hierarchy.version == 1 and path.read_text().strip() != value:
            raise OSError(f"{path} reads back {path.read_text().strip()!r}, not {value!r}")

    def events(self) -> int:
        """How often this group's cap has bitten: OOM kills (memory), refused forks (pids)."""
        match self.hierarchy.controller:
            case "memory":
                name = "memory.oom_control" if self.hierarchy.version == 1 else "memory.events"
                return _field(self.path / name, "oom_kill")
            case "pids":
                return _field(self.path / "pids.events", "max")
        return 0

    def procs(self) -> list[int]:
        try:
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def kill(self, deadline_s: float = 5.0) -> bool:
        """SIGKILL every member until none is left (a fork bomb refills it); whether emptied."""
        with contextlib.suppress(FileNotFoundError, OSError):
            (self.path / "cgroup.kill").write_text("1")  # v2, Linux 5.14+: all at once
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            members = self.procs()
            if not members:
                return True
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)
        return not self.procs()

    def remove(self) -> None:
        for _ in range(100):  # a killed member leaves the group a moment after it dies
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                self.kill(0.05)


def _field(path: Path, key: str) -> int:
    for line in path.read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


class GroupPool:
    """Pre-created sandbox groups: one `Group` per enforced controller, reused once emptied.

    It also keeps the CPU weight of the parent group at one process's weight per sandbox with an
    exec running (`busy`): the scheduler weighs a group as a whole against its siblings, so on a
    busy host all sandboxes together would otherwise get the share of a single process, and
    weight for idle ones would take more than they use.
    """

    def __init__(self, confinement: Confinement, keep: int = 64) -> None:
        self.confinement = confinement
        self.keep = keep
        self._free: list[list[Group]] = []
        self._busy = 0
        self._lock = threading.Lock()

    def busy(self, step: int) -> None:
        """Count an exec in (+1) or out (-1) and re-weigh the parent."""
        with self._lock:
            self._busy += step
            self._weigh()

    def _weigh(self) -> None:
        cpu = self.confinement.hierarchies.get("cpu")
        if cpu is None:
            return
        busy = max(1, self._busy)
        name, value = (
            ("cpu.shares", min(1024 * busy, 262144))
            if cpu.version == 1
            else ("cpu.weight", min(100 * busy, 10000))
        )
        with contextlib.suppress(OSError):
            (cpu.parent / name).write_text(str(value))

    def acquire(self, limits: Limits) -> list[Group]:
        with self._lock:
            groups = self._free.pop() if self._free else None
        if groups is None:
            name = f"s-{secrets.token_hex(6)}"
            groups = [Group(h, h.parent / name) for h in self.confinement.hierarchies.values()]
            for group in groups:
                group.path.mkdir()
        for group in groups:
            group.apply(limits)
        return groups

    def release(self, groups: list[Group]) -> bool:
        """Kill what is left in `groups` and keep them for reuse; False if some would not empty."""
        emptied = all([group.kill() for group in groups])
        with self._lock:
            if emptied and len(self._free) < self.keep:
                self._free.append(groups)
                return True
        for group in groups:
            with contextlib.suppress(OSError):
                group.remove()
        return emptied

    def drain(self) -> None:
        with self._lock:
            free, self._free = self._free, []
        for groups in free:
            for group in groups:
                group.remove()


def sweep(confinement: Confinement, dead_siblings: bool = False) -> int:
    """Kill and remove every group under this service's parents (after a restart); how many
    sandboxes' groups there were. With `dead_siblings`, also the parents `<parent>-p<pid>` of
    in-process hosts (`shipyard.sandbox.create`) on the same home whose process is gone."""
    names = set()
    for hierarchy in confinement.hierarchies.values():
        parents = [hierarchy.parent]
        if dead_siblings and hierarchy.parent.parent.is_dir():
            siblings = hierarchy.parent.parent.glob(f"{hierarchy.parent.name}-p*")
            parents += [p for p in siblings if not alive(p.name.rpartition("-p")[2])]
        for parent in parents:
            if not parent.is_dir():
                continue
            for child in parent.iterdir():
                if child.is_dir():
                    group = Group(hierarchy, child)
                    group.kill()
                    with contextlib.suppress(OSError):
                        group.remove()
                    names.add(child.name)
            if parent != hierarchy.parent:
                with contextlib.suppress(OSError):
                    parent.rmdir()
    return len(names)
