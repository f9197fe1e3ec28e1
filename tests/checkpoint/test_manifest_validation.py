"""A checkpoint manifest read back is hostile: every field is checked once, at parse time.

Each case edits a real committed manifest the way an attacker or a corrupted disk could, and
checks that parsing (and `checkpoint ls|verify`) refuses it with InvalidInput naming the file and
the field, before any file it names is opened.
"""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from shipyard.checkpoint import CheckpointManager, load_committed
from shipyard.checkpoint.corrupt import CORRUPT
from shipyard.checkpoint.manifest import (
    MANIFEST,
    CheckpointManifest,
    open_committed,
    read_committed,
    step_dir,
)
from shipyard.errors import InvalidInput

Edit = Callable[[dict[str, Any]], None]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args], capture_output=True, text=True, env=env
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A committed checkpoint of step 1: two tensors, a nested structure, one rank."""
    root = tmp_path_factory.mktemp("ckpt")
    manager = CheckpointManager(root, peer_memory=False)
    state = {"w": torch.arange(12.0).reshape(3, 4), "b": [torch.ones(2, dtype=torch.int64), 5]}
    manager.save(1, state, blocking=True)
    manager.close()
    return root


def _manifest(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((step_dir(root, 1) / MANIFEST).read_bytes())
    return data


def _refused(data: Any, *expected: str) -> str:
    with pytest.raises(InvalidInput) as caught:
        CheckpointManifest.from_json(json.dumps(data).encode(), "/ckpt/manifest.json")
    message = str(caught.value)
    assert message.startswith("/ckpt/manifest.json: ")
    for text in expected:
        assert text in message
    return message


def _set(path: str, value: Any) -> Edit:
    """An edit that sets `path` ("shards.0.file") to `value`."""

    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value

    return edit


CASES: list[tuple[str, Edit, str]] = [
    ("absolute shard path", _set("shards.0.file", "/etc/passwd"), "field shards[0].file"),
    ("parent shard path", _set("shards.0.file", "../step-0000000002/x"), "field shards[0].file"),
    ("dot component", _set("shards.0.file", "a/./b"), "field shards[0].file"),
    ("empty shard path", _set("shards.0.file", ""), "field shards[0].file"),
    ("NUL in shard path", _set("shards.0.file", "a\0b"), "field shards[0].file"),
    ("surrogate in shard path", _set("shards.0.file", "\ud800"), "field shards[0].file"),
    ("shard path not a string", _set("shards.0.file", ["x"]), "field shards[0].file"),
    ("dtype as torch attribute", _set("tensors.0.dtype", "load"), "field tensors[0].dtype"),
    ("dtype not a string", _set("tensors.0.dtype", {"x": 1}), "field tensors[0].dtype"),
    ("shape as a string", _set("tensors.0.shape", "34"), "field tensors[0].shape"),
    ("negative dimension", _set("tensors.0.shape", [-1]), "field tensors[0].shape[0]"),
    ("boolean dimension", _set("tensors.0.shape", [True, 2]), "field tensors[0].shape[0]"),
    ("float dimension", _set("tensors.0.shape", [2.0]), "field tensors[0].shape[0]"),
    ("absurd shape", _set("tensors.0.shape", [2**40, 2**40]), "field tensors[0].shape"),
    ("too many dimensions", _set("tensors.0.shape", [1] * 65), "field tensors[0].shape"),
    ("shape disagrees with pieces", _set("tensors.0.shape", [3]), "field pieces"),
    ("negative size", _set("shards.0.size", -1), "field shards[0].size"),
    ("size as a string", _set("shards.0.size", "100"), "field shards[0].size"),
    ("size too small for pieces", _set("shards.0.size", 16), "field shards[0].size"),
    ("bad sha256", _set("shards.0.sha256", "zz"), "field shards[0].sha256"),
    ("rank beyond world", _set("shards.0.rank", 1), "field shards[0].rank"),
    ("world of zero", _set("world_size", 0), "field world_size"),
    ("step as a float", _set("step", 1.5), "field step"),
    ("negative step", _set("step", -3), "field step"),
    ("format as bool", _set("format", True), "field format"),
    ("unknown format", _set("format", 3), "field format"),
    ("wrong kind", _set("kind", "model"), "field kind"),
    ("piece of unknown tensor", _set("pieces.0.0", "nope"), "field pieces[0]"),
    ("piece past the end", _set("pieces.0.2", 10**6), "field pieces[0][2]"),
    ("empty piece", _set("pieces.0.2", 0), "field pieces[0][2]"),
    ("piece too short", _set("pieces.0", ["b/0", 0]), "field pieces[0]"),
    ("piece rank beyond world", _set("pieces.0.3", 7), "field pieces[0][3]"),
    ("skeleton to unknown tensor", _set("skeleton", {"T": "nope"}), "field skeleton"),
    ("skeleton of two kinds", _set("skeleton", {"T": "w", "V": 1}), "field skeleton"),
    ("skeleton key not scalar", _set("skeleton", {"D": [[[1], {"V": 1}]]}), "field skeleton.D[0]"),
    ("rng of wrong length", _set("rng", []), "field rng"),
    ("rng not an object", _set("rng", [7]), "field rng[0]"),
    ("loader not an object", _set("loader", 3), "field loader"),
    ("metadata not an object", _set("metadata", []), "field metadata"),
]


@pytest.mark.parametrize(("what", "edit", "field"), CASES, ids=[c[0] for c in CASES])
def test_each_field_is_checked(saved: Path, what: str, edit: Edit, field: str) -> None:
    data = _manifest(saved)
    edit(data)
    _refused(data, field)


def test_missing_fields_are_named(saved: Path) -> None:
    for key in ("step", "world_size", "shards", "tensors", "pieces", "skeleton", "rng"):
        data = _manifest(saved)
        del data[key]
        _refused(data, f"field {key}: is missing")
    data = _manifest(saved)
    del data["shards"][0]["sha256"]
    _refused(data, "field shards[0].sha256: is missing")


def test_overlapping_pieces_are_refused(saved: Path) -> None:
    data = _manifest(saved)
    data["pieces"].append(data["pieces"][0])  # the same elements twice, another left unset
    _refused(data, "field pieces", "do not cover")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"format": 1, "step": Infinity}',
        b'{"format": 1, "step": NaN}',
        b'{"format": 1, "step": -Infinity}',
        b"[" * 50_000 + b"]" * 50_000,
        b'{"skeleton": ' + b'{"L": [' * 2_000 + b"]}" * 2_000 + b"}",
        b'{"step": 1' + b"0" * 5_000 + b"}",
        b"\xff\xfe\x00garbage",
        b"",
        b"[]",
    ],
    ids=[
        "infinity",
        "nan",
        "-infinity",
        "deep",
        "deep skeleton",
        "huge int",
        "bytes",
        "empty",
        "list",
    ],
)
def test_hostile_json_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidInput, match=r"^/ckpt/manifest\.json: "):
        CheckpointManifest.from_json(raw, "/ckpt/manifest.json")


def test_a_deep_skeleton_within_json_limits_is_refused(saved: Path) -> None:
    data = _manifest(saved)
    node: dict[str, Any] = {"V": 1}
    for _ in range(300):
        node = {"L": [node]}
    data["skeleton"] = node
    _refused(data, "nested deeper than")


def test_a_shard_symlinked_out_of_the_checkpoint_is_refused(saved: Path, tmp_path: Path) -> None:
    copy = tmp_path / "root"
    directory = step_dir(copy, 1)
    directory.mkdir(parents=True)
    original = step_dir(saved, 1)
    outside = tmp_path / "outside.safetensors"
    for path in original.iterdir():
        (directory / path.name).write_bytes(path.read_bytes())
    shard = next(directory.glob("*.safetensors"))
    shard.rename(outside)
    shard.symlink_to(outside)  # same bytes, same size: only containment can refuse it

    with pytest.raises(InvalidInput, match="outside the checkpoint"):
        read_committed(directory)
    # Refused once, marked for good: later reads name the mark and what it recorded.
    assert json.loads((directory / CORRUPT).read_bytes())["reason"] == "manifest-invalid"
    assert open_committed(directory) is None
    listed = _cli("checkpoint", "ls", str(copy))
    assert listed.returncode == 0 and listed.stdout == ""
    assert "step 1: refused" in listed.stderr and "outside the checkpoint" in listed.stderr
    verified = _cli("checkpoint", "verify", str(copy))
    assert verified.returncode == 5 and "outside the checkpoint" in verified.stderr

    shard.unlink()
    (directory / CORRUPT).unlink()
    shard.symlink_to(shard.name)  # a loop
    with pytest.raises(InvalidInput, match="does not resolve"):
        read_committed(directory)


def test_a_refused_manifest_stops_verify_instead_of_an_older_checkpoint(
    saved: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    manager = CheckpointManager(root, peer_memory=False)
    for step in (1, 2):
        manager.save(step, {"w": torch.arange(4.0)}, blocking=True)
    manager.close()
    path = step_dir(root, 2) / MANIFEST
    data = json.loads(path.read_bytes())
    data["tensors"][0]["dtype"] = "load"
    path.write_text(json.dumps(data))

    verified = _cli("checkpoint", "verify", str(root))
    assert verified.returncode == 2
    assert f"{path}: field tensors[0].dtype" in verified.stderr
    listed = _cli("checkpoint", "ls", str(root))
    assert listed.returncode == 0 and "step          1" in listed.stdout
    assert "step 2: refused" in listed.stderr
    assert load_committed(read_committed(step_dir(root, 1))).step == 1


def test_missing_paths_are_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    for command in ("ls", "verify"):
        result = _cli("checkpoint", command, str(missing))
        assert result.returncode == 4, result.stderr
        assert str(missing) in result.stderr and result.stdout == ""
    (tmp_path / "file").write_text("x")
    assert _cli("checkpoint", "ls", str(tmp_path / "file")).returncode == 2
    step = _cli("checkpoint", "verify", str(tmp_path), "--step", "0")
    assert step.returncode == 4 and "step-0000000000" in step.stderr
