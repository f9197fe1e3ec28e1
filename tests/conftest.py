"""Fixtures shared by every subsystem's tests."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.workspace import Workspace


@pytest.fixture
def shipyard_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh `$SHIPYARD_HOME` for this test (also seen by CLI subprocesses it starts)."""
    home = tmp_path / "home"
    monkeypatch.setenv("SHIPYARD_HOME", str(home))
    monkeypatch.delenv("SHIPYARD_STORE", raising=False)
    monkeypatch.delenv("SHIPYARD_CATALOG", raising=False)
    return home


@pytest.fixture
def workspace(shipyard_home: Path) -> Iterator[Workspace]:
    ws = Workspace.open(shipyard_home)
    yield ws
    ws.close()
