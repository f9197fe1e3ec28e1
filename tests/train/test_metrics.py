"""The controller's `GET /metrics`: Prometheus text that Prometheus's own parser reads back."""

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shipyard.train.metrics import FAMILIES, MetricsServer

RUN = 'nightly "big" \\ run\nsecond line'  # run ids are the user's: a label must survive them


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain")
        return str(reply.read().decode())


def test_a_runs_metrics_parse_and_odd_label_values_round_trip() -> None:
    samples = [
        ("shipyard_train_step", {"run": RUN}, 7),
        ("shipyard_train_failures_total", {"run": RUN}, 2),
        ("shipyard_train_rank_step_seconds", {"run": RUN, "rank": "0"}, 0.125),
        ("shipyard_train_seconds", {"run": RUN, "bucket": "restart"}, 1.5),
    ]
    server = MetricsServer(lambda: samples, port=0)
    try:
        text = scrape(server.port)
    finally:
        server.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    exposed = {
        name + ("_total" if f.type == "counter" else ""): f.type for name, f in families.items()
    }
    assert exposed == {name: kind for name, (kind, _) in FAMILIES.items()}
    got = [(s.name, s.labels, s.value) for f in families.values() for s in f.samples]
    assert sorted(got, key=str) == sorted(samples, key=str)


def test_each_scrape_reads_the_run_as_it_is_now_and_other_paths_are_not_found() -> None:
    steps = iter(range(100))
    server = MetricsServer(lambda: [("shipyard_train_step", {"run": "r"}, next(steps))], port=0)
    try:
        assert 'shipyard_train_step{run="r"} 0.0' in scrape(server.port)
        assert 'shipyard_train_step{run="r"} 1.0' in scrape(server.port)
        with pytest.raises(urllib.error.HTTPError, match="404"):
            scrape(server.port, "/other")
    finally:
        server.close()
