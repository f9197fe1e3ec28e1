"""One artifact's failed claims on this daemon: what `Holding` reports to `blame`, the pieces
whose claimed holders failed too often (their owners go to the origin), requests trickling
below the minimum rate, and who wrote the bytes kept in each partial file.
"""

import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from shipyard.distribute.blame import ORIGIN_AFTER_FAILURES, Blame
from shipyard.distribute.piece_call import RATE_GRACE, Aborted
from shipyard.distribute.transfer import ORIGIN, LaneReset, Transfer
from shipyard.store.partial import MemorySink, PieceSink, SinkError

# Seconds a request a hedged twin outran must have had for its rate to count: a trickle would
# otherwise escape blame whenever the twin lands within `RATE_GRACE`.
LOSER_GRACE = 1.0


class Claims:
    def __init__(self, blame: Blame, artifact: str, pieces: int) -> None:
        self.blame = blame
        self.artifact = artifact
        self.failures = np.zeros(pieces, dtype=np.int64)  # per piece, against claimed holders

    def failed(self, index: int, peer: str, reason: str, detail: str) -> None:
        self.failures[index] += 1
        self.blame.claim_failed(peer, self.artifact, index, reason, detail)

    def corrupt(self, index: int, writers: set[str], detail: str) -> None:
        """The piece failed its hash: blame the peers that wrote its bytes."""
        self.failures[index] += 1
        self.blame.corrupt(sorted(writers - {ORIGIN}), self.artifact, index, detail)

    def nowhere(self, counts: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
        """Pieces to count as held by nobody: no live peer claims them, or claimed holders
        failed them `ORIGIN_AFTER_FAILURES` times (however many liars claim a piece, its owner
        then takes it from the origin)."""
        nowhere: npt.NDArray[np.bool_] = (counts == 0) | (self.failures >= ORIGIN_AFTER_FAILURES)
        return nowhere

    def cut_trickles(self, inflight: dict[int, list[Transfer]], now: float) -> None:
        """Call off requests whose bytes come slower than the minimum rate (a peer sending a
        byte a second never stalls), each a failed claim."""
        for index, transfers in list(inflight.items()):
            for transfer in transfers:
                if self.trickled(index, transfer, now):
                    assert transfer.call is not None
                    transfer.call.abort()

    def trickled(
        self, index: int, transfer: Transfer, now: float, grace: float = RATE_GRACE
    ) -> bool:
        """Count a failed claim against `transfer` if it is below the minimum rate (after
        `grace` seconds; `LOSER_GRACE` for one a hedged twin outran, else it would escape
        whenever the twin lands sooner)."""
        call = transfer.call
        if call is None or call.aborted or not call.too_slow(now, grace):
            return False
        detail = f"peer {transfer.source}: {call.received()} bytes in {transfer.age(now):.1f} s"
        self.failed(index, transfer.source, "slow", f"{detail}, below the minimum rate")
        return True


class PartialSources:
    """Which peers wrote the bytes kept in each piece's partial file during this run, so a
    resumed piece that fails its hash blames them. Bytes kept from before a restart have no
    known writer (`None`): a mismatch then blames nobody. Used from transfer threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_piece: dict[str, set[str] | None] = {}

    def opened(self, piece_hash: str, kept: int) -> None:
        """A transfer found `kept` bytes in the piece's partial file."""
        with self._lock:
            if kept == 0:
                self._by_piece.pop(piece_hash, None)
            elif piece_hash not in self._by_piece:
                self._by_piece[piece_hash] = None  # kept by an earlier run of this daemon

    def wrote(self, piece_hash: str, source: str) -> None:
        """`source` left bytes in the piece's partial file (its transfer was cut short by this
        host, not by its own failure)."""
        with self._lock:
            writers = self._by_piece.get(piece_hash, set())
            if writers is not None:
                writers.add(source)
                self._by_piece[piece_hash] = writers

    def take(self, piece_hash: str) -> set[str] | None:
        """Forget the piece's writers and return them (None: unknown; empty: none)."""
        with self._lock:
            return self._by_piece.pop(piece_hash, set())

    def guard(
        self, piece_hash: str, source: str, fetch: Callable[[PieceSink], None]
    ) -> Callable[[PieceSink], None]:
        """`fetch` from `source` into a sink, keeping the sink's bytes only when the sender is
        not to blame: whatever a failing sender wrote into a partial file is dropped at once,
        and the writers of bytes that stay are noted."""

        def guarded(sink: PieceSink) -> None:
            kept_file = not isinstance(sink, MemorySink)  # bytes that outlive this transfer
            if kept_file:
                self.opened(piece_hash, sink.kept)
            try:
                fetch(sink)
            except (Aborted, LaneReset, SinkError):  # not the sender's doing: its bytes stay
                if kept_file and sink.received:
                    self.wrote(piece_hash, source)
                raise
            except BaseException:  # the sender failed: none of what it sent is kept
                if kept_file:
                    sink.restart()
                    self.opened(piece_hash, 0)
                raise
            if kept_file and not sink.kept:  # sent whole: bytes kept before are gone
                self.opened(piece_hash, 0)

        return guarded
