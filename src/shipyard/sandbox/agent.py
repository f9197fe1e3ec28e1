"""The sandbox agent (`agent.c`): building it once per host, and the requests it understands.

The agent is compiled statically on first use (`cc -O2 -static`, so it needs nothing from an
image) into the image cache, named by the hash of its source, and bound read-only into every
sandbox at `/.shipyard/agent`, which bubblewrap runs as the sandbox's init: `agent SOCKET SECCOMP
BYTES FILES` (the service's socket, a pipe holding the seccomp filter, and the writable layer's
caps). Requests are frames of NUL-separated strings (`wire.send_frame`):

- `exec TIMEOUT_MS CWD ARGC ARGV... ENVC NAME=VALUE... NLIMITS (RESOURCE VALUE)...` with the
  command's stdin, stdout and stderr as fds → `{"exit" | "signal", "timed_out", "killed",
  "leftover", "disk_full", "files_full"}`; every process the command left is killed before the
  reply.
- `kill` while an exec runs: kill the command now (the output cap was passed).

Its first frame is `{"ready": true}`. It serves files through exec: `agent put PATH MODE`, `agent
get PATH` (exit 2: no such file).
"""

import hashlib
import os
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from shipyard.errors import StorageError

PATH = "/.shipyard/agent"
SOURCE = Path(__file__).with_name("agent.c")
_lock = threading.Lock()


def binary(cache: Path) -> Path:
    """The compiled agent for this source, built into `cache` the first time."""
    source = SOURCE.read_bytes()
    built = cache / f"agent-{hashlib.sha256(source).hexdigest()[:16]}"
    with _lock:
        if built.exists():
            return built
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise StorageError(
                "the sandbox agent is built on first use and needs a C compiler with static "
                "libc (Debian: apt-get install gcc libc6-dev)"
            )
        cache.mkdir(parents=True, exist_ok=True, mode=0o755)
        temp = built.with_name(f".{built.name}.{os.getpid()}")
        run = subprocess.run(
            [compiler, "-O2", "-static", "-o", str(temp), str(SOURCE)],
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            raise StorageError(f"cannot build the sandbox agent: {run.stderr.strip()[-500:]}")
        temp.chmod(0o755)
        os.replace(temp, built)
    return built


def exec_request(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    timeout: float,
    rlimits: Mapping[int, int],
) -> bytes:
    words = ["exec", str(max(1, int(timeout * 1000))), cwd, str(len(argv)), *argv, str(len(env))]
    words += [f"{name}={value}" for name, value in env.items()]
    words.append(str(len(rlimits)))
    for resource, value in rlimits.items():
        words += [str(resource), str(value)]
    return b"".join(word.encode() + b"\0" for word in words)


KILL = b"kill\0"
