"""A committed manifest cannot lie: its own digest and its directory vouch for every byte.

Any checkpoint refused after its commit (a damaged or unparsable manifest, a step that is not its
directory's, a shard missing or cut short) is marked `corrupt.json` with the reason, and loading
falls back to the checkpoint before it.
"""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.checkpoint.conftest import trained_state
from tests.checkpoint.ranks import RANKS_TIMEOUT_S, run
from tests.checkpoint.test_resume import _read_log
from tests.loader.conftest import write_dataset

from shipyard.checkpoint import CheckpointManager, corrupt_marks, latest_committed
from shipyard.checkpoint.corrupt import CORRUPT, CorruptCheckpoint
from shipyard.checkpoint.manifest import (
    DIGEST,
    MANIFEST,
    CheckpointManifest,
    ManifestDamaged,
    _refuse,
    committed,
    read_committed,
    seal,
    step_dir,
)
from shipyard.errors import IntegrityError, InvalidInput, ShipyardError


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two committed checkpoints, steps 27 and 28, one rank."""
    root = tmp_path_factory.mktemp("ckpt")
    manager = CheckpointManager(root, peer_memory=False)
    for step in (27, 28):
        manager.save(step, trained_state(seed=step), blocking=True, metadata={"lr": 1e-05})
    manager.close()
    return root


def _raw(root: Path, step: int = 28) -> bytes:
    return (step_dir(root, step) / MANIFEST).read_bytes()


def _flipped(raw: bytes, at: int, bit: int) -> bytes:
    damaged = bytearray(raw)
    damaged[at] ^= 1 << bit
    return bytes(damaged)


def _top_step_at(raw: bytes) -> int:
    """The offset of the last digit of the top-level `"step"` (the last key sorted before
    `tensors` and `world_size`, whose values hold no `"step":`)."""
    at = raw.rindex(b'"step":') + len(b'"step":')
    while raw[at + 1 : at + 2].isdigit():
        at += 1
    return at


def _refused(raw: bytes) -> bool:
    try:
        CheckpointManifest.from_json(raw, "manifest.json")
    except (InvalidInput, ManifestDamaged):
        return True
    return False


def _copy(saved: Path, tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for step in (27, 28):
        (step_dir(root, step)).mkdir(parents=True)
        for path in step_dir(saved, step).iterdir():
            (step_dir(root, step) / path.name).write_bytes(path.read_bytes())
    return root


def test_the_step_bit_flip_is_refused_and_marked(saved: Path, tmp_path: Path) -> None:
    root = _copy(saved, tmp_path)
    path = step_dir(root, 28) / MANIFEST
    lying = _flipped(_raw(root), _top_step_at(_raw(root)), 0)  # 28 -> 29
    assert json.loads(lying)["step"] == 29
    path.write_bytes(lying)

    with pytest.raises(ManifestDamaged, match=f"its field {DIGEST} says"):
        read_committed(step_dir(root, 28))
    (mark,) = corrupt_marks(root)
    assert mark["step"] == 28 and mark["reason"] == "manifest-digest"
    assert mark["file"] == str(path) and mark["piece"] is None
    found = latest_committed(root)
    assert found is not None and found.step == 27  # falls back to the one before
    assert [c.step for c in committed(root)] == [27]
    assert path.read_bytes() == lying  # the evidence is left as it was


def test_a_resealed_manifest_in_another_steps_directory_is_refused(
    saved: Path, tmp_path: Path
) -> None:
    """Whoever rewrites the digest too still cannot move a checkpoint to another step."""
    root = _copy(saved, tmp_path)
    data = json.loads(_raw(root))
    data["step"] = 29
    (step_dir(root, 28) / MANIFEST).write_bytes(seal(data))
    with pytest.raises(CorruptCheckpoint, match="says step 29, in the directory of step 28"):
        read_committed(step_dir(root, 28))
    (mark,) = corrupt_marks(root)
    assert mark["reason"] == "step-mismatch"


def test_a_legacy_manifest_without_digest_loads_and_its_step_is_still_checked(
    saved: Path, tmp_path: Path
) -> None:
    root = _copy(saved, tmp_path)
    data = json.loads(_raw(root))
    del data[DIGEST]
    data["format"] = 1
    path = step_dir(root, 28) / MANIFEST
    path.write_bytes(json.dumps(data).encode())
    assert read_committed(step_dir(root, 28)).step == 28
    data["step"] = 29
    path.write_bytes(json.dumps(data).encode())
    with pytest.raises(CorruptCheckpoint, match="step-mismatch"):
        read_committed(step_dir(root, 28))
    assert (step_dir(root, 28) / CORRUPT).exists()


@pytest.mark.parametrize("damage", ["truncated", "deleted", "unparsable", "not a file"])
def test_every_refusal_is_marked_with_its_reason(saved: Path, tmp_path: Path, damage: str) -> None:
    root = _copy(saved, tmp_path)
    directory = step_dir(root, 28)
    shard = next(directory.glob("*.safetensors"))
    if damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:-1])
    elif damage == "deleted":
        shard.unlink()
    elif damage == "unparsable":
        (directory / MANIFEST).write_bytes(_raw(root)[:-1])
    else:
        (directory / MANIFEST).unlink()
        (directory / MANIFEST).mkdir()
    with pytest.raises((IntegrityError, InvalidInput)):
        read_committed(directory)
    (mark,) = corrupt_marks(root)
    expected = "shard-missing" if damage in ("truncated", "deleted") else "manifest-invalid"
    assert mark["step"] == 28 and mark["reason"] == expected
    found = latest_committed(root, verify=False)
    assert found is not None and found.step == 27
    with pytest.raises(IntegrityError, match="marked corrupt"):  # and it stays refused
        read_committed(directory)


def test_a_manifest_swapped_out_meanwhile_is_not_marked(saved: Path, tmp_path: Path) -> None:
    """A re-save removes the manifest before it rewrites shards: not damage, never marked."""
    root = _copy(saved, tmp_path)
    directory = step_dir(root, 28)
    raw = _raw(root)
    (directory / MANIFEST).unlink()
    _refuse(directory, raw, CorruptCheckpoint(28, "x", None, "gone", "shard-missing"))
    assert not (directory / CORRUPT).exists()


@pytest.mark.slow
@pytest.mark.timeout(900)  # ~24,000 parses: seconds idle, far longer on a loaded host
def test_a_bit_flip_in_every_byte_of_a_real_manifest_is_refused(saved: Path) -> None:
    """Every byte of a committed manifest, one bit each, the bit cycling so every position is
    hit alike; the random test below draws the other bits."""
    raw = _raw(saved)
    accepted = [(at, at % 8) for at in range(len(raw)) if not _refused(_flipped(raw, at, at % 8))]
    assert accepted == []


@pytest.mark.fuzz
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_a_random_bit_flip_is_refused(saved: Path, data: st.DataObject) -> None:
    raw = _raw(saved)
    # Half the draws aim at the top-level fields, where a flip still parses most often.
    low = data.draw(st.sampled_from([0, raw.rindex(b'"skeleton":')]))
    at = data.draw(st.integers(low, len(raw) - 1))
    assert _refused(_flipped(raw, at, data.draw(st.integers(0, 7))))


def test_field_values_that_parse_alike_are_refused(saved: Path) -> None:
    """Bytes that parse to the same value (an exponent's case, a repeated key) are not the
    canonical bytes the digest covers."""
    raw = _raw(saved)
    assert b"1e-05" in raw
    assert _refused(raw.replace(b"1e-05", b"1E-05"))
    assert _refused(raw.replace(b'{"code_version"', b'{"kind":"x","code_version"', 1))
    assert not _refused(raw)


def _trainer(tmp: Path, name: str, until: int, data: str, save_every: int) -> list[int]:
    args = ["--root", str(tmp / name), "--data", data, "--until", str(until)]
    args += ["--log", str(tmp / f"{name}.log"), "--save-every", str(save_every)]
    return run("trainer.py", 1, args)


@pytest.mark.slow
@pytest.mark.timeout(4 * RANKS_TIMEOUT_S)
def test_a_lying_step_is_refused_and_training_resumes_from_the_one_before(
    tmp_path: Path,
) -> None:
    """The step-28→29 attack on a real run: resuming at "29" with step 28's weights would skip
    a data step and end elsewhere; refused, the run resumes from 20 and ends bitwise clean."""
    data = ",".join(str(write_dataset(tmp_path / f"d{i}", i, 200)) for i in range(2))
    assert _trainer(tmp_path, "clean", 40, data, save_every=10) == [0]
    assert _trainer(tmp_path, "lied", 28, data, save_every=10) == [0]  # commits 10, 20, 28
    path = step_dir(tmp_path / "lied", 28) / MANIFEST
    path.write_bytes(_flipped(path.read_bytes(), _top_step_at(path.read_bytes()), 0))
    assert json.loads(path.read_bytes())["step"] == 29

    assert _trainer(tmp_path, "lied", 40, data, save_every=100) == [0]  # saves only step 40
    # Marked when the resume refused it, then removed by retention with the other leftovers.
    assert [c.step for c in committed(tmp_path / "lied")] == [20, 40]
    assert not step_dir(tmp_path / "lied", 28).exists()
    clean, clean_final = _read_log(tmp_path / "clean.log")
    lied, lied_final = _read_log(tmp_path / "lied.log")
    assert sorted(lied) == list(range(40))  # steps 20..27 ran twice, no data step was skipped
    assert all(lied[s] == clean[s] for s in range(40))
    assert lied_final[40] == clean_final[40]


def test_peer_manifests_are_held_to_their_digest_too(saved: Path) -> None:
    lying = _flipped(_raw(saved), _top_step_at(_raw(saved)), 0)
    with pytest.raises(ShipyardError):
        CheckpointManifest.from_json(lying, "peer manifest of step 28")
