"""`shipyard pull --tensors`: only the pieces covering one slice of a safetensors model."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from shipyard.distribute import select_pieces
from shipyard.errors import InvalidInput
from shipyard.store import LocalBackend, Manifest, PieceStore, put_tree

PIECE = 64 << 10


def make_model(root: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    tensors = {
        f"layers.{i}.{part}": rng.standard_normal((64, 256), dtype=np.float32)
        for i in range(4)
        for part in ("attn", "mlp")
    }
    root.mkdir()
    save_file(tensors, str(root / "model.safetensors"))
    (root / "config.json").write_text('{"n_layers": 4}')
    return tensors


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, Manifest, dict[str, np.ndarray]]:
    tensors = make_model(tmp_path / "model")
    store = tmp_path / "origin"
    manifest = put_tree(PieceStore(LocalBackend(store)), tmp_path / "model", "model", PIECE)
    return store, manifest, tensors


def test_pull_tensors_fetches_only_the_matching_slice(
    cluster: Any, model: tuple[Path, Manifest, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    store, manifest, tensors = model
    host = cluster.peer("host", [], "--origin", str(store)).start()
    dest = tmp_path / "slice"
    cli = [sys.executable, "-m", "shipyard.cli.main", "pull", manifest.id]
    cli += ["--peer", host.address, "--dest", str(dest), "--tensors", "layers.1.*"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == manifest.id
    with safe_open(str(dest / "model.safetensors"), framework="numpy") as f:
        for name in ("layers.1.attn", "layers.1.mlp"):
            np.testing.assert_array_equal(f.get_tensor(name), tensors[name])
    assert (dest / "config.json").read_text() == '{"n_layers": 4}'
    # Exactly the header, the two tensors' pieces and config.json: the other layers stayed away.
    entry = next(e for e in manifest.files if e.path.endswith(".safetensors"))
    header = PieceStore(LocalBackend(store)).get_piece(entry.pieces[0].hash)
    expected = set(select_pieces(manifest, {entry.path: header}, "layers.1.*"))
    assert host.pieces_on_disk() == expected
    assert len(expected) < len({p.hash for e in manifest.files for p in e.pieces}) - 3


def test_select_pieces_refuses_a_pattern_matching_nothing(
    model: tuple[Path, Manifest, dict[str, np.ndarray]],
) -> None:
    store, manifest, _ = model
    entry = next(e for e in manifest.files if e.path.endswith(".safetensors"))
    pieces = PieceStore(LocalBackend(store))
    header = b"".join(pieces.get_piece(p.hash) for p in entry.pieces[:2])
    with pytest.raises(InvalidInput, match="matches"):
        select_pieces(manifest, {entry.path: header}, "decoder.*")
