"""The SQLite catalog file: made once by racing openers; an empty or corrupt file refused."""

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shipyard.catalog import ArtifactRecord, SQLiteCatalog
from shipyard.errors import StorageError


def artifact(catalog: SQLiteCatalog, char: str) -> str:
    artifact_id = char * 64
    catalog.add_artifact(ArtifactRecord(artifact_id, "model", 10, 1, time.time(), None))
    return artifact_id


def test_a_missing_catalog_is_created_once_by_racing_openers(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "catalog.db"
    start = threading.Barrier(8)

    def open_and_add(i: int) -> None:
        start.wait()
        catalog = SQLiteCatalog(path)
        catalog.add_artifact(ArtifactRecord(f"{i:x}" * 64, "model", 1, 1, 0.0, None))
        catalog.close()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(open_and_add, range(8)))
    assert len(SQLiteCatalog(path).list_artifacts()) == 8
    assert [p.name for p in path.parent.iterdir() if not p.name.startswith("catalog.db")] == []


def test_an_empty_catalog_file_is_refused_not_recreated(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    path.write_bytes(b"")
    with pytest.raises(StorageError, match=f"catalog {path} is an empty file"):
        SQLiteCatalog(path)
    assert path.read_bytes() == b""


@pytest.mark.parametrize("damage", ["random bytes", "torn header"])
def test_a_corrupt_catalog_is_a_storage_error_naming_the_file(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "catalog.db"
    good = SQLiteCatalog(path)
    good.set_alias("prod", artifact(good, "a"), expect=None, by="x")
    good.close()
    data = path.read_bytes()
    bad = os.urandom(len(data)) if damage == "random bytes" else b"\0" * 100 + data[100:]
    path.write_bytes(bad)
    with pytest.raises(StorageError, match=f"catalog {path}: .*not a database"):
        SQLiteCatalog(path).list_aliases()
    assert path.read_bytes() == bad
