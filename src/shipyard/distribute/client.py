"""`pull`: ask the local daemon to fetch an artifact (or one tensor slice of it), follow its
progress, and optionally write the files to a directory, verifying every piece again.
"""

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shipyard.distribute.config import Address, format_address
from shipyard.distribute.swarm_key import SwarmKey
from shipyard.distribute.tensors import covering, header_end, is_safetensors, select_pieces
from shipyard.distribute.wire import Header, PeerUnavailable, request
from shipyard.errors import IntegrityError, InvalidInput, StorageError
from shipyard.hashing import sha256_hex
from shipyard.store import Manifest, PieceStore
from shipyard.store.get import staged

Progress = Callable[[int, int], None]  # (held bytes, wanted bytes)

POLL = 0.2
CONNECT_TIMEOUT = 2.0
REPLY_TIMEOUT = 60.0  # a first fetch waits while the daemon finds the manifest


@dataclass(frozen=True)
class PullResult:
    artifact: str
    manifest: Manifest
    pieces: int
    wanted_bytes: int
    bytes_from_peers: int
    bytes_from_origin: int


def pull(
    daemon: Address,
    artifact: str,
    dest: Path | None = None,
    tensors: str | None = None,
    progress: Progress | None = None,
    stall_timeout: float = 120.0,
    key: SwarmKey | None = None,
) -> PullResult:
    """Fetch `artifact` through the daemon at `daemon`; raise if it makes no progress for
    `stall_timeout` seconds. With `tensors`, fetch only the pieces that pattern needs. `key`:
    the swarm's key, when the daemon has one."""
    if dest is not None and dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InvalidInput(f"destination {dest} exists and is not an empty directory")
    puller = _Puller(daemon, artifact, progress, stall_timeout, key)
    return asyncio.run(puller.run(dest, tensors))


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

    async def run(self, dest: Path | None, tensors: str | None) -> PullResult:
        manifest = await self._fetch([] if tensors else None)
        wanted = None
        if tensors:
            wanted = select_pieces(manifest, await self._headers(manifest), tensors)
            await self._fetch(wanted)
        status = await self._wait()
        if dest is not None:
            await self._write(manifest, dest, set(wanted) if wanted is not None else None)
        return PullResult(
            artifact=self.artifact,
            manifest=manifest,
            pieces=int(status["wanted_pieces"]),
            wanted_bytes=int(status["wanted_bytes"]),
            bytes_from_peers=int(status["bytes_from_peers"]),
            bytes_from_origin=int(status["bytes_from_origin"]),
        )

    async def _call(self, header: Header) -> tuple[Header, bytes | None]:
        return await request(self.daemon, header, CONNECT_TIMEOUT, REPLY_TIMEOUT, key=self.key)

    async def _fetch(self, pieces: list[str] | None) -> Manifest:
        reply, body = await self._call({"op": "fetch", "artifact": self.artifact, "pieces": pieces})
        if pieces is None or self._asked is None:
            self._asked = None
        else:
            self._asked = list(dict.fromkeys([*self._asked, *pieces]))
        self._boot = reply.get("boot")
        # The daemon verified the manifest already; check again rather than trust the socket.
        return PieceStore.parse_manifest(self.artifact, body or b"")

    async def _wait(self) -> Header:
        """Poll the daemon until every wanted piece is held, reporting progress. A daemon that
        restarted meanwhile (its supervisor brought it back) has forgotten what it was asked:
        it is asked again, and resumes from the pieces on its disk. Time it is unreachable
        counts as time without progress."""
        last_held, last_change = -1, time.monotonic()
        ask_again, problem = False, ""
        while True:
            try:
                if ask_again:
                    await self._fetch(self._asked)
                status, _ = await self._call({"op": "status", "artifact": self.artifact})
                ask_again = status.get("boot") != self._boot
            except PeerUnavailable as exc:
                ask_again, problem = True, f"the daemon is unreachable ({exc})"
            if not ask_again:
                if status.get("store_error"):
                    raise StorageError(
                        f"artifact {self.artifact}: the daemon at {format_address(self.daemon)} "
                        f"stopped fetching it: {status['store_error']} (its verified pieces "
                        "stay; pull again once there is room)"
                    )
                held, wanted = int(status["held_bytes"]), int(status["wanted_bytes"])
                if self.progress:
                    self.progress(held, wanted)
                if status["missing_pieces"] == 0:
                    return status
                if held != last_held:
                    last_held, last_change = held, time.monotonic()
                problem = (
                    f"{status['missing_pieces']} pieces missing (no live peer or origin has them)"
                )
                if status.get("origin_error"):
                    problem += f"; the origin's last error: {status['origin_error']}"
            if time.monotonic() - last_change > self.stall_timeout:
                raise StorageError(
                    f"artifact {self.artifact}: no progress for {self.stall_timeout:.0f} s: "
                    f"{problem}"
                )
            await asyncio.sleep(POLL)

    async def _piece(self, piece_hash: str) -> bytes:
        _, body = await self._call({"op": "piece", "hash": piece_hash})
        data = body or b""
        if sha256_hex(data) != piece_hash:
            raise IntegrityError(f"piece {piece_hash[:16]} from the daemon does not match")
        return data

    async def _ensure(self, hashes: list[str]) -> dict[str, bytes]:
        await self._fetch(hashes)
        await self._wait()
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

    async def _write(self, manifest: Manifest, dest: Path, only: set[str] | None) -> None:
        """Build the files in a staging directory, then rename it to `dest`. A partial pull
        leaves holes (sparse ranges) where unselected pieces would be."""
        with staged(dest) as staging:
            for entry in manifest.files:
                target = staging / entry.path
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "wb") as out:
                    out.truncate(entry.size)
                    for ref in entry.pieces:
                        if only is None or ref.hash in only:
                            out.seek(ref.offset)
                            out.write(await self._piece(ref.hash))
                os.chmod(target, entry.mode)
