"""Mixing: shares within one sample of target at every step, phases, per-source order."""

import random
from pathlib import Path

import numpy as np
import pytest

from shipyard.errors import InvalidInput
from shipyard.loader import LoaderSpec, MixturePhase, Sampler, Source
from shipyard.loader.mixing import Mixture


@pytest.mark.parametrize("seed", range(20))
def test_greedy_mixture_stays_within_one_sample(seed: int) -> None:
    rng = random.Random(seed)
    weights = [rng.random() for _ in range(rng.randint(1, 6))]
    mixture = Mixture(weights)
    shares = np.array(mixture.weights) / mixture.period
    for n in range(0, 3 * mixture.period + 7, 1 + mixture.period // 50):
        assert np.abs(mixture.counts(n) - n * shares).max() < 1


def test_shares_at_every_step_and_a_new_phase(datasets: list[Path]) -> None:
    sources = tuple(Source(f"s{i}", str(p)) for i, p in enumerate(datasets))
    spec = LoaderSpec(
        sources=sources,
        seq_len=32,
        global_batch=7,
        mixture=(MixturePhase(0, (0.5, 0.3, 0.2)),),
    ).with_phase(20, (0.1, 0.0, 0.9))
    assert spec.to_dict()["mixture"][1] == {"start_step": 20, "weights": [0.1, 0.0, 0.9]}
    sampler = Sampler(spec)
    counts = np.zeros(3, dtype=np.int64)
    seen: list[list[int]] = [[], [], []]
    for step in range(40):
        sources, ids = sampler.sample_ids(step)
        for src, k in zip(sources.tolist(), ids.tolist(), strict=True):
            seen[src].append(k)
        counts += np.bincount(sources, minlength=3)
        assert sampler.consumed(step + 1) == {f"s{i}": int(c) for i, c in enumerate(counts)}
        if step < 20:
            in_phase, target = counts, (step + 1) * 7 * np.array([0.5, 0.3, 0.2])
        else:
            at_20 = np.array(list(sampler.consumed(20).values()))
            in_phase, target = counts - at_20, (step - 19) * 7 * np.array([0.1, 0.0, 0.9])
        assert np.abs(in_phase - target).max() < 1
    for ids in seen:  # each source is read in order, nothing skipped or repeated
        assert ids == list(range(len(ids)))


def test_bad_weights_rejected() -> None:
    with pytest.raises(InvalidInput, match="weights"):
        Mixture([0.0, 0.0])
    with pytest.raises(InvalidInput, match="weights"):
        Mixture([1.0, float("nan")])
