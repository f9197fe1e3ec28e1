"""A small real catalog (a dataset → run → model chain) and the console app over it."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from shipyard.httpguard import Guard
from shipyard.web import Console, create_app
from shipyard.workspace import Workspace

BASE = "http://127.0.0.1:8643"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SHIPYARD_HOME", str(tmp_path / "home"))
    for name in ("SHIPYARD_DB", "SHIPYARD_STORE", "SHIPYARD_CATALOG"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


@pytest.fixture
def chain(home: Path, tmp_path: Path) -> list[str]:
    """Artifacts a0 ← a1 ← ... ← a5, each made from the one before; a5 is `prod`."""
    ws = Workspace.open(home)
    ids: list[str] = []
    for index in range(6):
        source = tmp_path / f"src{index}"
        source.mkdir()
        (source / "part.txt").write_text(f"artifact {index}\n" * (index + 1))
        kind = "dataset" if index < 3 else "model"
        record = ws.put(source, kind, inputs=ids[-1:], metadata={"name": f"step-{index}"})
        ids.append(record.id)
    ws.move_alias("prod", ids[-1])
    ws.close()
    return ids


@pytest.fixture
def console(home: Path) -> Console:
    return Console(home, Guard.start("console", home, "127.0.0.1"))


@pytest.fixture
def client(console: Console, chain: list[str]) -> Iterator[TestClient]:
    with TestClient(create_app(console), base_url=BASE) as client:
        yield client


def auth(console: Console) -> dict[str, str]:
    return {"Authorization": f"Bearer {console.guard.token}", "Content-Type": "application/json"}
