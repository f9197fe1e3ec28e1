"""The engine in process: the one loader, log-likelihoods, and generation through LocalEngine."""

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tests.serve.conftest import TinyModel, reference_greedy

from shipyard.errors import InvalidInput
from shipyard.serve.engine import (
    Completion,
    EngineConfig,
    Loaded,
    LocalEngine,
    LogLikelihood,
    Sampling,
    load_causal_lm,
)


@pytest.fixture(scope="module")
def loaded(tiny_model_dir: Path) -> Loaded:
    return load_causal_lm(tiny_model_dir, threads=1)


@pytest.fixture
def engine(loaded: Loaded) -> Iterator[LocalEngine]:
    # Small blocks and chunks: contexts hit the prefix cache and span several forward passes.
    with LocalEngine(loaded, EngineConfig(block_size=4, prefill_chunk=8)) as running:
        yield running


PAIRS = [
    ("Question: What is 2 + 2?\nAnswer:", " 4"),
    ("Question: What is 2 + 2?\nAnswer:", " 5"),
    ("A much longer context that runs over several prefill chunks of eight tokens", " yes"),
    ("", "hello"),
    ("trailing space ", "moves"),
    ("x", " a longer continuation of several tokens"),
    ("Short", " this continuation runs past one prefill chunk of eight tokens, so it runs alone"),
]


def _full_pass(loaded: Loaded, context: list[int], continuation: list[int]) -> LogLikelihood:
    """The plain computation: one forward over the whole sequence, every position's logits."""
    ids = torch.tensor([context + continuation])
    with torch.no_grad():
        logprobs = loaded.model(input_ids=ids).logits[0].float().log_softmax(-1)
    rows = logprobs[len(context) - 1 : len(context) + len(continuation) - 1]
    target = torch.tensor(continuation)
    total = float(rows.gather(1, target[:, None]).sum())
    return LogLikelihood(total, bool((rows.argmax(-1) == target).all()))


def test_loglikelihoods_equal_a_full_forward_pass_and_share_the_context(
    loaded: Loaded, engine: LocalEngine
) -> None:
    scores = engine.loglikelihoods(PAIRS)
    for (context, continuation), got in zip(PAIRS, scores, strict=True):
        want = _full_pass(loaded, *engine.encode_pair(context, continuation))
        assert got.logprob == pytest.approx(want.logprob, abs=1e-4)
        assert got.greedy == want.greedy
    # The second choice found the first one's context in the prefix cache.
    assert engine.engine.cached_tokens >= 8
    # Alone (a cold cache for some, a warm one for others) gives the same scores.
    for pair, together in zip(PAIRS, scores, strict=True):
        (alone,) = engine.loglikelihoods([pair])
        assert alone.logprob == pytest.approx(together.logprob, abs=1e-4)
    # Token ids are taken as given.
    ids = engine.encode_pair(*PAIRS[0])
    (by_ids,) = engine.loglikelihoods([ids])
    assert by_ids.logprob == pytest.approx(scores[0].logprob, abs=1e-4)


def test_scores_are_the_same_while_generations_run(engine: LocalEngine) -> None:
    quiet = engine.loglikelihoods(PAIRS)
    busy: list[Completion] = []
    thread = threading.Thread(
        target=lambda: busy.extend(engine.generate(["Tell a long story"] * 3, max_tokens=40))
    )
    thread.start()
    while engine.engine.running == 0 and thread.is_alive():
        time.sleep(0.01)
    during = engine.loglikelihoods(PAIRS)
    thread.join(timeout=120)
    assert len(busy) == 3 and all(c.finish_reason == "length" for c in busy)
    for a, b in zip(quiet, during, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4) and a.greedy == b.greedy


def test_pairs_are_encoded_as_the_harness_encodes_them(engine: LocalEngine) -> None:
    tok = engine.tokenizer
    assert engine.encode_pair("", "hello") == ([tok.eos_token_id], tok.encode("hello"))
    context, continuation = engine.encode_pair("Answer: ", "yes")
    assert context == tok.encode("Answer:")  # the trailing space moved to the continuation
    assert context + continuation == tok.encode("Answer: yes")
    with pytest.raises(InvalidInput, match="encodes to no tokens"):
        engine.loglikelihoods([("context", "")])


def test_a_context_too_long_loses_its_oldest_tokens(loaded: Loaded, engine: LocalEngine) -> None:
    window = engine.context  # 512 for the tiny model
    context, continuation = list(range(100, 100 + window + 40)), [7, 8, 9]
    (got,) = engine.loglikelihoods([(context, continuation)])
    kept = context[-(window + 1 - len(continuation)) :]
    assert got.logprob == pytest.approx(_full_pass(loaded, kept, continuation).logprob, abs=1e-4)


def test_greedy_generation_equals_model_generate(loaded: Loaded, engine: LocalEngine) -> None:
    prompts = ["The quick brown fox", "a", "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15"]
    ids = [engine.prompt_ids(p) for p in prompts]
    outs = engine.generate(prompts, max_tokens=10)
    for prompt_ids, out in zip(ids, outs, strict=True):
        assert out.token_ids == reference_greedy(loaded.model, prompt_ids, 10)
        assert out.finish_reason == "length" and out.logprobs is None
        assert out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    assert engine.generate(ids, max_tokens=10) == outs  # token ids in, the same out


def test_a_stop_string_cuts_the_text_and_ends_the_request(engine: LocalEngine) -> None:
    (full,) = engine.generate(["The quick brown fox"], max_tokens=12)
    stop = full.text[len(full.text) // 2 : len(full.text) // 2 + 3]
    assert stop.strip()
    (cut,) = engine.generate(["The quick brown fox"], max_tokens=12, stop=(stop,))
    assert cut.text == full.text[: full.text.find(stop)]
    assert cut.finish_reason == "stop" and len(cut.token_ids) < len(full.token_ids)
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)]


def test_seeded_sampling_is_the_same_in_process_and_through_a_replica(
    loaded: Loaded, engine: LocalEngine, tiny_model: TinyModel, start_replica: object
) -> None:
    sampling = Sampling(temperature=0.9, top_p=0.95, seed=1234, top_logprobs=0)
    ours = engine.generate(["Once upon a time", "Once upon a time"], sampling, max_tokens=12)
    assert ours[0] == ours[1]  # the seed, not the batch-mate, decides
    assert ours[0].logprobs is not None and len(ours[0].logprobs) == len(ours[0].token_ids)
    replica = start_replica("--model", tiny_model.alias)  # type: ignore[operator]
    body = {
        "model": tiny_model.alias,
        "prompt": "Once upon a time",
        "max_tokens": 12,
        "temperature": 0.9,
        "top_p": 0.95,
        "seed": 1234,
    }
    request = urllib.request.Request(
        f"{replica.url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        answer = json.load(reply)
    assert answer["choices"][0]["text"] == ours[0].text


def test_a_prompt_too_long_is_refused_naming_it(engine: LocalEngine) -> None:
    with pytest.raises(InvalidInput, match=r"request 1: .*context window"):
        engine.generate([[1, 2], list(range(10, 510))], max_tokens=20)


def test_the_loader_refuses_a_directory_that_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"not a Hugging Face model directory \(no config"):
        load_causal_lm(tmp_path)
