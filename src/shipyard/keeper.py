"""The keeper: kills a Shipyard process's children when that process dies (see
`shipyard.children`, which starts one per process as `python -I -S keeper.py`; stdlib only).

It reads lines on stdin, `keep PGID SIGNAL [PATH]` and `drop PGID`. The parent holds the only
write end of that pipe, so end of input means the parent is gone, however it ended: every group
still kept is sent its signal, then SIGKILL if it lingers, and its PATH is removed.
"""

import contextlib
import os
import shutil
import signal
import sys
import time

_LINGER_S = 30.0  # how long a group may take to end on its own signal before it is SIGKILLed


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the parent's end ends the keeper
    kept: dict[int, tuple[int, str]] = {}
    for line in sys.stdin.buffer:
        words = line.decode(errors="replace").split(maxsplit=3)
        if len(words) >= 3 and words[0] == "keep":
            kept[int(words[1])] = (int(words[2]), words[3].strip() if len(words) > 3 else "")
        elif len(words) == 2 and words[0] == "drop":
            kept.pop(int(words[1]), None)
    for pgid, (sig, _) in kept.items():
        _signal(pgid, sig)
    deadline = time.monotonic() + _LINGER_S
    while any(_alive(p) for p in kept) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pgid, (_, path) in kept.items():
        _signal(pgid, signal.SIGKILL)
        if path:
            while _alive(pgid) and time.monotonic() < deadline + _LINGER_S:
                time.sleep(0.05)
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
