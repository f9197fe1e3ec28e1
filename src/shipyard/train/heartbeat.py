"""Heartbeats: each rank's progress, as small JSON datagrams to the controller over loopback UDP.

A rank sends one `step` beat when it finishes a step (step, step time, work time, data-wait time,
checkpoint stall, loss, grad norm), one `enter` beat when it enters a collective, and a `alive`
beat every `interval` seconds from a background thread, so a rank blocked inside a collective is
still seen alive. UDP because a beat must never block training, and a lost beat is harmless: the
next one carries the same state.
"""

import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Beat:
    rank: int
    attempt: int
    kind: str  # "step", "enter", "alive", "anomaly", "done", "ready"
    at: float
    pid: int = 0
    step: int = 0  # steps completed (the next step to run)
    collective: tuple[int, int] = (-1, -1)  # (step, index within the step) last entered
    fields: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "rank": self.rank,
                "attempt": self.attempt,
                "kind": self.kind,
                "at": self.at,
                "pid": self.pid,
                "step": self.step,
                "collective": list(self.collective),
                "fields": self.fields,
            }
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> "Beat":
        data = json.loads(raw)
        data["collective"] = tuple(data["collective"])
        return cls(**data)


class Sender:
    """A rank's side: `send` now, and an `alive` repeat of the last state every `interval`."""

    def __init__(
        self, address: tuple[str, int], rank: int, attempt: int, pid: int, interval: float
    ) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._address = address
        self._last = Beat(rank, attempt, "alive", time.time(), pid)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._repeat, name="heartbeat", daemon=True)
        self._thread.start()

    def send(self, kind: str, **changes: Any) -> None:
        with self._lock:
            beat = self._last
            for name, value in changes.items():
                setattr(beat, name, value)
            beat.kind, beat.at = kind, time.time()
            raw = beat.encode()
        self._emit(raw)

    def _emit(self, raw: bytes) -> None:
        # No controller listening right now (it may be restarting): the next beat retries.
        with contextlib.suppress(OSError):
            self._sock.sendto(raw, self._address)

    def _repeat(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                self._last.kind, self._last.at = "alive", time.time()
                raw = self._last.encode()
            self._emit(raw)

    def close(self) -> None:
        self._stop.set()
        self._sock.close()


class Receiver:
    """The controller's side: a UDP socket on loopback; `drain` returns every beat waiting."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self._sock.bind((host, port))
        self._sock.setblocking(False)
        self.address: tuple[str, int] = self._sock.getsockname()

    def drain(self, wait: float = 0.0) -> list[Beat]:
        beats: list[Beat] = []
        if wait > 0:
            self._sock.settimeout(wait)
            try:
                beats.append(Beat.decode(self._sock.recv(65536)))
            except (TimeoutError, BlockingIOError):
                return beats
            finally:
                self._sock.setblocking(False)
        while True:
            try:
                beats.append(Beat.decode(self._sock.recv(65536)))
            except BlockingIOError:
                return beats

    def close(self) -> None:
        self._sock.close()
