"""Training-level guarantees with real rank processes: exact resume, elastic resume, resharding."""

import json
import random
from pathlib import Path
from typing import Any

import pytest
from tests.checkpoint.ranks import RANKS_TIMEOUT_S, run
from tests.checkpoint.trainer import state_digest
from tests.loader.conftest import write_dataset

from shipyard.checkpoint import latest_committed, load_committed


def _read_log(path: Path) -> tuple[dict[int, str], dict[int, str]]:
    batches, finals = {}, {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "final" in entry:
            finals[entry["step"]] = entry["final"]
        else:
            batches[entry["step"]] = entry["batch"]
    return batches, finals


def _train(tmp: Path, name: str, world: int, until: int, data: str, **kw: Any) -> list[int]:
    args = ["--root", str(tmp / name), "--data", data, "--until", str(until)]
    args += ["--log", str(tmp / f"{name}.log")]
    for key, value in kw.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return run("trainer.py", world, args)


@pytest.fixture
def data(tmp_path: Path) -> str:
    return ",".join(str(write_dataset(tmp_path / f"d{i}", i, 200)) for i in range(2))


@pytest.mark.slow
@pytest.mark.timeout(3 * RANKS_TIMEOUT_S)
def test_kill_at_a_random_step_then_resume_exactly(tmp_path: Path, data: str) -> None:
    assert _train(tmp_path, "plain", 1, 130, data) == [0]
    die_at = random.Random().randint(11, 29)
    assert _train(tmp_path, "killed", 1, 130, data, die_at=die_at) == [-9]
    committed = latest_committed(tmp_path / "killed")  # None: killed before the first commit
    resumed_from = committed.step if committed else 0
    assert resumed_from <= die_at
    assert _train(tmp_path, "killed", 1, 130, data) == [0]
    plain, plain_final = _read_log(tmp_path / "plain.log")
    killed, killed_final = _read_log(tmp_path / "killed.log")
    assert len([s for s in killed if s >= resumed_from]) >= 100
    for step, digest in killed.items():  # before the kill and after the resume
        assert plain[step] == digest, f"global batch of step {step} differs"
    assert killed_final == plain_final


@pytest.mark.slow
@pytest.mark.timeout(4 * RANKS_TIMEOUT_S)  # four runs of up to 4 ranks each
def test_elastic_resume_4_2_3_and_resharding(tmp_path: Path, data: str) -> None:
    assert _train(tmp_path, "plain", 1, 30, data) == [0]
    assert _train(tmp_path, "elastic", 4, 10, data) == [0] * 4
    assert _train(tmp_path, "elastic", 2, 20, data) == [0] * 2
    _, finals_2 = _read_log(tmp_path / "elastic.log")
    # Saved on 2 ranks, loaded on 1 (this process): bitwise the state the ranks had.
    saved_on_2 = latest_committed(tmp_path / "elastic")
    assert saved_on_2 is not None and saved_on_2.manifest.world_size == 2
    assert state_digest(load_committed(saved_on_2).state) == finals_2[20]
    assert _train(tmp_path, "elastic", 3, 30, data) == [0] * 3  # loaded on 3
    plain, plain_final = _read_log(tmp_path / "plain.log")
    elastic, elastic_final = _read_log(tmp_path / "elastic.log")
    assert sorted(elastic) == list(range(30))
    assert all(plain[s] == elastic[s] for s in range(30))
    assert elastic_final[30] == plain_final[30]
    saved_on_3 = latest_committed(tmp_path / "elastic")
    assert saved_on_3 is not None and len(saved_on_3.manifest.shards) == 3
    assert saved_on_3.manifest.loader is not None
    assert saved_on_3.manifest.loader["consumed"] == {"s0": 180, "s1": 180}
