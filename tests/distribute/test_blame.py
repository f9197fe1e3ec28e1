"""The blame rules alone (strikes, retracted claims, standing), and how the data plane names the
way a peer failed a piece: refused, truncated, stalled or slow."""

import os
import socket
import threading
from collections.abc import Callable

import numpy as np
import pytest

from shipyard.cli.peer import render_status
from shipyard.distribute.blame import ORIGIN_AFTER_FAILURES, RETRACT_FOR, STANDING_STRIKES, Blame
from shipyard.distribute.claims import Claims, PartialSources
from shipyard.distribute.metrics import Metrics
from shipyard.distribute.piece_call import RATE_GRACE, Aborted, PieceCall
from shipyard.distribute.shortfall import PAROLE, RATIO, SHORTFALLS, WINDOW
from shipyard.distribute.transfer import Lane, PeerFault, piece_request
from shipyard.distribute.wire import encode

from .conftest import BytesSink, read_request
from .rawwire import wait_until

A, B = "10.0.0.1:7000", "10.0.0.2:7000"
ART = "ab" * 32
BODY = os.urandom(300_000)
Peer = Callable[[Callable[[socket.socket], None]], tuple[str, int]]


def blame_at(now: list[float]) -> Blame:
    return Blame("me:1", Metrics(), clock=lambda: now[0])


def test_a_failed_claim_is_disbelieved_for_a_while_and_strikes_add_up_to_blame() -> None:
    now = [0.0]
    blame = blame_at(now)
    blame.claim_failed(A, ART, 3, "refused", "not here")
    assert blame.retracted(A, ART) == 1 << 3 and blame.retracted(B, ART) == 0
    assert A not in blame  # one strike: maybe a busy link
    now[0] = RETRACT_FOR + 1
    assert blame.retracted(A, ART) == 0  # an honest peer's bad moment does not hide it for ever
    for index in range(1, STANDING_STRIKES):
        blame.claim_failed(A, ART, index, "truncated", "reset")
    assert A in blame and blame.report()[0]["reason"] == "truncated"
    assert blame.metrics.values["shipyard_peer_blamed_total"][(("reason", "truncated"),)] == 1


def test_delivered_pieces_earn_strikes_back() -> None:
    blame = blame_at([0.0])
    for index in range(10):  # a failure, then a good piece, over and over: under 50% failing
        blame.claim_failed(A, ART, index, "truncated", "reset")
        blame.delivered(A)
    assert A not in blame


def test_wrong_bytes_from_one_peer_are_proof_but_shared_ones_only_a_strike_each() -> None:
    blame = blame_at([0.0])
    blame.corrupt([A, B], ART, 0, "bytes do not match")
    assert len(blame) == 0 and blame.retracted(A, ART) == blame.retracted(B, ART) == 1
    blame.corrupt([A], ART, 1, "bytes do not match")
    assert A in blame and B not in blame


def test_a_peer_is_blamed_and_logged_once(capsys: pytest.CaptureFixture[str]) -> None:
    blame = blame_at([0.0])
    for index in range(2 * STANDING_STRIKES):
        blame.claim_failed(A, ART, index, "refused", "not here")
    assert capsys.readouterr().err.count(f"blamed {A}") == 1
    assert blame.metrics.values["shipyard_peer_blamed_peers"][()] == 1


def test_a_peers_words_reach_the_log_without_control_characters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    blame = blame_at([0.0])
    blame.lose_standing(A, "refused", "not here\npeer 10.0.0.9:7000: blamed \x1b[31mnobody")
    [line] = capsys.readouterr().err.splitlines()  # one line, whatever the peer said
    assert "\x1b" not in line and blame.report()[0]["detail"].count("?") == 2


def others_deliver(blame: Blame, pieces: int = SHORTFALLS, nbytes: int = 1 << 20) -> None:
    for _ in range(pieces):
        blame.received(B, nbytes)
        blame.delivered(B)


