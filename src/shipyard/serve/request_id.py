"""Request ids: what ties a served answer to the request log and to the model that produced it.

A client may name its request with `X-Request-Id`; an id that is not 1 to 128 of
`A-Z a-z 0-9 . _ -` (starting with a letter or digit) is hostile or broken and is replaced, not
refused, so a bad header never costs a client its answer and never reaches a log or a page.
"""

import re
import uuid
from collections.abc import Mapping

from shipyard.errors import InvalidInput

HEADER = "x-request-id"
MAX_LENGTH = 128
_WELL_FORMED = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_LENGTH - 1}}}", re.ASCII)


def well_formed(value: object) -> bool:
    return isinstance(value, str) and _WELL_FORMED.fullmatch(value) is not None


def new_request_id() -> str:
    return uuid.uuid4().hex


def request_id(headers: Mapping[str, str]) -> str:
    """The client's `X-Request-Id` when it is well formed, else a fresh id."""
    value = headers.get(HEADER)
    return value if value is not None and well_formed(value) else new_request_id()


def check_request_id(value: str, where: str = "request id") -> str:
    """`value` if well formed, else InvalidInput naming `where` (for ids typed by a person)."""
    if not well_formed(value):
        raise InvalidInput(
            f"{where}: expected 1 to {MAX_LENGTH} of A-Z a-z 0-9 . _ - "
            f"(starting with a letter or digit), got {value[:60]!r}"
        )
    return value
