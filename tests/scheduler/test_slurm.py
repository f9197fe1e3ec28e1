"""The Slurm backend runs and preempts gangs on a real two-node, fake-GPU Slurm."""

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.db import Database
from shipyard.scheduler.config import parse_config
from shipyard.scheduler.model import Job, Running, Tier
from shipyard.scheduler.service import Service
from shipyard.scheduler.slurm import SlurmBackend
from shipyard.scheduler.store import JobStore

from .slurm_testbed import missing, slurm_cluster

pytestmark = [pytest.mark.root, pytest.mark.slow]

CONFIG = {
    "nodes": [{"name": "sn1", "gpus": 4}, {"name": "sn2", "gpus": 4}],
    "teams": [{"team": "a", "nominal": {"gpu": 8}}],
}


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    why = missing()
    if why:
        pytest.skip(why)
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as conf:
        yield conf


def test_gang_runs_on_both_nodes(slurm_conf: Path, tmp_path: Path) -> None:
    config = parse_config(CONFIG)
    store = JobStore(Database(f"sqlite://{tmp_path / 'catalog.db'}"))
    backend = SlurmBackend(config.nodes, tmp_path / "logs", slurm_conf)
    service = Service(config, store, backend)
    out = tmp_path / "out"
    script = (
        f"import os; open('{out}.' + os.environ['SLURMD_NODENAME'], 'w')"
        ".write(os.environ['CUDA_VISIBLE_DEVICES'])"
    )
    job = Job("", "a", 8, 120.0, gpus_per_node=4)
    job_id = store.submit(job, [sys.executable, "-c", script])
    deadline = time.monotonic() + 90
    while store.get(job_id)["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline, "slurm job did not finish"
        service.tick()
        time.sleep(0.3)
    row = store.get(job_id)
    assert row["state"] == "done" and row["exit_code"] == 0
    assert (tmp_path / "out.sn1").read_text() == "0,1,2,3"
    assert (tmp_path / "out.sn2").read_text() == "0,1,2,3"


TRAP = """
import signal, sys, time
def term(*_):
    open(sys.argv[1] + ".term", "w").write("term")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
open(sys.argv[1] + ".up", "w").write("up")
time.sleep(120)
"""


def test_stop_delivers_sigterm(slurm_conf: Path, tmp_path: Path) -> None:
    config = parse_config(CONFIG)
    backend = SlurmBackend(config.nodes, tmp_path / "logs", slurm_conf)
    script = tmp_path / "trap.py"
    script.write_text(TRAP)
    marker = tmp_path / "victim"
    job = Job("victim", "a", 2, 300.0, preemptible=True)
    backend.launch(
        Running(job, {0: 2}, Tier.BORROWED, 0.0), [sys.executable, str(script), str(marker)]
    )
    deadline = time.monotonic() + 60
    while not marker.with_suffix(".up").exists():
        assert time.monotonic() < deadline, "slurm job did not start"
        time.sleep(0.2)
    backend.stop("victim", grace=10.0, now=time.time())
    ended: list[tuple[str, int]] = []
    while not ended:
        assert time.monotonic() < deadline + 60, "slurm job did not stop"
        ended = backend.poll(time.time())
        time.sleep(0.3)
    assert ended[0][0] == "victim"
    assert marker.with_suffix(".term").read_text() == "term"
    assert not backend.running("victim")


def test_service_reclaims_through_slurm(slurm_conf: Path, tmp_path: Path) -> None:
    config = parse_config(
        {
            "nodes": CONFIG["nodes"],
            "teams": [
                {"team": "a", "nominal": {"gpu": 4}, "cohort": "ab"},
                {"team": "b", "nominal": {"gpu": 4}, "cohort": "ab"},
            ],
        }
    )
    store = JobStore(Database(f"sqlite://{tmp_path / 'catalog.db'}"))
    service = Service(config, store, SlurmBackend(config.nodes, tmp_path / "logs", slurm_conf))
    script = tmp_path / "trap.py"
    script.write_text(TRAP)
    borrower = Job("", "b", 8, 300.0, gpus_per_node=4, preemptible=True, grace=10.0)
    victim = store.submit(borrower, [sys.executable, str(script), str(tmp_path / "b")])
    deadline = time.monotonic() + 120

    def wait(job_id: str, state: str) -> None:
        while store.get(job_id)["state"] != state:
            assert time.monotonic() < deadline, f"{job_id} never reached {state}"
            service.tick()
            time.sleep(0.3)

    wait(victim, "running")
    while not (tmp_path / "b.up").exists():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    owner = store.submit(Job("", "a", 4, 120.0), [sys.executable, "-c", "print('mine')"])
    wait(owner, "done")
    assert (tmp_path / "b.term").read_text() == "term"
    assert store.get(victim)["spec"]["preemptions"] == 1  # requeued (and maybe back already)
    assert service.counts["preempt"] == 1
    service.backend.shutdown()
