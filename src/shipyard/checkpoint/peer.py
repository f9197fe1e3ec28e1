"""Peer memory: each rank's snapshot is held by itself and by the next rank (a ring), in memory.

Every rank runs a `PeerMemory`, a small TCP server over the snapshots it holds, keyed by (step,
owner rank): its own (no copy: the snapshot buffers themselves), its predecessor's (pushed to it
after each save) and the committed manifest (owner -1). When one rank is lost, a replacement asks
the owners, or for the lost one its successor, for every piece: `restore_from_peers` rebuilds the
whole state without reading storage. Every owner's bytes are checked against the SHA-256 of its
shard in the manifest (the committed one from storage, when the caller passes it) before use.

Only members talk to it: every request and reply is signed with the swarm key (`peer_wire`), so
a stranger's request is dropped before a field of it is read. Even a member's `put` is taken only
when announced by this rank's own save (`expect`): that step, that owner, that many bytes, once.
Connections are capped (the rest wait in the listen backlog) and a request must arrive whole
within `header_timeout_s`; payloads time out after `idle_timeout_s` of silence.

Requests are `{"op": "put" | "get" | "steps", "step", "owner"}`; replies `{"ok", ...}`.
"""

import contextlib
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch

from shipyard.checkpoint.load import Batch, Loaded, assemble
from shipyard.checkpoint.manifest import MAX_MANIFEST_BYTES, CheckpointManifest
from shipyard.checkpoint.peer_wire import Blob, recv_exact, recv_header, send
from shipyard.checkpoint.verify import check_shard, rank_pieces
from shipyard.distribute.swarm_key import SwarmKey
from shipyard.errors import InvalidInput, NotFound, StorageError

MANIFEST_OWNER = -1
MAX_CONNECTIONS = 32  # served at once; more than a restart of every rank of a ring asks for
HEADER_TIMEOUT_S = 30.0  # a request (a few hundred bytes) must arrive whole within this
IDLE_TIMEOUT_S = 60.0  # a payload may pause this long between bytes
_MAX_STEP = 1 << 56


class PeerMemory:
    """Snapshots held in this process, served to the swarm's members over TCP."""

    def __init__(
        self,
        secret: bytes,
        host: str | None = None,
        port: int = 0,
        *,
        max_connections: int = MAX_CONNECTIONS,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        host = host or os.environ.get("SHIPYARD_PEER_HOST", "127.0.0.1")
        self._secret = secret
        self._key = SwarmKey(secret)  # the server's own: its nonces are not a client's
        self._held: dict[tuple[int, int], Blob] = {}
        self._expected: dict[tuple[int, int], int] = {}  # (step, owner) -> bytes, from `expect`
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_connections)
        self._header_timeout_s, self._idle_timeout_s = header_timeout_s, idle_timeout_s
        self._server = socket.create_server((host, port))
        self.address = f"{host}:{self._server.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, name="peer-memory", daemon=True)
        self._thread.start()

    def client_key(self) -> SwarmKey:
        """A key for requests to this swarm's peers (its own instance: a request this process
        sends to its own server must not look like a replay of itself)."""
        return SwarmKey(self._secret)

    def hold(self, step: int, owner: int, payload: Blob) -> None:
        with self._lock:
            self._held[(step, owner)] = payload

    def expect(self, step: int, owner: int, size: int) -> None:
        """Take one `put` of `owner`'s snapshot of `step`, of exactly `size` bytes."""
        with self._lock:
            self._expected[(step, owner)] = size

    def drop_before(self, step: int) -> None:
        """Forget every snapshot (and expected one) older than `step` (once `step` commits)."""
        with self._lock:
            for key in [k for k in self._held if k[0] < step]:
                del self._held[key]
            for key in [k for k in self._expected if k[0] < step]:
                del self._expected[key]

    def steps(self) -> list[int]:
        with self._lock:
            return sorted({step for step, owner in self._held if owner == MANIFEST_OWNER})

    def close(self) -> None:
        self._server.close()
        with self._lock:
            self._held.clear()
            self._expected.clear()

    def _serve(self) -> None:
        while True:
            self._slots.acquire()  # at the cap, new connections wait in the kernel's backlog
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed
                self._slots.release()
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                deadline = time.monotonic() + self._header_timeout_s
                request = recv_header(conn, self._key, deadline)
                op, key = request.get("op"), (_number(request, "step"), _number(request, "owner"))
                if op == "put":
                    self._put(conn, request, key)
                elif op == "steps":
                    send(conn, {"ok": True, "steps": self.steps()}, self._key)
                elif op == "get":
                    with self._lock:
                        held = self._held.get(key)
                    send(conn, {"ok": held is not None}, self._key, held or ())
        except (OSError, InvalidInput, MemoryError):
            return  # a stranger, garbage, a timeout or a peer gone mid-request: drop it
        finally:
            self._slots.release()

    def _put(self, conn: socket.socket, request: dict[str, Any], key: tuple[int, int]) -> None:
        with self._lock:
            expected = self._expected.get(key)
            if expected == request["size"]:
                del self._expected[key]  # claimed now: one put per announcement, even in flight
        if expected is None or request["size"] != expected:
            wanted = "no snapshot" if expected is None else f"{expected} bytes"
            problem = f"this rank expects {wanted} for rank {key[1]}, step {key[0]}"
            send(conn, {"ok": False, "error": f"{problem}, not {request['size']} bytes"}, self._key)
            return
        payload = recv_exact(conn, expected, None, self._idle_timeout_s)
        self.hold(*key, [memoryview(payload)])
        send(conn, {"ok": True}, self._key)


