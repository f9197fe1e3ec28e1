"""Copy a stored piece into a file at an offset without its bytes passing through Python: a
reflink (`FICLONERANGE`: the two files share blocks) where the filesystem can, else
`copy_file_range` (in the kernel; itself a reflink on some filesystems), else read and write.
The first method a filesystem refuses is not tried again for the rest of a `Copier`'s life."""

import errno
import fcntl
import os
import struct
from collections.abc import Callable

FICLONERANGE = 0x4020940D  # _IOW(0x94, 13, struct file_clone_range)
_CHUNK = 1 << 20
# What a filesystem (or kernel) says when it cannot do a method at all, or not for these files.
_REFUSED = {
    errno.EOPNOTSUPP,
    errno.ENOTSUP,
    errno.ENOTTY,
    errno.EXDEV,
    errno.EINVAL,
    errno.ENOSYS,
    errno.EBADF,
}

Method = Callable[[int, int, int, int], None]  # (source fd, dest fd, length, dest offset)


def clone(source: int, dest: int, length: int, offset: int) -> None:
    """Share the source's blocks: no bytes are copied at all."""
    fcntl.ioctl(dest, FICLONERANGE, struct.pack("=qQQQ", source, 0, length, offset))


def copy_range(source: int, dest: int, length: int, offset: int) -> None:
    done = 0
    while done < length:
        n = os.copy_file_range(source, dest, length - done, done, offset + done)
        if n == 0:
            raise OSError(errno.EIO, f"source ended after {done} of {length} bytes")
        done += n


def read_write(source: int, dest: int, length: int, offset: int) -> None:
    done = 0
    while done < length:
        data = os.pread(source, min(_CHUNK, length - done), done)
        if not data:
            raise OSError(errno.EIO, f"source ended after {done} of {length} bytes")
        view = memoryview(data)
        while view:
            written = os.pwrite(dest, view, offset + done)
            view, done = view[written:], done + written


class Copier:
    def __init__(self, methods: tuple[Method, ...] = (clone, copy_range, read_write)) -> None:
        self.methods = list(methods)

    @property
    def method(self) -> str:
        """The name of the method in use (the first not yet refused)."""
        return self.methods[0].__name__

    def copy(self, source: int, dest: int, length: int, offset: int) -> None:
        """Copy the first `length` bytes of file `source` into `dest` at `offset`."""
        while True:
            try:
                self.methods[0](source, dest, length, offset)
                return
            except OSError as exc:
                if exc.errno not in _REFUSED or len(self.methods) == 1:
                    raise
                self.methods.pop(0)
