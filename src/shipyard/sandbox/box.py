"""One running sandbox, seen from the host: exec, put and get files, destroy.

The agent inside answers over a socket pair; the command's stdin, stdout and stderr are pipes
made here per exec and handed in, so its output never passes through the agent and the output
cap is enforced where the bytes arrive. Every agent reply is checked like any outside input.
"""

import contextlib
import os
import select
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shipyard.errors import Conflict, InvalidInput, StorageError
from shipyard.sandbox import agent
from shipyard.sandbox.bwrap import ENV
from shipyard.sandbox.cgroups import Confinement, Group
from shipyard.sandbox.limits import Limits, Outcome, Result
from shipyard.sandbox.wire import WireError, recv_msg, send_frame

GRACE_S = 3.0  # past the timeout, how long the agent has to report before the sandbox goes
DRAIN_S = 2.0  # after the agent reports, how long pipes may take to reach end of file
MAX_REPLY = 1 << 16
MAX_FILES_BYTES = 64 << 20


@dataclass
class Sandbox:
    id: str
    image_id: str
    limits: Limits
    confinement: Confinement
    groups: list[Group]
    process: subprocess.Popen[bytes]
    sock: socket.socket
    errors_fd: int  # bubblewrap's and the agent's own stderr (a pipe)
    started: float = field(default_factory=time.monotonic)
    ready_s: float = 0.0
    dead: str = ""  # why it is gone, once it is
    execs: int = 0
    closer: Callable[["Sandbox"], None] | None = field(default=None, repr=False)
    # Counts work in (+1) and out (-1) for the CPU weight: a start, from launch to the agent's
    # ready message, and each exec.
    busy: Callable[[int], None] = field(default=lambda step: None, repr=False)
    starting: bool = False  # counted in `busy` until `started()`
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _start_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Block until the agent says it is up (at once if it already has); whether this call
        had to wait for it. A sandbox that cannot start says why."""
        if self.ready_s:
            return False
        waited = not select.select([self.sock], [], [], 0)[0]
        try:
            self.sock.settimeout(timeout)
            reply = recv_msg(self.sock, MAX_REPLY)
            if reply.get("ready") is not True:
                raise WireError(f"unexpected first message {str(reply)[:80]}")
        except (OSError, WireError) as exc:
            why = self._startup_errors() or str(exc)
            self.destroy("failed to start")
            raise StorageError(f"sandbox {self.id} did not start: {why}") from None
        finally:
            self.started_up()
        self.ready_s = time.monotonic() - self.started
        return waited

    def started_up(self) -> None:
        """The start is over (ready, failed or destroyed): count it out of `busy`, once."""
        with self._start_lock:
            if not self.starting:
                return
            self.starting = False
        self.busy(-1)

    def _startup_errors(self) -> str:
        os.set_blocking(self.errors_fd, False)
        with contextlib.suppress(OSError):
            return os.read(self.errors_fd, 4096).decode(errors="replace").strip()
        return ""

    # Exec

    def exec(
        self,
        argv: Sequence[str],
        stdin: bytes = b"",
        timeout: float = 10.0,
        env: Mapping[str, str] | None = None,
        cwd: str = "/work",
        output_bytes: int | None = None,
    ) -> Result:
        """Run `argv` to its end, then kill whatever it left; the result names how it ended.
        `output_bytes` overrides the sandbox's output cap for this exec."""
        request = agent.exec_request(
            *_checked_exec(argv, timeout, env, cwd),
            rlimits=self.confinement.rlimits(self.limits, timeout),
        )
        with self._lock:
            if self.dead:
                raise Conflict(f"sandbox {self.id} is closed ({self.dead})")
            self.execs += 1
            before = {g.hierarchy.controller: g.events() for g in self.groups}
            started = time.monotonic()
            cap = self.limits.output_bytes if output_bytes is None else output_bytes
            io = _ExecIO(self, stdin, cap)
            reply = io.run(request, deadline=started + timeout + GRACE_S)
            after = {g.hierarchy.controller: g.events() for g in self.groups}
            hits = {name for name in after if after[name] > before[name]}
            return _result(self, reply, io, hits, time.monotonic() - started, timeout)

    # Files

    def put_files(self, files: Mapping[str, bytes], mode: int = 0o644) -> None:
        """Write files into the writable layer; relative paths are under /work."""
        if sum(map(len, files.values())) > MAX_FILES_BYTES:
            raise InvalidInput(f"put_files: more than {MAX_FILES_BYTES} bytes in one call")
        for path, data in files.items():
            _check_path(path)
            done = self.exec([agent.PATH, "put", path, f"{mode:o}"], stdin=data, timeout=60)
            if not done.ok:
                why = done.stderr.decode(errors="replace").strip() or done.detail
                raise InvalidInput(f"put_files {path} in sandbox {self.id}: {why[:300]}")

    def get_files(self, paths: Sequence[str], max_bytes: int | None = None) -> dict[str, bytes]:
        """Read files from the sandbox (missing ones are left out), at most `max_bytes` in all."""
        budget = min(max_bytes or MAX_FILES_BYTES, MAX_FILES_BYTES)
        out: dict[str, bytes] = {}
        for path in paths:
            _check_path(path)
            room = budget - sum(map(len, out.values()))
            done = self.exec([agent.PATH, "get", path], timeout=60, output_bytes=room)
            if done.outcome is Outcome.NONZERO_EXIT and done.exit_code == 2:
                continue  # no such file
            if done.outcome is Outcome.OUTPUT_LIMIT:
                raise InvalidInput(f"get_files: over the {budget}-byte limit at {path}")
            if not done.ok:
                why = done.stderr.decode(errors="replace").strip() or done.detail
                raise InvalidInput(f"get_files {path} in sandbox {self.id}: {why[:300]}")
            out[path] = done.stdout
        return out

    # End

    def close(self) -> None:
        """Destroy the sandbox and give back all it held."""
        if self.closer is not None:
            self.closer(self)
        else:
            self.destroy("closed by its driver")
            self.release()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def kill_now(self, reason: str) -> None:
        """Mark the sandbox dead and SIGKILL bubblewrap, without waiting for anything."""
        if not self.dead:
            self.dead = reason
        with contextlib.suppress(ProcessLookupError):
            # --die-with-parent: the namespace's init dies with it, and so does all inside.
            self.process.send_signal(signal.SIGKILL)

    def destroy(self, reason: str) -> None:
        """Kill everything in the sandbox and wait until it is gone (idempotent; safe while an
        exec runs elsewhere)."""
        self.started_up()
        if self.process.returncode is not None and not any(g.procs() for g in self.groups):
            self.dead = self.dead or reason
            return
        self.kill_now(reason)
        for group in self.groups:
            group.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def release(self) -> None:
        """After `destroy` and once no exec runs: close the descriptors."""
        with self._lock:
            self.sock.close()
            if self.errors_fd >= 0:
                os.close(self.errors_fd)
                self.errors_fd = -1


