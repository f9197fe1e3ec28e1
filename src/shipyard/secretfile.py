"""Files only this user may read: tokens and keys, with one set of rules for all of them.

`read_private_file` refuses, by name, anything another local user could have planted or could
read: a missing file, a symlink, a FIFO or device (opened without blocking, so a FIFO cannot hang
the reader), a file owned by someone else or with any group/other permission bit, and a parent
directory that is a symlink, owned by someone else, or readable/writable by group/other. The file
is opened relative to the already-checked directory, so the directory cannot be swapped between
the check and the open.

`write_private_file` makes the parent 0700 if missing (and refuses an unsafe one, as above), then
writes a 0600 temporary file, fsyncs it and renames (or links) it into place: a reader sees the
old file or the new one, never half of one, and no symlink is followed.
"""

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from shipyard.errors import StorageError

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
# Group/other read or write on the directory: listing names, or replacing the file.
_DIR_UNSAFE = 0o066


def read_private_file(path: Path, what: str, max_bytes: int) -> bytes:
    """At most `max_bytes` bytes of `path`; StorageError names `what` and the path if unsafe."""
    dir_fd = _open_private_dir(path, what)
    try:
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=dir_fd)
        except FileNotFoundError:
            raise StorageError(f"{what} {path} does not exist") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StorageError(
                    f"{what} {path} is a symbolic link: cannot open safely (another user could "
                    "point it anywhere); replace it with the file itself"
                ) from None
            raise StorageError(f"{what} {path}: cannot open safely ({exc.strerror})") from None
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StorageError(f"{what} {path} is not a regular file (a FIFO, device or directory)")
        _check_owner(info, f"{what} {path}")
        if info.st_mode & 0o077:
            raise StorageError(
                f"{what} {path} has mode {stat.S_IMODE(info.st_mode):04o}: group/other may "
                f"access it; run `chmod 600 {path}`"
            )
        chunks: list[bytes] = []
        left = max_bytes
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise StorageError(f"{what} {path}: read failed ({exc.strerror})") from None
    finally:
        os.close(fd)


def write_private_file(path: Path, data: bytes, *, replace: bool = True) -> None:
    """Write `data` to `path` (0600, parent 0700) atomically; with `replace=False` an existing
    file is kept as it is (two first starts racing agree on whichever landed first)."""
    what = f"private file {path}"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"{what}: cannot create its directory ({exc.strerror})") from None
    dir_fd = _open_private_dir(path, "private file")
    temp = f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            if replace:
                # rename replaces a symlink at `path` itself, never what it points to
                os.rename(temp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            else:
                with contextlib.suppress(FileExistsError):  # a link never replaces
                    os.link(temp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.fsync(dir_fd)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=dir_fd)
    except OSError as exc:
        raise StorageError(f"{what}: write failed ({exc.strerror})") from None
    finally:
        os.close(dir_fd)


def _open_private_dir(path: Path, what: str) -> int:
    """A descriptor on `path`'s parent, checked: not a symlink, ours, no group/other access."""
    parent = path.parent
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except FileNotFoundError:
        raise StorageError(f"{what} {path} does not exist (no directory {parent})") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StorageError(
                f"{what} {path}: its directory {parent} is a symbolic link or not a directory; "
                "cannot open safely"
            ) from None
        raise StorageError(f"{what} {path}: cannot open {parent} ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        _check_owner(info, f"{what} {path}: its directory {parent}")
        if info.st_mode & _DIR_UNSAFE:
            raise StorageError(
                f"{what} {path}: its directory {parent} has mode "
                f"{stat.S_IMODE(info.st_mode):04o}: group/other may list or replace it; run "
                f"`chmod 700 {parent}`"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_owner(info: os.stat_result, subject: str) -> None:
    if info.st_uid != os.geteuid():
        raise StorageError(
            f"{subject} is owned by uid {info.st_uid}, not by you (uid {os.geteuid()})"
        )


def ensure_private_dir(path: Path) -> bool:
    """Make `path` (and missing parents) with mode 0700; take group/other access away from an
    existing one this user owns. True when an existing directory's mode was tightened."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.geteuid() or not info.st_mode & 0o077:
        return False
    path.chmod(stat.S_IMODE(info.st_mode) & 0o700)
    return True