def fall_short(blame: Blame, peer: str, pieces: range, nbytes: int = 41) -> None:
    for index in pieces:
        blame.received(peer, nbytes)
        blame.claim_failed(peer, ART, index, "slow", f"{nbytes} bytes in 1.5 s")


def test_a_trickle_loses_standing_on_repeated_shortfalls_for_a_while() -> None:
    now = [0.0]
    blame = blame_at(now)
    others_deliver(blame)
    fall_short(blame, A, range(1))
    fall_short(blame, A, range(1))  # the same piece again: one shortfall, not two
    assert A not in blame and blame.retracted(A, ART) == 1
    fall_short(blame, A, range(1, SHORTFALLS))
    assert A in blame
    [verdict] = blame.report()
    assert verdict["reason"] == "slow" and verdict["until"] is not None
    assert blame.metrics.values["shipyard_peer_blamed_peers"][()] == 1
    now[0] = PAROLE + 1  # slowness is no proof: asked again, on a fresh record
    assert A not in blame and blame.report()[0]["standing"] is True
    assert blame.metrics.values["shipyard_peer_blamed_peers"][()] == 0
    others_deliver(blame)
    fall_short(blame, A, range(SHORTFALLS - 1))
    assert A not in blame
    fall_short(blame, A, range(SHORTFALLS - 1, SHORTFALLS))
    assert A in blame  # the same terms again
    blame.corrupt([A], ART, 9, "bytes do not match")  # proof outlasts any parole
    now[0] += PAROLE + 1
    assert A in blame and blame.report()[0]["until"] is None


def test_a_case_completed_by_another_sources_piece_is_judged_at_once() -> None:
    blame = blame_at([0.0])
    fall_short(blame, A, range(SHORTFALLS))  # before this host has received anything
    assert A not in blame
    others_deliver(blame, 1)  # now it could receive: no further shortfall needed
    assert A in blame


def test_slowness_costs_no_standing_without_evidence_against_the_peer_itself() -> None:
    """A peer that sent a fair share between its stalls, a host that received from nobody,
    and shortfalls spread wider than the window: none is blamed."""
    now = [0.0]
    sent_its_share = blame_at(now)
    others_deliver(sent_its_share, nbytes=RATIO * 1000)
    # 2000 bytes a reply: at its third shortfall, 6000 against 192 000, over a 64th of it
    fall_short(sent_its_share, A, range(5), nbytes=2000)
    assert A not in sent_its_share

    starved_host = blame_at(now)
    fall_short(starved_host, A, range(5))
    assert A not in starved_host

    spread = blame_at(now)
    for index in range(5):
        others_deliver(spread)
        fall_short(spread, A, range(index, index + 1))
        now[0] += WINDOW / 2 + 0.1  # never three within the window
    assert A not in spread
    assert spread.metrics.values["shipyard_peer_claim_failures_total"][(("reason", "slow"),)] == 5


def test_status_says_how_long_a_verdict_of_slowness_lasts() -> None:
    now = [0.0]
    blame = blame_at(now)
    others_deliver(blame)
    fall_short(blame, A, range(SHORTFALLS))
    blame.corrupt([B], ART, 0, "bytes do not match")
    reply = {"me": "me:1", "members_alive": 2, "holdings": [], "blamed": blame.report()}
    table = render_status(reply)
    assert f"blamed {A} (slow, until " in table and f"blamed {B} (corrupt): " in table
    now[0] = PAROLE + 1
    assert f"blamed {A} (slow, lapsed): " in render_status(reply | {"blamed": blame.report()})


