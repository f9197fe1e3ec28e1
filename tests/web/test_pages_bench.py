"""A small run of benchmarks/console_pages.py: every page loads in Chromium, none is an error."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "benchmarks"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists()),
        reason="needs Debian's chromium and chromium-driver (scripts/apt-packages.txt)",
    ),
]


def test_small_page_benchmark_loads_every_page(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("selenium.webdriver")
    monkeypatch.syspath_prepend(str(BENCH))  # it imports console_lineage beside it
    for name in ("SHIPYARD_DB", "SHIPYARD_STORE", "SHIPYARD_CATALOG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SHIPYARD_HOME", "/nonexistent")  # run() points it at its temp home
    spec = importlib.util.spec_from_file_location("console_pages", BENCH / "console_pages.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "console_pages", module)
    spec.loader.exec_module(module)
    result = module.run(artifacts=300, edges=2000, loads=2, db=None)
    assert set(result) == set(module.pages([], "", None))
    assert all(0 < p50 <= p95 for p50, p95 in result.values())
