"""`pull`: ask the local daemon to fetch an artifact (or one tensor slice of it), follow its
progress, and optionally have it write the files into a directory (see `materialize`): the
daemon copies them from its store as the pieces arrive, so no piece crosses a socket twice.
"""

import asyncio
import base64
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from shipyard.distribute.config import Address, format_address
from shipyard.distribute.sources import PullSources, held_before
from shipyard.distribute.swarm_key import SwarmKey
from shipyard.distribute.tensors import covering, header_end, is_safetensors, select_pieces
from shipyard.distribute.wire import Header, PeerBusy, PeerGone, PeerUnavailable, request
from shipyard.errors import (
    IntegrityError,
    InvalidInput,
    NotFound,
    ShipyardError,
    StorageError,
)
from shipyard.hashing import sha256_hex
from shipyard.store import Manifest, PieceStore
from shipyard.store.get import staged
from shipyard.trust.signatures import MAX_FILE_BYTES

Progress = Callable[[int, int], None]  # (held bytes, wanted bytes)
# Told the manifest and signature file (None: none) as the daemon sent them, before anything is
# written; raises to refuse the artifact (see `shipyard.trust.gate`).
Admit = Callable[[Manifest, bytes | None], None]

POLL = 0.2
LISTEN_POLL = 0.05  # a refused connection costs next to nothing: look for a starting daemon often
WAIT = 0.5  # how long the daemon holds a materialize reply for its job to end
CONNECT_TIMEOUT = 2.0
REPLY_TIMEOUT = 60.0  # a first fetch waits while the daemon finds the manifest
ERRORS: dict[str, type[ShipyardError]] = {
    cls.__name__: cls for cls in (InvalidInput, NotFound, IntegrityError, StorageError)
}


@dataclass(frozen=True)
class PullResult:
    artifact: str
    manifest: Manifest
    pieces: int
    wanted_bytes: int
    bytes_from_peers: int  # over the daemon's life, as its status says
    bytes_from_origin: int
    # Pieces and bytes the daemon stored from each source (`origin`, or a peer's HOST:PORT)
    # while this pull waited, and those it held before: where this pull's pieces came from.
    sources: dict[str, tuple[int, int]] = field(default_factory=dict)
    already_held: tuple[int, int] = (0, 0)
    copy: str | None = None  # how the daemon wrote the files (see `copy`), with a destination


def pull(
    daemon: Address,
    artifact: str,
    dest: Path | None = None,
    tensors: str | None = None,
    progress: Progress | None = None,
    stall_timeout: float = 120.0,
    key: SwarmKey | None = None,
    verify: bool = False,
    wait_daemon: float = 10.0,
    admit: Admit | None = None,
) -> PullResult:
    """Fetch `artifact` through the daemon at `daemon`, waiting up to `wait_daemon` seconds
    for it to listen; raise if it makes no progress for `stall_timeout` seconds. With `dest`,
    the daemon (on this host, running as this user or root) writes the files there; `verify`
    has it hash the written bytes again. With `tensors`, fetch only the pieces that pattern
    needs. `key`: the swarm's key, when the daemon has one. `admit` accepts or refuses the
    artifact by its manifest and signatures before the daemon is asked to write anything."""
    if dest is not None and dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InvalidInput(f"destination {dest} exists and is not an empty directory")
    puller = _Puller(daemon, artifact, progress, stall_timeout, key)
    return asyncio.run(puller.run(dest, tensors, verify, wait_daemon, admit))


def daemon_status(daemon: Address, key: SwarmKey | None = None) -> Header:
    """What the daemon at `daemon` holds and is fetching: its address as peers know it, the
    live members it sees, and per artifact the `status` fields (see `Holding.status`)."""
    status = request(daemon, {"op": "status"}, CONNECT_TIMEOUT, REPLY_TIMEOUT, key=key)
    reply, _ = asyncio.run(status)
    return reply


