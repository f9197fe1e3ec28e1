"""`benchmarks/fuzz.py` runs the `fuzz`-marked tests in rounds and counts what escapes them."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz.py"

CONFTEST = """
from hypothesis import settings

settings.register_profile("fuzz", max_examples=10_000, deadline=None)

def pytest_configure(config):
    config.addinivalue_line("markers", "fuzz: long-run property tests")
"""

SOUND = """
import pytest
from hypothesis import given, settings, strategies as st

@pytest.mark.fuzz
@settings(max_examples=5)  # the runner's plan overrides a test's own bound
@given(st.binary())
def test_sound(data):
    assert bytes(data) == data

def test_not_fuzz():
    raise AssertionError("the runner runs only `fuzz` tests")
"""

PLANTED = """
import pytest
from hypothesis import given, strategies as st

@pytest.mark.fuzz
@given(st.text())
def test_planted(text):
    if len(text) >= 2:
        raise ValueError("planted")
"""

# A target whose fixture keeps a file in pytest's cache, as the replica's tokenizer fixture does.
CACHED = """
import pytest
from hypothesis import given, strategies as st

@pytest.fixture(scope="session")
def cached_dir(request):
    return request.config.cache.mkdir("fuzz-runner-probe")

@pytest.mark.fuzz
@given(st.integers())
def test_cached(cached_dir, number):
    assert cached_dir.is_dir()
"""


def fuzz(tests: Path, seconds: float, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tests / ".hypothesis"))
    result = subprocess.run(
        [sys.executable, str(RUNNER), "--seconds", str(seconds), "--tests", str(tests)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result.returncode, result.stdout


@pytest.fixture
def targets(tmp_path: Path) -> Path:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_sound.py").write_text(SOUND)
    return tmp_path


def report(out: str, test: str) -> tuple[int, int, int]:
    """(runs, rounds, uncaught) that the report gives for `test`."""
    match = re.search(rf"::{test} +([\d,]+) runs in (\d+) rounds +(\d+) uncaught", out)
    assert match, out
    return int(match[1].replace(",", "")), int(match[2]), int(match[3])


def test_an_escaped_exception_fails_the_run(targets: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (targets / "test_planted.py").write_text(PLANTED)
    (targets / "test_broken.py").write_text("import no_such_module\n")
    code, out = fuzz(targets, 6, monkeypatch)
    assert code == 1
    last = out.splitlines()[-1]
    assert re.fullmatch(r"fuzz: 1 uncaught exceptions in \d+ s over 2 targets \(goal: 0\)", last)
    assert "test_not_fuzz" not in out
    assert re.search(r"^not fuzzed: \S*test_broken.py does not import", out, re.M)
    assert report(out, "test_planted")[2] == 1
    assert "    ValueError: planted  (pytest --hypothesis-seed=" in out
    runs, rounds, uncaught = report(out, "test_sound")
    assert uncaught == 0 and runs > 5 * rounds  # the plan, not the decorator's bound of 5


def test_a_clean_run_exits_0(targets: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = fuzz(targets, 3, monkeypatch)
    assert code == 0, out
    assert out.splitlines()[-1].startswith("fuzz: 0 uncaught exceptions in ")
    assert report(out, "test_sound")[0] > 0


def test_a_target_may_use_pytests_cache(targets: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (targets / "test_cached.py").write_text(CACHED)
    code, out = fuzz(targets, 3, monkeypatch)
    assert code == 0, out
    runs, _, uncaught = report(out, "test_cached")
    assert runs > 0 and uncaught == 0
