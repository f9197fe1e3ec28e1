"""Property: whatever a checkpoint manifest holds, parsing and loading raise only Shipyard errors.

Random JSON, random edits of a real manifest and random byte damage are parsed; whatever parses
is also committed next to the real shards and loaded, RNG states included.
"""

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from shipyard.checkpoint import CheckpointManager, load_committed
from shipyard.checkpoint.manifest import (
    MANIFEST,
    CheckpointManifest,
    read_committed,
    seal,
    step_dir,
)
from shipyard.checkpoint.rng import capture_rng, restore_rng
from shipyard.errors import ShipyardError

pytestmark = pytest.mark.fuzz

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["float32", "bfloat16", "load", "../x", "/etc/passwd", "w", "T", "D"])
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ckpt")
    manager = CheckpointManager(root, peer_memory=False)
    state = {"w": torch.arange(12.0).reshape(3, 4), "opt": {0: [torch.ones(3, dtype=torch.int64)]}}
    manager.save(1, state, blocking=True)
    manager.close()
    return step_dir(root, 1)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a node in a JSON value, the root included."""
    found = [prefix]
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in items:
        found += _paths(child, (*prefix, key))
    return found


def _exercise(directory: Path, raw: bytes) -> None:
    """Parse `raw`; if it parses, commit it beside the real shards and load it all."""
    try:
        CheckpointManifest.from_json(raw, "fuzz")
    except ShipyardError:
        return
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / directory.name
        shutil.copytree(directory, copy)
        (copy / MANIFEST).write_bytes(raw)
        rng = capture_rng()
        try:
            loaded = load_committed(read_committed(copy))
            for rank in range(loaded.manifest.world_size):
                loaded.restore_rng(rank)
        except ShipyardError:
            pass
        finally:
            restore_rng(rng)


@given(value=json_values)
def test_random_json(saved: Path, value: Any) -> None:
    _exercise(saved, json.dumps(value).encode())


@given(data=st.data())
def test_edited_manifest(saved: Path, data: st.DataObject) -> None:
    manifest = json.loads((saved / MANIFEST).read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(manifest)))
        if not path:
            continue
        parent = manifest
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(json_values)
    _exercise(saved, seal(manifest))  # sealed anew: the edit must pass every field check


@given(data=st.data())
def test_damaged_bytes(saved: Path, data: st.DataObject) -> None:
    raw = bytearray((saved / MANIFEST).read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at : at + data.draw(st.integers(0, 8))] = data.draw(st.binary(max_size=8))
    _exercise(saved, bytes(raw))
