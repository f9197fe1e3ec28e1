"""Partial pieces: bytes kept as they arrive, resumed after a cut, verified whole on commit."""

import os
import time
from pathlib import Path

import pytest

from shipyard.errors import IntegrityError
from shipyard.hashing import sha256_hex
from shipyard.store import LocalBackend, PieceStore
from shipyard.store.partial import MemorySink, PartialPiece, Partials, StalePartial

PIECE = os.urandom(700_000)
HASH = sha256_hex(PIECE)


@pytest.fixture
def store(tmp_path: Path) -> PieceStore:
    return PieceStore(LocalBackend(tmp_path / "store", fsync=False))


def partial_file(store: PieceStore) -> Path:
    assert isinstance(store.backend, LocalBackend)
    return store.backend.root / ".partial" / HASH


def write_part(partials: Partials, data: bytes) -> None:
    sink = partials.open(HASH, len(PIECE))
    assert isinstance(sink, PartialPiece)
    sink.write(memoryview(data))
    sink.close()


def test_a_piece_cut_short_resumes_where_it_stopped_and_commits_whole(store: PieceStore) -> None:
    partials = Partials(store)
    write_part(partials, PIECE[:300_000])
    assert partials.sizes() == {HASH: 300_000}
    sink = partials.open(HASH, len(PIECE))
    assert (sink.kept, sink.received) == (300_000, 0)
    sink.write(memoryview(PIECE)[300_000:])
    sink.commit()
    sink.close()
    assert store.get_piece(HASH) == PIECE
    assert not partial_file(store).exists()
    assert partials.sizes() == {}


def test_kept_bytes_that_spoil_the_piece_are_dropped_blaming_nobody(store: PieceStore) -> None:
    partials = Partials(store)
    write_part(partials, b"\0" * 300_000)  # not the piece's bytes, as after a power cut
    sink = partials.open(HASH, len(PIECE))
    sink.write(memoryview(PIECE)[300_000:])
    with pytest.raises(StalePartial):
        sink.commit()
    sink.close()
    assert not store.has_piece(HASH)
    assert not partial_file(store).exists()  # the next transfer starts from the first byte
    assert partials.open(HASH, len(PIECE)).kept == 0


def test_a_whole_transfer_of_wrong_bytes_is_the_senders_fault(store: PieceStore) -> None:
    sink = Partials(store).open(HASH, len(PIECE))
    sink.write(memoryview(b"x" * len(PIECE)))
    with pytest.raises(IntegrityError) as caught:
        sink.commit()
    assert not isinstance(caught.value, StalePartial)
    assert not store.has_piece(HASH)


def test_more_bytes_than_the_piece_has_are_refused(store: PieceStore) -> None:
    sink = Partials(store).open(HASH, len(PIECE))
    with pytest.raises(IntegrityError, match="more bytes than the manifest says"):
        sink.write(memoryview(PIECE + b"!"))


def test_a_partial_file_longer_than_its_piece_is_started_over(store: PieceStore) -> None:
    partials = Partials(store)
    partials.open(HASH, len(PIECE)).close()  # makes the directory
    partial_file(store).write_bytes(PIECE + b"junk")
    sink = partials.open(HASH, len(PIECE))
    assert sink.kept == 0
    sink.write(memoryview(PIECE))
    sink.commit()
    assert store.get_piece(HASH) == PIECE


def test_restart_forgets_the_kept_bytes(store: PieceStore) -> None:
    partials = Partials(store)
    write_part(partials, PIECE[:1000])
    sink = partials.open(HASH, len(PIECE))
    sink.restart()  # the sender sends the whole piece
    sink.write(memoryview(PIECE))
    sink.commit()
    assert store.get_piece(HASH) == PIECE


def test_a_twin_transfer_gathers_in_memory_while_the_file_is_taken(store: PieceStore) -> None:
    partials = Partials(store)
    first = partials.open(HASH, len(PIECE))
    twin = partials.open(HASH, len(PIECE))
    assert isinstance(first, PartialPiece) and isinstance(twin, MemorySink)
    first.write(memoryview(PIECE)[:1000])
    twin.write(memoryview(PIECE))
    twin.commit()
    twin.close()
    first.close()  # the twin stored the piece: nothing is left to resume
    assert store.get_piece(HASH) == PIECE
    assert partials.sizes() == {}
    assert isinstance(partials.open(HASH, len(PIECE)), PartialPiece)


def test_sweep_keeps_only_the_partials_of_pieces_still_missing(store: PieceStore) -> None:
    partials = Partials(store)
    write_part(partials, PIECE[:10])
    other = sha256_hex(b"other")
    sink = partials.open(other, 5)
    sink.write(memoryview(b"ot"))
    sink.close()
    assert partials.sweep(keep={HASH}) == 1
    assert partials.sizes() == {HASH: 10}


def test_partials_are_not_objects_and_old_ones_are_cleaned(store: PieceStore) -> None:
    backend = store.backend
    assert isinstance(backend, LocalBackend)
    write_part(Partials(store), PIECE[:10])
    assert list(backend.list("")) == []
    assert backend.clean_temp(older_than=time.time() - 60) == 0  # a fresh one stays
    assert backend.clean_temp(older_than=time.time() + 1) == 1
    assert not partial_file(store).exists()
