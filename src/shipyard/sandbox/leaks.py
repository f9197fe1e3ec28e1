"""Counting what sandboxes left behind on this host: processes, mounts, cgroups, records.

Used by the lifecycle tests and `benchmarks/sandbox_leaks.py`. A sandbox's processes are found
two ways that do not depend on the service being alive: bubblewrap's environment carries the
host's tag (`bwrap.MARKER`), and everything inside is in the sandbox's cgroups.
"""

from dataclasses import dataclass
from pathlib import Path

from shipyard.sandbox.bwrap import MARKER
from shipyard.sandbox.cgroups import Confinement, Group


@dataclass(frozen=True)
class Leaks:
    processes: list[int]
    mounts: list[str]
    cgroups: list[str]
    records: list[str]

    @property
    def total(self) -> int:
        return len(self.processes) + len(self.mounts) + len(self.cgroups) + len(self.records)


def tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment carries `tag` (prefix match: tags of one home)."""
    needle = f"{MARKER}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(v.startswith(needle) for v in environ.split(b"\0")):
            found.append(int(entry.name))
    return found


def count(tag: str, confinement: Confinement, state_dir: Path, cache: Path) -> Leaks:
    groups, members = [], []
    for hierarchy in confinement.hierarchies.values():
        parent = hierarchy.parent
        if parent.is_dir():
            for child in parent.iterdir():
                if child.is_dir():
                    groups.append(str(child))
                    members += Group(hierarchy, child).procs()
    processes = sorted(set(tagged_processes(tag)) | set(members))
    with open("/proc/self/mountinfo") as file:
        mounts = [line.split()[4] for line in file if str(cache) in line or "/.shipyard" in line]
    records = sorted(p.name for p in state_dir.glob("*.json")) if state_dir.is_dir() else []
    return Leaks(processes, mounts, groups, records)
