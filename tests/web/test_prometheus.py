"""A real Prometheus server (Debian's `prometheus`) scrapes a peer daemon and a training
controller's `/metrics`, and what it stored is read back through its query API."""

import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.conftest import free_port
from tests.web.servers import answers, start, stop, wait_for

from shipyard.train.metrics import MetricsServer

PROMETHEUS = Path("/usr/bin/prometheus")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not PROMETHEUS.exists(), reason="needs Debian's prometheus (scripts/apt-packages.txt)"
    ),
]
RUN = 'nightly "big" run'  # a label value Prometheus must store as sent, quotes included
TRAIN = [
    ("shipyard_train_step", {"run": RUN}, 41),
    ("shipyard_train_goodput_ratio", {"run": RUN}, 0.875),
    ("shipyard_train_rank_step_seconds", {"run": RUN, "rank": "1"}, 0.25),
]


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        answer = json.loads(reply.read())
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[str]:
    """A `shipyard peer serve` daemon on loopback, alone (no seeds); yields its address."""
    address = f"127.0.0.1:{free_port()}"
    args = ["peer", "serve", "--listen", address, "--store", str(tmp_path / "store")]
    process = start([*args, "--no-fsync"], tmp_path / "home", tmp_path / "peer.log")
    try:
        wait_for(f"peer daemon ({tmp_path / 'peer.log'})", answers(f"http://{address}/metrics"))
        yield address
    finally:
        stop(process)


@pytest.fixture
def trainer() -> Iterator[str]:
    """The training controller's metrics endpoint, serving a run's samples; yields its address."""
    server = MetricsServer(lambda: TRAIN, port=0)
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        server.close()


@pytest.fixture
def prometheus(tmp_path: Path, peer: str, trainer: str) -> Iterator[str]:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: peer\n    static_configs: [{{targets: ['{peer}']}}]\n"
        f"  - job_name: train\n    static_configs: [{{targets: ['{trainer}']}}]\n"
    )
    base = f"http://127.0.0.1:{free_port()}"
    process = start_prometheus(config, tmp_path, base)
    try:
        wait_for(f"prometheus ({tmp_path / 'prometheus.log'})", answers(f"{base}/-/ready"))
        yield base
    finally:
        stop(process)


def start_prometheus(config: Path, tmp_path: Path, base: str) -> subprocess.Popen[bytes]:
    with open(tmp_path / "prometheus.log", "wb") as log:
        return subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address={base.removeprefix('http://')}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def test_prometheus_scrapes_a_peer_and_a_trainer_and_answers_queries(
    prometheus: str, peer: str, trainer: str
) -> None:
    def both_up() -> bool:
        up = {r["metric"]["job"]: r["value"][1] for r in query(prometheus, "up")}
        return up == {"peer": "1", "train": "1"}

    wait_for("both targets up in prometheus", both_up, deadline_s=60)

    # A gauge the daemon sets once: what Prometheus stored is what the daemon serves.
    served = scrape(f"http://{peer}/metrics")[("shipyard_peer_members_alive", frozenset())]
    found = query(prometheus, "shipyard_peer_members_alive")
    assert [(r["metric"]["job"], float(r["value"][1])) for r in found] == [("peer", served)]

    # The trainer's samples, labels included, as the controller serves them.
    served_train = scrape(f"http://{trainer}/metrics")
    for name, labels, value in TRAIN:
        assert served_train[(name, frozenset(labels.items()))] == value
        found = query(prometheus, name)
        assert len(found) == 1, found
        stored = {k: v for k, v in found[0]["metric"].items() if k not in ("instance", "job")}
        assert stored == {"__name__": name, **labels}
        assert float(found[0]["value"][1]) == value