def _check_path(path: Any) -> None:
    if not isinstance(path, str) or not path or "\0" in path or ".." in path.split("/"):
        raise InvalidInput(f"file path {str(path)[:100]!r}: expected a path without '..' or NUL")


def _checked_exec(
    argv: Sequence[str], timeout: float, env: Mapping[str, str] | None, cwd: str
) -> tuple[list[str], dict[str, str], str, float]:
    """The exec's arguments as the agent takes them (env merged over the default), or refused."""
    if isinstance(argv, str) or not isinstance(argv, Sequence) or not argv:
        raise InvalidInput("exec: argv must be a non-empty list of strings")
    if not all(isinstance(a, str) for a in argv):
        raise InvalidInput("exec: argv must be a non-empty list of strings")
    if any("\0" in a for a in argv):
        raise InvalidInput("exec: argv may not contain NUL")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidInput(f"exec: timeout must be a number of seconds, not {timeout!r}")
    if not 0 < timeout <= 86400:
        raise InvalidInput(f"exec: timeout {timeout} is outside (0, 86400] seconds")
    if env is not None and not isinstance(env, Mapping):
        raise InvalidInput("exec: env must be an object of NAME → text")
    merged = dict(ENV)
    for key, value in (env or {}).items():
        if not (isinstance(key, str) and isinstance(value, str)) or not key or "=" in key:
            raise InvalidInput(f"exec: environment entry {str(key)[:60]!r} is not NAME=text")
        if "\0" in key + value:
            raise InvalidInput(f"exec: environment entry {key[:60]!r} contains NUL")
        merged[key] = value
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\0" in cwd:
        raise InvalidInput(f"exec: cwd must be an absolute path, not {str(cwd)[:100]!r}")
    return list(argv), merged, cwd, float(timeout)


