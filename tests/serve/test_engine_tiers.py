"""Tiers: admission on the KV footprint, batch shed first, priority order, preemption."""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.serve.conftest import collect
from transformers import AutoModelForCausalLM

from shipyard.serve.engine import (
    Done,
    Engine,
    EngineConfig,
    Failed,
    GenRequest,
    Overloaded,
    Token,
    TooLarge,
)
from shipyard.serve.engine.tiers import Admission, TierQueues


def request(tier: str, prompt: int = 10, new: int = 10) -> GenRequest:
    return GenRequest(list(range(1, prompt + 1)), new, tier=tier)  # type: ignore[arg-type]


def test_queues_start_higher_tiers_first_within_the_budget() -> None:
    queues = TierQueues(Admission(budget_bytes=100, bytes_per_token=1))
    batch, standard, interactive = request("batch"), request("standard"), request("interactive")
    for r in (batch, standard, interactive):
        queues.push(r)
    assert queues.depth() == {"interactive": 1, "standard": 1, "batch": 1}
    anything = lambda r: True  # noqa: E731
    assert queues.pop_fitting(0, 8, anything) is interactive
    assert queues.pop_fitting(1, 8, anything) is standard
    assert queues.reserved == 40
    assert queues.pop_fitting(2, 2, anything) is None  # batch is full
    assert queues.pop_fitting(2, 8, anything) is batch
    assert queues.pop_fitting(3, 8, anything) is None


def test_batch_is_shed_over_the_budget_and_too_large_is_refused() -> None:
    queues = TierQueues(Admission(budget_bytes=50, bytes_per_token=1))
    queues.push(request("standard", 20, 20))
    with pytest.raises(Overloaded, match="batch"):
        queues.push(request("batch", 10, 10))
    queues.push(request("standard", 10, 10))  # other tiers wait instead
    with pytest.raises(TooLarge, match="max_tokens"):
        queues.push(request("interactive", 30, 30))


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> Any:
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.train(False)
    return model


@pytest.fixture
def small_engine(tiny: Any) -> Iterator[Engine]:
    per_token = Engine(tiny).bytes_per_token
    config = EngineConfig(kv_budget_bytes=per_token * 300, max_batch=4, block_size=4)
    engine = Engine(tiny, config).start()
    yield engine
    engine.stop()


@pytest.fixture
def slow_steps(tiny: Any) -> Iterator[None]:
    """Each forward pass takes at least 5 ms, as a bigger model's would: the batch request
    below cannot finish its 250 tokens before the test has submitted the next one."""
    hook = tiny.register_forward_hook(lambda *args: time.sleep(0.005))
    yield
    hook.remove()


@pytest.mark.usefixtures("slow_steps")
def test_interactive_preempts_a_running_batch_request(small_engine: Engine) -> None:
    batch = small_engine.submit(request("batch", 20, 250))  # 270 of 300 tokens of room
    assert isinstance(batch.events.get(timeout=30), Token)  # it is running
    urgent = small_engine.submit(request("interactive", 10, 40))  # 270 + 50 > 300
    tokens, done = collect(urgent)
    assert isinstance(done, Done) and len(tokens) == 40
    while isinstance(event := batch.events.get(timeout=30), Token):
        pass
    assert isinstance(event, Failed) and event.status == 503 and "preempted" in event.message


def test_over_the_context_window_is_refused(small_engine: Engine) -> None:
    with pytest.raises(TooLarge, match="context window"):
        small_engine.submit(request("standard", 500, 100))


def test_queue_waits_for_room_then_runs(small_engine: Engine) -> None:
    first = small_engine.submit(request("standard", 20, 200))
    second = small_engine.submit(request("standard", 20, 200))  # waits: 440 > 300
    deadline = time.monotonic() + 5
    while small_engine.queues.depth()["standard"] != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert small_engine.queues.depth()["standard"] == 1
    for r in (first, second):
        tokens, done = collect(r)
        assert isinstance(done, Done) and len(tokens) == 200


def test_a_short_request_waits_when_padding_to_the_long_row_would_overflow(
    small_engine: Engine,
) -> None:
    """Reservations 250 + 20 fit 300 tokens, but the batch would be 2 rows x 250 columns."""
    long = small_engine.submit(request("standard", 10, 240))
    assert isinstance(long.events.get(timeout=30), Token)
    short = small_engine.submit(request("standard", 10, 10))
    # Tokens of the long request made after the short one arrived: the engine looked at the
    # queue (it does before every step) and left the short one there.
    for _ in range(long.events.qsize() + 2):
        assert isinstance(long.events.get(timeout=30), Token)
    assert short.events.qsize() == 0
    assert small_engine.queues.depth()["standard"] == 1
    assert isinstance(collect(long)[1], Done)
    tokens, done = collect(short)
    assert isinstance(done, Done) and len(tokens) == 10
