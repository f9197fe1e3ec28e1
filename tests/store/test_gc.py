"""Garbage collection keeps every referenced piece, even with puts running concurrently."""

import os
import threading
from pathlib import Path

import pytest

from shipyard.errors import Conflict
from shipyard.store import PieceStore, collect_garbage, put_tree, verify
from shipyard.store.leases import gc_lease, put_lease

PIECE = 64 << 10


def test_gc_deletes_only_unreferenced_pieces(pieces: PieceStore, model_dir: Path) -> None:
    manifest = put_tree(pieces, model_dir, "model", piece_size=PIECE)
    orphan, _ = pieces.put_piece(os.urandom(1000))
    report = collect_garbage(pieces)
    assert report.pieces_deleted == 1
    assert report.bytes_freed == 1000
    assert not pieces.has_piece(orphan)
    assert verify(pieces, manifest) == []


def test_dry_run_deletes_nothing(pieces: PieceStore) -> None:
    orphan, _ = pieces.put_piece(os.urandom(1000))
    assert collect_garbage(pieces, dry_run=True).pieces_deleted == 1
    assert pieces.has_piece(orphan)


def test_gc_refuses_to_run_while_a_put_holds_its_lease(pieces: PieceStore) -> None:
    orphan, _ = pieces.put_piece(os.urandom(1000))
    with put_lease(pieces.backend), pytest.raises(Conflict, match="put"):
        collect_garbage(pieces)
    assert pieces.has_piece(orphan)


def test_put_waits_out_a_running_collection_then_gives_up(pieces: PieceStore) -> None:
    with (
        gc_lease(pieces.backend),
        pytest.raises(Conflict, match="garbage collection"),
        put_lease(pieces.backend, wait=0.3),
    ):
        pass


def test_stale_leases_of_dead_processes_do_not_block_gc(pieces: PieceStore) -> None:
    # A lease not refreshed within the TTL belongs to a dead process.
    pieces.backend.put("leases/put-deadbeef", b"{}")
    report = collect_garbage(pieces, ttl=0.0)
    assert report.stale_leases_removed == 1


@pytest.mark.slow
def test_concurrent_puts_and_collections_never_lose_a_referenced_piece(
    tmp_path: Path, pieces: PieceStore
) -> None:
    """Each put reuses pieces that no manifest references yet (left by an earlier killed put):
    exactly the pieces a collection running at the same moment would delete."""
    stop = threading.Event()
    collections = 0
    errors: list[BaseException] = []

    def collector() -> None:
        nonlocal collections
        while not stop.is_set():
            try:
                collections += collect_garbage(pieces).pieces_deleted > 0
            except Conflict:
                pass  # a put was running: the right outcome, try again
            except BaseException as exc:
                errors.append(exc)
                return

    thread = threading.Thread(target=collector)
    thread.start()
    manifests = []
    try:
        for index in range(12 if pieces.backend.uri.startswith("file:") else 4):
            content = os.urandom(4 * PIECE)
            for offset in range(0, len(content), PIECE):
                pieces.put_piece(content[offset : offset + PIECE])  # orphans until the put commits
            src = tmp_path / f"src-{index}"
            src.mkdir()
            (src / "reused.bin").write_bytes(content)
            manifests.append(put_tree(pieces, src, "model", piece_size=PIECE))
            stop.wait(0.01)
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert collections > 0  # collections did delete orphans while puts ran
    for manifest in manifests:
        assert verify(pieces, manifest) == []
