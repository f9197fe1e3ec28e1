"""Child processes (rollout workers, the reward service) die with the controller that forked them.

A forked child inherits the parent's end of every pipe, so it would never see EOF when the
controller is SIGKILLed; the kernel's parent-death signal ends it instead.
"""

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Call first thing in the child; `parent_pid` is the controller's pid before the fork."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the pipe's EOF remains the only signal
        pass
    if os.getppid() != parent_pid:  # it died before the signal was armed
        os._exit(1)
