"""A saved process is named by pid and start time: a signal never reaches whoever got the pid."""

import signal
import subprocess
import sys

import pytest

from shipyard.errors import NotFound
from shipyard.train.procid import MAX_PID, UNKNOWN_START, ProcessId


@pytest.fixture
def bystander():
    """An unrelated live process that must survive every test here."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def test_the_launched_process_is_signalled(bystander: subprocess.Popen[bytes]) -> None:
    ident = ProcessId.of(bystander.pid)
    assert ident.alive() and ident.from_record(ident.to_record()) == ident
    assert ident.signal(signal.SIGTERM)
    assert bystander.wait(timeout=30) == -signal.SIGTERM


def test_a_record_whose_start_time_differs_is_never_signalled(
    bystander: subprocess.Popen[bytes],
) -> None:
    real = ProcessId.of(bystander.pid)
    # The pid a dead rank had, now held by another process: same pid, another start time.
    reused = ProcessId(bystander.pid, real.start + 1)
    assert not reused.alive()
    assert reused.signal(signal.SIGKILL) is False
    for record in ([bystander.pid, real.start - 1], bystander.pid, [bystander.pid], "x", None):
        other = ProcessId.from_record(record)
        assert not other.alive() and other.signal(signal.SIGKILL) is False
    assert bystander.poll() is None and real.alive()


def test_an_exited_process_is_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    ident = ProcessId.of(proc.pid)  # read before reaping, as the controller does
    proc.wait()
    assert not ident.alive() and ident.signal(signal.SIGKILL) is False
    with pytest.raises(NotFound):
        ProcessId.of(MAX_PID + 1)  # no process can hold it


def test_bad_records_name_no_process() -> None:
    for record in ([0, 5], [-1, 5], [2**40, 5], [True, 5], [1, 2.5]):
        assert ProcessId.from_record(record).start == UNKNOWN_START
