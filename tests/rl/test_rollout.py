"""Rollouts go through the serving engine: a worker's tokens and log-probs are the engine's for
the same rows and seeds, partial rollouts continue under newly synced weights, and the
trainer's log-probs agree with the engine's at the same version."""

import importlib.util
import time
from pathlib import Path
from typing import Any

import torch

from shipyard.rl import RLConfig
from shipyard.rl.policy import build, prompt_row, token_logprobs
from shipyard.rl.rollout import segment_seed
from shipyard.rl.tasks import EOS, encode
from shipyard.rl.weights import Publisher
from shipyard.rl.worker import WorkerHandle
from shipyard.serve.engine import Done, Engine, EngineConfig, GenRequest, Sampling, Token

CFG = RLConfig.from_dict(
    {
        "seed": 3,
        "model": {"vocab_size": 98, "d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 40},
        "rollout": {"group_size": 4, "max_new_tokens": 10, "token_budget": 4, "top_p": 0.9},
    }
)


def _ask(worker: WorkerHandle, message: dict[str, Any]) -> dict[str, Any]:
    assert worker.send(message)
    assert worker.conn is not None
    end = time.monotonic() + 120
    while time.monotonic() < end:
        if worker.conn.poll(0.1):
            reply: dict[str, Any] = worker.conn.recv()
            return reply
    raise AssertionError("the worker did not answer")


def _engine_alone(
    model: torch.nn.Module, rows: list[list[int]], uids: list[str], generated: list[int]
) -> list[tuple[list[int], list[float]]]:
    """Each row as a request of its own to a fresh engine, seeded as the worker seeds it."""
    out = []
    engine = Engine(model, EngineConfig(prefix_cache_bytes=0)).start()
    try:
        for row, uid, done in zip(rows, uids, generated, strict=True):
            room = min(CFG.rollout.token_budget, CFG.rollout.max_new_tokens - done)
            sampling = Sampling(
                temperature=CFG.rollout.temperature,
                top_p=CFG.rollout.top_p,
                seed=segment_seed(CFG.seed, uid, done),
                top_logprobs=0,
            )
            request = engine.submit(GenRequest(row, room, sampling, stop_ids=frozenset({EOS})))
            tokens, logprobs = [], []
            while not isinstance(event := request.events.get(timeout=60), Done):
                assert isinstance(event, Token) and event.logprob is not None
                tokens.append(event.token_id)
                logprobs.append(event.logprob)
            out.append((tokens, logprobs))
    finally:
        engine.stop()
    return out


def _check(reply: dict[str, Any], expect: list[tuple[list[int], list[float]]]) -> None:
    for (_, tokens, logprobs, _), (want_tokens, want_logprobs) in zip(
        reply["items"], expect, strict=True
    ):
        assert tokens == want_tokens
        assert torch.allclose(torch.tensor(logprobs), torch.tensor(want_logprobs), atol=1e-5)


def test_a_workers_rollouts_are_the_engines_and_continue_under_new_weights() -> None:
    model = build(CFG.model, 11)  # not the worker's own initial weights: they must come by sync
    publisher = Publisher("shm", "rollout-test")
    worker = WorkerHandle(0, CFG)
    worker.start()
    try:
        uids = ["g0-0", "g0-1", "g1-0"]
        rows = [prompt_row(encode("3+4=")), [*prompt_row(encode("9-2=")), 17, 17], [1, 12, 15]]
        generated = [0, 2, 0]
        first = {"dispatch": 1, "version": 0, "uids": uids, "rows": rows, "generated": generated}
        reply = _ask(worker, {**first, "ref": publisher.push(model, 0)})
        assert reply["version"] == 0
        _check(reply, _engine_alone(model, rows, uids, generated))
        # The trainer's forward pass gives the same log-probs at the same version.
        full = [row + item[1] for row, item in zip(rows, reply["items"], strict=True)]
        with torch.no_grad():
            trainer = token_logprobs(model, full, [len(r) for r in rows])
        for item, mine in zip(reply["items"], trainer, strict=True):
            assert torch.allclose(torch.tensor(item[2]), mine, atol=1e-5)

        # Partial rollouts continue at the next dispatch, under version 1's weights.
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        live = [i for i, item in enumerate(reply["items"]) if not item[3]]
        assert live, "every row finished within the first budget"
        rows = [full[i] for i in live]
        uids = [uids[i] for i in live]
        generated = [generated[i] + len(reply["items"][i][1]) for i in live]
        second = {"dispatch": 2, "version": 1, "uids": uids, "rows": rows, "generated": generated}
        reply = _ask(worker, {**second, "ref": publisher.push(model, 1)})
        assert reply["version"] == 1 and reply["sync_s"] > 0
        _check(reply, _engine_alone(model, rows, uids, generated))
    finally:
        worker.stop()
        publisher.close()


def test_the_weight_sync_benchmark_times_both_ways(tmp_path: Path) -> None:
    """A small run of benchmarks/rl_weight_sync.py: each arm synced and answered a dispatch."""
    path = Path(__file__).parents[2] / "benchmarks" / "rl_weight_sync.py"
    spec = importlib.util.spec_from_file_location("rl_weight_sync", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    figures = bench.measure(
        {"d_model": 16, "n_layers": 1, "n_heads": 2, "seq_len": 24}, 1, tmp_path
    )
    assert set(figures) == {
        f"{a}_{b}" for a in ("in_place", "rebuild") for b in ("sync", "to_dispatch")
    }
    for arm in ("in_place", "rebuild"):
        assert 0 < figures[f"{arm}_sync"] < figures[f"{arm}_to_dispatch"]
