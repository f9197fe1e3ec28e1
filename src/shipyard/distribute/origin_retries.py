"""Pieces the origin failed to give (missing there, bytes that do not match their hash, an HTTP or
storage error), each held back before it is asked for again.

Without this an owner asked again on every scheduling round, about twenty times a second, for a
piece the origin does not have. The wait doubles per failure of the same piece, from `FIRST_WAIT`
to `LONGEST_WAIT`: a passing fault (a throttled request, a restarting server) costs half a second,
and a lasting one a request every few seconds, while the last error is kept for `pull` to report.
"""

FIRST_WAIT = 0.5
LONGEST_WAIT = 8.0


class OriginRetries:
    """The origin's failures for one artifact on one peer."""

    def __init__(self) -> None:
        self.last_error: str | None = None  # until no failed piece is left
        self._failures: dict[int, int] = {}  # piece index -> failures in a row
        self._until: dict[int, float] = {}  # piece index -> not to be asked before

    def failed(self, index: int, reason: str, now: float) -> None:
        count = self._failures.get(index, 0) + 1
        self._failures[index] = count
        self._until[index] = now + min(LONGEST_WAIT, FIRST_WAIT * 2 ** (count - 1))
        self.last_error = reason

    def held(self, index: int) -> None:
        """The piece is here now, from wherever: its failures no longer matter."""
        self._failures.pop(index, None)
        self._until.pop(index, None)
        if not self._failures:
            self.last_error = None

    def waiting(self, now: float) -> list[int]:
        """The pieces not to ask the origin for yet."""
        return [index for index, until in self._until.items() if until > now]
