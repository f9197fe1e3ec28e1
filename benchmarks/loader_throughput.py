"""Loader throughput: tokens/s the deterministic loader delivers, against a sequential memmap read.

Writes two token datasets (uint16, documents of 20..3000 tokens) holding 70% and 30% of
`--tokens`, mixes them 70/30 into batches of 32 x 2048 tokens delivered as int64, and reads about
`--tokens` tokens, i.e. one epoch of each source: the sampler and the baseline then each touch
every page once. The baseline reads the shards front to back through `np.memmap` in batch-sized
slices, widened to int64. The page cache is warm throughout.

- first pass (the headline `value` / `baseline` / `ratio`): `Sampler.batch` in this process
  against the baseline, each side reading once through shards it has just mapped, so both pay
  for mapping the pages they touch. This is how training reads: `shipyard.train.worker` calls
  `Sampler.batch` in the training process, and a pretraining epoch touches each page once. Both
  sides mapped fresh is also how this benchmark measured before.
- held mappings (`held_*`): the same, re-reading the same steps through mappings kept warm
  across rounds: the pure copy cost, where the baseline is one streaming read and the sampler a
  gather of ~45 randomly placed documents per batch.
- through the torch DataLoader (`dataloader_ratio`): the adapter (`make_dataloader`) against the
  same sequential read wrapped in the same DataLoader configuration (`torch_data.wrap`: same
  workers, prefetch and batch shape), and `dataloader_transport_ceiling`, workers yielding a
  constant batch. Moving a batch out of a worker costs more than producing it, so this ratio says
  how close the adapter gets to the transport, not how fast the sampler is; it is not the headline.

The in-process pairs are measured in rounds (the machine is shared and noisy); the JSON gives the
medians and the range of the per-round ratios.

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
SHARES = (0.7, 0.3)  # the mixture, and the sources' sizes
WARMUP = 8  # DataLoader items taken before timing: workers started, shards mapped


def write(directory: Path, tokens: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with TokenDatasetWriter(directory, 50_257, shard_tokens=8 << 20) as writer:
        written = 0
        while written < tokens:
            doc = rng.integers(0, 50_257, int(rng.integers(20, 3000)), dtype=np.uint16)
            writer.add(doc)
            written += len(doc)


def open_shards(paths: list[Path]) -> list[np.memmap]:
    return [
        np.memmap(shard.stem.with_suffix(".tok"), dtype=shard.dtype, mode="r")
        for path in paths
        for shard in TokenDataset(path).shards
    ]


def sequential_batches(
    memmaps: list[np.memmap], steps: int, first: int = 0, every: int = 1
) -> Iterator[np.ndarray]:
    """The baseline: shards read front to back in batch-sized slices (over again if `steps` asks
    for more), widened to int64; batches `first, first + every, ...` of the first `steps`."""
    size = SEQ_LEN * BATCH
    slices = [(mm, lo) for mm in memmaps for lo in range(0, len(mm) - size + 1, size)]
    for step in range(first, steps, every):
        mm, lo = slices[step % len(slices)]
        yield np.asarray(mm[lo : lo + size], dtype=np.int64).reshape(BATCH, SEQ_LEN)


def rate(batches: Iterator[Any], size: Callable[[Any], int]) -> float:
    start, done = time.perf_counter(), 0
    for batch in batches:
        done += size(batch)
    return done / (time.perf_counter() - start)


def first_pass(paths: list[Path], spec: LoaderSpec, steps: int) -> list[float]:
    """(baseline, sampler) rates, each reading through freshly mapped shards."""
    memmaps, sampler = open_shards(paths), Sampler(spec)
    sampler.batch(0)  # the epoch plans are built outside the timing
    return [
        rate(sequential_batches(memmaps, steps), np.size),
        rate((sampler.batch(step).tokens for step in range(1, steps + 1)), np.size),
    ]


def held_mappings(
    paths: list[Path], spec: LoaderSpec, steps: int, rounds: int
) -> list[list[float]]:
    """(baseline, sampler) rates re-reading the same steps through mappings kept warm."""
    memmaps, sampler = open_shards(paths), Sampler(spec)

    def pair() -> list[float]:
        return [
            rate(sequential_batches(memmaps, steps), np.size),
            rate((sampler.batch(step).tokens for step in range(1, steps + 1)), np.size),
        ]

    pair()
    return [pair() for _ in range(rounds)]


class _Sequential(IterableDataset[dict[str, Any]]):
    """The baseline in DataLoader form: worker `w` of `n` yields batches `w, w+n, ...`."""

    def __init__(self, paths: list[Path], steps: int) -> None:
        self.paths, self.steps = paths, steps

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        batches = sequential_batches(open_shards(self.paths), self.steps, worker, workers)
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
    parser.add_argument("--tokens", type=int, default=40_000_000, help="tokens in all")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="in-process rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / "a", Path(tmp) / "b"]
        for i, (path, share) in enumerate(zip(paths, SHARES, strict=True)):
            write(path, int(args.tokens * share), seed=i)
        spec = LoaderSpec(
            sources=(Source("a", str(paths[0])), Source("b", str(paths[1]))),
            seq_len=SEQ_LEN,
            global_batch=BATCH,
            seed=1,
            mixture=(MixturePhase(0, SHARES),),
        )
        steps = args.tokens // (SEQ_LEN * BATCH) - 1  # within the first epoch of both sources
        fresh = [first_pass(paths, spec, steps) for _ in range(args.rounds)]
        held = held_mappings(paths, spec, steps, args.rounds)
        stop = steps + WARMUP
        config = {"num_workers": args.workers}
        loader = through(iter(make_dataloader(spec, stop_step=stop, **config)))
        loader_base = through(iter(wrap(_Sequential(paths, stop), **config)))
        ceiling = through(iter(wrap(_Constant(stop), **config)))
    result: dict[str, Any] = {"name": "loader_throughput", "unit": "tokens/s"}
    for label, key, pairs in (("first pass", "", fresh), ("held mappings", "held_", held)):
        ratios = [d / b for b, d in pairs]
        for b, d in pairs:
            print(f"{label}: sequential memmap {b / 1e6:7.1f} M tokens/s, sampler {d / 1e6:7.1f} M")
        print(
            f"{label}, in process, sampler ÷ sequential: median {statistics.median(ratios):.3f}, "
            f"range {min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} rounds"
        )
        result[key + "value"] = round(statistics.median(d for _, d in pairs))
        result[key + "baseline"] = round(statistics.median(b for b, _ in pairs))
        result[key + "ratio"] = round(statistics.median(ratios), 3)
        result[key + "ratio_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
    print(
        f"DataLoader, {args.workers} workers: sampler {loader / 1e6:.1f} M tokens/s, "
        f"sequential {loader_base / 1e6:.1f} M tokens/s, "
        f"constant batches (transport alone) {ceiling / 1e6:.1f} M tokens/s"
    )
    result |= {
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