def test_a_reply_still_in_the_kernel_counts_as_progress() -> None:
    """A reply is read a whole chunk at a time: the bytes the kernel holds count too, so a
    steady reply is not taken for a trickle before its first chunk is read."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        requester = socket.create_connection(listener.getsockname())
        sender, _ = listener.accept()
        with requester, sender:
            call, idle = PieceCall(min_rate=16 * 1024), PieceCall(min_rate=16 * 1024)
            call.attach(requester)
            sender.sendall(b"x" * 100_000)
            wait_until(lambda: call.received() == 100_000, what="the bytes to arrive")
            assert call.got == 0  # nothing read yet
            assert call.active_since is not None
            assert not call.too_slow(call.active_since + 2 * RATE_GRACE)
            idle.attach(requester)
            assert idle.active_since is not None
            assert idle.too_slow(idle.active_since + RATE_GRACE)


def test_partial_sources_know_who_wrote_kept_bytes_only_within_this_run() -> None:
    sources = PartialSources()
    sources.opened("p1", 0)
    sources.wrote("p1", A)
    sources.opened("p1", 1000)  # resumed by the next transfer: A's bytes are there
    assert sources.take("p1") == {A}
    sources.opened("p2", 500)  # bytes kept by an earlier run of the daemon
    sources.wrote("p2", B)
    assert sources.take("p2") is None  # nobody can be blamed for those
    assert sources.take("p3") == set()


def test_an_owner_counts_a_piece_as_nowhere_after_its_claimed_holders_failed_it() -> None:
    claims = Claims(blame_at([0.0]), ART, 3)
    counts = np.array([0, 4, 4])  # piece 0 claimed by nobody, 1 and 2 by four peers each
    for _ in range(ORIGIN_AFTER_FAILURES):
        claims.failed(1, A, "refused", "not here")
    assert claims.nowhere(counts).tolist() == [True, True, False]


def test_a_failing_sender_leaves_no_bytes_and_a_called_off_one_is_noted() -> None:
    sources = PartialSources()

    def send_half_then(exc: Exception) -> Callable[[BytesSink], None]:
        def fetch(sink: BytesSink) -> None:
            sink.write(memoryview(BODY[:1000]))
            raise exc

        return fetch

    failed = BytesSink()
    with pytest.raises(PeerFault):
        sources.guard("p", A, send_half_then(PeerFault("truncated", "reset")))(failed)
    assert failed.data == b"" and sources.take("p") == set()
    called_off = BytesSink()
    with pytest.raises(Aborted):
        sources.guard("p", B, send_half_then(Aborted("twin won")))(called_off)
    assert len(called_off.data) == 1000 and sources.take("p") == {B}


def fetch(address: tuple[str, int], call: PieceCall | None = None) -> None:
    lane = Lane(address, connect_timeout=1.0, idle_timeout=1.0)
    request = piece_request("cd" * 32, ART, "127.0.0.1:9", 0, False)
    lane.fetch(call or PieceCall(), request, BytesSink())


def failure(address: tuple[str, int], call: PieceCall | None = None) -> str:
    with pytest.raises(PeerFault) as caught:
        fetch(address, call)
    return caught.value.reason


def test_each_way_a_peer_fails_a_piece_is_named(peer: Peer) -> None:
    done = threading.Event()

    def refuse(conn: socket.socket) -> None:
        with conn:
            read_request(conn)
            conn.sendall(encode({"error": "piece cdcd is not held here", "kind": "NotFound"}))
            done.wait(10)

    def half_then_reset(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(encode({"size": len(BODY)}) + BODY[: len(BODY) // 2])
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        conn.close()

    def stall(conn: socket.socket) -> None:
        with conn:
            read_request(conn)
            conn.sendall(encode({"size": len(BODY)}) + BODY[:1000])
            done.wait(10)

    def trickle(conn: socket.socket) -> None:  # a byte every 0.2 s: never idle for 1 s
        with conn:
            read_request(conn)
            conn.sendall(encode({"size": len(BODY)}))
            while not done.wait(0.2):
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    try:
        assert failure(peer(refuse)) == "refused"
        assert failure(peer(half_then_reset)) == "truncated"
        assert failure(peer(stall)) == "stalled"
        slow = PieceCall(min_rate=64 * 1024)
        assert failure(peer(trickle), slow) == "slow"
        assert slow.got < 64 * 1024 * RATE_GRACE  # cut off soon after its grace ran out
    finally:
        done.set()
