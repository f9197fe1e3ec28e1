"""The controller through the CLI: it survives its own restart, and enforces a failure budget."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from shipyard.train import RunTable, create_run
from shipyard.train.procid import ProcessId

from ..conftest import run_cli
from .conftest import events, make_config, train


def wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_controller_reattaches_after_its_own_restart(home: Path, token_data: Path, tmp_path):
    config = tmp_path / "run.json"
    cfg = make_config(token_data, train={"steps": 60})
    config.write_text(json.dumps(cfg.to_dict()))
    first = subprocess.Popen(
        [sys.executable, "-m", "shipyard", "train", "run", str(config), "--nprocs", "2"],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    assert first.stdout is not None
    run_id = first.stdout.readline().split()[1]
    table = RunTable()
    try:
        wait_for(lambda: table.get(run_id).step >= 5)
        first.send_signal(signal.SIGKILL)  # the controller dies; its ranks train on
        first.wait()
        pids = table.get(run_id).rank_pids
        assert all(ProcessId.from_record(r).alive() for r in pids)

        done = run_cli("train", "attach", run_id, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        run = table.get(run_id)
        assert run.state == "succeeded" and run.step == 60
        assert run.attempt == 0 and run.rank_pids == pids  # adopted, not restarted
        assert [e.detail["pids"] for e in table.events(run_id, "attach")] == [pids]
    finally:
        table.close()

    status = run_cli("train", "status", run_id, "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["state"] == "succeeded"
    text = run_cli("train", "report", run_id)
    assert text.returncode == 0 and "goodput" in text.stdout and "Young/Daly" in text.stdout


def test_failure_budget_stops_the_run_with_the_reason(home: Path, token_data: Path):
    kills = [{"kind": "kill", "rank": 0, "step": 2, "attempt": n} for n in (0, 1)]
    cfg = make_config(
        token_data, controller={"max_failures": 1}, chaos={"faults": kills}, train={"steps": 20}
    )
    run_id, state = train(cfg)
    assert state == "failed"
    assert [f["kind"] for f in events(run_id, "failure")] == ["crash", "crash"]
    table = RunTable()
    try:
        run = table.get(run_id)
    finally:
        table.close()
    assert "2 failures within" in run.reason and "max_failures 1" in run.reason
    assert all(not ProcessId.from_record(r).alive() for r in run.rank_pids)


def test_attach_never_signals_a_pid_now_held_by_another_process(home: Path, token_data: Path):
    """The saved ranks are gone and their pids reused: attach restarts and kills no bystander."""
    run_id = create_run(make_config(token_data, train={"steps": 10}), 2)
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    bystanders = [subprocess.Popen(sleeper) for _ in range(2)]
    table = RunTable()
    try:
        run = table.get(run_id)
        started = ProcessId.of(bystanders[0].pid).start
        # Rank 0's pid went to a process that started later than the rank did; rank 1's record
        # predates start times (a bare pid), so it cannot be told from a stranger either.
        run.rank_pids = [[bystanders[0].pid, started - 1], bystanders[1].pid]  # type: ignore[list-item]
        run.state = "running"
        table.save(run)

        done = run_cli("train", "attach", run_id, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        assert [p.poll() for p in bystanders] == [None, None]  # neither was signalled
        assert [e.detail["alive"] for e in table.events(run_id, "attach")] == [[False, False]]
        run = table.get(run_id)
        assert run.state == "succeeded" and len(table.events(run_id, "launch")) == 1  # relaunched
    finally:
        table.close()
        for proc in bystanders:
            proc.kill()
            proc.wait()


def test_unknown_run_and_bad_config_are_clear_errors(home: Path, tmp_path):
    missing = run_cli("train", "status", "run-nope")
    assert missing.returncode == 4 and "no training run 'run-nope'" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[data]\npath = "x"\n[model]\nd_model = 30\nn_heads = 4\n')
    result = run_cli("train", "run", str(bad), "--nprocs", "2")
    assert result.returncode == 2 and "model.d_model" in result.stderr
