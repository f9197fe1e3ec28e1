"""Escape and abuse attempts, each a real program run inside a sandbox.

Every test asserts the outcome the attempt must end in and that the host is unaffected.
"""

import os
import secrets
import socket
import textwrap
from pathlib import Path

import pytest

from shipyard.sandbox import Host, Outcome, Result, Sandbox
from shipyard.sandbox.cgroups import OVERHEAD_PIDS

from .conftest import SMALL, Service


def python(box: Sandbox, code: str, timeout: float = 20.0) -> Result:
    return box.exec(["python3", "-c", textwrap.dedent(code)], timeout=timeout)


def members(box: Sandbox) -> int:
    return max(len(group.procs()) for group in box.groups)


def test_no_network_loopback_or_namespace_address(box: Sandbox) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        result = python(
            box,
            f"""
            import errno, socket
            for address in [("127.0.0.1", {port}), ("10.0.2.2", 80), ("8.8.8.8", 53)]:
                s = socket.socket()
                s.settimeout(3)
                try:
                    s.connect(address)
                    print("connected", address)
                except OSError as exc:
                    print("refused", errno.errorcode.get(exc.errno, exc.errno))
            u = socket.socket(socket.AF_UNIX)
            try:
                u.connect("\\0shipyard-host-abstract")
                print("connected abstract")
            except OSError as exc:
                print("refused", errno.errorcode.get(exc.errno, exc.errno))
            """,
        )
        listener.settimeout(0.2)
        try:
            listener.accept()
            raise AssertionError("the host's listener was reached from a sandbox")
        except TimeoutError:
            pass
    assert result.outcome is Outcome.OK, result
    lines = result.stdout.decode().split("\n")
    assert lines[0] == "refused ECONNREFUSED"  # the sandbox's own loopback, nothing listening
    assert lines[1] == lines[2] == "refused ENETUNREACH"  # no route: no interface but lo
    assert lines[3] == "refused ECONNREFUSED"
    assert "connected" not in result.stdout.decode()


def test_writes_outside_the_writable_layer_fail(box: Sandbox) -> None:
    result = python(
        box,
        """
        for path in ["/x", "/usr/x", "/usr/bin/python3", "/proc/sys/kernel/hostname", "/dev/x"]:
            try:
                open(path, "w").write("x")
                print("wrote", path)
            except OSError as exc:
                print("refused", path, exc.strerror)
        open("/work/ok", "w").write("x")
        open("/tmp/ok", "w").write("x")
        """,
    )
    assert result.outcome is Outcome.OK, result
    assert "wrote" not in result.stdout.decode(), result.stdout
    assert result.stdout.decode().count("refused") == 5
    assert not Path("/x").exists() and not Path("/usr/x").exists()


def test_host_files_outside_the_image_cannot_be_read(box: Sandbox, shipyard_home: Path) -> None:
    secret = shipyard_home / "secret.txt"
    secret.write_text("host secret")
    result = python(
        box,
        f"""
        import os
        for path in ["/etc/passwd", "/etc/shadow", "{secret}", "/root", "/home", "/var"]:
            print(path, os.path.exists(path))
        print("pid1", open("/proc/1/cmdline", "rb").read().split(b"\\0")[0].decode())
        """,
    )
    assert result.outcome is Outcome.OK, result
    lines = result.stdout.decode().splitlines()
    assert all(line.endswith("False") for line in lines[:-1]), lines
    assert lines[-1] == "pid1 /.shipyard/agent"  # its own PID namespace: the agent is its init


def test_fork_bomb_hits_the_pids_cap(box: Sandbox) -> None:
    result = python(
        box,
        """
        import os, time
        end = time.time() + 3
        while time.time() < end:
            try:
                os.fork()
            except OSError:
                pass
        """,
        timeout=15,
    )
    assert result.outcome is Outcome.PIDS_LIMIT, result
    assert members(box) == OVERHEAD_PIDS  # every bomb process is gone
    assert box.exec(["true"]).outcome is Outcome.OK  # the sandbox itself still works


