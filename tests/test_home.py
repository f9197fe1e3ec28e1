"""`$SHIPYARD_HOME` and what is in it are private to the user who runs Shipyard."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.home import shipyard_home

NOBODY = 65534


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A directory every local user may enter (unlike pytest's tmp_path), as `/home/alice` is."""
    base = Path(tempfile.mkdtemp(prefix="shipyard-home-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHIPYARD_HOME": str(home), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "shipyard.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def read_as_nobody(path: Path) -> subprocess.CompletedProcess[bytes]:
    # cat, not this Python: the interpreter may live where the other user cannot run it
    return subprocess.run(["cat", str(path)], capture_output=True, user=NOBODY, cwd="/")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_home_and_catalog_are_private(open_base: Path) -> None:
    home = open_base / "home"
    assert cli(home, "db", "upgrade").returncode == 0
    catalog = home / "catalog.db"
    assert mode(home) == 0o700 and mode(catalog) == 0o600
    for extra in (home / "catalog.db-wal", home / "catalog.db-shm"):
        assert not extra.exists() or mode(extra) == 0o600
    if os.geteuid() == 0:  # a real other local user: cannot read the catalog
        denied = read_as_nobody(catalog)
        assert denied.returncode != 0 and b"Permission denied" in denied.stderr


def test_an_existing_open_home_and_catalog_are_tightened(open_base: Path) -> None:
    home = open_base / "home"
    assert cli(home, "db", "upgrade").returncode == 0
    catalog = home / "catalog.db"
    home.chmod(0o755)
    catalog.chmod(0o644)
    before = catalog.read_bytes()
    if os.geteuid() == 0:
        assert read_as_nobody(catalog).returncode == 0  # the hole, as it was
    result = cli(home, "db", "status")
    assert result.returncode == 0, result.stderr
    assert f"{home} was readable by other users; its mode is now 0700" in result.stderr
    assert mode(home) == 0o700 and mode(catalog) == 0o600
    assert catalog.read_bytes() == before  # the data is left as it was
    if os.geteuid() == 0:
        assert read_as_nobody(catalog).returncode != 0


def test_shipyard_home_is_made_0700(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path / "a" / "home"))
    home = shipyard_home()
    assert home == tmp_path / "a" / "home" and mode(home) == 0o700
