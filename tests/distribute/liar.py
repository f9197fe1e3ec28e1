"""A lying peer, for tests and `benchmarks/fanout.py --liar`: a real daemon (it gossips, serves
manifests and is a member like any other) that claims every piece of every artifact whose
manifest is in its store, and answers piece requests in one of four bad ways:

- `notfound`: "not held here", for every piece it claimed;
- `halfreset`: half the piece as random bytes, then a connection reset;
- `flip`: the real piece (its store must hold it) with one byte flipped;
- `slow`: the piece's bytes at one byte a second.

    python tests/distribute/liar.py MODE --listen HOST:PORT --store DIR [--seeds A,B]
"""

import argparse
import asyncio
import os
import socket
import struct
import sys
from typing import Any

from shipyard.distribute.config import DaemonConfig, parse_address
from shipyard.distribute.daemon import PeerDaemon
from shipyard.distribute.server import Server
from shipyard.distribute.wire import Header, encode
from shipyard.errors import NotFound
from shipyard.store.pieces import piece_key

MODES = ("notfound", "halfreset", "flip", "slow")


class Liar(PeerDaemon):
    async def start(self) -> None:
        await super().start()
        for holding in self.holdings.values():  # claims all, and wants all: a mesh member
            holding.held, holding.full = (1 << len(holding.hashes)) - 1, True
        self.ctx.membership.beat(self._haves())

    def size(self, piece_hash: str) -> int:
        for holding in self.holdings.values():
            if piece_hash in holding.sizes:
                return holding.sizes[piece_hash]
        raise NotFound(f"piece {piece_hash[:16]} is not held here")


def lying_piece(liar: Liar, mode: str) -> Any:
    async def piece(server: Server, request: Header, writer: asyncio.StreamWriter) -> None:
        piece_hash: str = request["hash"]
        size = liar.size(piece_hash)
        if mode == "notfound":
            raise NotFound(f"piece {piece_hash[:16]} is not held here")
        offset: int = request.get("offset", 0)
        header = encode({"size": size - offset} | ({"offset": offset} if offset else {}))
        if mode == "flip":
            data = bytearray(server.ctx.store.backend.get(piece_key(piece_hash)))
            data[len(data) // 2] ^= 0xFF
            writer.write(header + bytes(data[offset:]))
        elif mode == "halfreset":
            writer.write(header + os.urandom((size - offset) // 2))
            while writer.transport.get_write_buffer_size():
                await asyncio.sleep(0.01)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # with no linger: a reset, not a clean close
            raise ConnectionResetError("the liar reset the connection")
        else:  # slow
            writer.write(header)
            for _ in range(size - offset):
                writer.write(b"\0")
                await writer.drain()
                await asyncio.sleep(1.0)

    return piece


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--seeds", default="")
    parser.add_argument("--members-uri")
    args = parser.parse_args()
    config = DaemonConfig(
        listen=parse_address(args.listen),
        store=args.store,
        seeds=tuple(parse_address(s) for s in args.seeds.split(",") if s),
        fsync=False,
        members_uri=args.members_uri,
    )

    async def run() -> None:
        liar = Liar(config)
        Server._piece = lying_piece(liar, args.mode)  # type: ignore[method-assign]
        await liar.start()
        print(f"peer {config.me} listening (liar: {args.mode})", file=sys.stderr, flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
