"""A job dies with the scheduler service that started it, SIGKILL included: a restarted service
requeues what was running, so a job left behind would run twice at once."""

import os
import signal
import sys
import time
from pathlib import Path

from tests.processes import alive

from .live import scheduler, wait_for

JOB = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"


def test_a_sigkilled_service_takes_its_running_jobs_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "job.pid"
    with scheduler(tmp_path / "home", tmp_path) as live:
        spec = {"team": "a", "gpus": 1, "time_limit": 600}
        spec["command"] = [sys.executable, "-c", JOB, str(pid_file)]
        code, _ = live.request("POST", "/jobs", spec)
        assert code == 200
        wait_for(lambda: pid_file.exists() and pid_file.read_text(), limit=120)
        job = int(pid_file.read_text())
        assert alive(job)
        os.kill(live.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while alive(job):
            assert time.monotonic() < deadline, f"job {job} outlived its SIGKILLed scheduler"
            time.sleep(0.05)
