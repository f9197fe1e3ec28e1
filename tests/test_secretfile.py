"""`shipyard.secretfile`: tokens and keys are read only from files no other local user controls."""

import os
import stat
import threading
from pathlib import Path

import pytest

from shipyard.errors import StorageError
from shipyard.secretfile import read_private_file, write_private_file


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "keys" / "signing.key"
    write_private_file(path, b"s3cret")
    return path


def test_written_private_atomically_and_read_back(secret: Path) -> None:
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(secret.parent.stat().st_mode) == 0o700
    assert read_private_file(secret, "key file", 100) == b"s3cret"
    assert read_private_file(secret, "key file", 2) == b"s3"
    write_private_file(secret, b"new")
    assert read_private_file(secret, "key file", 100) == b"new"
    write_private_file(secret, b"kept?", replace=False)
    assert read_private_file(secret, "key file", 100) == b"new"
    assert [p.name for p in secret.parent.iterdir()] == ["signing.key"]  # no temp file left


def test_concurrent_exclusive_writes_keep_the_first(tmp_path: Path) -> None:
    path = tmp_path / "t" / "x.token"
    threads = [
        threading.Thread(
            target=lambda i=i: write_private_file(path, str(i).encode() * 10, replace=False)
        )
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    data = read_private_file(path, "token file", 100)
    assert len(data) == 10 and len(set(data)) == 1
    assert [p.name for p in path.parent.iterdir()] == ["x.token"]


def test_group_or_other_bits_on_the_file_are_refused(secret: Path) -> None:
    for mode in (0o644, 0o640, 0o604, 0o620, 0o601):
        secret.chmod(mode)
        with pytest.raises(StorageError, match=f"key file {secret} has mode {mode:04o}"):
            read_private_file(secret, "key file", 100)


@pytest.mark.parametrize("mode", [0o755, 0o777, 0o750, 0o707, 0o740])
def test_a_directory_others_may_read_or_write_is_refused(secret: Path, mode: int) -> None:
    secret.parent.chmod(mode)
    with pytest.raises(StorageError, match=f"its directory {secret.parent} has mode {mode:04o}"):
        read_private_file(secret, "key file", 100)
    with pytest.raises(StorageError, match="has mode"):
        write_private_file(secret, b"x")
    assert (secret.parent / secret.name).read_bytes() == b"s3cret"


def test_a_symlinked_directory_is_refused_even_to_a_safe_one(secret: Path, tmp_path: Path) -> None:
    link = tmp_path / "linked"
    link.symlink_to(secret.parent)
    with pytest.raises(StorageError, match="symbolic link"):
        read_private_file(link / secret.name, "key file", 100)
    with pytest.raises(StorageError, match="symbolic link"):
        write_private_file(link / "other.key", b"x")
    assert not (secret.parent / "other.key").exists()


def test_a_symlinked_file_is_refused_and_never_written_through(
    secret: Path, tmp_path: Path
) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"victim")
    link = secret.parent / "link.key"
    link.symlink_to(target)
    with pytest.raises(StorageError, match=r"key file .* symbolic link: cannot open safely"):
        read_private_file(link, "key file", 100)
    write_private_file(link, b"new")
    assert target.read_bytes() == b"victim" and not link.is_symlink()


def test_a_fifo_is_refused_without_waiting_for_a_writer(secret: Path) -> None:
    fifo = secret.parent / "fifo.token"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(StorageError, match=f"token file {fifo} is not a regular file"):
        read_private_file(fifo, "token file", 100)


def test_missing_file_and_directory_are_named(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir(mode=0o700)
    with pytest.raises(StorageError, match=r"token file .*/d/none does not exist"):
        read_private_file(tmp_path / "d" / "none", "token file", 100)
    with pytest.raises(StorageError, match="no directory"):
        read_private_file(tmp_path / "nodir" / "none", "token file", 100)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown and mknod need root")
def test_files_and_directories_of_another_user_or_devices_are_refused(secret: Path) -> None:
    device = secret.parent / "null.key"
    os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    with pytest.raises(StorageError, match="not a regular file"):
        read_private_file(device, "key file", 100)
    os.chown(secret, 65534, 65534)
    with pytest.raises(StorageError, match=f"key file {secret} is owned by uid 65534"):
        read_private_file(secret, "key file", 100)
    os.chown(secret, 0, 0)
    os.chown(secret.parent, 65534, 65534)
    with pytest.raises(StorageError, match=f"its directory {secret.parent} is owned by uid 65534"):
        read_private_file(secret, "key file", 100)
