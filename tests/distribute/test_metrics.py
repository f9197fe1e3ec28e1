"""The daemon's `GET /metrics`: Prometheus text that Prometheus's own parser reads back."""

import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from shipyard.distribute import pull
from shipyard.distribute.metrics import FAMILIES, Metrics
from shipyard.store import Manifest

HOSTILE = 'a "quoted" \\ back\\slashed\nsecond line'


def parse(text: str) -> tuple[dict[str, str], dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """Each family's type by its exposed name, and each sample's value by name and labels."""
    types, values = {}, {}
    for family in text_string_to_metric_families(text):
        exposed = family.name + ("_total" if family.type == "counter" else "")
        types[exposed] = family.type
        for sample in family.samples:
            assert isinstance(sample, Sample)
            values[sample.name, frozenset(sample.labels.items())] = sample.value
    return types, values


def test_a_daemons_metrics_parse_with_every_family_and_its_counts(
    cluster: Any, origin: tuple[Path, Manifest], tmp_path: Path
) -> None:
    store, manifest = origin
    host = cluster.peer("h0", [], "--origin", str(store)).start()
    pull(host.port, manifest.id, tmp_path / "out", None, None, 60.0)
    with urllib.request.urlopen(f"http://{host.address}/metrics", timeout=10) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain")
        types, values = parse(reply.read().decode())
    assert types == {name: kind for name, (kind, _) in FAMILIES.items()}
    pieces = len({ref.hash for entry in manifest.files for ref in entry.pieces})
    origin_label = frozenset({("source", "origin")})
    # Alone in its swarm, the host fetched every piece from the origin, once.
    assert values["shipyard_peer_bytes_received_total", origin_label] == manifest.size
    assert values["shipyard_peer_pieces_received_total", origin_label] == pieces
    artifact = frozenset({("artifact", manifest.id)})
    assert values["shipyard_peer_artifact_pieces_wanted", artifact] == pieces
    assert values["shipyard_peer_artifact_pieces_held", artifact] == pieces
    assert values["shipyard_peer_requests_served_total", frozenset({("op", "fetch")})] >= 1
    assert values["shipyard_peer_members_alive", frozenset()] == 0  # nobody else in view


def test_label_values_with_quotes_backslashes_and_newlines_round_trip() -> None:
    metrics = Metrics()
    metrics.set("shipyard_peer_artifact_pieces_held", 3, artifact=HOSTILE)
    metrics.inc("shipyard_peer_requests_served_total", 2, op=HOSTILE)
    metrics.inc("shipyard_peer_bytes_sent_total", 1 << 40)
    _, values = parse(metrics.render().decode())
    assert values == {
        ("shipyard_peer_artifact_pieces_held", frozenset({("artifact", HOSTILE)})): 3,
        ("shipyard_peer_requests_served_total", frozenset({("op", HOSTILE)})): 2,
        ("shipyard_peer_bytes_sent_total", frozenset()): 1 << 40,
    }


def test_each_daemon_has_a_registry_of_its_own() -> None:
    # Several daemons share one process in `local_swarm`: one's counts never show in another's.
    first, second = Metrics(), Metrics()
    first.inc("shipyard_peer_hedged_requests_total")
    _, values = parse(second.render().decode())
    assert values == {}


def test_the_daemon_loads_prometheus_client_only_when_scraped() -> None:
    # A restarted daemon's start-up time is time its host's link idles.
    code = (
        "import sys; import shipyard.cli.peer; from shipyard.distribute.metrics import Metrics; "
        "m = Metrics(); m.inc('shipyard_peer_bytes_sent_total', 1); "
        "print('prometheus_client' in sys.modules); m.render(); "
        "print('prometheus_client' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]
