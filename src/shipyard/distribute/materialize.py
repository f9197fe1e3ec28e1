"""The daemon writes an artifact's files into a directory of its own host, from its store, for a
`pull --dest` running there: no piece crosses a socket, and none is hashed again (each was
verified before it was stored) unless the pull asks for `verify`.

A job starts when asked, even while pieces still arrive: each piece is copied to its offsets as
soon as it is held (see `copy`: a reflink or an in-kernel copy), into a temp name beside the
file, which is renamed to its own name once its last piece is in, its mode within the daemon's
umask and never writable by group or others (see `store.modes`). A file under its final name
is therefore always whole. The client polls the same request to follow the job (the reply
waits up to `wait` seconds for it to end); a job nobody asks about for `ABANDONED` seconds
ends, and a failed one removes the temp files it made.

Only a client on this host running as the daemon's user, or root, may ask (`local_peer`): the
daemon writes as itself, so anything more would let one user write where only another may.
"""

import asyncio
import contextlib
import errno
import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

from shipyard.distribute.context import Context
from shipyard.distribute.copy import Copier
from shipyard.distribute.holding import Holding
from shipyard.errors import IntegrityError, InvalidInput, NotFound, ShipyardError, StorageError
from shipyard.store import LocalBackend
from shipyard.store.local import why
from shipyard.store.manifest import FileEntry, PieceRef
from shipyard.store.modes import written_mode
from shipyard.store.pieces import piece_key

ABANDONED = 30.0  # seconds a job nobody asks about lives on
MAX_JOBS = 64  # jobs at once per daemon
MAX_WAIT = 2.0  # the longest a reply waits for its job to end
TICK = 0.1  # seconds between looks at the holding when no transfer ends meanwhile
AGAIN = 0.01  # ... while the daemon's news of an ended transfer is not yet cleared
_READ = 1 << 20


@dataclass
class _File:
    entry: FileEntry
    temp: str  # relative to the job's directory
    remaining: int  # pieces still to copy into it
    created: bool = False