def _number(request: dict[str, Any], field: str) -> int:
    value = request.get(field, 0)
    if type(value) is not int or not MANIFEST_OWNER <= value <= _MAX_STEP:
        raise InvalidInput(f"peer request field {field} is not an integer in range")
    return value


def _request(
    address: str,
    header: dict[str, Any],
    key: SwarmKey,
    payload: Blob = (),
    *,
    max_reply: int = 0,
    timeout: float = IDLE_TIMEOUT_S,
) -> tuple[dict[str, Any], bytearray]:
    """One signed request and its signed reply, whose payload may be at most `max_reply` bytes."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        send(sock, header, key, payload)
        reply = recv_header(sock, key, time.monotonic() + timeout)
        if reply["size"] > max_reply:
            raise InvalidInput(
                f"peer {address} sends {reply['size']} bytes, at most {max_reply} expected"
            )
        return reply, recv_exact(sock, reply["size"], None, timeout)


def push(address: str, step: int, owner: int, payload: Blob, key: SwarmKey) -> None:
    """Have the peer at `address` hold `owner`'s snapshot of `step`."""
    reply, _ = _request(address, {"op": "put", "step": step, "owner": owner}, key, payload)
    if not reply.get("ok"):
        raise StorageError(
            f"peer {address} refused the snapshot of rank {owner}, step {step}: "
            f"{str(reply.get('error'))[:300]}"
        )


def _fetch(addresses: Sequence[str], step: int, owner: int, key: SwarmKey, size: int) -> bytearray:
    """`owner`'s blob (at most `size` bytes) from the first peer in `addresses` that is alive and
    holds it."""
    for address in addresses:
        with contextlib.suppress(OSError, InvalidInput):  # gone, or not a member of this swarm
            reply, payload = _request(
                address, {"op": "get", "step": step, "owner": owner}, key, max_reply=size
            )
            if reply.get("ok"):
                return payload
    raise NotFound(f"no live peer among {list(addresses)} holds rank {owner}'s step {step}")


def restore_from_peers(
    addresses: Sequence[str],
    step: int | None = None,
    manifest: CheckpointManifest | None = None,
    *,
    key: SwarmKey,
) -> Loaded:
    """Rebuild the newest (or `step`'s, or `manifest`'s) committed state from the peers' memory.

    `addresses[r]` is the peer memory of saving rank `r`; any one of them may be gone. `key`
    signs the requests (see `PeerMemory.client_key`). With `manifest` (read from storage), the
    peers' bytes are checked against it, not against a manifest the peers hold. Bytes that fail
    raise `CorruptCheckpoint`.
    """
    if manifest is not None:
        step = manifest.step
    elif step is None:
        held: list[int] = []
        for address in addresses:
            with contextlib.suppress(OSError, InvalidInput):  # gone, or not of this swarm
                steps = _request(address, {"op": "steps"}, key)[0].get("steps")
                if isinstance(steps, list):
                    held += [s for s in steps if type(s) is int and s >= 0]
        if not held:
            raise NotFound(f"no live peer among {list(addresses)} holds a committed snapshot")
        step = max(held)
    if manifest is None:
        raw = _fetch(addresses, step, MANIFEST_OWNER, key, MAX_MANIFEST_BYTES)
        manifest = CheckpointManifest.from_json(bytes(raw), f"peer manifest of step {step}")
    checked = manifest  # bound for the closure below, with its narrowed type
    world = manifest.world_size
    dtypes = {m.path: m.dtype for m in manifest.tensors}
    shards = {s.rank: s for s in manifest.shards}

    def batch(owner: int) -> Batch:
        ring = [addresses[owner % len(addresses)], addresses[(owner + 1) % len(addresses)]]
        pieces = rank_pieces(checked, owner)
        size = sum((p.stop - p.start) * dtypes[p.path].itemsize for p in pieces)
        blob = _fetch(ring if world == len(addresses) else addresses, step, owner, key, size)
        source = f"peer snapshot of rank {owner}, step {step}"
        check_shard(checked, shards[owner], blob, source, header=False)
        data, at = {}, 0
        for p in pieces:  # the blob is the owner's pieces back to back, in manifest order
            count = p.stop - p.start
            data[p.key] = torch.frombuffer(blob, dtype=dtypes[p.path], count=count, offset=at)
            at += count * dtypes[p.path].itemsize
        return source, pieces, data

    return assemble(manifest, (batch(owner) for owner in range(world)))
