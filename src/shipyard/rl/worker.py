"""Rollout workers: processes that continue trajectories with the policy version they are sent.

Each worker holds a serving engine (`shipyard.serve.engine`) over its copy of the policy. A
dispatch names a weight version (and where to load it), the rows to continue and a token budget;
the worker loads the version into the engine's model if it does not serve it yet (between
dispatches, so no request is in flight), lets the engine decode, and answers with each row's new
tokens, the engine's log-probs of them, whether it finished, the version it served and how long
the load and the decoding took. It keeps no rollout state between dispatches: the buffer does.
"""

import contextlib
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import torch

from shipyard.children import die_with_parent
from shipyard.rl import weights
from shipyard.rl.config import RLConfig
from shipyard.rl.policy import build
from shipyard.rl.rollout import continue_rows, engine, segment_seed
from shipyard.serve.engine import Engine


def _serve(conn: Connection, cfg: RLConfig, index: int, parent: int) -> None:
    die_with_parent(parent)
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    model = build(cfg.model, cfg.seed)
    runner = engine(model, cfg.rollout.group_size)
    try:
        _loop(conn, cfg, index, model, runner)
    finally:
        runner.stop()


def _loop(
    conn: Connection, cfg: RLConfig, index: int, model: torch.nn.Module, runner: Engine
) -> None:
    version = -1
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        sync_s = 0.0
        if message["version"] != version:
            start = time.perf_counter()
            weights.load(model, message["ref"])  # the engine is idle: the last call drained it
            version = message["version"]
            sync_s = time.perf_counter() - start
        rows, generated = message["rows"], message["generated"]
        seeds = [
            segment_seed(cfg.seed, u, g) for u, g in zip(message["uids"], generated, strict=True)
        ]
        start, cpu = time.perf_counter(), time.process_time()
        steps = continue_rows(
            runner,
            rows,
            generated,
            seeds,
            max_new=cfg.rollout.max_new_tokens,
            budget=cfg.rollout.token_budget,
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p,
        )
        if cfg.rollout.step_latency_s:  # one batched decode step per token of the longest row
            time.sleep(cfg.rollout.step_latency_s * max(len(s.tokens) for s in steps))
        reply = {
            "dispatch": message["dispatch"],
            "worker": index,
            "version": version,
            "sync_s": sync_s,
            "gen_s": time.perf_counter() - start,
            "gen_cpu_s": time.process_time() - cpu,
            "items": [
                (uid, s.tokens, s.logprobs, s.finished)
                for uid, s in zip(message["uids"], steps, strict=True)
            ],
        }
        try:
            conn.send(reply)
        except OSError:
            return


@dataclass
class WorkerHandle:
    """The controller's side of one worker: its process, pipe, dispatches and counters."""

    index: int
    cfg: RLConfig
    process: Any = None
    conn: Connection | None = None
    inflight: list[int] = field(default_factory=list)  # dispatch ids, oldest first
    version: int = -1  # the version it last reported serving
    busy_s: float = 0.0
    sync_s: float = 0.0
    tokens: int = 0
    restarts: int = 0
    started_at: float = 0.0

    def start(self) -> None:
        context = multiprocessing.get_context("fork")
        parent, child = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(child, self.cfg, self.index, os.getpid()),
            name=f"rl-worker-{self.index}",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.conn = parent
        self.version = -1
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def send(self, message: dict[str, Any]) -> bool:
        assert self.conn is not None
        try:
            self.conn.send(message)
        except OSError:
            return False
        self.inflight.append(message["dispatch"])
        return True

    def receive(self) -> tuple[list[dict[str, Any]], bool]:
        """Every reply waiting, and whether the pipe has closed (the worker is gone)."""
        assert self.conn is not None
        out = []
        try:
            while self.conn.poll():
                out.append(self.conn.recv())
        except (EOFError, OSError):
            return out, True
        return out, False

    def restart(self) -> list[int]:
        """After a death: the dispatches it never answered, then a fresh process."""
        lost, self.inflight = self.inflight, []
        if self.conn is not None:
            self.conn.close()
        if self.process.is_alive():  # its pipe broke but it lingers: it cannot be trusted
            self.process.kill()
        self.process.join()
        self.restarts += 1
        self.start()
        return lost

    def stop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.conn.close()
        if self.process is not None:
            self.process.join(timeout=5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