def test_allocating_past_the_memory_cap(box: Sandbox) -> None:
    result = python(box, "x = bytearray(400 << 20); x[::4096] = b'x' * len(x[::4096])")
    assert result.outcome is Outcome.MEMORY_LIMIT, result
    assert f"{SMALL.memory_mib} MiB" in result.detail


def test_filling_the_disk_past_its_quota(box: Sandbox) -> None:
    result = python(
        box,
        """
        with open("/work/fill", "wb") as f:
            for _ in range(1000):
                f.write(b"x" * (1 << 20))
                f.flush()
        """,
    )
    assert result.outcome is Outcome.DISK_LIMIT, result
    usage = box.exec(["sh", "-c", "wc -c < /work/fill; rm /work/fill"])
    assert usage.outcome is Outcome.OK
    assert int(usage.stdout) <= SMALL.disk_mib << 20


def test_filling_the_layer_with_empty_files_hits_the_file_cap(box: Sandbox) -> None:
    result = python(
        box,
        """
        import os
        os.mkdir("/work/many")
        for n in range(10_000_000):
            open(f"/work/many/{n}", "w").close()
        """,
        timeout=120,
    )
    assert result.outcome is Outcome.DISK_LIMIT, result
    assert f"{SMALL.files}-file cap is hit" in result.detail
    assert b"No space left on device" in result.stderr
    count = box.exec(["sh", "-c", "ls /work/many | wc -l; rm -r /work/many"], timeout=120)
    assert count.outcome is Outcome.OK, count
    assert SMALL.files - 10 <= int(count.stdout) < SMALL.files  # the root and /work/.tmp count


def test_the_command_has_no_capabilities_and_no_new_privileges(box: Sandbox) -> None:
    status = box.exec(["cat", "/proc/self/status"]).stdout.decode().splitlines()
    fields = dict(line.split(":\t", 1) for line in status if ":\t" in line)
    for name in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]:
        assert int(fields[name], 16) == 0, (name, fields[name])
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"


def test_orphans_are_reaped_while_the_command_runs(box: Sandbox) -> None:
    # Each short-lived grandchild is orphaned to the agent, the namespace's init; unreaped, their
    # zombies would pass the process cap long before the loop ends.
    script = "for i in $(seq 120); do (true &); done; sleep 0.2; echo done"
    result = box.exec(["sh", "-c", script], timeout=60)
    assert result.outcome is Outcome.OK, result
    assert result.stdout == b"done\n"


def test_the_agent_cannot_be_killed_from_inside(box: Sandbox) -> None:
    result = box.exec(["sh", "-c", "kill -KILL 1; kill -TERM 1; kill -SEGV 1; echo sent"])
    assert result.outcome is Outcome.OK, result
    assert box.exec(["true"]).outcome is Outcome.OK  # the agent is still there


def test_spinning_forever_times_out(box: Sandbox) -> None:
    result = python(box, "while True: pass", timeout=1.0)
    assert result.outcome is Outcome.TIMEOUT, result
    assert result.seconds < 1.0 + 3.0
    assert members(box) == OVERHEAD_PIDS


def test_printing_gigabytes_hits_the_output_cap(box: Sandbox) -> None:
    result = python(
        box,
        """
        import sys
        chunk = b"x" * (1 << 20)
        for _ in range(2048):
            sys.stdout.buffer.write(chunk)
        """,
    )
    assert result.outcome is Outcome.OUTPUT_LIMIT, result
    assert len(result.stdout) + len(result.stderr) == SMALL.output_bytes


def test_background_process_is_killed_when_exec_returns(box: Sandbox) -> None:
    result = box.exec(["sh", "-c", "setsid sleep 1000 & nohup sleep 1000 >/dev/null & echo ok"])
    assert result.outcome is Outcome.OK, result
    assert result.leftover_killed == 2
    assert members(box) == OVERHEAD_PIDS
    listing = python(
        box, "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"
    )
    assert len(eval(listing.stdout)) == 2  # the agent (the namespace's init), this python


