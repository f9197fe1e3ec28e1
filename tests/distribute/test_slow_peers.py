"""Slowness as evidence, on a loopback rig of real daemons: a peer that claims pieces and serves
them at a byte a second is blamed within the issue's 10 s, while an honest seeder that is
stopped and continued in bursts (as a host starved of CPU is) is cut off piece by piece but
never blamed."""

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shipyard.distribute import pull
from shipyard.distribute.client import daemon_status
from shipyard.store import Manifest

from .conftest import PIECE, Cluster, Peer, make_artifact
from .rawwire import wait_until
from .test_liars import start_liar

BLAME_WITHIN = 10.0  # seconds after the pulls start: the goal
# Honest links: slow enough that a pull lasts longer than the goal, so every host keeps
# asking for pieces while the evidence against the liar comes in.
LINK = ("--upload-limit-mbit", "12")
FAILURES = "shipyard_peer_claim_failures_total"


def blamed_at(peer: Peer) -> dict[str, tuple[str, float]]:
    """Whom the daemon blamed: reason and wall-clock time."""
    return {b["peer"]: (b["reason"], b["at"]) for b in daemon_status(peer.port)["blamed"]}


def pull_all(hosts: list[Peer], manifest: Manifest, tmp_path: Path) -> None:
    with ThreadPoolExecutor(len(hosts)) as pool:
        futures = [
            pool.submit(pull, h.port, manifest.id, tmp_path / f"out-{i}", None, None, 60.0)
            for i, h in enumerate(hosts)
        ]
        for future in futures:
            future.result()
    source = (tmp_path / "src" / "blob.bin").read_bytes()
    for i in range(len(hosts)):
        assert (tmp_path / f"out-{i}" / "blob.bin").read_bytes() == source


def test_a_slow_liar_is_blamed_by_every_host_within_the_goal(
    cluster: Cluster, tmp_path: Path
) -> None:
    store = tmp_path / "origin"
    manifest = make_artifact(store, tmp_path / "src", 48 * PIECE)
    seed = cluster.seeder("seed", [], store, *LINK).start()
    liar = start_liar(cluster, "slow", store)  # alone, then told of the seed by gossip
    hosts = [cluster.peer(f"h{i}", [seed.address, liar.address], *LINK).start() for i in range(3)]
    for host in hosts:
        wait_until(lambda h=host: h.metrics()["shipyard_peer_members_alive"] >= 4, what="swarm")

    started = time.time()
    pull_all(hosts, manifest, tmp_path)

    for host in hosts:
        verdicts = blamed_at(host)
        assert set(verdicts) == {liar.address}, verdicts  # the liar, and no honest peer
        reason, at = verdicts[liar.address]
        assert reason == "slow"
        print(f"{host.address} blamed the liar {at - started:.2f} s after the pulls started")
        assert at - started <= BLAME_WITHIN


def test_an_honest_seeder_stopped_in_bursts_is_never_blamed(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Stopped for 2 s, longer than a reply's grace, then run for 0.4 s, over and over: its
    replies are cut off as slow (under the old rules, three strikes blamed it), but it sends
    its share whenever it runs."""
    store = tmp_path / "origin"
    manifest = make_artifact(store, tmp_path / "src", 48 * PIECE)
    starved = cluster.seeder("starved", [], store, *LINK).start()
    steady = cluster.seeder("steady", [starved.address], store, *LINK).start()
    seeds = [starved.address, steady.address]
    hosts = [cluster.peer(f"h{i}", seeds, *LINK).start() for i in range(2)]
    for host in hosts:
        wait_until(lambda h=host: h.metrics()["shipyard_peer_members_alive"] >= 3, what="swarm")
    done = threading.Event()

    def bursts() -> None:  # a daemon starved of CPU, at its worst: nothing for 2 s at a time
        assert starved.proc is not None
        while not done.is_set():
            os.kill(starved.proc.pid, signal.SIGSTOP)
            done.wait(2.0)
            os.kill(starved.proc.pid, signal.SIGCONT)
            done.wait(0.4)

    throttle = threading.Thread(target=bursts)
    throttle.start()
    try:
        pull_all(hosts, manifest, tmp_path)
    finally:
        done.set()
        throttle.join()
    cut = served = 0
    for host in hosts:
        metrics = host.metrics()
        cut += sum(metrics.get(f'{FAILURES}{{reason="{r}"}}', 0) for r in ("slow", "stalled"))
        served += daemon_status(host.port)["holdings"][0]["sources"].get(starved.address, [0])[0]
        assert blamed_at(host) == {}
    print(f"the starved seeder's replies were cut off {cut} times; it served {served} pieces")
    assert served >= 1  # it took part
