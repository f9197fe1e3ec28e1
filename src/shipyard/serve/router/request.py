"""Parse an OpenAI-compatible inference request into what the router routes on.

The router reads only what it needs (model, stream, session, the prompt's routing prefix) and
checks the fields it reads; everything else passes through to the replica, which checks the rest.

The routing prefix (what consistent hashing hashes, together with the model name):
- chat: the leading system (or developer) messages' text, when there are any: requests sharing
  a system prompt share a replica, whatever their user turns say;
- otherwise the start of the prompt, for chat rendered as `role: content` lines;
- either way cut to the first `prefix_chars` characters (about 4 characters a token).
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from shipyard.errors import InvalidInput

Kind = Literal["completions", "chat"]
MAX_BODY = 8 << 20
MAX_NAME = 256
DEFAULT_PREFIX_CHARS = 1024
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
SESSION_HEADER = "x-session-id"


@dataclass(frozen=True)
class InferenceRequest:
    kind: Kind
    model: str
    stream: bool
    session: str | None
    prefix: str
    body: dict[str, Any]


def parse_request(
    kind: Kind,
    raw: bytes,
    headers: Mapping[str, str],
    prefix_chars: int = DEFAULT_PREFIX_CHARS,
) -> InferenceRequest:
    """The request in `raw`, or InvalidInput naming the first bad field."""
    body = _json_object(raw)
    model = _name(body.get("model"), "model", required=True)
    assert model is not None
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidInput(f"stream: expected true or false, got {_shown(stream)}")
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
    ):
        raise InvalidInput(f"max_tokens: expected a positive integer, got {_shown(max_tokens)}")
    user = _name(body.get("user"), "user")
    session = _name(headers.get(SESSION_HEADER), f"header {SESSION_HEADER}") or user
    if kind == "chat":
        prefix = _chat_prefix(body.get("messages"))
    else:
        prefix = _prompt_prefix(body.get("prompt"), prefix_chars)
    return InferenceRequest(kind, model, stream, session, prefix[:prefix_chars], body)


def _json_object(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_BODY:
        raise InvalidInput(f"body: {len(raw)} bytes is over the {MAX_BODY}-byte limit")
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise InvalidInput("body: JSON nested too deep") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidInput(f"body: not JSON ({str(exc)[:100]})") from None
    if not isinstance(body, dict):
        raise InvalidInput(f"body: expected a JSON object, not {type(body).__name__}")
    return body


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _name(value: Any, field: str, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field}: expected a non-empty string, got {_shown(value)}")
    if len(value) > MAX_NAME or not value.isprintable():
        raise InvalidInput(
            f"{field}: expected at most {MAX_NAME} printable characters, got {_shown(value)}"
        )
    return value


def _prompt_prefix(prompt: Any, limit: int) -> str:
    """The start of a completions prompt: a string, strings, token ids or lists of them."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list) or not prompt:
        raise InvalidInput(
            f"prompt: expected a string or a non-empty list of strings or token ids, "
            f"got {_shown(prompt)}"
        )
    first = prompt[0]
    if isinstance(first, str) and all(isinstance(p, str) for p in prompt):
        return first
    if _token_ids(prompt):
        return "ids:" + ",".join(str(t) for t in prompt[:limit])
    if all(isinstance(p, list) and p and _token_ids(p) for p in prompt):
        return "ids:" + ",".join(str(t) for t in first[:limit])
    raise InvalidInput(
        "prompt: a list must hold only strings, only token ids (integers >= 0), "
        "or only non-empty lists of token ids"
    )


def _token_ids(values: list[Any]) -> bool:
    return all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in values)


def _chat_prefix(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise InvalidInput(f"messages: expected a non-empty list, got {_shown(messages)}")
    texts: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidInput(f"{where}: expected an object, got {_shown(message)}")
        role = message.get("role")
        if role not in ROLES:
            raise InvalidInput(
                f"{where}.role: expected one of {', '.join(ROLES)}, got {_shown(role)}"
            )
        texts.append((role, _content_text(message.get("content"), f"{where}.content")))
    system = [text for role, text in _leading_system(texts)]
    if system:
        return "\n".join(system)
    return "".join(f"{role}: {text}\n" for role, text in texts)


def _leading_system(texts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    leading: list[tuple[str, str]] = []
    for role, text in texts:
        if role not in ("system", "developer"):
            break
        leading.append((role, text))
    return leading


def _content_text(content: Any, where: str) -> str:
    """A message's text: a string, null (a tool call) or a list of parts (text parts kept)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidInput(f"{where}: expected a string or a list of parts, got {_shown(content)}")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidInput(f"{where}[{j}]: expected an object with a string 'type'")
        if part["type"] == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidInput(f"{where}[{j}].text: expected a string, got {_shown(text)}")
            texts.append(text)
    return "".join(texts)


def _shown(value: Any) -> str:
    """A short, safe rendering of a bad value for an error message."""
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