@dataclass
class Job:
    """One directory being written. `state`: running, done or failed (then `kind` and
    `reason` say why, as the project's error class name and message)."""

    ctx: Context
    holding: Holding
    directory: str
    root: int  # the directory, open
    identity: tuple[int, int] | None  # its (device, inode): a directory made anew is a new job
    only: set[str] | None  # the pieces to write (None: all); the rest stay holes
    verify: bool
    state: str = "running"
    kind: str = ""
    reason: str = ""
    files_done: int = 0
    bytes_done: int = 0
    asked: float = field(default_factory=time.monotonic)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    copier: Copier = field(default_factory=Copier)
    _files: list[_File] = field(default_factory=list)
    _waiting: dict[int, list[tuple[_File, PieceRef]]] = field(default_factory=dict)
    _bits: int = 0  # the keys of `_waiting` as a have-map
    _task: "asyncio.Task[None] | None" = None

    def __post_init__(self) -> None:
        index = {h: i for i, h in enumerate(self.holding.hashes)}
        for number, entry in enumerate(self.holding.manifest.files):
            refs = [r for r in entry.pieces if self.only is None or r.hash in self.only]
            slot = _File(entry, _temp_name(entry.path, number), len(refs))
            self._files.append(slot)
            for ref in refs:
                self._waiting.setdefault(index[ref.hash], []).append((slot, ref))
        bits = bytearray(len(self.holding.hashes) // 8 + 1)
        for i in self._waiting:
            bits[i // 8] |= 1 << (i % 8)
        self._bits = int.from_bytes(bits, "little")
        self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def artifact(self) -> str:
        return self.holding.artifact

    def reply(self) -> dict[str, Any]:
        reply = {
            "state": self.state,
            "files": len(self._files),
            "files_done": self.files_done,
            "bytes_done": self.bytes_done,
            "copy": self.copier.method,
        }
        return reply | ({"kind": self.kind, "reason": self.reason} if self.kind else {})

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        try:
            await self._in_thread(self._copy, [])  # make every file; finish those with no piece
            while self._waiting:
                if self.holding.store_error:
                    raise StorageError(f"the daemon's store failed: {self.holding.store_error}")
                if time.monotonic() - self.asked > ABANDONED:
                    raise StorageError(f"nobody asked about it for {ABANDONED:.0f} s")
                if ready := self._ready():
                    await self._in_thread(self._copy, [self._waiting.pop(i) for i in ready])
                    continue
                await self._news()
            self.state = "done"
        except ShipyardError as exc:
            self._fail(type(exc).__name__, str(exc))
        except OSError as exc:
            self._fail("StorageError", f"cannot write {self.directory}: {why(exc)}")
        finally:
            if self.state != "done":
                self._remove_temps()
            os.close(self.root)
            self.ended.set()

    def _ready(self) -> list[int]:
        """The pieces waited for that are held now (bit operations: an artifact may have a
        hundred thousand pieces, and this runs at every transfer's end)."""
        ready = self.holding.held & self._bits
        self._bits &= ~ready
        indexes = []
        while ready:
            lowest = ready & -ready
            indexes.append(lowest.bit_length() - 1)
            ready ^= lowest
        return indexes

    async def _news(self) -> None:
        """Until a transfer ends, or `TICK` passes. The daemon's event says a transfer ended
        until its fetch loop clears it: while it is still set, look again a moment later."""
        if self.ctx.changed.is_set():
            await asyncio.sleep(AGAIN)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TICK):
                await self.ctx.changed.wait()

    async def _in_thread(self, work: Any, *args: Any) -> None:
        """Run blocking `work` on a thread; if cancelled meanwhile, let it finish first: it
        uses the directory's descriptor."""
        running = asyncio.get_running_loop().run_in_executor(None, work, *args)
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError:
            await asyncio.wait([running])
            raise

    def _fail(self, kind: str, reason: str) -> None:
        self.state, self.kind = "failed", kind
        self.reason = f"materialize {self.artifact[:12]} into {self.directory}: {reason}"

    def _copy(self, batches: list[list[tuple[_File, PieceRef]]]) -> None:
        """Copy newly held pieces into their files (blocking), creating any file not yet made
        (the first call makes them all); rename each file that is whole."""
        touched: dict[int, _File] = {id(f): f for f in self._files if not f.created}
        by_file: dict[int, list[PieceRef]] = {}
        for batch in batches:
            for slot, ref in batch:
                touched[id(slot)] = slot
                by_file.setdefault(id(slot), []).append(ref)
        for key, slot in touched.items():
            self._write(slot, by_file.get(key, []))

    def _write(self, slot: _File, refs: list[PieceRef]) -> None:
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC  # read back by `verify`
        if not slot.created:
            self._make_parents(slot.entry.path)
            fd = os.open(slot.temp, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=self.root)
            slot.created = True
            os.ftruncate(fd, slot.entry.size)  # unwritten ranges stay holes
        else:
            fd = os.open(slot.temp, flags, dir_fd=self.root)
        try:
            for ref in refs:
                self._place(fd, slot.entry, ref)
                slot.remaining -= 1
                self.bytes_done += ref.size
            if slot.remaining == 0:
                os.fchmod(fd, written_mode(slot.entry.mode))
                os.rename(slot.temp, slot.entry.path, src_dir_fd=self.root, dst_dir_fd=self.root)
                self.files_done += 1
        finally:
            os.close(fd)

    def _place(self, fd: int, entry: FileEntry, ref: PieceRef) -> None:
        backend = self.ctx.store.backend
        if isinstance(backend, LocalBackend):
            try:
                source = os.open(backend.path(piece_key(ref.hash)), os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                raise IntegrityError(f"piece {ref.hash[:16]} left the store") from None
            try:
                if os.fstat(source).st_size != ref.size:
                    raise IntegrityError(f"{entry.path}: stored piece {ref.hash[:16]} is corrupt")
                self.copier.copy(source, fd, ref.size, ref.offset)
            finally:
                os.close(source)
        else:  # a remote store: its get verifies the bytes on the way
            data = self.ctx.store.get_piece(ref.hash)
            os.pwrite(fd, data, ref.offset)
        if self.verify and _hash_range(fd, ref.offset, ref.size) != ref.hash:
            raise IntegrityError(
                f"{entry.path}: the piece at offset {ref.offset} ({ref.hash[:16]}) does not "
                "match its hash: the daemon's stored copy is corrupt"
            )

    def _make_parents(self, path: str) -> None:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            with contextlib.suppress(FileExistsError):
                os.mkdir("/".join(parts[:depth]), 0o777, dir_fd=self.root)

    def _remove_temps(self) -> None:
        for slot in self._files:
            if slot.created and slot.remaining:
                with contextlib.suppress(OSError):
                    os.unlink(slot.temp, dir_fd=self.root)


class Materializations:
    """The daemon's jobs, by directory."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.jobs: dict[str, Job] = {}

    async def ask(
        self, holding: Holding, header: dict[str, Any], uid: int | None
    ) -> dict[str, Any]:
        """Start the job `header` describes, or follow it if it runs; the reply says how far
        it is, once it has ended or `header["wait"]` seconds have passed. A job that ended is
        forgotten once its end was told. Refusals come back as a failed job."""
        directory = header["dir"]
        try:
            job = self.jobs.get(directory)
            if job is not None and job.identity != _identity(directory):
                # The client made the directory anew (its daemon had restarted meanwhile, or
                # so it believed): the old job writes into what was removed.
                await job.stop()
                del self.jobs[directory]
                job = None
            if job is None:
                job = self._start(holding, header, uid)
                self.jobs[directory] = job
            elif job.artifact != holding.artifact:
                raise InvalidInput(f"{directory} is being written for {job.artifact[:12]}")
        except ShipyardError as exc:
            return {"state": "failed", "kind": type(exc).__name__, "reason": str(exc)}
        job.asked = time.monotonic()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(float(header.get("wait", 0)), MAX_WAIT)):
                await job.ended.wait()
        if job.ended.is_set():
            self.jobs.pop(directory, None)
        return job.reply()

    async def stop(self) -> None:
        for job in self.jobs.values():
            await job.stop()

    def _start(self, holding: Holding, header: dict[str, Any], uid: int | None) -> Job:
        if uid is None:
            raise InvalidInput(
                "materialize: only a client on this host, in this network namespace, may ask "
                "(pull --dest needs the daemon of its own host)"
            )
        if uid not in (os.geteuid(), 0):
            raise InvalidInput(
                f"materialize: the client runs as uid {uid} and this daemon as uid "
                f"{os.geteuid()}: it writes files only for its own user or root"
            )
        if holding.manifest.encryption is not None:
            raise InvalidInput(
                f"materialize: artifact {holding.artifact} is confidential: this daemon holds "
                "only its ciphertext and writes no files of it; pull without --dest, then "
                "`shipyard artifact get` with the key from this daemon's store"
            )
        for directory, job in list(self.jobs.items()):  # ended, and never asked about again
            if job.ended.is_set() and time.monotonic() - job.asked > ABANDONED:
                del self.jobs[directory]
        if len(self.jobs) >= MAX_JOBS:
            raise StorageError(f"materialize: {MAX_JOBS} jobs are running already")
        pieces = header.get("pieces")
        only = None if pieces is None else set(pieces)
        _check_pieces(holding, only)
        root = _open_empty_directory(header["dir"])
        stat = os.fstat(root)
        identity = (stat.st_dev, stat.st_ino)
        verify = header.get("verify") is True
        return Job(self.ctx, holding, header["dir"], root, identity, only, verify)


def _check_pieces(holding: Holding, only: set[str] | None) -> None:
    """Every piece to write must be held or being fetched, or the job would wait forever."""
    for index, piece_hash in enumerate(holding.hashes):
        if only is not None and piece_hash not in only:
            continue
        if not holding.has(index) and index not in holding.wanted:
            raise InvalidInput(
                f"materialize: piece {piece_hash[:16]} of {holding.artifact[:12]} is neither "
                "held nor being fetched here (fetch it first)"
            )
    if only is not None and (unknown := only - set(holding.sizes)):
        raise InvalidInput(f"materialize: piece {min(unknown)[:16]} is not in the artifact")


def _open_empty_directory(path: str) -> int:
    """The directory at absolute `path`, open: it must exist, be empty, and not be a link."""
    if not os.path.isabs(path) or "\x00" in path:
        raise InvalidInput(f"materialize: directory {path[:200]!r} is not an absolute path")
    try:
        root = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotFound(f"materialize: directory {path} does not exist") from None
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            raise InvalidInput(f"materialize: {path} is not a directory (or is a link)") from None
        raise StorageError(f"materialize: cannot open {path}: {why(exc)}") from None
    try:
        if os.listdir(root):
            raise InvalidInput(f"materialize: directory {path} is not empty")
        if not os.access(path, os.W_OK | os.X_OK, effective_ids=True):
            raise StorageError(f"materialize: this daemon (uid {os.geteuid()}) cannot write {path}")
    except BaseException:
        os.close(root)
        raise
    return root


def _identity(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _temp_name(path: str, number: int) -> str:
    """A name beside the file's own that no manifest path can take: manifests refuse
    backslashes. Its `number` in the manifest keeps it short and unique."""
    parent = path.rpartition("/")[0]
    name = f".shipyard\\partial-{number}"
    return f"{parent}/{name}" if parent else name


def _hash_range(fd: int, offset: int, size: int) -> str:
    digest = hashlib.sha256()
    done = 0
    while done < size:
        data = os.pread(fd, min(_READ, size - done), offset + done)
        if not data:
            break
        digest.update(data)
        done += len(data)
    return digest.hexdigest()
