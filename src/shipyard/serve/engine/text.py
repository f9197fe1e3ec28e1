"""Token ids to text as they arrive: whole characters only, and stop strings cut off exactly.

Decoding the growing id list and sending the new suffix keeps multi-token characters whole (a
trailing U+FFFD means "wait for the next token"); while stop strings are set, the last few
characters are held back until they can no longer start one.
"""

from typing import Any

REPLACEMENT = "\ufffd"


class TextStream:
    def __init__(self, tokenizer: Any, stop: tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.ids: list[int] = []
        self.sent = 0  # characters of the decoded text already given out
        self.stopped = False
        self._hold = max((len(s) for s in stop), default=1) - 1

    def push(self, token_id: int, special: bool) -> str:
        """The new text after `token_id` (empty while a character or stop string is pending)."""
        if self.stopped:
            return ""
        if not special:
            self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        for stop in self.stop:
            at = text.find(stop, max(0, self.sent - len(stop)))
            if at >= 0:
                self.stopped = True
                return self._take(text[:at], len(text[:at]))
        if text.endswith(REPLACEMENT):
            return ""
        return self._take(text, len(text) - self._hold)

    def flush(self) -> str:
        """Whatever was held back, at the end of generation."""
        if self.stopped:
            return ""
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        return self._take(text, len(text))

    def _take(self, text: str, upto: int) -> str:
        if upto <= self.sent:
            return ""
        piece = text[self.sent : upto]
        self.sent = upto
        return piece
