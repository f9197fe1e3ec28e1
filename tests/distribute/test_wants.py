"""The fetches a daemon keeps on disk so that, restarted, it carries on by itself."""

import asyncio
import random
import socket
from pathlib import Path

import pytest

from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.daemon import PeerDaemon
from shipyard.distribute.wants import WANTS, WantLog
from shipyard.store import LocalBackend, PieceStore, put_tree

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


def daemon_on(store: Path) -> PeerDaemon:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return PeerDaemon(DaemonConfig(listen=("127.0.0.1", port), store=str(store), fsync=False))


def test_a_want_whose_manifest_is_gone_is_dropped_at_start(tmp_path: Path) -> None:
    """The artifact was deleted from the store while the daemon was down: nothing to resume,
    and nothing is fetched."""
    WantLog(LocalBackend(tmp_path)).record(ARTIFACT, None)
    daemon = daemon_on(tmp_path)

    async def start_and_stop() -> None:
        await daemon.start()
        await daemon.stop()

    asyncio.run(start_and_stop())
    assert daemon.holdings == {}
    assert WantLog(LocalBackend(tmp_path)).pending() == {}


def test_a_want_that_cannot_be_recorded_leaves_the_fetch_going(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`wants` is a file, not a folder: the record fails, is reported, and the fetch it was for
    still runs (only a restart would miss it)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "blob.bin").write_bytes(random.Random(3).randbytes(3 << 16))
    store = tmp_path / "store"
    manifest = put_tree(PieceStore(LocalBackend(store)), tmp_path / "src", "model", 1 << 16)
    piece = next(p for p in (store / "pieces").rglob("*") if p.is_file())
    piece.unlink()
    (store / "wants").write_text("in the way")
    daemon = daemon_on(store)

    async def fetch() -> bool:
        await daemon.start()
        try:
            await daemon._on_fetch({"artifact": manifest.id, "pieces": None})
            holding = daemon.holdings[manifest.id]
            return bool(holding.missing()) and holding._runner is not None
        finally:
            await daemon.stop()

    assert asyncio.run(fetch())
    assert "want record" in capsys.readouterr().err
    assert (store / "wants").read_text() == "in the way"
