"""The engine's continuous batching: exact greedy output, joins between steps, prefix reuse."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.serve.conftest import collect, reference_greedy
from transformers import AutoModelForCausalLM, AutoTokenizer

from shipyard.serve.engine import Done, Engine, EngineConfig, Failed, GenRequest, Token


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> tuple[Any, Any]:
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.train(False)
    return model, AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def engine(tiny: tuple[Any, Any]) -> Iterator[Engine]:
    # Prompts longer than 8 tokens are prefilled in chunks, with decode steps in between.
    running = Engine(tiny[0], EngineConfig(block_size=4, max_batch=8, prefill_chunk=8)).start()
    yield running
    running.stop()


PROMPTS = [
    "You are a shipping clerk. Answer briefly. Where is the cargo?",
    "The quick brown fox",
    "You are a shipping clerk. Answer briefly. When does it sail?",
    "a",
    "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15",
]


def test_greedy_equals_generate_alone_batched_and_with_prefix_hits(
    tiny: tuple[Any, Any], engine: Engine
) -> None:
    model, tokenizer = tiny
    ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
    expected = [reference_greedy(model, i, 12) for i in ids]

    alone = collect(engine.submit(GenRequest(ids[1], 12)))
    assert alone[0] == expected[1]

    # All at once: they share the batch, rows of different lengths, left-padded.
    requests = [engine.submit(GenRequest(i, 12)) for i in ids]
    results = [collect(r) for r in requests]
    for (tokens, done), want in zip(results, expected, strict=True):
        assert tokens == want
        assert isinstance(done, Done) and done.reason == "length"
    # Prompt 2 shares its first blocks with prompt 0, prefilled just before it: a hit.
    assert results[0][1] == Done("length", len(ids[0]), 12, 0)
    assert isinstance(results[2][1], Done) and results[2][1].cached_tokens >= 8
    again, done = collect(engine.submit(GenRequest(ids[2], 12)))
    assert again == expected[2] and isinstance(done, Done) and done.cached_tokens >= 12
    assert engine.prefix_hit_rate() > 0


def test_a_request_joins_between_decode_steps(tiny: tuple[Any, Any], engine: Engine) -> None:
    _, tokenizer = tiny
    long = engine.submit(GenRequest(tokenizer("Tell a long story")["input_ids"], 300))
    first = long.events.get(timeout=30)
    assert isinstance(first, Token)
    short_tokens, done = collect(engine.submit(GenRequest(tokenizer("hi")["input_ids"], 3)))
    assert isinstance(done, Done) and len(short_tokens) == 3
    # The long request was still running when the short one finished: it did not wait for it.
    produced = 1 + long.events.qsize()
    assert produced < 300
    long.cancel()
    while not isinstance(event := long.events.get(timeout=30), Failed):
        assert isinstance(event, Token)
    assert event.status == 499
    assert _drained(engine)  # its row and its KV reservation are free again


def _drained(engine: Engine) -> bool:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if engine.running == 0 and engine.queues.reserved == 0:
            return True
        time.sleep(0.01)
    return False


def test_stop_token_and_logprobs(tiny: tuple[Any, Any], engine: Engine) -> None:
    model, tokenizer = tiny
    ids = tokenizer(PROMPTS[1])["input_ids"]
    expected = reference_greedy(model, ids, 6)
    stop = frozenset({expected[2]})
    from shipyard.serve.engine import Sampling

    request = GenRequest(ids, 6, Sampling(top_logprobs=2), stop_ids=stop)
    engine.submit(request)
    events = []
    while True:
        event = request.events.get(timeout=30)
        events.append(event)
        if not isinstance(event, Token):
            break
    tokens = [e for e in events if isinstance(e, Token)]
    assert [t.token_id for t in tokens] == expected[:3]
    assert isinstance(events[-1], Done) and events[-1].reason == "stop"
    for token in tokens:  # greedy: the chosen token is the most likely one
        assert token.logprob is not None and token.top[0][0] == token.token_id
        assert token.top[0][1] == pytest.approx(token.logprob)


def test_seeded_sampling_repeats(tiny: tuple[Any, Any], engine: Engine) -> None:
    from shipyard.serve.engine import Sampling

    ids = tiny[1]("Once upon a time")["input_ids"]
    runs = [
        collect(engine.submit(GenRequest(ids, 8, Sampling(temperature=1.0, seed=s))))[0]
        for s in (5, 5, 6)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
