"""The gossip loop against a member that accepts connections and never answers, and what a
fetch waiting on news does when gossip brings some."""

import asyncio
import shutil
import socket
import threading
import time
from pathlib import Path

from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.daemon import PeerDaemon
from shipyard.distribute.membership import HaveMap, Membership
from shipyard.store import Manifest

from .conftest import free_port


def black_hole() -> tuple[socket.socket, list[socket.socket]]:
    """A listener that accepts every connection and never reads or writes a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return listener, held


def test_a_member_that_never_answers_does_not_hold_back_the_heartbeat(tmp_path: Path) -> None:
    listener, held = black_hole()
    config = DaemonConfig(
        listen=("127.0.0.1", free_port()),
        store=str(tmp_path / "store"),
        seeds=(listener.getsockname(),),  # gossiped with every round: it is the only seed
        fsync=False,
    )

    async def heartbeat_ages() -> list[float]:
        daemon = PeerDaemon(config)
        await daemon.start()
        ages = []
        try:
            for _ in range(16):  # 4 s: a hung exchange lasts the 4 s idle timeout
                await asyncio.sleep(0.25)
                record = daemon.ctx.membership.records[config.me]
                ages.append(time.time() - record.heartbeat / 1000)
        finally:
            await daemon.stop()
        return ages

    try:
        ages = asyncio.run(heartbeat_ages())
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert held, "the daemon never tried the silent member"
    # Beats every 0.3 s (±20%), whatever the exchanges do; a beat held back by the hung exchange
    # would be 3-4 s old by the end, while a loaded machine may delay a healthy one by a second.
    assert max(ages) < 2.0, ages


def test_a_fetch_with_nothing_in_flight_schedules_as_soon_as_gossip_names_a_holder(
    origin: tuple[Path, Manifest],
) -> None:
    """A restarted daemon knows only its seeds, so its fetch has nobody to ask. The first view
    that names a holder must wake it then, not at its next tick; a view with no news must not."""
    store, manifest = origin
    shutil.rmtree(store / "pieces")  # the manifest stays: the daemon knows what to fetch
    pieces = sum(len(entry.pieces) for entry in manifest.files)
    listen = ("127.0.0.1", free_port())
    daemon = PeerDaemon(DaemonConfig(listen=listen, store=str(store), fsync=False))
    holder = Membership("127.0.0.1:1", [], dead_after=3.0)
    holder.beat({manifest.id: HaveMap(True, (1 << pieces) - 1)})

    async def woken() -> tuple[bool, bool]:
        await daemon.start()
        try:
            await daemon._on_fetch({"artifact": manifest.id, "pieces": None})
            await asyncio.sleep(0.1)  # its first rounds: nobody to ask, nothing in flight
            assert not daemon.holdings[manifest.id].inflight
            daemon.ctx.changed.clear()
            daemon._merge({})
            by_no_news = daemon.ctx.changed.is_set()
            daemon._merge(holder.view())
            return by_no_news, daemon.ctx.changed.is_set()
        finally:
            await daemon.stop()

    assert asyncio.run(woken()) == (False, True)
