"""Loader throughput: tokens/s the deterministic loader delivers, against a sequential memmap read.

Writes two token datasets, then measures (page cache warm for both):
- baseline: each shard read front to back with `np.memmap` in batch-sized slices, as int64;
- `direct`: `Sampler.batch` in this process (shuffled, packed, mixed 70/30);
- `value`: the same batches through the torch `DataLoader` adapter with worker processes;
- `dataloader_transport_ceiling`: a DataLoader whose workers yield a constant batch of the same
  shape, i.e. what moving batches from worker processes costs by itself.

    .venv/bin/python benchmarks/loader_throughput.py [--tokens 40000000] [--workers 2]
"""

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from shipyard.loader import (
    LoaderSpec,
    MixturePhase,
    Sampler,
    Source,
    TokenDataset,
    TokenDatasetWriter,
)
from shipyard.loader.torch_data import make_dataloader

SEQ_LEN, BATCH = 2048, 32


def write(directory: Path, tokens: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with TokenDatasetWriter(directory, 50_257, shard_tokens=8 << 20) as writer:
        written = 0
        while written < tokens:
            doc = rng.integers(0, 50_257, int(rng.integers(20, 3000)), dtype=np.uint16)
            writer.add(doc)
            written += len(doc)


def sequential(paths: list[Path], limit: int) -> float:
    start, done = time.perf_counter(), 0
    for path in paths:
        for shard in TokenDataset(path).shards:
            mm = np.memmap(shard.stem.with_suffix(".tok"), dtype=shard.dtype, mode="r")
            for lo in range(0, len(mm) - SEQ_LEN * BATCH + 1, SEQ_LEN * BATCH):
                batch = np.asarray(mm[lo : lo + SEQ_LEN * BATCH], dtype=np.int64)
                done += batch.size
                if done >= limit:
                    return done / (time.perf_counter() - start)
    return done / (time.perf_counter() - start)


def direct(spec: LoaderSpec, steps: int) -> float:
    sampler = Sampler(spec)
    sampler.batch(0)  # build the epoch permutations outside the timing
    start = time.perf_counter()
    done = sum(sampler.batch(step).tokens.size for step in range(1, steps + 1))
    return done / (time.perf_counter() - start)


def through_dataloader(spec: LoaderSpec, steps: int, workers: int) -> float:
    loader = iter(make_dataloader(spec, start_step=0, stop_step=steps + 8, num_workers=workers))
    for _ in range(8):  # workers started and warmed up
        next(loader)
    start, done = time.perf_counter(), 0
    for item in loader:
        done += item["tokens"].numel()
    return done / (time.perf_counter() - start)


class _Constant(IterableDataset[dict[str, Any]]):
    """The same-shaped batch over and over: what the DataLoader's worker transport alone costs."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def __iter__(self) -> Iterator[dict[str, Any]]:
        tokens = np.ones((BATCH, SEQ_LEN), dtype=np.int64)
        for step in range(self.steps):
            yield {"step": step, "tokens": torch.from_numpy(tokens.copy())}


def transport_ceiling(steps: int, workers: int) -> float:
    loader = iter(DataLoader(_Constant(steps + 8), batch_size=None, num_workers=workers))
    for _ in range(8):
        next(loader)
    start, done = time.perf_counter(), 0
    for item in loader:
        done += item["tokens"].numel()
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=40_000_000, help="tokens per dataset")
    parser.add_argument("--workers", type=int, default=2)
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
        limit = steps * SEQ_LEN * BATCH
        sequential(paths, limit)  # warm the page cache
        baseline = sequential(paths, limit)
        direct_rate = direct(spec, steps)
        loader_rate = through_dataloader(spec, steps, args.workers)
        ceiling = transport_ceiling(steps, args.workers)
    print(f"sequential memmap: {baseline / 1e6:.1f} M tokens/s")
    print(f"sampler, in process: {direct_rate / 1e6:.1f} M tokens/s")
    print(f"DataLoader, {args.workers} workers: {loader_rate / 1e6:.1f} M tokens/s")
    print(f"DataLoader transport alone (constant batches): {ceiling / 1e6:.1f} M tokens/s")
    result = {
        "name": "loader_throughput",
        "value": round(loader_rate),
        "unit": "tokens/s",
        "baseline": round(baseline),
        "ratio": round(loader_rate / baseline, 3),
        "direct": round(direct_rate),
        "direct_ratio": round(direct_rate / baseline, 3),
        "dataloader_transport_ceiling": round(ceiling),
        "workers": args.workers,
        "tokens": limit,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
