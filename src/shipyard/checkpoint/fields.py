"""Strict JSON for manifests read back: no NaN or Infinity, bounded nesting, typed field checks.

Every refusal is an `InvalidInput` naming the source (`where`) and the field, never a traceback.
"""

import json
from typing import Any, NoReturn

from shipyard.errors import InvalidInput

MAX_INT = 1 << 56  # default upper bound of an integer field: sizes stay exact, far beyond any run


def decode(raw: bytes, where: str) -> Any:
    def refuse(constant: str) -> NoReturn:
        raise ValueError(f"{constant} is not a number a manifest may hold")

    try:
        return json.loads(raw, parse_constant=refuse)
    except RecursionError:
        raise InvalidInput(f"{where}: JSON nested too deeply to be a checkpoint manifest") from None
    except ValueError as exc:  # also bad UTF-8 and integers of more digits than Python parses
        raise InvalidInput(f"{where}: not a JSON checkpoint manifest ({exc})") from None


class Fields:
    """Type and range checks that name the manifest and the field they refuse."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, name: str, problem: str) -> NoReturn:
        raise InvalidInput(f"{self.where}: field {name}: {problem}")

    def get(self, obj: dict[str, Any], key: str, name: str) -> Any:
        if key not in obj:
            self.fail(f"{name}.{key}" if name else key, "is missing")
        return obj[key]

    def obj(self, value: Any, name: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(name, f"expected an object, got {kind_of(value)}")
        return value

    def items(self, value: Any, name: str, length: int | None = None) -> list[Any]:
        if not isinstance(value, list):
            self.fail(name, f"expected a list, got {kind_of(value)}")
        if length is not None and len(value) != length:
            self.fail(name, f"expected {length} items, got {len(value)}")
        return value

    def integer(self, value: Any, name: str, low: int = 0, high: int = MAX_INT) -> int:
        if type(value) is not int:  # bool is an int to Python, not to a manifest
            self.fail(name, f"expected an integer, got {kind_of(value)}")
        if not low <= value <= high:
            self.fail(name, f"{value} is outside [{low}, {high}]")
        return value

    def text(self, value: Any, name: str) -> str:
        if not isinstance(value, str):
            self.fail(name, f"expected a string, got {kind_of(value)}")
        return value

    def optional_text(self, value: Any, name: str) -> str | None:
        return None if value is None else self.text(value, name)


def kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__
