"""The torch DataLoader adapter: worker processes, step order, resume from a step."""

from pathlib import Path

import numpy as np

from shipyard.loader import LoaderSpec, Sampler, Source
from shipyard.loader.torch_data import make_dataloader


def test_workers_deliver_the_sampler_batches_in_step_order(datasets: list[Path]) -> None:
    spec = LoaderSpec(
        sources=tuple(Source(f"s{i}", str(p)) for i, p in enumerate(datasets)),
        seq_len=32,
        global_batch=6,
        seed=3,
    )
    sampler = Sampler(spec)
    loader = make_dataloader(spec, rank=1, world_size=2, start_step=5, stop_step=16, num_workers=2)
    items = list(loader)
    assert [item["step"] for item in items] == list(range(5, 16))
    for item in items:
        want = sampler.batch(item["step"], 1, 2)
        np.testing.assert_array_equal(item["tokens"].numpy(), want.tokens)
        assert item["doc_starts"] == want.doc_starts
