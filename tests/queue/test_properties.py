"""Properties: outside JSON is parsed or refused by name; random interleavings of claims,
expiries and late calls never let a stale lease act, nor an item complete twice."""

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipyard.db import Database
from shipyard.errors import InvalidInput
from shipyard.queue import Item, Queue, StaleLease
from shipyard.queue.model import parse_json


@pytest.mark.fuzz
@settings(max_examples=200, deadline=None)
@given(st.text() | st.binary().map(lambda b: b.decode("latin-1")))
def test_outside_json_is_parsed_or_refused_by_name(text: str) -> None:
    try:
        parse_json(text, "payload")
    except InvalidInput as exc:
        assert str(exc).startswith("payload is not JSON")


OPS = st.lists(
    st.tuples(
        st.sampled_from(["claim", "complete", "fail", "release", "heartbeat", "tick"]),
        st.integers(0, 50),
    ),
    max_size=60,
)


@pytest.mark.fuzz
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_only_the_live_lease_acts_and_each_item_completes_once(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    path: Path = tmp_path_factory.mktemp("q") / "q.db"
    now = [1000.0]
    queue = Queue(Database(f"sqlite://{path}"), clock=lambda: now[0])
    queue.create("q", max_attempts=3)
    queue.enqueue_many("q", list(range(4)))
    held: list[Item] = []  # every lease ever handed out, live or not
    completed: dict[int, Any] = {}
    ended: dict[tuple[int, int], str] = {}  # how each lease ended; repeating that is a no-op
    for op, n in ops:
        if op == "tick":
            now[0] += n / 5
            continue
        if op == "claim":
            held += queue.claim("q", 1 + n % 3, lease=5)
            continue
        if not held:
            continue
        item = held[n % len(held)]
        live = _is_live(queue, item, now[0])
        try:
            if op == "complete":
                queue.complete(item.id, item.token, item.token)
            elif op == "fail":
                queue.fail(item.id, item.token, "x")
            elif op == "release":
                queue.release(item.id, item.token)
            else:
                queue.heartbeat(item.id, item.token, 5)
        except StaleLease:
            assert not live
            continue
        lease = (item.id, item.token)
        assert live or ended.get(lease) == op, f"{op} under a dead lease {lease} took effect"
        if op != "heartbeat":
            ended[lease] = op
        if op == "complete":
            assert completed.setdefault(item.id, item.token) == item.token
    for item_id, token in completed.items():
        record = queue.get(item_id)
        assert (record.state, record.result) == ("done", token)
        assert [a.outcome for a in record.history].count("completed") == 1
    queue.close()


def _is_live(queue: Queue, item: Item, now: float) -> bool:
    record = queue.get(item.id)
    current = max(a.token for a in record.history)
    return (
        record.state == "leased"
        and current == item.token
        and record.lease_expires is not None
        and record.lease_expires > now
    )
