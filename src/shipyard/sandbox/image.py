"""Sandbox images: the read-only base a sandbox sees as its filesystem.

`host` (the default) is this host's own /usr with its /bin, /lib, /lib64 and /sbin, so Python and
the system's tools work with nothing to download. Any other image is an artifact: a directory tree
whose top-level entries are bound read-only at `/<entry>`. A tree without `usr/` is a layer over
the host's base (a task's packages under `opt/`, say); a tree with one is a whole root.

An artifact image is materialized once per host into a cache keyed by its id and shared, read-only,
by every sandbox that uses it. The cache is `$SHIPYARD_SANDBOX_CACHE`, else `/var/cache/shipyard/
sandbox-images` for root (sandboxes run as an unprivileged user, who must be able to reach it;
a root home is closed to them), else `$SHIPYARD_HOME/sandbox/images`.
"""

import contextlib
import fcntl
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard.errors import InvalidInput, StorageError
from shipyard.home import shipyard_home

if TYPE_CHECKING:
    from shipyard.workspace import Workspace

HOST = "host"
_BASE_LINKS = ("bin", "lib", "lib64", "sbin", "lib32", "libx32")
_RESERVED = {"proc", "dev", "work", "tmp", ".shipyard"}  # the sandbox makes these itself


@dataclass(frozen=True)
class Image:
    id: str  # "host" or an artifact id
    mounts: tuple[tuple[str, str, str], ...]  # ("--ro-bind" | "--symlink", source, dest)

    def args(self) -> list[str]:
        return [word for mount in self.mounts for word in mount]


def host_mounts() -> list[tuple[str, str, str]]:
    """This host's /usr read-only, with its /bin, /lib... as the links or directories they are."""
    mounts = [("--ro-bind", "/usr", "/usr")]
    for name in _BASE_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            mounts.append(("--symlink", os.readlink(path), f"/{name}"))
        elif path.is_dir():
            mounts.append(("--ro-bind", str(path), f"/{name}"))
    return mounts


def cache_dir() -> Path:
    if os.environ.get("SHIPYARD_SANDBOX_CACHE"):
        return Path(os.environ["SHIPYARD_SANDBOX_CACHE"])
    if os.geteuid() == 0:
        return Path("/var/cache/shipyard/sandbox-images")
    return shipyard_home() / "sandbox" / "images"


class ImageCache:
    """Resolves image references to mounts, materializing artifacts once per host."""

    def __init__(self, home: Path, root: Path | None = None) -> None:
        self.home = home
        self.root = root or cache_dir()
        self._lock = threading.Lock()
        self._known: dict[str, Image] = {HOST: Image(HOST, tuple(host_mounts()))}

    def resolve(self, ref: str) -> Image:
        if not isinstance(ref, str) or not ref:
            raise InvalidInput(f"image: expected {HOST!r} or an artifact reference, not {ref!r}")
        with self._lock:
            if ref in self._known:
                return self._known[ref]
            image = self._materialize(ref)
            if ref == image.id:  # an id names the same tree for ever; an alias may move
                self._known[ref] = image
            return image

    def _materialize(self, ref: str) -> Image:
        from shipyard.workspace import Workspace  # only artifact images need the catalog

        ws = Workspace.open(self.home)
        try:
            artifact_id = ws.resolve(ref)
            tree = self.root / artifact_id
            if not tree.is_dir():
                self._fetch(ws, artifact_id, tree)
        finally:
            ws.close()
        entries = sorted(p.name for p in tree.iterdir())
        clash = sorted(_RESERVED & set(entries))
        if clash:
            raise InvalidInput(
                f"image {ref}: top-level {clash[0]!r} is reserved for the sandbox "
                f"({', '.join(sorted(_RESERVED))})"
            )
        base = [] if "usr" in entries else host_mounts()
        mounts = [m for m in base if m[2].lstrip("/") not in entries]  # the image's own wins
        mounts += [("--ro-bind", str(tree / name), f"/{name}") for name in entries]
        return Image(artifact_id, tuple(mounts))

    def _fetch(self, ws: "Workspace", artifact_id: str, tree: Path) -> None:
        """Materialize under a host-wide lock, so concurrent services fetch it once."""
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o755)
            lock = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StorageError(f"image cache {self.root}: {exc.strerror}") from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not tree.is_dir():
                ws.get(artifact_id, tree)
                with contextlib.suppress(OSError):
                    tree.chmod(0o755)
        finally:
            os.close(lock)
