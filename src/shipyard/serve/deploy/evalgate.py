"""The eval gate: a fixed item set scored on two versions, read from JSONL.

One item per line: {"prompt": str, "expected": str, "match": "exact" | "contains" (default
contains), "max_tokens": int (default 16)}. A completion passes when its text, stripped, equals
`expected` stripped (exact) or contains it (contains). Greedy decoding (temperature 0, a fixed
seed) makes a version's score a function of its weights, so the candidate and the current version
are compared on the same items.
"""

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from shipyard.errors import InvalidInput

MAX_ITEMS = 1000
MAX_ITEM_FILE = 4 << 20
MAX_TOKENS = 256


@dataclass(frozen=True)
class Item:
    prompt: str
    expected: str
    match: Literal["exact", "contains"] = "contains"
    max_tokens: int = 16


@dataclass(frozen=True)
class Score:
    passed: int
    total: int
    failed: tuple[int, ...]  # line numbers (1-based) of the items that failed

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 1.0


def load_items(path: Path) -> list[Item]:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_ITEM_FILE + 1)
    except OSError as exc:
        raise InvalidInput(f"eval items {path}: cannot read ({exc.strerror})") from None
    if len(raw) > MAX_ITEM_FILE:
        raise InvalidInput(f"eval items {path}: larger than {MAX_ITEM_FILE} bytes")
    return parse_items(raw, str(path))


def parse_items(raw: bytes, where: str = "eval items") -> list[Item]:
    """Items from JSONL bytes; a bad line is named by number. Only `InvalidInput` escapes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{where}: not UTF-8 (byte {exc.start})") from None
    items: list[Item] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(items) == MAX_ITEMS:
            raise InvalidInput(f"{where}: more than {MAX_ITEMS} items")
        items.append(_item(line, f"{where} line {number}"))
    if not items:
        raise InvalidInput(f"{where}: no items")
    return items


def _item(line: str, where: str) -> Item:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"{where}: not JSON ({exc})") from None
    allowed = ("prompt", "expected", "match", "max_tokens")
    if not isinstance(data, dict):
        raise InvalidInput(f"{where}: expected an object with {', '.join(allowed)}")
    unknown = [key for key in data if key not in allowed]
    if unknown:
        raise InvalidInput(f"{where}: unknown field {unknown[0]!r:.60}: allowed {allowed}")
    prompt, expected = data.get("prompt"), data.get("expected")
    if not isinstance(prompt, str) or not prompt or not isinstance(expected, str):
        raise InvalidInput(f"{where}: prompt (non-empty) and expected must be strings")
    match = data.get("match", "contains")
    if match not in ("exact", "contains"):
        raise InvalidInput(f"{where}: match {match!r:.60}: allowed exact, contains")
    max_tokens = data.get("max_tokens", 16)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise InvalidInput(f"{where}: max_tokens must be a whole number")
    if not 1 <= max_tokens <= MAX_TOKENS:
        raise InvalidInput(f"{where}: max_tokens {max_tokens}: allowed 1 to {MAX_TOKENS}")
    return Item(prompt, expected, match, max_tokens)


def passes(item: Item, text: str) -> bool:
    got, want = text.strip(), item.expected.strip()
    return got == want if item.match == "exact" else want in got


def score(items: Sequence[Item], complete: Callable[[Item], str]) -> Score:
    """Score `items` with `complete` (item -> completion text)."""
    failed = tuple(n for n, item in enumerate(items, 1) if not passes(item, complete(item)))
    return Score(len(items) - len(failed), len(items), failed)


def completion_request(item: Item, model: str) -> dict[str, Any]:
    """The OpenAI /v1/completions body that scores `item`: greedy, seeded."""
    return {
        "model": model,
        "prompt": item.prompt,
        "max_tokens": item.max_tokens,
        "temperature": 0,
        "seed": 0,
    }
