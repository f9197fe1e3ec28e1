"""Background work yields the CPU to training: persistence threads run at a lower priority."""

import os
import threading

BACKGROUND_NICENESS = 10


def lower_thread_priority() -> None:
    """Raise the calling thread's niceness (Linux: per thread), so training threads come first."""
    try:
        current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(
            os.PRIO_PROCESS, threading.get_native_id(), max(current, BACKGROUND_NICENESS)
        )
    except (OSError, AttributeError):  # not Linux, or not permitted: run at normal priority
        pass
