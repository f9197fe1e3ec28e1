"""Peer memory: each rank's snapshot is held by itself and by the next rank (a ring), in memory.

Every rank runs a `PeerMemory`, a small TCP server over the snapshots it holds, keyed by (step,
owner rank): its own (no copy: the snapshot buffers themselves), its predecessor's (pushed to it
after each save) and the committed manifest (owner -1). When one rank is lost, a replacement asks
the owners, or for the lost one its successor, for every piece: `restore_from_peers` rebuilds the
whole state without reading storage. Every owner's bytes are checked against the SHA-256 of its
shard in the manifest (the committed one from storage, when the caller passes it) before use.

Wire format, both ways: 8-byte little-endian header length, a JSON header with `size`, then
`size` payload bytes. Requests are `{"op": "put" | "get" | "steps", "step", "owner"}`.
"""

import json
import os
import socket
import threading
from collections.abc import Sequence
from typing import Any

import torch

from shipyard.checkpoint.load import Batch, Loaded, assemble
from shipyard.checkpoint.manifest import CheckpointManifest
from shipyard.checkpoint.verify import check_shard, rank_pieces
from shipyard.errors import NotFound, StorageError

MANIFEST_OWNER = -1
MAX_HEADER_BYTES = 1 << 16  # requests and replies are a few small fields
_Blob = Sequence[memoryview]


def _send(sock: socket.socket, header: dict[str, Any], payload: _Blob = ()) -> None:
    header = {**header, "size": sum(view.nbytes for view in payload)}
    raw = json.dumps(header).encode()
    sock.sendall(len(raw).to_bytes(8, "little") + raw)
    for view in payload:
        sock.sendall(view)


def _recv_exact(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("peer closed the connection mid-message")
        got += n
    return buffer


def _recv(sock: socket.socket) -> tuple[dict[str, Any], bytearray]:
    """One message; ValueError if its header is not one this protocol sends."""
    length = int.from_bytes(_recv_exact(sock, 8), "little")
    if length > MAX_HEADER_BYTES:
        raise ValueError(f"a peer header of {length} bytes (at most {MAX_HEADER_BYTES})")
    try:
        header = json.loads(_recv_exact(sock, length))
    except RecursionError:
        raise ValueError("a peer header nested too deeply") from None
    size = header.get("size") if isinstance(header, dict) else None
    if type(size) is not int or size < 0:
        raise ValueError("a peer header without a valid size")
    return header, _recv_exact(sock, size)


class PeerMemory:
    """Snapshots held in this process, served to peers over TCP."""

    def __init__(self, host: str | None = None, port: int = 0) -> None:
        host = host or os.environ.get("SHIPYARD_PEER_HOST", "127.0.0.1")
        self._held: dict[tuple[int, int], _Blob] = {}
        self._lock = threading.Lock()
        self._server = socket.create_server((host, port))
        self.address = f"{host}:{self._server.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, name="peer-memory", daemon=True)
        self._thread.start()

    def hold(self, step: int, owner: int, payload: _Blob) -> None:
        with self._lock:
            self._held[(step, owner)] = payload

    def drop_before(self, step: int) -> None:
        """Forget every snapshot older than `step` (once `step` is committed)."""
        with self._lock:
            for key in [k for k in self._held if k[0] < step]:
                del self._held[key]

    def steps(self) -> list[int]:
        with self._lock:
            return sorted({step for step, owner in self._held if owner == MANIFEST_OWNER})

    def close(self) -> None:
        self._server.close()
        with self._lock:
            self._held.clear()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                request, payload = _recv(conn)
                key = (int(request.get("step", 0)), int(request.get("owner", 0)))
                if request["op"] == "put":
                    self.hold(*key, [memoryview(payload)])
                    _send(conn, {"ok": True})
                elif request["op"] == "steps":
                    _send(conn, {"ok": True, "steps": self.steps()})
                else:
                    with self._lock:
                        held = self._held.get(key)
                    _send(conn, {"ok": held is not None}, held or ())
            except (OSError, ValueError, KeyError, TypeError, OverflowError, MemoryError):
                return  # a peer that went away mid-request, or sent garbage; nothing to clean up


def _request(
    address: str, header: dict[str, Any], payload: _Blob = (), timeout: float = 60.0
) -> tuple[dict[str, Any], bytearray]:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        _send(sock, header, payload)
        return _recv(sock)


def push(address: str, step: int, owner: int, payload: _Blob) -> None:
    """Have the peer at `address` hold `owner`'s snapshot of `step`."""
    reply, _ = _request(address, {"op": "put", "step": step, "owner": owner}, payload)
    if not reply.get("ok"):
        raise StorageError(f"peer {address} refused the snapshot of rank {owner}, step {step}")


def _fetch(addresses: Sequence[str], step: int, owner: int) -> bytearray:
    """`owner`'s blob from the first peer in `addresses` that is alive and holds it."""
    for address in addresses:
        try:
            reply, payload = _request(address, {"op": "get", "step": step, "owner": owner})
        except (OSError, ValueError):  # gone, or not speaking this protocol
            continue
        if reply.get("ok"):
            return payload
    raise NotFound(f"no live peer among {list(addresses)} holds rank {owner}'s step {step}")


def restore_from_peers(
    addresses: Sequence[str], step: int | None = None, manifest: CheckpointManifest | None = None
) -> Loaded:
    """Rebuild the newest (or `step`'s, or `manifest`'s) committed state from the peers' memory.

    `addresses[r]` is the peer memory of saving rank `r`; any one of them may be gone. With
    `manifest` (read from storage), the peers' bytes are checked against it, not against a
    manifest the peers hold. Bytes that fail raise `CorruptCheckpoint`.
    """
    if manifest is not None:
        step = manifest.step
    elif step is None:
        held: list[int] = []
        for address in addresses:
            try:
                steps = _request(address, {"op": "steps"})[0].get("steps")
            except (OSError, ValueError):  # gone, or not speaking this protocol
                continue
            if isinstance(steps, list):
                held += [s for s in steps if type(s) is int and s >= 0]
        if not held:
            raise NotFound(f"no live peer among {list(addresses)} holds a committed snapshot")
        step = max(held)
    if manifest is None:
        manifest = CheckpointManifest.from_json(
            bytes(_fetch(addresses, step, MANIFEST_OWNER)), f"peer manifest of step {step}"
        )
    checked = manifest  # bound for the closure below, with its narrowed type
    world = manifest.world_size
    dtypes = {m.path: m.dtype for m in manifest.tensors}
    shards = {s.rank: s for s in manifest.shards}

    def batch(owner: int) -> Batch:
        ring = [addresses[owner % len(addresses)], addresses[(owner + 1) % len(addresses)]]
        blob = _fetch(ring if world == len(addresses) else addresses, step, owner)
        pieces = rank_pieces(checked, owner)
        source = f"peer snapshot of rank {owner}, step {step}"
        check_shard(checked, shards[owner], blob, source, header=False)
        data, at = {}, 0
        for p in pieces:  # the blob is the owner's pieces back to back, in manifest order
            count = p.stop - p.start
            data[p.key] = torch.frombuffer(blob, dtype=dtypes[p.path], count=count, offset=at)
            at += count * dtypes[p.path].itemsize
        return source, pieces, data

    return assemble(manifest, (batch(owner) for owner in range(world)))
