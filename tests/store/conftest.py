import os
from pathlib import Path

import pytest

from shipyard.store import LocalBackend, PieceStore, open_backend


@pytest.fixture(params=["local", "s3"])
def pieces(request: pytest.FixtureRequest, tmp_path: Path) -> PieceStore:
    """The same tests against the local backend and a real S3-compatible server."""
    if request.param == "local":
        return PieceStore(LocalBackend(tmp_path / "store"))
    return PieceStore(open_backend(request.getfixturevalue("s3_store_uri")))


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A small model-shaped tree: two multi-piece files, a small config, an empty file."""
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "weights-1.bin").write_bytes(os.urandom(300_000))
    (root / "sub" / "weights-2.bin").write_bytes(os.urandom(150_000))
    (root / "config.json").write_text('{"d_model": 64}')
    (root / "empty").write_bytes(b"")
    os.chmod(root / "config.json", 0o600)
    return root
