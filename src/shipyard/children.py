"""Every child of a Shipyard process dies with it.

`spawn` starts a command in its own process group (so a Ctrl-C reaches the parent, which
decides, and so the group can be ended as one) with the kernel's parent-death signal armed:
SIGKILL the parent and the command is SIGKILLed too. The signal reaches only the command itself,
not what the command started, so every group is also registered with a keeper process
(`shipyard.keeper`, one per parent, started on first use in a session of its own): when the
parent ends for any reason, SIGKILL included, the keeper sees its pipe close and kills each group
still registered. `stop` ends a group on purpose; `reap` sweeps up what an exited command left.

A forked child (no exec) calls `die_with_parent` first thing instead.

PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not the process: spawn from
the main thread or another that lives as long as the children.
"""

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

_PR_SET_PDEATHSIG = 1  # Linux prctl option
try:  # looked up now: a forked child must not dlopen (another thread may hold the loader's lock)
    _prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: the keeper remains
    _prctl = None


def die_with_parent(parent_pid: int) -> None:
    """Be SIGKILLed when the parent dies. Call first thing in a forked child; `parent_pid` is
    the parent's pid taken before the fork."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before the signal was armed
        os._exit(1)


class _Keeper:
    """The client end of the keeper process: one pipe, a line per registration."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the pid that started it: a forked child needs its own

    def send(self, line: str) -> None:
        with self._lock:
            for _ in range(2):  # a keeper that died is started again once
                if self._proc is None or self._owner != os.getpid():
                    self._start()
                stdin = self._proc.stdin if self._proc else None
                assert stdin is not None
                try:
                    stdin.write(line.encode() + b"\n")
                    stdin.flush()
                    return
                except BrokenPipeError:
                    self._proc = None

    def forked(self) -> None:
        """In a forked child: let go of the parent's pipe (so the keeper sees the parent's
        end, not the child's) and of a lock another thread may have held at the fork."""
        self._lock = threading.Lock()
        stdin = self._proc.stdin if self._proc else None
        if stdin is not None:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stdin.fileno(), inheritable=False)
            os.close(null)
        self._proc = None

    def _start(self) -> None:
        keeper = Path(__file__).with_name("keeper.py")
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(keeper)],  # stdlib only: starts in milliseconds
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # never hold a caller's pipe open after the caller ends
            start_new_session=True,  # a signal to the parent's group must not end it too
        )
        self._owner = os.getpid()


# The parent-death signal is armed by util-linux's `setpriv`, which then execs the command, not
# by a `preexec_fn`: Python code between fork and exec may run finalizers (a database
# connection's, say) in the child that act on the parent's sockets, and it can deadlock on locks
# other threads held at the fork.
_SETPRIV = shutil.which("setpriv")
_PDEATHSIG_WRAPPER = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []

_KEEPER = _Keeper()
os.register_at_fork(after_in_child=_KEEPER.forked)


def keep(pgid: int, sig: signal.Signals = signal.SIGKILL, remove: Path | None = None) -> None:
    """Have process group `pgid` sent `sig` (then SIGKILL) if this process dies first, and
    `remove` deleted once the group is gone."""
    _KEEPER.send(f"keep {pgid} {int(sig)} {remove or ''}".rstrip())


def forget(pgid: int) -> None:
    """This process ends group `pgid` itself (or it ended): the keeper leaves it alone."""
    _KEEPER.send(f"drop {pgid}")


def spawn(
    argv: Sequence[str],
    *,
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> "subprocess.Popen[bytes]":
    """Start `argv` in a new process group that dies with this process (see the module's doc).
    End it with `stop`, or `reap` once it exited."""
    proc = subprocess.Popen(
        [*_PDEATHSIG_WRAPPER, _program(argv[0], env, cwd), *argv[1:]],
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    keep(proc.pid)
    return proc


def _program(name: str, env: dict[str, str] | None, cwd: Path | None) -> str:
    """`name` as `exec` would find it; FileNotFoundError, as `Popen` raises, when it would not
    (the wrapper would only report it by an exit code)."""
    if os.sep in name:
        path = Path(cwd or ".") / name
        if path.is_file() and os.access(path, os.X_OK):
            return name
    else:
        found = shutil.which(name, path=os.pathsep.join(os.get_exec_path(env)))
        if found:
            return found
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


def signal_group(proc: "subprocess.Popen[bytes]", sig: signal.Signals) -> None:
    """Send `sig` to the command's whole process group (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop(proc: "subprocess.Popen[bytes]", patience: float = 5.0) -> None:
    """End the command's group: SIGTERM, then SIGKILL after `patience` seconds."""
    signal_group(proc, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=patience)
    reap(proc)


def reap(proc: "subprocess.Popen[bytes]") -> None:
    """Kill whatever is left of the command's group and wait for the command: nothing it
    started outlives it."""
    signal_group(proc, signal.SIGKILL)
    proc.wait()
    forget(proc.pid)
