"""What the queue hands out and reports, and the checks every outside value passes first."""

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from shipyard.errors import Conflict, InvalidInput

QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
MAX_JSON_BYTES = 1 << 20  # a payload or result; bulk data belongs in the store, by artifact id
MAX_KEY_LEN = 200
MAX_CLAIM = 1000
MAX_LEASE_S = 7 * 24 * 3600.0
MAX_ATTEMPTS = 1000
MAX_REASON_CHARS = 2000
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
STATES = ("ready", "leased", "done", "dead")


class StaleLease(Conflict):
    """A heartbeat, completion, failure or release under a lease the item no longer has."""


@dataclass(frozen=True)
class Item:
    """A claimed item: do the work, then complete or fail it with `token`."""

    id: int
    queue: str
    key: str
    payload: Any
    priority: int
    attempt: int  # 1 for the first claim
    max_attempts: int
    token: int  # the fencing token of this lease
    lease_expires: float


@dataclass(frozen=True)
class Attempt:
    attempt: int
    token: int
    owner: str
    claimed_at: float
    ended_at: float | None
    outcome: str | None  # None while leased; completed, failed, released or expired
    reason: str | None


@dataclass(frozen=True)
class ItemRecord:
    id: int
    queue: str
    key: str
    payload: Any
    priority: int
    state: str
    attempts: int
    max_attempts: int
    not_before: float
    lease_owner: str | None
    lease_expires: float | None
    result: Any
    enqueued_at: float
    finished_at: float | None
    history: tuple[Attempt, ...] = ()


@dataclass(frozen=True)
class QueueStats:
    queue: str
    ready: int  # claimable now
    waiting: int  # ready but not before a later time
    leased: int
    done: int
    dead: int
    oldest_ready_age: float  # seconds the longest-waiting claimable item has waited; 0 if none
    claims: int
    completions: int


def check_queue_name(name: str) -> str:
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidInput(
            f"queue name {name!r}: use 1-100 letters, digits or '_.:-', starting with a letter "
            "or digit"
        )
    return name


def check_key(key: str) -> str:
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_LEN:
        raise InvalidInput(f"item key {key!r}: use 1-{MAX_KEY_LEN} characters")
    return key


def check_seconds(value: float, what: str, *, positive: bool) -> float:
    low = "greater than 0" if positive else "0 or more"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or (value <= 0 if positive else value < 0)
        or value > MAX_LEASE_S
    ):
        raise InvalidInput(f"{what} {value!r}: seconds must be {low} and at most {MAX_LEASE_S:g}")
    return float(value)


def check_int(value: int, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{what} {value!r}: must be a whole number from {low} to {high}")
    return value


def encode_json(value: Any, what: str) -> str:
    """Canonical JSON text of `value`, refused by name if it is not JSON or too big."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not JSON: {exc}") from None
    if len(text.encode()) > MAX_JSON_BYTES:
        raise InvalidInput(
            f"{what} is {len(text.encode())} bytes of JSON, over the {MAX_JSON_BYTES} limit: "
            "store bulk data as an artifact and pass its id"
        )
    return text


def parse_json(text: str, what: str) -> Any:
    """A value from JSON text from outside (a command line, a file, a command's output)."""

    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(text, parse_constant=refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"{what} is not JSON: {exc}") from None
