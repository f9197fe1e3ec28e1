"""The permission bits a file written from a manifest gets.

A manifest's mode is its publisher's word, and the publisher may be anyone: a file comes out
with at most the manifest's read and execute bits and its owner's write bit (`mode & 0o755`),
and no bit the process's umask removes. So no manifest makes a file that group or others may
write, or a setuid, setgid or sticky one; a stricter umask (0o077) keeps files private.
"""

import contextlib

WRITTEN_BITS = 0o755


def written_mode(mode: int) -> int:
    """The mode a file the manifest gives `mode` is written with."""
    return mode & WRITTEN_BITS & ~current_umask()


def current_umask() -> int:
    """The process's umask, read without changing it: `os.umask` can only set it, and setting
    it for a moment would race the other threads creating files."""
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o077  # no /proc here (or a kernel before 4.7): the strictest owner-only mask