class _ExecIO:
    """Feeds stdin, collects stdout and stderr up to the cap, and waits for the agent's report."""

    def __init__(self, box: Sandbox, stdin: bytes, cap: int) -> None:
        self.box = box
        self.stdin = memoryview(stdin)
        self.cap = cap
        self.out = {1: bytearray(), 2: bytearray()}
        self.over_cap = False
        self.no_answer = ""  # why the agent gave no report
        self.open: set[int] = set()  # our pipe ends not yet closed: each is closed exactly once

    def _close(self, fd: int) -> None:
        # Never twice: in a threaded service the number may already name another's descriptor.
        if fd in self.open:
            self.open.discard(fd)
            os.close(fd)

    def run(self, request: bytes, deadline: float) -> dict[str, Any] | None:
        pipes = [os.pipe() for _ in range(3)]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        ours = {pipes[0][1]: 0, pipes[1][0]: 1, pipes[2][0]: 2}
        self.open = set(ours)
        sock = self.box.sock
        try:
            try:
                sock.settimeout(GRACE_S)
                send_frame(sock, request, fds=theirs)
            finally:
                for fd in theirs:
                    os.close(fd)
            return self._loop(ours, deadline)
        except (OSError, WireError) as exc:
            self.no_answer = f"the sandbox's agent went away ({exc})"
            return None
        finally:
            for fd in list(self.open):
                self._close(fd)

    def _loop(self, ours: dict[int, int], deadline: float) -> dict[str, Any] | None:
        sock = self.box.sock
        with selectors.DefaultSelector() as selector:
            for fd, stream in ours.items():
                os.set_blocking(fd, False)
                if stream or self.stdin:
                    selector.register(
                        fd, selectors.EVENT_WRITE if stream == 0 else selectors.EVENT_READ
                    )
                else:
                    self._close(fd)
            selector.register(sock, selectors.EVENT_READ)
            reply = None
            while reply is None or len(selector.get_map()) > 0:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    if reply is None:
                        self.no_answer = "timeout"
                        self.box.destroy("the agent did not report within the timeout")
                    return reply
                for key, _ in selector.select(wait):
                    if key.fileobj is sock:
                        reply = recv_msg(sock, MAX_REPLY)
                        selector.unregister(sock)
                        deadline = min(deadline, time.monotonic() + DRAIN_S)
                    elif ours[key.fd] == 0:
                        self._feed(selector, key.fd)
                    else:
                        self._read(selector, key.fd, ours[key.fd])
        return reply

    def _feed(self, selector: selectors.BaseSelector, fd: int) -> None:
        try:
            sent = os.write(fd, self.stdin[:65536])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the command closed its stdin
            sent = len(self.stdin)
        self.stdin = self.stdin[sent:]
        if not self.stdin:
            selector.unregister(fd)
            self._close(fd)

    def _read(self, selector: selectors.BaseSelector, fd: int, stream: int) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        if not data:
            selector.unregister(fd)
            return
        if self.over_cap:
            return  # discard: the kill is on its way
        room = self.cap - len(self.out[1]) - len(self.out[2])
        self.out[stream] += data[: max(room, 0)]
        if len(data) > room:
            self.over_cap = True
            send_frame(self.box.sock, agent.KILL)


def _result(
    box: Sandbox,
    reply: dict[str, Any] | None,
    io: _ExecIO,
    hits: set[str],
    seconds: float,
    timeout: float,
) -> Result:
    report = _checked(reply)
    exit_code, sig = report.get("exit"), report.get("signal")
    caps = box.limits
    if io.over_cap:
        outcome, detail = Outcome.OUTPUT_LIMIT, f"output passed {caps.output_bytes} bytes; killed"
    elif "memory" in hits:
        outcome, detail = Outcome.MEMORY_LIMIT, f"memory cap {caps.memory_mib} MiB: OOM kill"
    elif "pids" in hits:
        outcome, detail = Outcome.PIDS_LIMIT, f"process cap {caps.pids}: a fork was refused"
    elif report.get("timed_out") or io.no_answer == "timeout":
        outcome, detail = Outcome.TIMEOUT, f"still running after {timeout} s; killed"
    elif report.get("disk_full") and exit_code != 0:
        outcome, detail = Outcome.DISK_LIMIT, f"the {caps.disk_mib} MiB writable layer is full"
    elif report.get("files_full") and exit_code != 0:
        outcome, detail = Outcome.DISK_LIMIT, f"the writable layer's {caps.files}-file cap is hit"
    elif reply is None:
        outcome, detail = Outcome.KILLED, box.dead or io.no_answer
    elif "exit" not in report and "signal" not in report:
        outcome, detail = Outcome.KILLED, f"the agent refused: {str(reply.get('error'))[:200]}"
    elif sig is not None:
        outcome, detail = Outcome.KILLED, f"ended by {_signal_name(sig)}"
    elif exit_code != 0:
        outcome, detail = Outcome.NONZERO_EXIT, f"exit status {exit_code}"
    else:
        outcome, detail = Outcome.OK, ""
    if reply is None:
        box.destroy(box.dead or io.no_answer or "the agent died")
    return Result(
        outcome,
        exit_code if reply is not None else None,
        sig,
        bytes(io.out[1]),
        bytes(io.out[2]),
        seconds,
        detail,
        report.get("leftover", 0),
    )


_REPORT_INTS = {"exit": (0, 255), "signal": (1, 128), "leftover": (0, 1 << 20)}


def _checked(reply: dict[str, Any] | None) -> dict[str, Any]:
    """The agent's report with each field of the right type and range; anything else dropped."""
    out: dict[str, Any] = {}
    for name, (low, high) in _REPORT_INTS.items():
        value = (reply or {}).get(name)
        if type(value) is int and low <= value <= high:
            out[name] = value
    for name in ("timed_out", "disk_full", "files_full"):
        if type((reply or {}).get(name)) is bool:
            out[name] = (reply or {})[name]
    return out


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
