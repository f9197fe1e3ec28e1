"""The gossip loop against a member that accepts connections and never answers."""

import asyncio
import socket
import threading
import time
from pathlib import Path

from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.daemon import PeerDaemon


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
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = DaemonConfig(
        listen=("127.0.0.1", port),
        store=str(tmp_path / "store"),
        seeds=(listener.getsockname(),),  # gossiped with every round: it is the only seed
        fsync=False,
    )

    async def heartbeat_ages() -> list[float]:
        daemon = PeerDaemon(config)
        await daemon.start()
        ages = []
        try:
            for _ in range(8):  # 2 s: a hung exchange lasts the 4 s idle timeout
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
    assert max(ages) < 1.0, ages  # beats every 0.3 s (±20%), whatever the exchanges do
