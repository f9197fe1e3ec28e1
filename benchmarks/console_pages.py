"""Page load of each console page in headless Chromium, over the large generated catalog.

    .venv/bin/python benchmarks/console_pages.py [--artifacts 100000] [--edges 1000000]
        [--loads 30] [--db postgresql://...]

The catalog is the one `benchmarks/console_lineage.py` builds (`--artifacts` artifacts and
`--edges` lineage edges), plus one real stored artifact for the artifact page. A real uvicorn
serves the console on loopback; Debian's `chromium` (through `chromium-driver` and Selenium)
opens each page `--loads` times, and a load is the navigation entry's `loadEventEnd`: from the
start of navigation to the end of the page's load event, server time and rendering included.
Lineage pages open a different random artifact each time. The goal is p95 <= 500 ms per page.
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from console_lineage import build, percentile, serve
from shipyard.db import database_url
from shipyard.workspace import Workspace

GOAL_MS = 500.0
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"):
        options.add_argument(flag)
    options.add_argument("--disable-background-networking")
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def pages(ids: list[str], stored: str, rng: random.Random) -> dict[str, Any]:
    """Each page's name and a function giving the path of its next load."""
    return {
        "home": lambda: "/",
        "artifacts": lambda: "/artifacts",
        "artifacts?q=": lambda: "/artifacts?q=bench",
        "artifacts?kind=": lambda: "/artifacts?kind=model",
        "artifact": lambda: f"/artifacts/{stored}",
        "lineage up": lambda: f"/artifacts/{rng.choice(ids)}/lineage?direction=up&depth=5",
        "lineage down": lambda: f"/artifacts/{rng.choice(ids)}/lineage?direction=down&depth=5",
        "runs": lambda: "/runs",
        "scheduler": lambda: "/scheduler",
        "data": lambda: "/data",
        "queues": lambda: "/queues",
        "distribution": lambda: "/distribution",
        "api docs": lambda: "/api/docs",
    }


def load_ms(driver: Any, url: str) -> float:
    """Open `url` and return its navigation's loadEventEnd; an error page is a failure."""
    driver.get(url)
    if driver.title.startswith("Error"):
        raise RuntimeError(f"{url}: {driver.title}")
    script = "return performance.getEntriesByType('navigation')[0].loadEventEnd"
    value = float(driver.execute_script(script))
    if value <= 0:
        raise RuntimeError(f"{url}: no completed load ({value})")
    return value


def add_stored(home: Path) -> str:
    """One real artifact (files and pieces in the store), aliased `bench-stored`."""
    source = home / "bench-source"
    source.mkdir()
    (source / "weights.bin").write_bytes(os.urandom(1 << 20))
    ws = Workspace.open(home)
    try:
        record = ws.put(source, "model", metadata={"name": "bench-stored"})
        ws.move_alias("bench-stored", record.id)
        return record.id
    finally:
        ws.close()


def run(
    artifacts: int, edges: int, loads: int, db: str | None, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """p50 and p95 milliseconds per page."""
    with tempfile.TemporaryDirectory(prefix="shipyard-pages-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        os.environ["SHIPYARD_HOME"] = str(home)
        if db:
            os.environ["SHIPYARD_DB"] = db
        ids = build(database_url(home), artifacts, edges, seed)
        stored = add_stored(home)
        server, port = serve(home)
        rng = random.Random(seed)
        out = {}
        try:
            with chromium(Path(tmp) / "profile") as driver:
                base = f"http://127.0.0.1:{port}"
                load_ms(driver, base + "/")  # start the browser's caches and the connection
                for name, path in pages(ids, stored, rng).items():
                    times = [load_ms(driver, base + path()) for _ in range(loads)]
                    out[name] = (statistics.median(times), percentile(times, 0.95))
        finally:
            server.should_exit = True
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--artifacts", type=int, default=100_000, help="artifacts to generate")
    parser.add_argument("--edges", type=int, default=1_000_000, help="lineage edges to generate")
    parser.add_argument("--loads", type=int, default=30, help="loads of each page")
    parser.add_argument("--db", default=os.environ.get("SHIPYARD_DB"), help="postgresql://...")
    parser.add_argument("--seed", type=int, default=0, help="seed of the graph and the picks")
    args = parser.parse_args()
    result = run(args.artifacts, args.edges, args.loads, args.db, args.seed)
    print(f"{'page':18} {'p50 ms':>8} {'p95 ms':>8}")
    for name, (p50, p95) in result.items():
        print(f"{name:18} {p50:8.1f} {p95:8.1f}")
    worst = max(p95 for _, p95 in result.values())
    print(f"worst page p95 {worst:.1f} ms (goal {GOAL_MS:.0f} ms, ratio {worst / GOAL_MS:.2f})")
    return 0 if worst <= GOAL_MS else 1


if __name__ == "__main__":
    sys.exit(main())
