"""`shipyard demo --quick`, the lifecycle loop on a small model, as a real command.

One run (module-scoped: it is the expensive part) is checked for its summary, its answer, the
answer's lineage back to the crawl, and for leaving no process of its own behind.
"""

import importlib.util
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from tests.conftest import run_cli

from shipyard.lifecycle_demo.timeline import CHECKPOINT_PHASES, measure
from shipyard.workspace import Workspace

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# The whole loop in processes of its own: about a minute idle, several on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
PHASES = (
    "crawl → tokens",
    "base model",
    "deploy",
    "train → evals → gate → canary",
    "P2P pull",
    "request",
    "total",
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    home = tmp_path_factory.mktemp("demo") / "home"
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("SHIPYARD_")}
    os.environ.update(SHIPYARD_HOME=str(home), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        return home, run_cli("demo", "--quick", timeout=1400)
    finally:
        del os.environ["SHIPYARD_HOME"]
        os.environ.update(saved)


def _left_behind(home: Path) -> list[int]:
    """Live processes whose environment names `home` as their SHIPYARD_HOME."""
    marker = f"SHIPYARD_HOME={home}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:  # gone meanwhile
            continue
        if marker in environ and state != "Z":
            found.append(int(pid))
    return found


def test_the_summary_names_every_phase_with_its_time(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, result = demo
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = result.stdout.split("\n\n")[-1].splitlines()
    assert "gate passed" in result.stdout and "promoted" in result.stdout
    assert [line.split("  ")[0].strip() for line in summary] == list(PHASES)
    for line in summary:
        seconds = line[len(max(PHASES, key=len)) :].split(" s")[0]
        assert float(seconds) >= 0
    assert "Traceback" not in result.stderr


def test_the_answer_carries_a_request_id_and_its_model_reaches_the_crawl(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    home, result = demo
    assert result.returncode == 0, result.stderr[-3000:]
    request_line = next(line for line in result.stdout.splitlines() if "request id" in line)
    request_id = request_line.split("request id ")[1].split(",")[0]
    assert len(request_id) >= 16
    ws = Workspace.open(home)
    try:
        served = ws.resolve("demo-model")  # moved by the canary's promotion
        sources = {edge.parent for edge in ws.catalog.lineage(served, "up")}
        kinds = {ws.manifest(node).kind for node in sources if not node.startswith("run-")}
        crawl = ws.resolve("demo-crawl")
    finally:
        ws.close()
    assert crawl in sources and "checkpoint" in kinds, kinds
    assert f"answered by {served[:12]}" in result.stdout
    assert crawl[:16] in result.stdout.split("lineage of")[1]


def test_no_process_of_the_demo_is_left(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    home, result = demo
    assert result.returncode == 0, result.stderr[-3000:]
    deadline = time.monotonic() + 60
    while _left_behind(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _left_behind(home) == []


def test_the_lifecycle_benchmark_measures_the_demo_s_loop(
    demo: tuple[Path, subprocess.CompletedProcess[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, result = demo
    assert result.returncode == 0, result.stderr[-3000:]
    spec = importlib.util.spec_from_file_location("lifecycle", BENCHMARKS / "lifecycle.py")
    assert spec is not None and spec.loader is not None
    lifecycle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lifecycle)
    run_id = re.search(r"^train +(run-[0-9a-f]+):", result.stdout, re.M)
    assert run_id is not None
    monkeypatch.setenv("SHIPYARD_HOME", str(home))
    figures = measure(home, run_id.group(1))
    rows = figures["checkpoints"]
    assert rows, figures
    for row in rows:
        parts = sum(row[k] for k in CHECKPOINT_PHASES[:-1])
        assert row["commit_to_result"] == pytest.approx(parts)
        assert all(row[k] >= 0 for k in CHECKPOINT_PHASES)
    promotion = figures["promotion"]
    assert promotion["version"] in result.stdout.split("answered by ")[-1]
    assert promotion["gate_to_handed"] >= 0 and promotion["canary_began_to_promoted"] >= 0
    lines = lifecycle.report(figures, promotion["promoted_at"] + 1.0)
    assert any("p50 ratio" in line for line in lines)
    assert any(line.split()[:1] == ["promoted_to_answering"] for line in lines)