class _Puller:
    def __init__(
        self,
        daemon: Address,
        artifact: str,
        progress: Progress | None,
        stall_timeout: float,
        key: SwarmKey | None,
    ) -> None:
        self.daemon = daemon
        self.artifact = artifact
        self.progress = progress
        self.stall_timeout = stall_timeout
        self.key = key
        self._asked: list[str] | None = []  # every piece asked for so far; None: all of them
        self._boot: object = None  # the daemon's start token when it was last asked
        self._job_boot: object = None  # ... when its materialize job was started
        self._sources = PullSources()
        self._held_before: object = None  # the have-map of the first fetch reply
        self._signatures: bytes | None = None  # the signature file the first reply carried

    async def run(
        self,
        dest: Path | None,
        tensors: str | None,
        verify: bool,
        wait_daemon: float,
        admit: Admit | None,
    ) -> PullResult:
        manifest = await self._first_fetch([] if tensors else None, wait_daemon)
        if admit is not None:
            admit(manifest, self._signatures)
        wanted = None
        if tensors and manifest.encryption is not None:
            raise InvalidInput(
                f"artifact {self.artifact} is confidential: --tensors reads safetensors headers, "
                "which are encrypted; pull it whole"
            )
        if tensors:
            wanted = select_pieces(manifest, await self._headers(manifest), tensors)
            await self._fetch(wanted)
        if dest is None:
            status = await self._wait(self._status, POLL)
        else:
            with staged(dest) as staging:
                status = await self._wait(lambda: self._materialize(staging, wanted, verify), 0)
        sizes = {ref.hash: ref.size for entry in manifest.files for ref in entry.pieces}
        chosen = set(sizes) if wanted is None else set(wanted)
        return PullResult(
            artifact=self.artifact,
            manifest=manifest,
            pieces=len(chosen),
            wanted_bytes=sum(sizes[h] for h in chosen),
            bytes_from_peers=int(status["bytes_from_peers"]),
            bytes_from_origin=int(status["bytes_from_origin"]),
            sources=self._sources.total(),
            already_held=held_before(self._held_before, sizes, wanted),
            copy=status.get("copy") if dest is not None else None,
        )

    async def _call(self, header: Header) -> tuple[Header, bytes | None]:
        return await request(self.daemon, header, CONNECT_TIMEOUT, REPLY_TIMEOUT, key=self.key)

    async def _first_fetch(self, pieces: list[str] | None, wait_daemon: float) -> Manifest:
        """The first fetch, asked again while nothing listens at the daemon's address (it may
        be starting alongside this pull), for up to `wait_daemon` seconds."""
        deadline = time.monotonic() + wait_daemon
        while True:
            try:
                return await self._fetch(pieces, signatures=True)
            except PeerGone:
                if time.monotonic() >= deadline:
                    raise StorageError(
                        f"no daemon listens at {format_address(self.daemon)} after "
                        f"{wait_daemon:g} s: start one with `shipyard peer serve`, or wait "
                        "longer with --wait-daemon"
                    ) from None
            await asyncio.sleep(min(LISTEN_POLL, max(0.0, deadline - time.monotonic())))

    async def _fetch(self, pieces: list[str] | None, signatures: bool = False) -> Manifest:
        reply, body = await self._call(
            {"op": "fetch", "artifact": self.artifact, "pieces": pieces, "signatures": signatures}
        )
        if signatures:
            self._signatures = _signature_file(reply.get("signatures"))
        if pieces is None or self._asked is None:
            self._asked = None
        else:
            self._asked = list(dict.fromkeys([*self._asked, *pieces]))
        if reply.get("boot") != self._boot:  # the first reply, or one from a restarted daemon
            self._boot = reply.get("boot")
            self._sources.restarted(reply.get("sources"))
            if self._held_before is None:
                self._held_before = reply.get("held")
        # The daemon verified the manifest already; check again rather than trust the socket.
        return PieceStore.parse_manifest(self.artifact, body or b"")

    async def _status(self) -> Header:
        status, _ = await self._call({"op": "status", "artifact": self.artifact})
        return status

    async def _materialize(self, staging: Path, pieces: list[str] | None, verify: bool) -> Header:
        """Start or follow the daemon's job writing the files into `staging`. A daemon that
        restarted meanwhile lost the job: the directory is made anew for the next one."""
        if self._job_boot != self._boot:
            if self._job_boot is not None:
                shutil.rmtree(staging, ignore_errors=True)
                staging.mkdir()
            self._job_boot = self._boot
        header = {
            "op": "materialize",
            "artifact": self.artifact,
            "dir": str(staging.resolve()),
            "pieces": pieces,
            "verify": verify,
            "wait": WAIT,
        }
        reply, _ = await self._call(header)
        return reply

    async def _wait(self, probe: Callable[[], Awaitable[Header]], pause: float) -> Header:
        """Ask `probe` (every `pause` seconds) until every wanted piece is held, or for a
        materialize job until it is done, reporting progress. A daemon that restarted meanwhile
        (its supervisor brought it back) has forgotten what it was asked: it is asked again, and
        resumes from the pieces on its disk. Time it is unreachable counts as time without
        progress."""
        last, last_change = None, time.monotonic()
        ask_again, problem = False, ""
        while True:
            try:
                if ask_again:
                    await self._fetch(self._asked)
                status = await probe()
                ask_again = status.get("boot") != self._boot
            except PeerUnavailable as exc:
                ask_again, problem = True, f"the daemon is unreachable ({exc})"
                await asyncio.sleep(POLL)
            if not ask_again:
                self._sources.seen(status.get("sources"))
                if status.get("store_error"):
                    raise StorageError(
                        f"artifact {self.artifact}: the daemon at {format_address(self.daemon)} "
                        f"stopped fetching it: {status['store_error']} (its verified pieces "
                        "stay; pull again once there is room)"
                    )
                if status.get("state") == "failed":
                    error = ERRORS.get(str(status.get("kind")), StorageError)
                    raise error(str(status.get("reason")))
                held, wanted = int(status["held_bytes"]), int(status["wanted_bytes"])
                if self.progress:
                    self.progress(held, wanted)
                if _finished(status):
                    return status
                if (held, status.get("bytes_done")) != last:
                    last, last_change = (held, status.get("bytes_done")), time.monotonic()
                problem = (
                    f"{status['missing_pieces']} pieces missing (no live peer or origin has them)"
                )
                if status.get("origin_error"):
                    problem += f"; the origin's last error: {status['origin_error']}"
                await asyncio.sleep(pause)
            if time.monotonic() - last_change > self.stall_timeout:
                raise StorageError(
                    f"artifact {self.artifact}: no progress for {self.stall_timeout:.0f} s: "
                    f"{problem}"
                )

    async def _piece(self, piece_hash: str) -> bytes:
        """A piece's bytes from the daemon, asked again while its upload slots are full."""
        deadline = time.monotonic() + self.stall_timeout
        while True:
            try:
                _, body = await self._call({"op": "piece", "hash": piece_hash})
                break
            except PeerBusy:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(POLL)
        data = body or b""
        if sha256_hex(data) != piece_hash:
            raise IntegrityError(f"piece {piece_hash[:16]} from the daemon does not match")
        return data

    async def _ensure(self, hashes: list[str]) -> dict[str, bytes]:
        await self._fetch(hashes)
        await self._wait(self._status, POLL)
        return {h: await self._piece(h) for h in dict.fromkeys(hashes)}

    async def _headers(self, manifest: Manifest) -> dict[str, bytes]:
        """The JSON header of every safetensors file: first pieces, then any the header spans."""
        files = [e for e in manifest.files if is_safetensors(e) and e.pieces]
        firsts = await self._ensure([e.pieces[0].hash for e in files])
        headers = {}
        for entry in files:
            end = header_end(entry, firsts[entry.pieces[0].hash])
            pieces = await self._ensure(covering(entry, 0, end))
            headers[entry.path] = b"".join(pieces[h] for h in covering(entry, 0, end))
        return headers


def _finished(status: Header) -> bool:
    """A materialize reply: its job is done; a status reply: no wanted piece is missing."""
    if "state" in status:
        return bool(status["state"] == "done")
    return bool(status["missing_pieces"] == 0)


def _signature_file(value: object) -> bytes | None:
    """The signature file a fetch reply carries, base64 in its header (null: none)."""
    if value is None:
        return None
    too_large = f"fetch reply: signatures is not base64 of at most {MAX_FILE_BYTES} bytes"
    if not isinstance(value, str) or len(value) > 2 * MAX_FILE_BYTES:
        raise InvalidInput(too_large)
    try:
        data = base64.b64decode(value, validate=True)
    except ValueError:
        raise InvalidInput("fetch reply: signatures is not base64") from None
    if len(data) > MAX_FILE_BYTES:
        raise InvalidInput(too_large)
    return data
