"""The Python client of `shipyard sandbox serve`.

    with Client() as client:
        with client.create(limits=Limits(memory_mib=128)) as box:
            result = box.exec(["python3", "-c", "print(6 * 7)"], timeout=5)

A client heartbeats the leases of the sandboxes it holds from a thread of its own (every third
of the lease), so a driver that dies or hangs stops renewing them and the service reaps them. One
client is one connection: give each thread its own, or share one (calls are serialized).
"""

import base64
import socket
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shipyard.errors import (
    Conflict,
    IntegrityError,
    InvalidInput,
    NotFound,
    ShipyardError,
    StorageError,
)
from shipyard.home import shipyard_home
from shipyard.sandbox.limits import Limits, Result
from shipyard.sandbox.server import MAX_REQUEST, socket_path
from shipyard.sandbox.wire import WireError, recv_msg, send_msg

_ERRORS: dict[int, type[ShipyardError]] = {
    2: InvalidInput,
    3: Conflict,
    4: NotFound,
    5: IntegrityError,
    6: StorageError,
}


class _Connection:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(str(path))
        except OSError as exc:
            self.sock.close()
            raise StorageError(
                f"no sandbox service at {path} ({exc.strerror}): start `shipyard sandbox serve`"
            ) from None
        self.lock = threading.Lock()

    def call(self, op: str, **fields: Any) -> Any:
        with self.lock:
            try:
                send_msg(self.sock, {"op": op, **fields})
                reply = recv_msg(self.sock, MAX_REQUEST)
            except (OSError, WireError) as exc:
                raise StorageError(f"sandbox service at {self.path}: {exc}") from None
        if "error" in reply:
            code = reply.get("code")
            raise _ERRORS.get(code if isinstance(code, int) else 1, ShipyardError)(
                str(reply["error"])
            )
        return reply.get("ok")

    def close(self) -> None:
        self.sock.close()


class Client:
    def __init__(self, path: Path | None = None, lease_s: float = 15.0) -> None:
        self.path = path or socket_path(shipyard_home())
        self.lease_s = lease_s
        self._conn = _Connection(self.path)
        self._held: set[str] = set()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._held_lock = threading.Lock()

    def create(
        self, image: str = "host", limits: Limits | None = None, ttl_s: float | None = None
    ) -> "RemoteSandbox":
        reply = self._conn.call(
            "create",
            image=image,
            limits=(limits or Limits()).to_json(),
            ttl_s=ttl_s,
            lease_s=self.lease_s,
        )
        box = RemoteSandbox(self, reply["id"], reply["image"], bool(reply["warm"]))
        with self._held_lock:
            self._held.add(box.id)
        self._start_heartbeat()
        return box

    def status(self) -> dict[str, Any]:
        reply: dict[str, Any] = self._conn.call("status")
        return reply

    def metrics(self) -> str:
        return str(self._conn.call("metrics")["text"])

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(
                target=self._beat, name="sandbox-heartbeat", daemon=True
            )
            self._heartbeat.start()

    def _beat(self) -> None:
        conn = None
        while not self._stop.wait(self.lease_s / 3):
            with self._held_lock:
                ids = sorted(self._held)
            if not ids:
                continue
            try:
                conn = conn or _Connection(self.path)
                gone = conn.call("heartbeat", ids=ids)["gone"]
            except ShipyardError:
                conn = None  # the service restarted or is gone; try again next beat
                continue
            with self._held_lock:
                self._held -= set(gone)
        if conn:
            conn.close()

    def _forget(self, sandbox_id: str) -> None:
        with self._held_lock:
            self._held.discard(sandbox_id)

    def close(self) -> None:
        self._stop.set()
        if self._heartbeat:
            self._heartbeat.join(5)
        self._conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteSandbox:
    def __init__(self, client: Client, sandbox_id: str, image: str, warm: bool) -> None:
        self.client = client
        self.id = sandbox_id
        self.image = image
        self.warm = warm

    def exec(
        self,
        argv: Sequence[str],
        stdin: bytes = b"",
        timeout: float = 10.0,
        env: Mapping[str, str] | None = None,
        cwd: str = "/work",
    ) -> Result:
        reply = self.client._conn.call(
            "exec",
            id=self.id,
            argv=list(argv),
            stdin=base64.b64encode(stdin).decode(),
            timeout=timeout,
            env=dict(env or {}),
            cwd=cwd,
        )
        return Result.from_json(reply)

    def put_files(self, files: Mapping[str, bytes], mode: int = 0o644) -> None:
        encoded = {path: base64.b64encode(data).decode() for path, data in files.items()}
        self.client._conn.call("put", id=self.id, files=encoded, mode=mode)

    def get_files(self, paths: Sequence[str], max_bytes: int | None = None) -> dict[str, bytes]:
        reply = self.client._conn.call("get", id=self.id, paths=list(paths), max_bytes=max_bytes)
        return {path: base64.b64decode(data) for path, data in reply["files"].items()}

    def close(self) -> None:
        self.client._forget(self.id)
        self.client._conn.call("close", id=self.id)

    def __enter__(self) -> "RemoteSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
