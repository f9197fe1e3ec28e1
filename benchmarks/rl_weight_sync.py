"""Weight sync into a rollout worker's engine: load in place against rebuilding the engine.

A rollout worker serves a new policy version either by loading the version's safetensors file
into the model its engine already runs (`load_state_dict`, between dispatches, no request in
flight) or by building a fresh model from the file and a fresh engine over it. Each is timed
from the file on disk to the first dispatch answered (a group of rows decoded through the
engine), and to the engine ready (the sync alone), alternating, for the RL task's small policy
and a larger one.

    python benchmarks/rl_weight_sync.py            # seconds
    python benchmarks/rl_weight_sync.py --quick    # a smoke run
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHAPES = {
    "rl-small": {"d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 64},
    "wider": {"d_model": 256, "n_layers": 4, "n_heads": 8, "seq_len": 128},
}


def measure(shape: dict[str, int], repeat: int, folder: Path) -> dict[str, float]:
    import torch

    from shipyard.rl.policy import build, load_weights, prompt_row, save_weights
    from shipyard.rl.rollout import continue_rows, engine
    from shipyard.rl.tasks import encode
    from shipyard.train.config import ModelConfig

    cfg = ModelConfig(
        vocab_size=98,
        d_model=shape["d_model"],
        n_layers=shape["n_layers"],
        n_heads=shape["n_heads"],
        seq_len=shape["seq_len"],
    )
    path = folder / "policy.safetensors"
    save_weights(build(cfg, 1), path)
    rows = [prompt_row(encode(f"{k}+{k}=")) for k in range(8)]

    def dispatch(runner: Any) -> None:
        continue_rows(runner, rows, [0] * 8, list(range(8)), max_new=8, budget=8, temperature=1.0)

    model = build(cfg, 0)
    runner = engine(model, len(rows))
    dispatch(runner)  # warm

    def in_place() -> None:
        load_weights(model, path)

    def rebuild() -> None:
        nonlocal runner, model
        runner.stop()
        model = build(cfg, 0)
        load_weights(model, path)
        runner = engine(model, len(rows))

    times: dict[str, list[float]] = {}
    arms: dict[str, Callable[[], None]] = {"in_place": in_place, "rebuild": rebuild}
    torch.manual_seed(0)
    for k in range(repeat):
        for name in ["in_place", "rebuild"] if k % 2 == 0 else ["rebuild", "in_place"]:
            start = time.perf_counter()
            arms[name]()
            synced = time.perf_counter()
            dispatch(runner)
            times.setdefault(f"{name}_sync", []).append(synced - start)
            times.setdefault(f"{name}_to_dispatch", []).append(time.perf_counter() - start)
    runner.stop()
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="3 repeats, the small policy only")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    shapes = {"rl-small": SHAPES["rl-small"]} if args.quick else SHAPES
    repeat = 3 if args.quick else args.repeat
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="shipyard-rl-sync-") as folder:
        for name, shape in shapes.items():
            result = measure(shape, repeat, Path(folder))
            figures[name] = {k: round(v, 5) for k, v in result.items()}
            print(
                f"{name} (median of {repeat}): sync in place {result['in_place_sync'] * 1e3:.1f}"
                f" ms, rebuild {result['rebuild_sync'] * 1e3:.1f} ms; to the first dispatch "
                f"answered {result['in_place_to_dispatch'] * 1e3:.1f} ms against "
                f"{result['rebuild_to_dispatch'] * 1e3:.1f} ms",
                file=sys.stderr,
            )
    small = figures["rl-small"]
    print(
        json.dumps(
            {
                "name": "rl_weight_sync",
                "value": small["in_place_sync"],
                "unit": "s",
                "baseline": small["rebuild_sync"],
                "ratio": round(small["rebuild_sync"] / small["in_place_sync"], 2),
                "shapes": figures,
            }
        )
    )


if __name__ == "__main__":
    main()
