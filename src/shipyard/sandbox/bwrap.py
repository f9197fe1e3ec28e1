"""Starting a sandbox: the bubblewrap command line and the process that runs it.

Every sandbox gets new user, PID, IPC, UTS, mount, network and cgroup namespaces (`--unshare-all`:
its network is a loopback of its own and nothing else), no further user namespaces
(`--disable-userns`), a new session (no terminal to inject into), the image's read-only binds
under a root that is itself remounted read-only, and fresh /proc and /dev. The agent is the PID
namespace's init (`--as-pid-1`): bubblewrap leaves it CAP_SYS_ADMIN and CAP_SETPCAP in the
sandbox's user namespace for its first steps, mounting the writable layer at /work (a tmpfs
capped in bytes and files; /tmp points into it), then it drops them, loads the seccomp filter and
makes itself non-dumpable before any command runs. bubblewrap and everything under it die with
the process that started them (`--die-with-parent`), so a service killed outright takes its
sandboxes with it; the reaper removes what that leaves (cgroups, records).

bubblewrap starts with an environment of one variable, MARKER (its init would otherwise keep the
service's whole environment, secrets included, where /proc shows it), and gives the agent ENV.
When the service runs as root, bubblewrap runs as `nobody`: a sandbox is an unprivileged user's
user namespace, whose uid maps to no one on the host.
"""

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from shipyard.sandbox import agent, seccomp
from shipyard.sandbox.cgroups import Group
from shipyard.sandbox.image import Image
from shipyard.sandbox.limits import Limits

SANDBOX_UID = 1000  # the uid inside; outside it is the service's (or nobody's)
NOBODY = 65534
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8"}
MARKER = "SHIPYARD_SANDBOX"
_SECCOMP = seccomp.program()


def argv(image: Image, limits: Limits, agent_binary: Path, fds: dict[str, int]) -> list[str]:
    words = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user"]
    words += ["--disable-userns", "--as-pid-1", "--die-with-parent", "--new-session"]
    words += ["--hostname", "sandbox", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    words += ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP", "--clearenv"]
    for name, value in ENV.items():
        words += ["--setenv", name, value]
    words += image.args()
    words += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    words += ["--dir", "/work", "--symlink", "/work/.tmp", "/tmp"]
    words += ["--ro-bind", str(agent_binary), agent.PATH, "--remount-ro", "/", "--chdir", "/"]
    layer = [str(limits.disk_mib << 20), str(limits.files)]
    return [*words, agent.PATH, str(fds["socket"]), str(fds["seccomp"]), *layer]


def _readable_pipe(data: bytes) -> int:
    """A pipe holding `data` (under 1 KiB: it fits the pipe buffer), its write end closed."""
    read, write = os.pipe()
    try:
        os.write(write, data)
    finally:
        os.close(write)
    return read


def start(
    image: Image,
    limits: Limits,
    groups: Sequence[Group],
    agent_binary: Path,
    socket_fd: int,
    stderr: int,
    tag: str,
) -> subprocess.Popen[bytes]:
    """Start bubblewrap inside `groups`, joined (by the agent's `launch`) before it runs, so all
    its children are in them.

    `tag` goes in bubblewrap's environment as MARKER (the sandboxed command gets a clean one), so
    a process left by any sandbox of this host can be found and counted from /proc."""
    fds = {"seccomp": _readable_pipe(_SECCOMP), "socket": socket_fd}
    joins = [os.open(g.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for g in groups]
    uid = NOBODY if os.geteuid() == 0 else -1
    launch = [str(agent_binary), "launch", str(uid), ",".join(map(str, joins)) or "-"]
    try:
        return subprocess.Popen(
            [*launch, *argv(image, limits, agent_binary, fds)],
            pass_fds=[*fds.values(), *joins],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd="/",
            env={MARKER: tag},
        )
    finally:
        for fd in [fds["seccomp"], *joins]:
            os.close(fd)
