"""The text of an OpenAI-compatible answer, whole or streamed, for the mirrored-traffic log."""

import json
from typing import Any

from shipyard.serve.router.stats import MAX_TEXT


def choice_text(body: Any) -> str:
    """The first choice's text (completions) or message/delta content (chat); '' if none."""
    if not isinstance(body, dict):
        return ""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    first = choices[0]
    for holder in (first, first.get("message"), first.get("delta")):
        if not isinstance(holder, dict):
            continue
        text = holder.get("text") if holder is first else holder.get("content")
        if isinstance(text, str):
            return text
    return ""


def answer_text(raw: bytes) -> str:
    """The text of a whole (unstreamed) JSON answer."""
    try:
        return choice_text(json.loads(raw))[:MAX_TEXT]
    except (ValueError, RecursionError):
        return ""


class StreamText:
    """Collects the text of an SSE stream fed in arbitrary chunks (at most MAX_TEXT chars)."""

    def __init__(self) -> None:
        self._pending = b""
        self._parts: list[str] = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        if self._size >= MAX_TEXT:
            return
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        if len(self._pending) > MAX_TEXT:  # one line longer than we would keep: drop it
            self._pending = b""
        for line in lines:
            if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                continue
            try:
                text = choice_text(json.loads(line[5:]))
            except (ValueError, RecursionError):
                continue
            self._parts.append(text)
            self._size += len(text)

    def text(self) -> str:
        return "".join(self._parts)[:MAX_TEXT]
