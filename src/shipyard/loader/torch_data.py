"""A torch `IterableDataset` / `DataLoader` over the sampler, with worker processes.

Worker `w` of `n` produces steps `start + w, start + w + n, ...`; the DataLoader takes one item
from each worker in turn, so batches still arrive in step order. Each item is one step's batch
for this rank; resuming is `make_dataloader(spec, rank, world, start_step=step)`.
"""

from collections.abc import Iterator
from typing import Any, TypeVar

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from shipyard.errors import InvalidInput
from shipyard.loader.sampler import Sampler
from shipyard.loader.spec import LoaderSpec

T = TypeVar("T")


class TokenBatches(IterableDataset[dict[str, Any]]):
    def __init__(
        self,
        spec: LoaderSpec,
        rank: int = 0,
        world_size: int = 1,
        start_step: int = 0,
        stop_step: int | None = None,
    ) -> None:
        if start_step < 0 or (stop_step is not None and stop_step < start_step):
            raise InvalidInput(f"bad step range [{start_step}, {stop_step})")
        self.spec = spec
        self.rank = rank
        self.world_size = world_size
        self.start_step = start_step
        self.stop_step = stop_step

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        sampler = Sampler(self.spec)  # per worker: each maps the shards itself
        step = self.start_step + worker
        while self.stop_step is None or step < self.stop_step:
            batch = sampler.batch(step, self.rank, self.world_size)
            item = {
                "step": step,
                "tokens": torch.from_numpy(batch.tokens),
                # Small per-sample facts travel as lists: one shared-memory tensor per item.
                "sources": batch.sources.tolist(),
                "sample_ids": batch.sample_ids.tolist(),
                "doc_starts": batch.doc_starts,
            }
            if batch.loss_mask is not None:  # only when the data has one (loss_mask.py)
                item["loss_mask"] = torch.from_numpy(batch.loss_mask)
            yield item
            step += workers


def make_dataloader(
    spec: LoaderSpec,
    rank: int = 0,
    world_size: int = 1,
    *,
    start_step: int = 0,
    stop_step: int | None = None,
    num_workers: int = 2,
    prefetch_factor: int = 4,
    pin_memory: bool = False,
) -> DataLoader[dict[str, Any]]:
    """Batches for `rank` from `start_step` on, one per step, in step order."""
    dataset = TokenBatches(spec, rank, world_size, start_step, stop_step)
    return wrap(
        dataset, num_workers=num_workers, prefetch_factor=prefetch_factor, pin_memory=pin_memory
    )


def wrap(
    dataset: IterableDataset[T],
    *,
    num_workers: int = 2,
    prefetch_factor: int = 4,
    pin_memory: bool = False,
) -> DataLoader[T]:
    """The DataLoader configuration `make_dataloader` uses, around any per-step dataset (the
    benchmark wraps its baseline in it to compare like with like)."""
    return DataLoader(
        dataset,
        batch_size=None,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor if num_workers else None,
        pin_memory=pin_memory,
    )
