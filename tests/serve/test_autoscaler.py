"""The autoscaler's policy: bounds, early scale-up, hysteresis, scale to zero and back."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.serve.deploy.autoscaler import Decision, Signals, decide
from shipyard.serve.deploy.spec import Autoscale, Replicas, Slo

AUTO = Autoscale(queue_up=2, queue_down=0.5, up_cooldown_s=10, down_cooldown_s=60, max_step=2)
SLO = Slo(ttft_ms_p50=100, ttft_ms_p99=1000)


WIDE = Replicas(1, 8)


def run(signals: Signals, auto: Autoscale = AUTO, bounds: Replicas = WIDE) -> Decision:
    return decide(auto, bounds, SLO, signals, since_change_s=None)


def test_queue_over_threshold_scales_up_by_what_the_queue_needs() -> None:
    decision = run(Signals(replicas=2, queue={"interactive": 3, "standard": 2}))
    assert decision.action == "up" and decision.target == 3  # ceil(5 / 2)
    big = run(Signals(replicas=2, queue={"standard": 40}))
    assert big.target == 4  # at most max_step at once
    assert big.inputs["weighted_queue"] == 40 and "queue 40 over 2" in big.reason


def test_batch_queue_weighs_less() -> None:
    assert run(Signals(replicas=2, queue={"batch": 8})).action == "hold"  # 8 x 0.25 = 2
    assert run(Signals(replicas=2, queue={"standard": 8})).action == "up"


def test_ttft_crossing_a_fraction_of_the_slo_scales_up_early() -> None:
    # p99 750 ms is under the 1000 ms SLO but over 0.7 of it: add a replica before the breach
    decision = run(Signals(replicas=2, ttft_p50_ms=10, ttft_p99_ms=750))
    assert decision.action == "up" and decision.target == 3
    assert "p99 750 ms over 0.7 of the 1000 ms SLO" in decision.reason


def test_cooldowns_hold() -> None:
    hot = Signals(replicas=2, queue={"standard": 10})
    assert decide(AUTO, Replicas(1, 8), SLO, hot, since_change_s=5).action == "hold"
    assert decide(AUTO, Replicas(1, 8), SLO, hot, since_change_s=11).action == "up"
    calm = Signals(replicas=3)
    assert decide(AUTO, Replicas(1, 8), SLO, calm, since_change_s=30).action == "hold"
    assert decide(AUTO, Replicas(1, 8), SLO, calm, since_change_s=61).target == 2


def test_down_only_when_the_queue_fits_one_replica_fewer_under_the_low_mark() -> None:
    assert run(Signals(replicas=3, queue={"standard": 1})).action == "hold"  # 1 / 2 >= 0.5
    assert run(Signals(replicas=3, queue={"standard": 0})).action == "down"
    # TTFT above the low fraction blocks a scale-down even with an empty queue
    assert run(Signals(replicas=3, ttft_p50_ms=40)).action == "hold"


def test_bounds_are_enforced_first() -> None:
    assert run(Signals(replicas=0), bounds=Replicas(2, 4)).target == 2
    assert run(Signals(replicas=6), bounds=Replicas(1, 4)).target == 4
    at_max = run(Signals(replicas=4, queue={"standard": 99}), bounds=Replicas(1, 4))
    assert at_max.action == "hold" and "at max 4" in at_max.reason


def test_a_silent_replica_blocks_scaling_down_but_not_up() -> None:
    auto = Autoscale(idle_to_zero_s=60)
    silent = Signals(replicas=2, idle_s=600, silent=1)
    held = decide(auto, Replicas(0, 3), SLO, silent, None)
    assert held.action == "hold" and "did not report" in held.reason
    busy = Signals(replicas=2, queue={"standard": 9}, silent=1)
    assert decide(auto, Replicas(0, 3), SLO, busy, None).action == "up"


def test_scale_to_zero_when_idle_and_wake_on_the_first_request() -> None:
    auto = Autoscale(idle_to_zero_s=60)
    bounds = Replicas(0, 3)
    assert decide(auto, bounds, SLO, Signals(replicas=1, idle_s=30), None).action == "hold"
    zero = decide(auto, bounds, SLO, Signals(replicas=1, idle_s=61), None)
    assert zero.action == "zero" and zero.target == 0
    assert decide(auto, Replicas(1, 3), SLO, Signals(replicas=1, idle_s=600), None).target == 1
    assert decide(auto, bounds, SLO, Signals(replicas=0, idle_s=600), None).action == "hold"
    wake = decide(auto, bounds, SLO, Signals(replicas=0, waiting=1), None)
    assert wake.action == "wake" and wake.target == 1


_tiers = st.fixed_dictionaries(
    {t: st.integers(0, 200) for t in ("interactive", "standard", "batch")}
)
_ms = st.none() | st.floats(0, 5000)
_auto = st.builds(
    lambda up, gap, ttft_up, gap_t, step, zero: Autoscale(
        queue_up=up, queue_down=up * gap, ttft_up=ttft_up, ttft_down=ttft_up * gap_t,
        max_step=step, up_cooldown_s=10, down_cooldown_s=30, idle_to_zero_s=zero,
    ),
    st.floats(0.5, 20), st.floats(0, 0.99), st.floats(0.05, 1), st.floats(0, 0.99),
    st.integers(1, 4), st.none() | st.floats(1, 100),
)  # fmt: skip
_bounds = st.tuples(st.integers(0, 6), st.integers(1, 12)).map(
    lambda t: Replicas(min(t), max(t[1], min(t)))
)


@settings(max_examples=300, deadline=None)
@given(_auto, _bounds, st.integers(0, 20), _tiers, st.integers(0, 50), _ms, _ms,
       st.floats(0, 500), st.integers(0, 5), st.none() | st.floats(0, 500),
       st.integers(0, 2))  # fmt: skip
def test_target_never_leaves_the_bounds(
    auto: Autoscale, bounds: Replicas, replicas: int, queue: dict[str, int], running: int,
    p50: float | None, p99: float | None, idle: float, waiting: int, since: float | None,
    silent: int,
) -> None:  # fmt: skip
    signals = Signals(replicas, queue, running, p50, p99, idle, waiting, silent)
    decision = decide(auto, bounds, SLO, signals, since)
    assert bounds.min <= decision.target <= bounds.max
    assert abs(decision.target - replicas) <= max(auto.max_step, abs(replicas - bounds.min),
                                                  abs(replicas - bounds.max), 1)  # fmt: skip
    assert decision.inputs["replicas"] == replicas  # every decision carries its inputs


@settings(max_examples=300, deadline=None)
@given(_auto, _bounds, st.integers(0, 12), _tiers, st.integers(0, 20), _ms, _ms,
       st.floats(0, 500), st.integers(0, 3))  # fmt: skip
def test_a_steady_signal_never_flaps(
    auto: Autoscale, bounds: Replicas, replicas: int, queue: dict[str, int], running: int,
    p50: float | None, p99: float | None, idle: float, waiting: int,
) -> None:  # fmt: skip
    """Apply the policy 60 times (5 s apart) to one unchanging signal: the replica count only
    ever moves one way."""
    since: float | None = None
    counts = [replicas]
    for _ in range(60):
        signals = Signals(counts[-1], queue, running, p50, p99, idle, waiting)
        decision = decide(auto, bounds, SLO, signals, since)
        if decision.target != counts[-1]:
            since = 0.0
        since = None if since is None else since + 5
        counts.append(decision.target)
    moves = [b - a for a, b in itertools.pairwise(counts) if b != a]
    assert all(m > 0 for m in moves) or all(m < 0 for m in moves), counts


@pytest.mark.parametrize("ticks", [40])
def test_load_spike_then_calm(ticks: int) -> None:
    """A spike scales up within a tick; calm scales down only after the cool-down, one at a time."""
    count, since, trace = 1, None, []
    for t in range(ticks):
        queue = {"standard": 12} if t < 10 else {}
        decision = decide(AUTO, Replicas(1, 8), SLO, Signals(count, queue), since)
        since = 0.0 if decision.target != count else (None if since is None else since)
        count = decision.target
        trace.append(count)
        since = None if since is None else since + 5
    assert trace[0] == 3 and max(trace) == 6  # 12 queued / 2 per replica
    assert trace[9] == 6 and trace[10] == 6  # the calm waits out the 60 s cool-down
    assert trace[-1] < 6 and all(b - a >= -1 for a, b in itertools.pairwise(trace[10:]))
