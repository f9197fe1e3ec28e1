"""A few peer daemons on loopback inside this process: for `shipyard demo` and quick trials."""

import asyncio
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from shipyard.distribute.client import PullResult, pull
from shipyard.distribute.config import Address, DaemonConfig
from shipyard.distribute.daemon import PeerDaemon


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def local_swarm(count: int, origin: str | None, root: Path) -> Iterator[list[Address]]:
    """Run `count` daemons (stores under `root`) on one background event loop; yield addresses."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="shipyard-local-swarm", daemon=True)
    thread.start()
    daemons: list[PeerDaemon] = []
    try:
        addresses = [("127.0.0.1", _free_port()) for _ in range(count)]
        for i, address in enumerate(addresses):
            config = DaemonConfig(
                listen=address,
                store=str(root / f"peer-{i}"),
                seeds=tuple(addresses[:1]),
                origin=origin,
                fsync=False,
            )
            daemons.append(PeerDaemon(config))
            asyncio.run_coroutine_threadsafe(daemons[-1].start(), loop).result()
        yield addresses
    finally:
        for daemon in daemons:
            asyncio.run_coroutine_threadsafe(daemon.stop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def pull_to_local_peers(
    origin: str, artifact: str, root: Path, count: int = 3
) -> list[tuple[Address, PullResult]]:
    """Pull `artifact` from `origin` onto `count` fresh local peers at once; files land under
    `root/dest-N`. Returns each peer's address and what it fetched from where."""
    with local_swarm(count, origin, root) as addresses, ThreadPoolExecutor(count) as pool:
        futures = [
            pool.submit(pull, address, artifact, root / f"dest-{i}", None, None, 60.0)
            for i, address in enumerate(addresses)
        ]
        return [(a, f.result()) for a, f in zip(addresses, futures, strict=True)]
