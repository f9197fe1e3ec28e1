"""OpenAI-compatible request bodies, checked field by field, and the reply shapes.

Every field a body carries is known and checked: a bad one is an `InvalidInput` naming it (the
replica answers 400 with `param` set to it). Fields OpenAI defines that this engine does not
implement are accepted only at their neutral value (`n: 1`, `presence_penalty: 0`, ...).
"""

import time
from dataclasses import dataclass
from typing import Any, Literal

from shipyard.errors import InvalidInput

MAX_TOKENS_LIMIT = 1 << 20
MAX_TOP_LOGPROBS = 5
ROLES = ("system", "user", "assistant", "tool", "developer")
_NEUTRAL = {"n": 1, "presence_penalty": 0, "frequency_penalty": 0, "echo": False, "best_of": 1}
_COMMON = {
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stream",
    "stop",
    "user",
    "stream_options",
    *_NEUTRAL,
}
_FIELDS = {
    "completion": _COMMON | {"prompt", "logprobs"},
    "chat": _COMMON | {"messages", "logprobs", "top_logprobs", "max_completion_tokens"},
}


class FieldError(InvalidInput):
    """A refused field: `status` is 400, or 404 for a `model` this replica does not serve."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.status = status


@dataclass(frozen=True)
class Call:
    kind: Literal["completion", "chat"]
    model: str
    prompt: str | list[int] | None
    messages: list[dict[str, str]] | None
    max_tokens: int | None
    temperature: float
    top_p: float
    seed: int | None
    stream: bool
    top_logprobs: int | None  # None: no logprobs
    stop: tuple[str, ...]


def parse(kind: Literal["completion", "chat"], body: Any) -> Call:
    if not isinstance(body, dict):
        raise FieldError("body", f"expected a JSON object, not {type(body).__name__}")
    for name in body:
        if name not in _FIELDS[kind]:
            raise FieldError(str(name)[:60], "unknown field")
    for name, neutral in _NEUTRAL.items():
        if name in body and body[name] is not None and body[name] != neutral:
            raise FieldError(name, f"only {neutral!r} is supported")
    model = body.get("model")
    if not isinstance(model, str) or not 0 < len(model) <= 256:
        raise FieldError("model", "required: a string of 1 to 256 characters")
    prompt, messages = None, None
    if kind == "completion":
        prompt = _prompt(body.get("prompt"))
        top = _opt_int(body, "logprobs", 0, MAX_TOP_LOGPROBS)
    else:
        messages = _messages(body.get("messages"))
        wanted = body.get("logprobs")
        if wanted is not None and not isinstance(wanted, bool):
            raise FieldError("logprobs", "expected true or false")
        top = _opt_int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
        if top is not None and not wanted:
            raise FieldError("top_logprobs", "needs logprobs: true")
        top = (top or 0) if wanted else None
    limit = _opt_int(body, "max_tokens", 1, MAX_TOKENS_LIMIT)
    if kind == "chat" and limit is None:
        limit = _opt_int(body, "max_completion_tokens", 1, MAX_TOKENS_LIMIT)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise FieldError("stream", "expected true or false")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise FieldError("user", "expected a string")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise FieldError("stream_options", "expected an object")
    return Call(
        kind,
        model,
        prompt,
        messages,
        limit,
        _number(body, "temperature", 0.0, 2.0, 1.0),
        _number(body, "top_p", 0.0, 1.0, 1.0, open_low=True),
        _opt_int(body, "seed", 0, (1 << 63) - 1),
        stream,
        top,
        _stop(body.get("stop")),
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _opt_int(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value) or not low <= value <= high:
        raise FieldError(name, f"expected an integer from {low} to {high}, not {_show(value)}")
    return int(value)


def _number(
    body: dict[str, Any], name: str, low: float, high: float, default: float, open_low: bool = False
) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise FieldError(name, f"expected a number, not {_show(value)}")
    if not (low < value if open_low else low <= value) or not value <= high:
        side = "above" if open_low else "from"
        raise FieldError(name, f"expected a number {side} {low} to {high}, not {_show(value)}")
    return float(value)


def _prompt(value: Any) -> str | list[int]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]
    if isinstance(value, str):
        if not value:
            raise FieldError("prompt", "must not be empty")
        return value
    if isinstance(value, list) and value and all(_is_int(t) and t >= 0 for t in value):
        return list(value)
    raise FieldError("prompt", "expected a non-empty string or a list of token ids")


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise FieldError("messages", "expected a non-empty list of {role, content} objects")
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise FieldError(where, "expected an object with role and content")
        role = message.get("role")
        if role not in ROLES:
            raise FieldError(f"{where}.role", f"expected one of {', '.join(ROLES)}")
        out.append({"role": str(role), "content": _content(message.get("content"), where)})
    return out


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # [{"type": "text", "text": ...}, ...]
        texts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise FieldError(f"{where}.content[{j}]", "only text parts are supported")
            if not isinstance(part.get("text"), str):
                raise FieldError(f"{where}.content[{j}].text", "expected a string")
            texts.append(part["text"])
        return "".join(texts)
    raise FieldError(f"{where}.content", "expected a string or a list of text parts")


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or len(value) > 4
        or not all(isinstance(s, str) and 0 < len(s) <= 256 for s in value)
    ):
        raise FieldError("stop", "expected a string or up to 4 non-empty strings")
    return tuple(value)


def _show(value: Any) -> str:
    return repr(value)[:40]


# Replies


def response_id(kind: str, request_id: str) -> str:
    """The answer's `id`: OpenAI's prefix and the request's id, so an answer names its request."""
    return f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{request_id}"


def usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def chunk(
    call: Call, rid: str, text: str | None, finish: str | None, **extra: Any
) -> dict[str, Any]:
    """One streamed chunk (also the body of a non-streamed reply, with `text` whole)."""
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if call.kind == "chat":
        choice["delta"] = {} if text is None else {"content": text}
        obj = "chat.completion.chunk"
    else:
        choice["text"] = text or ""
        obj = "text_completion"
    choice.update(extra)
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": call.model,
        "choices": [choice],
    }


def whole(
    call: Call, rid: str, text: str, finish: str, use: dict[str, Any], logprobs: Any
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": logprobs}
    if call.kind == "chat":
        choice["message"] = {"role": "assistant", "content": text}
        obj = "chat.completion"
    else:
        choice["text"] = text
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": call.model,
        "choices": [choice],
        "usage": use,
    }


def error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error"}
    return {
        "error": {
            "message": message,
            "type": kind.get(status, "server_error"),
            "param": param,
            "code": status,
        }
    }
