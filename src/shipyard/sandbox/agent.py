"""The agent inside every sandbox: runs exec requests in a namespace that already exists.

Started once per sandbox by bubblewrap (`python3 -I -S /.shipyard/agent.py FD`), so an exec is a
fork inside a ready sandbox, not a new container. It imports nothing of Shipyard (the image's own
Python runs it, with no site packages) and is itself untrusted: the code it runs has the same uid
and may kill or lie through it, which only spoils its own episode. The service checks every reply.

Wire format (also used between the service and its clients): a frame is a 4-byte big-endian
length then that many bytes of UTF-8 JSON (one object); file descriptors ride on a frame's
length bytes (SCM_RIGHTS).

Requests and replies:
- start → `{"ready": true}`
- `{"op": "exec", "argv", "env", "cwd", "timeout", "rlimits"}` with fds (stdin, stdout, stderr);
  `{"op": "kill"}` may follow while it runs → `{"exit"|"signal", "timed_out", "killed",
  "leftover", "disk_full"}`. When the command ends, every other process it left is killed.
- `{"op": "put", "files": [{"path", "data" (base64), "mode"}]}` → `{"ok": true}`
- `{"op": "get", "paths", "max_bytes"}` → `{"files": [{"path", "data"}], "missing": [...]}`
"""

import base64
import contextlib
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

HEADER = struct.Struct(">I")
MAX_FDS = 3
WORK = "/work"


class WireError(Exception):
    """A peer that closed the connection or sent a frame that breaks the format."""


def send_msg(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    header = HEADER.pack(len(data))
    if fds:
        socket.send_fds(sock, [header], fds)
        sock.sendall(data)
    else:
        sock.sendall(header + data)


def recv_msg(
    sock: socket.socket, max_bytes: int, want_fds: int = 0
) -> tuple[dict[str, Any], list[int]]:
    """One frame, refused past `max_bytes`; fds beyond `want_fds` are closed, never kept."""
    fds: list[int] = []
    if want_fds:
        header, fds, _, _ = socket.recv_fds(sock, HEADER.size, MAX_FDS)
        extra, fds = fds[want_fds:], fds[:want_fds]
        for fd in extra:
            os.close(fd)
        header += _recv_exact(sock, HEADER.size - len(header)) if header else b""
    else:
        header = _recv_exact(sock, HEADER.size)
    if len(header) < HEADER.size:
        raise WireError("connection closed")
    (length,) = HEADER.unpack(header)
    if length > max_bytes:
        raise WireError(f"frame of {length} bytes is over the {max_bytes}-byte limit")
    try:
        message = json.loads(_recv_exact(sock, length))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WireError(f"frame is not JSON ({str(exc)[:80]})") from None
    if not isinstance(message, dict):
        raise WireError(f"frame is a JSON {type(message).__name__}, not an object")
    return message, fds


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise WireError(f"connection closed {size - left} bytes into a {size}-byte read")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# Inside the sandbox


def _others() -> list[int]:
    """Processes in this PID namespace besides its init (1) and this agent."""
    me = os.getpid()
    return [
        int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) not in (1, me)
    ]


def _kill_others() -> int:
    """SIGKILL every process but init and the agent (kill(-1) reaches this namespace only) and
    wait, briefly, until they are gone; how many there were."""
    left = len(_others())
    deadline = time.monotonic() + 2.0
    while _others() and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        _reap()  # our own children; init reaps the orphans
        time.sleep(0.001)
    return left


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the command, or exit 127 saying why not."""
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)
        for name, value in request.get("rlimits", {}).items():
            limit = getattr(resource, name)
            resource.setrlimit(limit, (value, value))
        os.chdir(request.get("cwd", WORK))
        argv = request["argv"]
        os.execvpe(argv[0], argv, request.get("env", {}))
    except BaseException as exc:
        try:
            os.write(2, f"sandbox: cannot run {request.get('argv')!r}: {exc}\n".encode())
        finally:
            os._exit(127)


def _exec(sock: socket.socket, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
    pid = os.fork()
    if pid == 0:
        sock.close()
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    deadline = time.monotonic() + float(request.get("timeout", 10))
    timed_out = killed = False
    while True:
        wait = deadline - time.monotonic()
        if wait <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([pidfd, sock.fileno()], [], [], wait)
        if pidfd in ready:
            break
        if sock.fileno() in ready:
            message, _ = recv_msg(sock, 1 << 16)
            if message.get("op") == "kill":
                killed = True
                break
    if timed_out or killed:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    leftover = _kill_others()
    _reap()
    reply: dict[str, Any] = {"timed_out": timed_out, "killed": killed, "leftover": leftover}
    if os.WIFSIGNALED(status):
        reply["signal"] = os.WTERMSIG(status)
    else:
        reply["exit"] = os.WEXITSTATUS(status)
    usage = os.statvfs(WORK)
    reply["disk_full"] = usage.f_bavail == 0
    return reply


def _path(name: str) -> str:
    return os.path.join(WORK, name)  # an absolute name stays itself


def _put(request: dict[str, Any]) -> dict[str, Any]:
    for entry in request["files"]:
        path = _path(entry["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, entry.get("mode", 0o644))
        with os.fdopen(fd, "wb") as file:
            file.write(base64.b64decode(entry["data"]))
    return {"ok": True}


def _get(request: dict[str, Any]) -> dict[str, Any]:
    budget = int(request["max_bytes"])
    files, missing = [], []
    for name in request["paths"]:
        try:
            with open(_path(name), "rb") as file:
                data = file.read(budget + 1)
        except OSError:
            missing.append(name)
            continue
        budget -= len(data)
        if budget < 0:
            return {"error": f"files are over the {request['max_bytes']}-byte limit at {name}"}
        files.append({"path": name, "data": base64.b64encode(data).decode()})
    return {"files": files, "missing": missing}


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    send_msg(sock, {"ready": True})
    while True:
        try:
            request, fds = recv_msg(sock, 1 << 30, want_fds=MAX_FDS)
        except WireError:
            return  # the service went away: so does the sandbox
        op = request.get("op")
        try:
            if op == "exec" and len(fds) == MAX_FDS:
                reply = _exec(sock, request, fds)
            elif op == "put":
                reply = _put(request)
            elif op == "get":
                reply = _get(request)
            else:
                reply = {"error": f"unknown request {op!r}"}
        except (OSError, KeyError, TypeError, ValueError) as exc:
            reply = {"error": f"{op}: {exc}"}
        send_msg(sock, reply)


if __name__ == "__main__":
    main()
