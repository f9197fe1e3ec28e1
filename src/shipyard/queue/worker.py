"""`shipyard queue worker QUEUE -- CMD`: claim an item, run CMD on it, commit its output.

The payload reaches CMD as JSON on stdin (or in `$SHIPYARD_PAYLOAD`), with the item's id, key
and attempt in `$SHIPYARD_ITEM_ID`, `$SHIPYARD_ITEM_KEY` and `$SHIPYARD_ITEM_ATTEMPT`, and the
lease's fencing token in `$SHIPYARD_LEASE_TOKEN`: it grows with every lease of the item, so an
idempotent CMD that remembers the newest token it saw per key can refuse a stale attempt's work.
While CMD runs the worker heartbeats its lease. CMD runs in a process group of its own that dies
with the worker (`shipyard.children`), and is killed when the lease is lost or runs out unrenewed;
nothing CMD started outlives its item. Exit 0 completes the item with CMD's stdout as the result
(the JSON value it printed, else the text), in the same transaction that ends the lease; any
other exit fails it with the last line of CMD's stderr as the reason. CMD's stderr is copied to
the worker's once CMD ends.

SIGTERM (or SIGINT) stops the worker gracefully: a running CMD gets `grace` seconds to finish
and its item is completed as usual; after that CMD is terminated and its item released for
another worker. When the database is unreachable the worker says so and retries with backoff;
a finished item's result is kept and retried for as long as its lease could still accept it.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import IO, Any, Literal, TypeVar

from shipyard import children
from shipyard.db import DatabaseUnavailable
from shipyard.errors import InvalidInput
from shipyard.queue.core import Queue
from shipyard.queue.model import MAX_JSON_BYTES, Item, StaleLease, check_seconds

T = TypeVar("T")
_MAX_BACKOFF_S = 30.0
_KILL_AFTER_S = 5.0  # a terminated command that ignores SIGTERM this long is killed


@dataclass(frozen=True)
class WorkerConfig:
    queue: str
    command: Sequence[str]
    lease: float = 60.0
    payload_via: Literal["stdin", "env"] = "stdin"
    max_items: int | None = None  # stop after this many items (None: run until stopped)
    until_empty: bool = False  # stop when nothing is claimable
    grace: float = 30.0  # after SIGTERM, how long a running command may still finish
    idle_poll: float = 1.0  # longest sleep between claims of an empty queue

    def __post_init__(self) -> None:
        if not self.command:
            raise InvalidInput("queue worker: a command is required after --")
        check_seconds(self.lease, "lease", positive=True)
        check_seconds(self.grace, "grace", positive=False)


class Worker:
    def __init__(
        self,
        open_queue: Callable[[], Queue],
        config: WorkerConfig,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.open_queue = open_queue
        self.config = config
        self.log = log or (lambda text: print(f"queue worker: {text}", file=sys.stderr))
        self.stopping = threading.Event()
        self.stopped_at = 0.0
        self.done = 0
        self.lease_until = 0.0  # (monotonic) when the current item's lease runs out

    def stop(self, *_: Any) -> None:
        if not self.stopping.is_set():
            self.stopped_at = time.monotonic()
            self.stopping.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run(self) -> int:
        """Work items until stopped (or `max_items`, or an empty queue with `until_empty`);
        return how many were completed."""
        cfg, idle = self.config, 0.05
        queue = self._retry(self.open_queue, "connect", self._going)
        if queue is None:
            return 0
        self.queue = queue
        while self._going() and (cfg.max_items is None or self.done < cfg.max_items):
            items = self._retry(lambda: queue.claim(cfg.queue, 1, cfg.lease), "claim", self._going)
            if items is None:
                break
            if items:
                idle = 0.05
                self._work(items[0])
                continue
            if cfg.until_empty:
                break
            self._retry(partial(queue.wait, cfg.queue, idle), "wait", self._going)
            idle = min(idle * 2, cfg.idle_poll)
        return self.done

    def _going(self) -> bool:
        return not self.stopping.is_set()

    def _retry(self, call: Callable[[], T], what: str, keep_trying: Callable[[], bool]) -> T | None:
        """`call()`, retried with backoff while the database is unreachable and `keep_trying()`;
        None if it gave up. A stop cuts short only the sleeps of retries that a stop ends."""
        delay = 0.5
        while True:
            try:
                return call()
            except DatabaseUnavailable as exc:
                if not keep_trying():
                    self.log(f"{what}: {exc}; giving up")
                    return None
                self.log(f"{what}: {exc}; retrying in {delay:.1f} s")
                if keep_trying == self._going:
                    self.stopping.wait(delay)
                else:
                    time.sleep(delay)
                delay = min(delay * 2, _MAX_BACKOFF_S)

    # One item

    def _work(self, item: Item) -> None:
        self.lease_until = time.monotonic() + self.config.lease
        with (
            tempfile.TemporaryFile() as stdin,
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
        ):
            payload = json.dumps(item.payload)
            env = os.environ | {
                "SHIPYARD_QUEUE": item.queue,
                "SHIPYARD_ITEM_ID": str(item.id),
                "SHIPYARD_ITEM_KEY": item.key,
                "SHIPYARD_ITEM_ATTEMPT": str(item.attempt),
                "SHIPYARD_LEASE_TOKEN": str(item.token),
            }
            if self.config.payload_via == "env":
                env["SHIPYARD_PAYLOAD"] = payload
            else:
                stdin.write(payload.encode())
                stdin.seek(0)
            try:
                proc = children.spawn(
                    self.config.command, stdin=stdin, stdout=out, stderr=err, env=env
                )
            except OSError as exc:  # the worker's fault, not the item's: give it back and stop
                why = f"cannot start {self.config.command[0]!r}: {exc.strerror}"
                self._end(item, "release", lambda q: q.release(item.id, item.token, why))
                raise InvalidInput(f"queue worker: {why}") from None
            try:
                outcome = self._watch(item, proc)
            finally:
                children.reap(proc)  # its leftovers, or all of it if the worker is failing
            reason = _last_line(err)
            err.seek(0)
            shutil.copyfileobj(err, sys.stderr.buffer)  # CMD's own log, after the fact
            sys.stderr.flush()
            if outcome == "lost":
                self.log(f"item {item.id}: lease lost while running; its result is discarded")
            elif outcome == "stopped":
                self._release(item)
            elif proc.returncode == 0:
                self._complete(item, out)
            else:
                code = proc.returncode
                why = f"killed by signal {-code}" if code < 0 else f"exit {code}"
                self._fail(item, f"{why}: {reason}" if reason else why)

    def _watch(self, item: Item, proc: "subprocess.Popen[bytes]") -> str:
        """Wait for the command, heartbeating; 'exited', 'lost' (lease gone) or 'stopped'."""
        beat = self.config.lease / 3
        next_beat = time.monotonic() + beat
        while True:
            wake = min(next_beat, self.lease_until)
            if self.stopping.is_set():
                give_up = self.stopped_at + self.config.grace
                if time.monotonic() >= give_up:
                    children.stop(proc, _KILL_AFTER_S)
                    return "stopped"
                wake = min(wake, give_up)
            try:
                proc.wait(timeout=max(wake - time.monotonic(), 0.01))
                return "exited"
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= self.lease_until:  # unrenewed (an outage): another may run it
                self.log(f"item {item.id}: its lease ran out before a heartbeat got through")
                children.stop(proc, _KILL_AFTER_S)
                return "lost"
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + beat
            try:
                sent = time.monotonic()
                self.queue.heartbeat(item.id, item.token, self.config.lease)
                self.lease_until = sent + self.config.lease
            except StaleLease as exc:
                self.log(str(exc))
                children.stop(proc, _KILL_AFTER_S)
                return "lost"
            except DatabaseUnavailable as exc:
                self.log(f"heartbeat of item {item.id}: {exc}; trying again in {beat:.0f} s")

    def _complete(self, item: Item, out: IO[bytes]) -> None:
        out.seek(0)
        data = out.read(MAX_JSON_BYTES + 1)
        if len(data) > MAX_JSON_BYTES:
            self._fail(item, f"output is over {MAX_JSON_BYTES} bytes: store it as an artifact")
            return
        text = data.decode(errors="replace")
        try:
            result: Any = json.loads(text)
        except ValueError:
            result = text
        if self._end(item, "complete", lambda q: q.complete(item.id, item.token, result)):
            self.done += 1

    def _fail(self, item: Item, reason: str) -> None:
        if self._end(item, "fail", lambda q: q.fail(item.id, item.token, reason)):
            self.log(f"item {item.id} failed: {reason}")

    def _release(self, item: Item) -> None:
        if self._end(item, "release", lambda q: q.release(item.id, item.token, "worker stopped")):
            self.log(f"item {item.id} released: the worker is stopping")

    def _end(self, item: Item, what: str, call: Callable[[Queue], object]) -> bool:
        """End the item's lease, retrying through outages while the lease could still take it."""
        try:
            ended = self._retry(
                lambda: call(self.queue) or True,
                f"{what} item {item.id}",
                lambda: time.monotonic() < self.lease_until,
            )
        except StaleLease as exc:
            self.log(f"{exc} (the {what} is dropped)")
            return False
        return ended is not None


def _last_line(stream: IO[bytes]) -> str:
    stream.seek(0, os.SEEK_END)
    stream.seek(max(0, stream.tell() - 4096))
    tail = stream.read().decode(errors="replace").strip().splitlines()
    return tail[-1].strip() if tail else ""
