"""Code scoring in the real sandbox: pass, fail, a loop that never ends, the network, a crash."""

import socket
import threading
from collections.abc import Iterator

import pytest

from shipyard.evals import get_task
from shipyard.evals.scoring import program, run_code, score

pytestmark = pytest.mark.slow


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A real TCP server on the host's loopback that counts the connections it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()
    assert accepted == []  # nothing inside the sandbox ever reached it


def test_humaneval_canonical_solution_passes_and_a_wrong_one_fails() -> None:
    task = get_task("humaneval")
    item = next(i for i in task.load() if i.id == "HumanEval/0")
    assert score(task, item, {"text": str(item.target)}).outcome == "pass"
    wrong = score(task, item, {"text": "    return False\n"})
    assert (wrong.value, wrong.outcome) == (0.0, "fail")
    assert "AssertionError" in wrong.detail


def test_a_solution_that_loops_forever_is_a_timeout() -> None:
    result = run_code("while True:\n    pass\n", timeout=1.5)
    assert (result.value, result.outcome) == (0.0, "timeout")


def test_a_solution_that_tries_the_network_fails_and_reaches_nothing(host_listener: int) -> None:
    source = f"import socket\nsocket.create_connection(('127.0.0.1', {host_listener}), timeout=2)\n"
    result = run_code(source, timeout=120)  # generous: under load a start is slow, not wrong
    assert result.outcome == "fail" and "Error" in result.detail
    outside = run_code(
        "import urllib.request\nurllib.request.urlopen('http://1.1.1.1', timeout=2)\n"
    )
    assert outside.outcome == "fail"


def test_a_solution_that_kills_itself_or_eats_memory_is_a_crash() -> None:
    killed = run_code("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", timeout=120)
    assert killed.outcome == "crash" and "killed" in killed.detail
    hog = run_code("x = bytearray(1 << 30)\n", timeout=120)
    assert hog.outcome in ("crash", "fail")  # the OOM killer, or MemoryError under rlimits
    assert hog.value == 0.0


def test_a_chat_answer_with_a_fenced_definition_is_run_whole() -> None:
    task = get_task("humaneval-chat")
    item = next(i for i in task.load() if i.id == "HumanEval/0")
    answer = f"Sure!\n```python\n{item.fields['prompt']}{item.target}```\nDone."
    assert score(task, item, {"text": answer}).outcome == "pass"
    assert score(task, item, {"text": "I cannot help."}).outcome == "fail"


def test_program_runs_the_tests_against_the_entry_point() -> None:
    task = get_task("humaneval")
    item = task.load()[0]
    source = program(task, item, "    pass\n")
    assert source.startswith(item.fields["prompt"]) and source.endswith(
        f"check({item.entry_point})\n"
    )
