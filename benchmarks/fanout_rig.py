"""An emulated cluster for `fanout.py`: one network namespace per host and one for the origin,
each joined by a veth pair to a bridge in its own namespace, every link shaped with `tc tbf` in
both directions. Everything created is recorded and torn down by `close()`, which also runs on
SIGINT, SIGTERM and normal exit, so an interrupted run leaves no namespace, link or process.
"""

import atexit
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

SUBNET = "10.231"


def sh(*args: str) -> None:
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Rig:
    def __init__(self, tag: str, queue_ms: float = 100.0) -> None:
        self.tag = tag
        self.queue_ms = queue_ms  # the longest a packet may wait in a link's shaper
        self.namespaces: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.bridge_ns = self._namespace("br")
        sh("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")
        atexit.register(self.close)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._interrupted)

    def _interrupted(self, signum: int, frame: FrameType | None) -> None:
        self.close()
        sys.exit(128 + signum)

    def _namespace(self, name: str) -> str:
        ns = f"sy{self.tag}{name}"
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        return ns

    def host(self, name: str, index: int, rate_mbit: float) -> tuple[str, str]:
        """A namespace with one link to the bridge capped at `rate_mbit` each way: (ns, IP)."""
        ns = self._namespace(name)
        ip = f"{SUBNET}.{index // 250}.{index % 250 + 1}"
        port = self.port(name)
        sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port,
           "netns", self.bridge_ns)  # fmt: skip
        sh("ip", "-n", ns, "addr", "add", f"{ip}/16", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", self.bridge_ns, "link", "set", port, "master", "br0", "up")
        # Uplink: what leaves the host; downlink: what the bridge sends into it.
        self._shape(ns, "eth0", rate_mbit)
        self._shape(self.bridge_ns, port, rate_mbit)
        return ns, ip

    def port(self, name: str) -> str:
        """The bridge-side end of a host's link (its tx: what the host downloads)."""
        return f"p{self.tag}{name}"[:15]

    def _shape(self, ns: str, dev: str, rate_mbit: float) -> None:
        # Room for a whole 64 KiB GSO super-packet: a smaller bucket makes tbf split every one
        # into MTU-sized packets, multiplying the kernel's per-packet work ~45 times.
        burst = max(256_000, int(rate_mbit * 1e6 / 8 / 250))
        sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit",
           "burst", str(burst), "latency", f"{self.queue_ms}ms")  # fmt: skip

    def spawn(self, ns: str, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        """Start `args` inside `ns` in its own session (so a kill takes its children). A session
        is also its own autogroup to the kernel's scheduler: when the cores are full, every host
        gets an even share of them, however many threads it runs."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def close(self) -> None:
        for proc in self.procs:
            self.kill(proc)
        self.procs.clear()
        for ns in reversed(self.namespaces):  # deleting a namespace deletes its links
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL, check=False)
        self.namespaces.clear()
