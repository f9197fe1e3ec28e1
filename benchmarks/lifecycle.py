"""Lifecycle latency: from a checkpoint's commit to its fast-tier eval result, and from a
passing eval to the promoted deployment answering, phase by phase.

The loop is `shipyard demo --quick`'s, on a fresh `$SHIPYARD_HOME`: the small GPT, untrained,
is deployed behind the router; its pre-training run (on the vendored crawl's tokens, no fault)
commits a checkpoint every 10 steps; the run's lifecycle agent publishes, imports and enqueues
each one's fast eval (a 24-item multiple-choice task) on the work queue, works it with an eval
worker, gates it against the deployed model and rolls the newest that passed out by canary. A
thread asks the router every 0.25 s which version answers.

Per checkpoint: commit (the checkpoint manifest's write) → published → enqueued (imported as a
model, items queued) → first item claimed (the eval worker up) → last item scored; p50 and max
over the checkpoints. The ratio printed beside it is the whole latency over the eval's own work
(first claim to last score): what the loop costs around the evaluation itself. Then for the
rolled-out checkpoint: its gate decision → rollout handed to the deployment → canary begun
(candidate replica up) → promoted → the first answer through the router after the promotion
(by the new version: the canary's stages before it send it some traffic already).

    .venv/bin/python benchmarks/lifecycle.py [--checkpoints 4]

The figures come from `shipyard.lifecycle_demo.timeline.measure`, which `shipyard demo` prints.
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from shipyard.lifecycle_demo.timeline import CHECKPOINT_PHASES, measure


class Watcher:
    """Asks the router which version answers, every 0.25 s, and keeps each answer's time."""

    def __init__(self, router: str, model: str) -> None:
        self.seen: list[tuple[float, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(router, model), daemon=True)
        self.thread.start()

    def _run(self, router: str, model: str) -> None:
        body = {"model": model, "prompt": "The", "max_tokens": 1, "temperature": 0}
        while not self.stop.wait(0.25):
            try:
                reply = httpx.post(f"{router}/v1/completions", json=body, timeout=30)
            except httpx.HTTPError:
                continue
            version = reply.headers.get("x-shipyard-version", "")
            if reply.status_code == 200 and version:
                self.seen.append((time.time(), version))

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def run_loop(home: Path, checkpoints: int) -> tuple[str, list[tuple[float, str]]]:
    """The loop on `home`; the run id and the watcher's (time, version) answers."""
    import dataclasses

    from shipyard.cli.demo_job import DEMO_ALIAS, DEPLOYMENT, hooked
    from shipyard.data.demo import crawl_to_tokens
    from shipyard.lifecycle_demo import models
    from shipyard.lifecycle_demo.loop import demo_task, train_and_roll_out
    from shipyard.lifecycle_demo.serving import deployment
    from shipyard.train.demo import demo_config
    from shipyard.workspace import Workspace

    ws = Workspace.open()
    with tempfile.TemporaryDirectory(prefix="shipyard-bench-") as tmp:
        tokens = crawl_to_tokens(ws)
        cfg = demo_config(ws, tokens)
        steps = 10 * checkpoints
        schedule = dataclasses.replace(
            cfg.train, steps=steps, checkpoint_every=10, keep_checkpoints=checkpoints + 1
        )
        cfg = dataclasses.replace(
            cfg, train=schedule, chaos=dataclasses.replace(cfg.chaos, faults=())
        )
        base = models.untrained_gpt(ws, cfg.model, "demo-tokenizer", 0, Path(tmp))
        ws.move_alias(DEMO_ALIAS, base, expect=None)
        with deployment(home, DEPLOYMENT, DEMO_ALIAS) as (router, _):
            watcher = Watcher(router, DEPLOYMENT)
            try:
                outcome = train_and_roll_out(hooked(cfg, demo_task(home)), 2, lambda line: None)
                deadline = time.monotonic() + 120
                ended = time.time()  # the rollout is over: wait for one answer after it
                while not any(t > ended for t, _ in watcher.seen) and time.monotonic() < deadline:
                    time.sleep(0.1)
            finally:
                watcher.close()
    ws.close()
    return outcome.run_id, watcher.seen


def report(figures: dict[str, Any], answered: float | None) -> list[str]:
    rows = figures["checkpoints"]
    lines = [f"checkpoints evaluated: {len(rows)}"]
    for key in CHECKPOINT_PHASES:
        values = [r[key] for r in rows]
        lines.append(
            f"  {key:24} p50 {statistics.median(values):7.2f} s   max {max(values):7.2f} s"
        )
    ratio = statistics.median(r["commit_to_result"] / r["eval_work"] for r in rows)
    lines.append(f"  commit→result over the eval's own work: p50 ratio {ratio:.1f}x")
    promotion = figures["promotion"]
    if promotion:
        lines.append("passing eval → promoted deployment answering:")
        for key in ("gate_to_handed", "handed_to_canary_began", "canary_began_to_promoted"):
            lines.append(f"  {key:24} {promotion[key]:7.2f} s")
        if answered is not None:
            lines.append(
                f"  {'promoted_to_answering':24} {answered - promotion['promoted_at']:7.2f} s"
            )
            lines.append(f"  {'total':24} {answered - promotion['gate_at']:7.2f} s")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=int, default=4, help="checkpoints evaluated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shipyard-lifecycle-") as tmp:
        home = Path(tmp) / "home"
        os.environ.update(SHIPYARD_HOME=str(home), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        for key in ("SHIPYARD_STORE", "SHIPYARD_CATALOG"):
            os.environ.pop(key, None)
        run_id, seen = run_loop(home, args.checkpoints)
        figures = measure(home, run_id)
        promotion = figures["promotion"]
        answered = min(
            (
                t
                for t, v in seen
                if promotion and v == promotion["version"] and t >= promotion["promoted_at"]
            ),
            default=None,
        )
        for line in report(figures, answered):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
