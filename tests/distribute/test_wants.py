"""The fetches a daemon keeps on disk so that, restarted, it carries on by itself."""

import asyncio
import socket
from pathlib import Path

import pytest

from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.daemon import PeerDaemon
from shipyard.distribute.wants import WANTS, WantLog
from shipyard.store import LocalBackend

ARTIFACT = "ab" * 32


def test_records_round_trip_and_clear(tmp_path: Path) -> None:
    log = WantLog(LocalBackend(tmp_path))
    log.record(ARTIFACT, None)
    log.record("cd" * 32, ["p2", "p1"])
    assert log.pending() == {ARTIFACT: None, "cd" * 32: ["p1", "p2"]}
    log.clear(ARTIFACT)
    log.clear(ARTIFACT)  # clearing twice is fine
    assert log.pending() == {"cd" * 32: ["p1", "p2"]}


@pytest.mark.parametrize("body", [b"{not json", b'{"pieces": 3}', b"[]", b"\xff\xfe"])
def test_an_unreadable_record_is_named_and_left_in_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes
) -> None:
    backend = LocalBackend(tmp_path)
    backend.put(WANTS + ARTIFACT, body)
    assert WantLog(backend).pending() == {}
    assert f"want record {WANTS}{ARTIFACT}:" in capsys.readouterr().err
    assert backend.get(WANTS + ARTIFACT) == body


def test_a_want_whose_manifest_is_gone_is_dropped_at_start(tmp_path: Path) -> None:
    """The artifact was deleted from the store while the daemon was down: nothing to resume,
    and nothing is fetched."""
    WantLog(LocalBackend(tmp_path)).record(ARTIFACT, None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    daemon = PeerDaemon(DaemonConfig(listen=("127.0.0.1", port), store=str(tmp_path)))

    async def start_and_stop() -> None:
        await daemon.start()
        await daemon.stop()

    asyncio.run(start_and_stop())
    assert daemon.holdings == {}
    assert WantLog(LocalBackend(tmp_path)).pending() == {}
