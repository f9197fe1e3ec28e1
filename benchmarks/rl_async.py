"""Synchronous (η = 0) against asynchronous (η = 1, 2) GRPO on one host, same everything else.

Same task (reasoning-gym basic arithmetic with a long-tailed "thinking" run before the answer),
same model, seed, warm-up checkpoint, workers and cores; each run gets the same wall-clock
budget. Figures: the time each run takes to first reach the synchronous run's final held-out
accuracy (speedup = synchronous time / asynchronous time), and the held-out accuracy each
reaches within the budget against the warm-up checkpoint's. Held-out evaluations are left out
of every clock. `--step-latency` emulates an accelerator engine's decode step (wall time that
does not use host CPU); 0 decodes on this host's CPU only.

    python benchmarks/rl_async.py              # ~3 minutes
    python benchmarks/rl_async.py --quick      # a smoke run, seconds
"""

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def config(args: argparse.Namespace, eta: int) -> Any:
    from shipyard.rl import RLConfig

    return RLConfig.from_dict(
        {
            "name": f"bench-eta{eta}",
            "seed": args.seed,
            "task": {"think_mean": args.think_mean, "think_max": 16, "heldout": args.heldout},
            "warmup": {"steps": args.warmup_steps},
            "rollout": {
                "workers": args.workers,
                "max_new_tokens": 24,
                "step_latency_s": args.step_latency,
                "token_budget": 64,
            },
            "trainer": {"steps": 100_000, "eta": eta, "eval_every": args.eval_every},
        }
    )


def first_time(curve: list[dict[str, float]], target: float) -> float | None:
    return next((p["seconds"] for p in curve if p["accuracy"] >= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="wall-clock budget per run")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--think-mean", type=float, default=1.0)
    parser.add_argument("--step-latency", type=float, default=0.01)
    parser.add_argument("--warmup-steps", type=int, default=500)
    parser.add_argument("--heldout", type=int, default=256)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--etas", default="0,1,2")
    parser.add_argument("--quick", action="store_true", help="tiny budget: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup_steps, args.heldout, args.eval_every = 4.0, 20, 16, 3
    etas = [int(e) for e in args.etas.split(",")]

    import torch

    from shipyard.rl import Controller, report
    from shipyard.rl.policy import build, save_weights
    from shipyard.rl.warmup import heldout_accuracy, warmup

    torch.set_num_threads(1)
    home = tempfile.mkdtemp(prefix="shipyard-rl-bench-")
    os.environ["SHIPYARD_HOME"] = home
    base = config(args, 0)
    start = time.monotonic()
    model = build(base.model, base.seed)
    warmup(model, base)
    init = Path(home) / "warmup.safetensors"
    save_weights(model, init)
    warm = heldout_accuracy(model, base)
    print(
        f"warm-up: {time.monotonic() - start:.1f}s, held-out accuracy {warm:.3f}", file=sys.stderr
    )

    runs: dict[int, dict[str, Any]] = {}
    for eta in etas:
        controller = Controller(replace(config(args, eta)))
        try:
            controller.prepare(init=init)
            controller.run(deadline_s=args.seconds)
        finally:
            controller.close()
        runs[eta] = report(controller)
        r = runs[eta]
        print(
            f"eta={eta}: {r['versions']} versions in {r['seconds']:.1f}s, held-out "
            f"{r['heldout_accuracy']['final']:.3f}, staleness {r['staleness_histogram']}, "
            f"trainer idle {r['idle_s']['trainer']:.1f}s, sync push "
            f"{r['weight_sync']['push_s_total']:.2f}s load {r['weight_sync']['load_s_total']:.2f}s",
            file=sys.stderr,
        )

    sync = runs[0]
    target = sync["heldout_accuracy"]["final"]
    t_sync = first_time(sync["heldout_accuracy"]["curve"], target)
    summary: dict[str, Any] = {}
    for eta, r in runs.items():
        t = first_time(r["heldout_accuracy"]["curve"], target)
        summary[f"eta{eta}"] = {
            "seconds_to_sync_final": t,
            "speedup": (t_sync / t) if (t and t_sync) else None,
            "heldout_final": r["heldout_accuracy"]["final"],
            "versions": r["versions"],
            "staleness": r["staleness_histogram"],
            "rollout_tokens_per_s": round(r["tokens_per_s"]["rollout"], 1),
            "versions_per_s": round(r["versions"] / r["seconds"], 3),
            "train_s_per_version": round(r["time_s"]["training"] / max(1, r["versions"]), 4),
            "train_cpu_s_per_version": round(
                r["time_s"]["training_cpu"] / max(1, r["versions"]), 4
            ),
            "trainer_idle_s": round(r["idle_s"]["trainer"], 2),
        }
    async_eta = 1 if 1 in runs else max(runs)
    speedup = summary[f"eta{async_eta}"]["speedup"]
    best = max(r["heldout_accuracy"]["final"] for r in runs.values())
    print(
        json.dumps(
            {
                "name": "rl_async_time_to_sync_accuracy",
                "value": round(speedup, 3) if speedup else None,
                "unit": "x faster than synchronous (eta=1)",
                "baseline": "synchronous GRPO, eta=0",
                "ratio": round(speedup, 3) if speedup else None,
                "target_accuracy": target,
                "warmup_accuracy": warm,
                "rl_gain_points": round(100 * (best - warm), 1),
                "budget_s": args.seconds,
                "step_latency_s": args.step_latency,
                "load_average": os.getloadavg(),
                "runs": summary,
            }
        )
    )


if __name__ == "__main__":
    main()
