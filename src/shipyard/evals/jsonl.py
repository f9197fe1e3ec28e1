"""Local JSONL tasks: one item per line, an optional header line, every byte checked.

    {"task": {"name": "my-mc", "version": "1", "kind": "mc", "template": "Q: {question}\\nA:",
              "fewshot": 2, "max_tokens": 32, "stop": ["\\n"]}}
    {"id": "q1", "question": "2+2?", "choices": ["3", "4"], "answer": 1, "cluster": "arith"}
    {"id": "q2", "question": "Capital of France?", "answer": "Paris"}

The task's version includes the hash of the file's bytes, so an edited file is a new task
version, never silently mixed with the old one's results. Any flaw is an `InvalidInput` naming the
file, the line and what was wrong.
"""

import json
import math
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.evals.tasks import TASK_NAME, Item, Kind, Sampling, Task, render
from shipyard.hashing import sha256_hex

MAX_FILE_BYTES = 64 << 20
MAX_ITEMS = 100_000
MAX_CHOICES = 26
MAX_TOKENS = 4096
_HEADER_KEYS = {"name", "version", "kind", "template", "scorer", "fewshot", "max_tokens", "stop"}
_ITEM_KEYS = {"id", "choices", "answer", "cluster"}
_DEFAULT_SCORER = {"mc": "mc", "gen": "exact"}
_KINDS = ("mc", "gen")  # code tasks need tests and an entry point: register them in Python
_SCORERS = ("mc", "exact", "numeric")


def load_jsonl_task(path_text: str) -> Task:
    path = Path(path_text)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InvalidInput(f"{path}: {size} bytes, over the {MAX_FILE_BYTES}-byte limit")
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the task file: {exc.strerror}") from None
    return parse_jsonl_task(data, str(path), default_name=_name_from(path.stem))


def parse_jsonl_task(data: bytes, where: str, default_name: str = "jsonl") -> Task:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{where}: not UTF-8 (byte {exc.start})") from None
    header: dict[str, Any] = {}
    items: list[Item] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        record = _parse_line(line, f"{where}:{number}")
        if number == 1 and "task" in record:
            header = _check_header(record, f"{where}:{number}")
            continue
        item = _item(record, f"{where}:{number}", default_id=str(len(items)))
        if item.id in seen:
            raise InvalidInput(f"{where}:{number}: item id {item.id!r} appears twice")
        seen.add(item.id)
        items.append(item)
        if len(items) > MAX_ITEMS:
            raise InvalidInput(f"{where}: more than {MAX_ITEMS} items")
    if not items:
        raise InvalidInput(f"{where}: no items")
    kind: Kind = header.get("kind") or ("mc" if items[0].choices else "gen")
    for index, item in enumerate(items):
        if kind == "mc" and not item.choices:
            raise InvalidInput(f"{where}: item {item.id!r} has no choices but the task is mc")
        if kind != "mc" and item.choices:
            raise InvalidInput(f"{where}: item {index} has choices but the task is {kind}")
    shots = int(header.get("fewshot", 0))
    if shots >= len(items):
        raise InvalidInput(f"{where}: fewshot {shots} leaves no items to evaluate")
    template = header.get("template") or (
        "{question}" if "question" in items[0].fields else "{prompt}"
    )
    for item in items:  # every item fills the template: fail here, not mid-run
        try:
            render(template, item.fields)
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: item {item.id!r}: {exc}") from None
    scorer = header.get("scorer") or _DEFAULT_SCORER[kind]
    if (scorer == "mc") != (kind == "mc"):
        raise InvalidInput(f"{where}: scorer {scorer!r} does not fit a {kind} task")
    body = tuple(items[shots:])
    return Task(
        name=header.get("name", default_name),
        version=f"{header.get('version', '1')}+{sha256_hex(data)[:12]}",
        kind=kind,
        template=template,
        scorer=scorer,
        load=lambda: body,
        fewshot=tuple(items[:shots]),
        sampling=Sampling(int(header.get("max_tokens", 64)), tuple(header.get("stop", ()))),
        clustered=any(item.cluster is not None for item in body),
    )


