"""Loader throughput: tokens/s the deterministic loader delivers, against a sequential memmap read.

Writes two token datasets (uint16, documents of 20..3000 tokens), mixes them 70/30 into batches
of 32 x 2048 tokens delivered as int64, and measures with the page cache warm:

- in process (the headline `value` / `ratio`): `Sampler.batch` against the baseline, each shard
  read front to back through `np.memmap` in batch-sized slices and widened to int64. This is
  the path training uses (`shipyard.train.worker` calls `Sampler.batch` in the training
  process), and the one where the loader's own work shows: both sides do the same job but the
  sampler's reads are shuffled, packed and mixed.
- through the torch DataLoader (`dataloader_ratio`): the adapter (`make_dataloader`) against the
  same sequential read wrapped in the same DataLoader configuration (same workers, prefetch and
  batch shape), plus `dataloader_transport_ceiling`, workers yielding a constant batch: moving a
  batch out of a worker costs more than producing it, so this ratio says how close the adapter
  gets to that ceiling, not how fast the sampler is.

The in-process pair is measured in alternating rounds (the machine is shared and noisy); the
JSON gives the median of the per-round figures and their range.

    .venv/bin/python benchmarks/loader_throughput.py [--tokens 40000000] [--workers 2] [--rounds 5]
"""

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from shipyard.loader import (
    LoaderSpec,
    MixturePhase,
    Sampler,
    Source,
    TokenDataset,
    TokenDatasetWriter,
)
from shipyard.loader.torch_data import make_dataloader, wrap

SEQ_LEN, BATCH = 2048, 32
WARMUP = 8  # DataLoader items taken before timing: workers started, shards mapped


def write(directory: Path, tokens: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with TokenDatasetWriter(directory, 50_257, shard_tokens=8 << 20) as writer:
        written = 0
        while written < tokens:
            doc = rng.integers(0, 50_257, int(rng.integers(20, 3000)), dtype=np.uint16)
            writer.add(doc)
            written += len(doc)


def sequential_batches(
    paths: list[Path], steps: int, first: int = 0, every: int = 1
) -> Iterator[np.ndarray]:
    """The baseline: shards read front to back in batch-sized slices, widened to int64; batches
    `first, first + every, ...` of the first `steps`."""
    size = SEQ_LEN * BATCH
    memmaps = [
        np.memmap(shard.stem.with_suffix(".tok"), dtype=shard.dtype, mode="r")
        for path in paths
        for shard in TokenDataset(path).shards
    ]
    slices = [(mm, lo) for mm in memmaps for lo in range(0, len(mm) - size + 1, size)]
    for mm, lo in slices[first:steps:every]:
        yield np.asarray(mm[lo : lo + size], dtype=np.int64).reshape(BATCH, SEQ_LEN)


def rate(batches: Iterator[Any], size: Callable[[Any], int]) -> float:
    start, done = time.perf_counter(), 0
    for batch in batches:
        done += size(batch)
    return done / (time.perf_counter() - start)


def in_process(paths: list[Path], spec: LoaderSpec, steps: int, rounds: int) -> list[list[float]]:
    """Alternating rounds of (baseline, sampler) rates, after one untimed pass of each."""
    sampler = Sampler(spec)
    # Untimed passes: page cache and page tables warm for both sides alike.
    rate(sequential_batches(paths, steps), np.size)
    rate((sampler.batch(step).tokens for step in range(steps)), np.size)
    return [
        [
            rate(sequential_batches(paths, steps), np.size),
            rate((sampler.batch(step).tokens for step in range(steps)), np.size),
        ]
        for _ in range(rounds)
    ]


class _Sequential(IterableDataset[dict[str, Any]]):
    """The baseline in DataLoader form: worker `w` of `n` yields batches `w, w+n, ...`."""

    def __init__(self, paths: list[Path], steps: int) -> None:
        self.paths, self.steps = paths, steps

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        batches = sequential_batches(self.paths, self.steps, worker, workers)
        for step, batch in enumerate(batches, start=worker):
            yield {"step": step, "tokens": torch.from_numpy(batch)}


class _Constant(IterableDataset[dict[str, Any]]):
    """The same-shaped batch over and over: what the DataLoader's worker transport alone costs."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def __iter__(self) -> Iterator[dict[str, Any]]:
        tokens = np.ones((BATCH, SEQ_LEN), dtype=np.int64)
        info = get_worker_info()
        for step in range(self.steps // (info.num_workers if info else 1)):
            yield {"step": step, "tokens": torch.from_numpy(tokens.copy())}


def through(loader: Iterator[dict[str, Any]]) -> float:
    for _ in range(WARMUP):
        next(loader)
    return rate(loader, lambda item: int(item["tokens"].numel()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=40_000_000, help="tokens per dataset")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="in-process rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / "a", Path(tmp) / "b"]
        for i, path in enumerate(paths):
            write(path, args.tokens, seed=i)
        spec = LoaderSpec(
            sources=(Source("a", str(paths[0])), Source("b", str(paths[1]))),
            seq_len=SEQ_LEN,
            global_batch=BATCH,
            seed=1,
            mixture=(MixturePhase(0, (0.7, 0.3)),),
        )
        steps = args.tokens // (SEQ_LEN * BATCH)
        pairs = in_process(paths, spec, steps, args.rounds)
        stop = steps + WARMUP
        config = {"num_workers": args.workers}
        loader = through(iter(make_dataloader(spec, stop_step=stop, **config)))
        loader_base = through(iter(wrap(_Sequential(paths, stop), **config)))
        ceiling = through(iter(wrap(_Constant(stop), **config)))
    baselines, directs = [p[0] for p in pairs], [p[1] for p in pairs]
    ratios = [d / b for b, d in pairs]
    for b, d in pairs:
        print(f"sequential memmap {b / 1e6:7.1f} M tokens/s   sampler {d / 1e6:7.1f} M tokens/s")
    print(
        f"in process, sampler ÷ sequential: median {statistics.median(ratios):.3f}, "
        f"range {min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} rounds"
    )
    print(
        f"DataLoader, {args.workers} workers: sampler {loader / 1e6:.1f} M tokens/s, "
        f"sequential {loader_base / 1e6:.1f} M tokens/s, "
        f"constant batches (transport alone) {ceiling / 1e6:.1f} M tokens/s"
    )
    result = {
        "name": "loader_throughput",
        "value": round(statistics.median(directs)),
        "unit": "tokens/s",
        "baseline": round(statistics.median(baselines)),
        "ratio": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "dataloader": round(loader),
        "dataloader_baseline": round(loader_base),
        "dataloader_ratio": round(loader / loader_base, 3),
        "dataloader_transport_ceiling": round(ceiling),
        "workers": args.workers,
        "rounds": args.rounds,
        "tokens": steps * SEQ_LEN * BATCH,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
