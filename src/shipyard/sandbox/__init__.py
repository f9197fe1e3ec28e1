"""Isolated, capped, leased execution of untrusted code (bubblewrap, cgroups, seccomp).

In this process:

    with create(limits=Limits(memory_mib=128)) as box:
        result = box.exec(["python3", "-c", "print(6 * 7)"], timeout=5)
        assert result.outcome is Outcome.OK

Through the service many drivers share (`shipyard sandbox serve`; warm pools, leases, reaper):
`Client().create(...)`, same methods. See docs/sandbox.md.
"""

import atexit
import os
import threading

from shipyard.home import shipyard_home
from shipyard.sandbox.box import Sandbox
from shipyard.sandbox.client import Client, RemoteSandbox
from shipyard.sandbox.host import Host
from shipyard.sandbox.limits import Limits, Outcome, Result

__all__ = ["Client", "Host", "Limits", "Outcome", "RemoteSandbox", "Result", "Sandbox", "create"]

_local: Host | None = None
_local_lock = threading.Lock()


def create(image: str = "host", limits: Limits | None = None) -> Sandbox:
    """A ready sandbox started by this process (no pool, no lease: close it when done)."""
    global _local
    with _local_lock:
        if _local is None:
            # Its own cgroup parent and records, apart from a service's on the same home.
            _local = Host(shipyard_home(), tag=f"-p{os.getpid()}")
            atexit.register(_local.close)
        host = _local
    box = host.start(host.images.resolve(image), limits or Limits())
    try:
        box.wait_ready()
    finally:
        if box.dead:
            host.finish(box, box.dead)
    return box
