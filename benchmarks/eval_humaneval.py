"""pass@1 of SmolLM2-135M-Instruct on HumanEval, each completion run against its tests in the
sandbox, through Shipyard's eval path (queue, warm engine, sandboxed scorer, result store).

    .venv/bin/python benchmarks/eval_humaneval.py --limit 20
    .venv/bin/python benchmarks/eval_humaneval.py            # all 164 problems

Greedy completion of the raw HumanEval prompt (max 256 new tokens, cut at the next top-level
statement), then `python3 -I` in a sandbox (256 MiB, 10 s). Reported: pass@1 with its standard
error, the sandbox's outcome counts (pass, fail, timeout, crash), items/s end to end, and the
seconds spent generating and scoring. The last line is JSON (value = pass@1).
"""

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_vs_harness import bench_home, smollm2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="the first N problems (default: all 164)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--task",
        default="humaneval-chat",
        choices=["humaneval-chat", "humaneval"],
        help="the chat-template variant (default: SmolLM2 is instruction-tuned) or raw completion",
    )
    parser.add_argument(
        "--home", type=Path, default=Path(tempfile.gettempdir()) / "shipyard-bench-evals"
    )
    args = parser.parse_args()
    os.environ["SHIPYARD_EVAL_THREADS"] = str(args.threads)
    ws = bench_home(args.home)
    model_id = smollm2(ws)

    from shipyard.evals import EvalWorker, ResultStore, get_task, plan, register
    from shipyard.evals.report import summarize
    from shipyard.evals.runner import materialise, warm_engine
    from shipyard.queue import open_queue

    queue = open_queue()
    store = ResultStore(queue.db)
    engine = warm_engine(model_id, materialise(ws, model_id))
    # HumanEval under a version of its own per invocation, so a repeat measures afresh instead
    # of (rightly) finding every item already done
    task = register(
        dataclasses.replace(
            get_task(args.task), name=f"{args.task}-bench", version=f"1-{time.time_ns()}"
        )
    )
    (run,) = plan(queue, model_id, [task.name], args.limit)
    timed = {"generate": 0.0, "score": 0.0}
    real_generate = EvalWorker._generate

    def generate(self: EvalWorker, task: object, item: object) -> dict[str, str]:
        started = time.perf_counter()
        try:
            return real_generate(self, task, item)  # type: ignore[arg-type]
        finally:
            timed["generate"] += time.perf_counter() - started

    EvalWorker._generate = generate  # type: ignore[method-assign]
    started = time.perf_counter()
    stats = EvalWorker(queue, model_id, engine, batch=4, lease=600).run()
    seconds = time.perf_counter() - started
    timed["score"] = seconds - timed["generate"]
    line = summarize(store, store.run(run.run_key))
    print(json.dumps({"worked": stats.__dict__, "items": line["scored"]}), file=sys.stderr)
    print(
        json.dumps(
            {
                "name": "eval_humaneval",
                "value": round(line["mean"], 4),
                "unit": "pass@1",
                "se": round(line["se"], 4),
                "problems": line["scored"],
                "outcomes": line["outcomes"],
                "items_per_s": round(stats.completed / seconds, 4) if stats.completed else None,
                "generate_s": round(timed["generate"], 1),
                "score_and_queue_s": round(timed["score"], 1),
                "max_tokens": task.sampling.max_tokens,
                "threads": args.threads,
                "load_average_1m": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