def _parse_line(line: str, where: str) -> dict[str, Any]:
    def refuse_constant(name: str) -> Any:
        raise InvalidInput(f"{where}: {name} is not JSON")

    try:
        record = json.loads(line, parse_constant=refuse_constant)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidInput(f"{where}: not JSON ({str(exc)[:80]})") from None
    if not isinstance(record, dict):
        raise InvalidInput(f"{where}: a line must be a JSON object, not {type(record).__name__}")
    return record


def _check_header(record: dict[str, Any], where: str) -> dict[str, Any]:
    header = record["task"]
    if not isinstance(header, dict) or len(record) != 1:
        raise InvalidInput(f'{where}: the header must be {{"task": {{...}}}} alone')
    unknown = set(header) - _HEADER_KEYS
    if unknown:
        raise InvalidInput(f"{where}: unknown header fields {sorted(unknown)}")
    for key in ("name", "version", "kind", "template", "scorer"):
        if key in header and not isinstance(header[key], str):
            raise InvalidInput(f"{where}: header {key} must be a string")
    if "name" in header and not TASK_NAME.fullmatch(header["name"]):
        raise InvalidInput(f"{where}: task name must be 1-64 of a-z, 0-9, '_.-'")
    if header.get("kind", "mc") not in _KINDS:
        raise InvalidInput(f"{where}: kind {header['kind']!r} is not one of {_KINDS}")
    if header.get("scorer", "mc") not in _SCORERS:
        raise InvalidInput(f"{where}: scorer {header['scorer']!r} is not one of {_SCORERS}")
    _check_int(header.get("fewshot", 0), 0, 64, f"{where}: fewshot")
    _check_int(header.get("max_tokens", 64), 1, MAX_TOKENS, f"{where}: max_tokens")
    stop = header.get("stop", [])
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise InvalidInput(f"{where}: stop must be a list of non-empty strings")
    return dict(header)


def _item(record: dict[str, Any], where: str, default_id: str) -> Item:
    item_id = record.get("id", default_id)
    if isinstance(item_id, int) and not isinstance(item_id, bool):
        item_id = str(item_id)
    if not isinstance(item_id, str) or not 0 < len(item_id) <= 200:
        raise InvalidInput(f"{where}: id must be a string of 1-200 characters")
    fields: dict[str, str] = {}
    for key, value in record.items():
        if key in _ITEM_KEYS:
            continue
        if not isinstance(value, str):
            raise InvalidInput(f"{where}: field {key[:40]!r} must be a string")
        fields[key] = value
    if not fields:
        raise InvalidInput(f"{where}: no text fields for the template")
    choices = record.get("choices", [])
    if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        raise InvalidInput(f"{where}: choices must be a list of strings")
    if choices and not 2 <= len(choices) <= MAX_CHOICES:
        raise InvalidInput(f"{where}: choices must number 2-{MAX_CHOICES}")
    answer = record.get("answer")
    if choices:
        _check_int(answer, 0, len(choices) - 1, f"{where}: answer (an index into choices)")
    elif isinstance(answer, (int, float)) and not isinstance(answer, bool):
        if not math.isfinite(answer):
            raise InvalidInput(f"{where}: answer must be finite")
        answer = str(answer)
    elif not isinstance(answer, str):
        raise InvalidInput(f"{where}: answer must be a string, a number or a choice index")
    cluster = record.get("cluster")
    if cluster is not None and not isinstance(cluster, str):
        raise InvalidInput(f"{where}: cluster must be a string")
    target: str | int = answer if isinstance(answer, (str, int)) else str(answer)
    return Item(item_id, fields, target, tuple(choices), cluster)


def _check_int(value: Any, low: int, high: int, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(f"{what} must be an integer in {low}..{high}, not {value!r}")


def _name_from(stem: str) -> str:
    name = "".join(c if c.isalnum() or c in "_.-" else "-" for c in stem.lower())[:64]
    return name if TASK_NAME.fullmatch(name) else "jsonl"