def test_ptrace_and_other_escape_calls_are_refused(box: Sandbox) -> None:
    result = python(
        box,
        """
        import ctypes, errno, os
        libc = ctypes.CDLL(None, use_errno=True)
        def call(name, *args):
            rc = getattr(libc, name)(*args)
            print(name, rc, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
        child = os.fork()
        if child == 0:
            import time; time.sleep(30); os._exit(0)
        call("ptrace", 16, child, None, None)       # PTRACE_ATTACH to its own child
        call("ptrace", 16, 1, None, None)           # and to the namespace's init
        call("unshare", 0x10000000)                 # CLONE_NEWUSER
        call("mount", b"none", b"/work", b"tmpfs", 0, None)
        call("syscall", 321, 0, 0, 0)               # bpf (x86-64 number)
        os.kill(child, 9)
        print(open("/proc/self/status").read().split("Seccomp:")[1].split()[0])
        """,
    )
    assert result.outcome is Outcome.OK, result
    lines = result.stdout.decode().splitlines()
    assert lines[:4] == [
        "ptrace -1 EPERM",
        "ptrace -1 EPERM",
        "unshare -1 EPERM",
        "mount -1 EPERM",
    ], lines
    assert lines[-1] == "2"  # seccomp filter mode


def test_host_is_intact_after_abuse(host: Host) -> None:
    with host.start(host.images.resolve("host"), SMALL) as box:
        box.wait_ready()
        python(box, "import os\nwhile True:\n  try: os.fork()\n  except OSError: pass", timeout=2)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0  # the host can still fork


# Reads every /proc entry of every other process it can see (its init, its parent) and the
# memory of each region it can map, and prints where each needle (given in hex, so that this
# script's own text, which the agent holds, does not contain them) turned up.
_PROC_SEARCH = """
import os, sys
needles = [bytes.fromhex(word) for word in sys.argv[1:]]
def search(where, data):
    for needle in needles:
        if needle in data:
            print("found", needle.decode(), "in", where)
def grab(path):
    try:
        with open(path, "rb") as f:
            search(path, f.read(1 << 20))
    except OSError as exc:
        print("refused", path, exc.strerror)
me = os.getpid()
for pid in sorted({1, os.getppid(), *(int(p) for p in os.listdir("/proc") if p.isdigit())} - {me}):
    for name in ["environ", "cmdline", "maps", "stack", "auxv", "status", "stat"]:
        grab(f"/proc/{pid}/{name}")
    for name in ["exe", "cwd", "root"]:
        try:
            search(f"/proc/{pid}/{name}", os.readlink(f"/proc/{pid}/{name}").encode())
        except OSError as exc:
            print("refused", f"/proc/{pid}/{name}", exc.strerror)
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        with open(f"/proc/{pid}/mem", "rb") as mem:
            for line in maps:
                low, high = (int(x, 16) for x in line.split()[0].split("-"))
                try:
                    mem.seek(low)
                    search(f"/proc/{pid}/mem", mem.read(min(high - low, 8 << 20)))
                except (OSError, OverflowError, ValueError):
                    pass
    except OSError as exc:
        print("refused", f"/proc/{pid}/mem", exc.strerror)
"""


def test_the_services_environment_and_paths_are_not_readable_inside(
    shipyard_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"s3-key-{secrets.token_hex(8)}"
    monkeypatch.setenv("SHIPYARD_TEST_SECRET", secret)
    service = Service(shipyard_home, "--pool-min", "0")
    service.start()
    try:
        with service.client() as client, client.create(limits=SMALL) as box:
            needles = [secret, str(shipyard_home), "--seccomp", "bwrap", "/var/cache", "SHIPYARD_"]
            argv = ["python3", "-c", _PROC_SEARCH, *(n.encode().hex() for n in needles)]
            result = box.exec(argv, timeout=60)
    finally:
        service.stop()
    assert result.outcome is Outcome.OK, result
    lines = result.stdout.decode().splitlines()
    assert [line for line in lines if line.startswith("found")] == []
    assert "refused /proc/1/environ Permission denied" in lines  # the agent, PID 1, is closed
    assert "refused /proc/1/mem Permission denied" in lines
