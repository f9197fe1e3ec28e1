"""The controller's pure parts: config validation, detectors, goodput ledger, metrics."""

import math
import random
import urllib.request

import pytest

from shipyard.errors import InvalidInput
from shipyard.train import Ledger, TrainConfig, model_goodput, young_daly
from shipyard.train.detect import HangWatch, StragglerWatch, missing_ranks
from shipyard.train.metrics import MetricsServer


def config(**sections):
    return TrainConfig.from_dict({"data": {"path": "/data"}, **sections})


def test_config_round_trips_and_names_bad_fields():
    cfg = config(chaos={"mtbf_s": 60, "faults": [{"kind": "hang", "rank": 1, "step": 3}]})
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.chaos.faults[0].kind == "hang" and cfg.chaos.mtbf_s == 60.0
    assert config(chaos={"faults": [{"kind": "corrupt", "step": 5}]}).chaos.faults[0].step == 5
    cases = [
        ({"model": {"d_model": 30, "n_heads": 4}}, "model.d_model"),
        ({"model": {"layers": 2}}, "unknown fields ['layers']"),
        ({"optim": {"lr": "fast"}}, "optim.lr"),
        ({"chaos": {"kinds": ["meteor"]}}, "chaos.kinds"),
        ({"chaos": {"kinds": ["corrupt"]}}, "chaos.kinds"),  # scripted only: not a signal
        ({"chaos": {"faults": [{"kind": "meteor"}]}}, "chaos.faults.kind"),
        ({"controller": {"straggler_factor": 0}}, "straggler_factor"),
        ({"trainer": {}}, "unknown sections ['trainer']"),
    ]
    for sections, message in cases:
        with pytest.raises(InvalidInput, match=message.replace("[", r"\[")):
            config(**sections)
    with pytest.raises(InvalidInput, match="exactly one of path, artifact"):
        TrainConfig.from_dict({"data": {"path": "a", "artifact": "b"}})


def test_hang_watch_threshold_and_stall():
    watch = HangWatch(factor=10, floor=0.5, startup=30)
    watch.reset(now=0.0)
    assert watch.threshold() == 30  # nothing measured yet
    for step in range(1, 6):
        watch.observe(step, now=step * 0.1, step_time=0.1)
    assert watch.threshold() == pytest.approx(1.0)
    assert watch.stalled_for(1.4) is None
    assert watch.stalled_for(1.6) == pytest.approx(1.1)
    watch.observe(5, now=2.0)  # no new step: no progress
    assert watch.stalled_for(1.6) == pytest.approx(1.1)


def test_missing_ranks_names_who_never_entered():
    assert missing_ranks({0: (7, 0), 1: (6, 1), 2: (7, 0)}) == ((7, 0), [1])
    assert missing_ranks({0: (7, 1), 1: (7, 1)}) == ((7, 1), [])


def feed(watch: StragglerWatch, windows: int, slow: dict[int, float], seed: int = 0) -> list:
    rng = random.Random(seed)
    found = []
    for step in range(windows * watch.window_steps):
        for rank in range(watch.world_size):
            base = 0.02 * (1 + rng.uniform(-0.05, 0.05))
            found += watch.observe(rank, step, base * slow.get(rank, 1.0))
    return found


@pytest.mark.parametrize("k", [1, 3, 5])
def test_straggler_flagged_after_exactly_k_windows(k: int):
    watch = StragglerWatch(world_size=3, window_steps=10, factor=1.1, windows=k)
    assert feed(watch, k - 1, {2: 1.5}) == []
    (flag,) = feed(watch, 1, {2: 1.5})
    assert flag.rank == 2 and flag.ratio == pytest.approx(1.5, rel=0.1)
    assert feed(watch, 3, {2: 1.5}) == []  # flagged once, not every window


def test_no_straggler_in_a_long_healthy_run():
    watch = StragglerWatch(world_size=4, window_steps=10, factor=1.1, windows=3)
    assert feed(watch, 500, {}, seed=1) == []


def test_ledger_buckets_sum_to_wall_time():
    ledger = Ledger()
    for step in range(1, 11):
        ledger.step(step, 1.0, data_wait=0.1, stall=0.2 if step % 5 == 0 else 0.0, end=step)
    ledger.commit(5)
    ledger.interrupt(failed_at=10.0, detected_at=10.5, committed=5)  # steps 6-10 lost
    ledger.step(6, 1.0, data_wait=0.1, stall=0.0, end=13.0)  # restart: 10.5 → 12.0
    ledger.commit(6)
    parts = ledger.breakdown(wall=14.0)
    assert parts["lost_work"] == pytest.approx(5.0)
    assert parts["detection"] == pytest.approx(0.5)
    assert parts["restart"] == pytest.approx(1.5)
    assert parts["productive"] == pytest.approx(6 * 0.9 - 0.2)
    assert parts["checkpoint_stall"] == pytest.approx(0.2)
    total = sum(v for k, v in parts.items() if k not in ("wall", "goodput"))
    assert total == pytest.approx(14.0)
    assert Ledger.from_dict(ledger.to_dict()).breakdown(14.0) == parts


def test_young_daly_is_the_model_optimum():
    stall, mtbf, restart = 2.0, 3600.0, 30.0
    tau = young_daly(stall, mtbf)
    assert tau == pytest.approx(math.sqrt(2 * stall * mtbf))
    best = model_goodput(stall, mtbf, restart, tau)
    for other in (tau / 2, tau * 2):
        assert model_goodput(stall, mtbf, restart, other) < best


def test_metrics_endpoint_serves_prometheus_text():
    samples = [("shipyard_train_step", {"run": "r"}, 7), ("shipyard_train_failures_total", {}, 2)]
    server = MetricsServer(lambda: samples, port=0)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        body = urllib.request.urlopen(url, timeout=10).read().decode()
    finally:
        server.close()
    assert 'shipyard_train_step{run="r"} 7.0' in body
    assert "# TYPE shipyard_train_failures_total counter" in body
