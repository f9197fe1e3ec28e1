"""An optional shared secret that lets a swarm refuse strangers (`peer serve --swarm-key-file`).

With a key, every framed message, requests and replies alike, carries its sender's wall-clock
time (`ts`, milliseconds) and a random `nonce` in its JSON header, and ends with the 32-byte
HMAC-SHA256 of the header bytes under the key. A receiver checks the MAC before it parses a byte
of the header, then refuses a message more than `WINDOW_MS` off its own clock, or one whose
nonce it has already seen in that window: a recorded message cannot be played again. Piece bytes
carry no MAC: the manifest's SHA-256 of each piece already vouches for them.

The key authenticates members, it does not hide anything: headers and pieces travel in clear.
"""

import hashlib
import heapq
import hmac
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput

MAC_SIZE = 32
MIN_KEY_BYTES = 16
WINDOW_MS = 60_000  # clocks of one swarm agree this well (NTP); a replay older is refused
# Nonces remembered at most (a few MiB). When more arrive within the window, the oldest are
# dropped and messages no newer than them are refused from then on: replays stay refused.
MAX_NONCES = 1 << 16


class SwarmKeyRefused(InvalidInput):
    """A message without this swarm's MAC, with a wrong one, stale, or played again."""


class SwarmKey:
    """The secret and the nonces seen lately; shared by the event loop and transfer threads."""

    def __init__(
        self, secret: bytes, wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000
    ) -> None:
        if len(secret) < MIN_KEY_BYTES:
            raise InvalidInput(f"a swarm key needs at least {MIN_KEY_BYTES} bytes")
        self._secret = secret
        self._wall_ms = wall_ms
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._expiry: list[tuple[int, str]] = []  # (ts, nonce), oldest first
        self._floor = -1  # messages stamped at or before this are refused (see MAX_NONCES)

    @classmethod
    def load(cls, path: Path) -> "SwarmKey":
        """The key in `path` (surrounding whitespace ignored), which only its owner may read."""
        try:
            with open(path, "rb") as handle:
                mode = os.fstat(handle.fileno()).st_mode
                secret = handle.read(4096).strip()
        except OSError as exc:
            raise InvalidInput(f"swarm key file {path}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(mode):
            raise InvalidInput(f"swarm key file {path} is not a regular file")
        if mode & 0o077:
            raise InvalidInput(
                f"swarm key file {path} is open to other users (mode {stat.S_IMODE(mode):04o}): "
                "chmod 600 it"
            )
        try:
            return cls(secret)
        except InvalidInput as exc:
            raise InvalidInput(f"swarm key file {path}: {exc}") from None

    def stamp(self) -> dict[str, Any]:
        """The time and a fresh nonce for an outgoing message. Its own nonce is remembered too,
        so a message reflected back to its sender is refused as a replay."""
        ts, nonce = self._wall_ms(), secrets.token_hex(12)
        with self._lock:
            self._remember(ts, nonce)
        return {"ts": ts, "nonce": nonce}

    def sign(self, data: bytes) -> bytes:
        return hmac.new(self._secret, data, hashlib.sha256).digest()

    def verify(self, data: bytes, mac: bytes) -> None:
        if not hmac.compare_digest(self.sign(data), mac):
            raise SwarmKeyRefused("no valid MAC under the swarm key (see --swarm-key-file)")

    def check_fresh(self, header: dict[str, Any]) -> None:
        """Take `ts` and `nonce` out of a verified header; refuse it when stale or replayed."""
        ts, nonce = header.pop("ts", None), header.pop("nonce", None)
        if not isinstance(ts, int) or isinstance(ts, bool) or not isinstance(nonce, str):
            raise SwarmKeyRefused("signed message lacks its 'ts' and 'nonce'")
        if len(nonce) > 64:
            raise SwarmKeyRefused("signed message has a nonce over 64 characters")
        skew = ts - self._wall_ms()
        if abs(skew) > WINDOW_MS:
            raise SwarmKeyRefused(
                f"signed message is {skew / 1000:+.0f} s off this host's clock "
                f"(at most {WINDOW_MS // 1000} s): a replay, or clocks out of sync"
            )
        with self._lock:
            if ts <= self._floor or nonce in self._seen:
                raise SwarmKeyRefused("signed message was already received: a replay")
            self._remember(ts, nonce)

    def _remember(self, ts: int, nonce: str) -> None:
        """Note a nonce (the caller holds the lock), dropping those past the window."""
        self._seen.add(nonce)
        heapq.heappush(self._expiry, (ts, nonce))
        horizon = self._wall_ms() - WINDOW_MS
        while self._expiry and (self._expiry[0][0] < horizon or len(self._seen) > MAX_NONCES):
            old_ts, old = heapq.heappop(self._expiry)
            self._seen.discard(old)
            if old_ts >= horizon:
                self._floor = max(self._floor, old_ts)
