"""`have` news: one notice out per downstream peer, later news merged into the next."""

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.context import Context
from shipyard.distribute.membership import Membership, decode_bits
from shipyard.distribute.news import HaveNews
from shipyard.distribute.wire import encode, read_header
from shipyard.store import LocalBackend, PieceStore

ANSWER_AFTER = 0.3  # seconds the peer below takes to answer each notice


async def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def _tell_in_bursts(tmp_path: Path) -> list[int]:
    """A real peer on loopback that answers each notice slowly; a burst of five pieces, then,
    while the first notice is out, three more. Returns the have-maps the peer received."""
    received: list[int] = []

    async def slow_peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not reader.at_eof():
            try:
                header = await read_header(reader, 10.0)
            except asyncio.IncompleteReadError:
                break
            received.append(decode_bits(header["have"]))
            await asyncio.sleep(ANSWER_AFTER)
            writer.write(encode({"ok": True}))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(slow_peer, "127.0.0.1", 0)
    peer = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    config = DaemonConfig(listen=("127.0.0.1", 7000), store=str(tmp_path / "store"))
    store = PieceStore(LocalBackend(tmp_path / "store"))
    ctx = Context(config, store, Membership(config.me, [], config.dead_after), None)
    held = 0
    news = HaveNews(ctx, "a", lambda: held)
    try:
        for piece in range(5):
            held |= 1 << piece
            news.tell([peer])
        await _wait_for(lambda: len(received) == 1)
        for piece in range(5, 8):
            held |= 1 << piece
            news.tell([peer])
        await _wait_for(lambda: not news.tasks)
    finally:
        ctx.close()
        server.close()
        await server.wait_closed()
    return received


def test_a_burst_of_news_costs_one_notice_and_news_while_it_is_out_one_more(tmp_path: Path):
    # The first notice leaves once the burst is over, carrying all five pieces; the three that
    # come while it is out go together in the second, with the whole have-map as it is then.
    assert asyncio.run(_tell_in_bursts(tmp_path)) == [0b11111, 0b11111111]
