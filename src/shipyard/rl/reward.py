"""The reward service: a process of its own scoring trajectories on a pool of threads.

`RewardService.submit(uid, env, completion, entry)` sends a request; `poll()` returns what came
back. The parent keeps every request until its answer arrives, so when the service process dies
(killed, crashed) it is restarted and the outstanding requests are sent again; an answer for a
request no longer outstanding is dropped, so nothing is scored twice. A request with no answer
after `timeout_s` comes back as an error: errors are quarantined by the caller, never a 0.
"""

import contextlib
import multiprocessing
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from shipyard.children import die_with_parent
from shipyard.rl import verifiers


@dataclass(frozen=True)
class Scored:
    uid: str
    env: str
    reward: float | None  # None: not scored, see `error`
    meta: dict[str, Any]
    error: str | None


def _serve(conn: Connection, threads: int, sandbox: str, parent: int) -> None:
    die_with_parent(parent)
    os.environ["OMP_NUM_THREADS"] = "1"
    pool = ThreadPoolExecutor(threads, thread_name_prefix="reward")

    def run(uid: str, env: str, completion: str, entry: dict[str, Any]) -> None:
        reply: tuple[str, float | None, dict[str, Any], str | None]
        try:
            reward, meta = verifiers.score(env, completion, entry, sandbox)
            reply = (uid, float(reward), meta, None)
        except Exception as exc:  # any verifier failure is an error to count, not a score
            reply = (uid, None, {}, f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(OSError):  # the parent is gone
            conn.send(reply)

    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            break
        if request is None:
            break
        pool.submit(run, *request)
    pool.shutdown(wait=True)


@dataclass
class RewardService:
    threads: int = 2
    timeout_s: float = 10.0
    sandbox: str = "local"  # where code verifiers run: "local" or "service"
    restarts: int = 0
    busy_s: float = 0.0  # summed scoring latency, for the pool's idle time
    outstanding: dict[str, tuple[tuple[str, str, str, dict[str, Any]], float]] = field(
        default_factory=dict
    )
    _conn: Connection | None = None
    _process: Any = None

    def start(self) -> None:
        context = multiprocessing.get_context("fork")
        parent, child = context.Pipe()
        self._process = context.Process(
            target=_serve,
            args=(child, self.threads, self.sandbox, os.getpid()),
            name="rl-reward",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._conn = parent
        for request, _ in self.outstanding.values():
            self._conn.send(request)

    @property
    def pid(self) -> int:
        return int(self._process.pid)

    @property
    def connection(self) -> Connection | None:
        return self._conn

    def submit(self, uid: str, env: str, completion: str, entry: dict[str, Any]) -> None:
        request = (uid, env, completion, entry)
        self.outstanding[uid] = (request, time.monotonic())
        assert self._conn is not None
        # If it is dead, `poll` restarts it and sends every outstanding request again.
        with contextlib.suppress(OSError):
            self._conn.send(request)

    def poll(self) -> list[Scored]:
        # Past its deadline first: an answer that comes later is dropped, as one that never does.
        out: list[Scored] = []
        now = time.monotonic()
        for uid, (request, since) in list(self.outstanding.items()):
            if now - since > self.timeout_s:
                del self.outstanding[uid]
                out.append(Scored(uid, request[1], None, {}, f"timeout after {self.timeout_s}s"))
        assert self._conn is not None
        try:
            while self._conn.poll():
                uid, reward, meta, error = self._conn.recv()
                pending = self.outstanding.pop(uid, None)
                if pending is None:
                    continue  # answered already (sent twice across a restart) or timed out
                self.busy_s += time.monotonic() - pending[1]
                out.append(Scored(uid, pending[0][1], reward, meta, error))
        except (EOFError, OSError):
            pass  # the service died mid-answer: restarted below, its requests time out above
        if not self._process.is_alive():
            self.restarts += 1
            self._conn.close()
            self._process.join()
            self.start()
        return out

    def stop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send(None)
            self._conn.close()
        if self._process is not None:
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
