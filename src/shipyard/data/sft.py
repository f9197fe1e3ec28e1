"""Supervised fine-tuning data: (prompt, response) pairs → a token dataset with a loss mask.

The dataset is the loader's usual token dataset (one document per example: prompt tokens, then
response tokens, then the tokenizer's EOS) plus `loss_mask/`, a second token dataset of vocab
size 2 with the same document lengths: 1 where the token is a training target (the response and
its closing EOS), 0 for the prompt. A prompt goes through the model's chat template when it has
one, exactly as serving renders `/v1/chat/completions`, so the fine-tune sees what it will serve.

Pairs come from a JSONL file, a reasoning-gym generator (kept disjoint from every registered eval
item) or a stored text table such as the crawl pipeline's (prompt: a document's opening,
response: its continuation). `build` stores the result as a "dataset" artifact whose inputs are
its sources, so lineage runs from a fine-tuned model back to its data.
"""

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.catalog import ArtifactRecord
from shipyard.catalog.base import check_alias_name
from shipyard.errors import InvalidInput
from shipyard.loader import LOSS_MASK_DIR, TokenDatasetWriter
from shipyard.workspace import Workspace, shipyard_home

SFT_FORMAT = "shipyard-sft/1"
ROLES = ("system", "user", "assistant")
# reasoning-gym item seeds for SFT data: eval tasks use small ones (42 + item number)
SEED_OFFSET = 1 << 40
SEED_STRIDE = 1 << 32  # between the --seed values: their items never share a seed
MIN_TEXT_TOKENS = 16  # a shorter document has no opening and continuation worth a pair
MODEL_CACHE = Path("evals", "models")  # under $SHIPYARD_HOME: the evals platform's model cache


@dataclass(frozen=True)
class Pair:
    """The turns before the response, as (role, content), and the response to learn."""

    turns: tuple[tuple[str, str], ...]
    response: str


@dataclass(frozen=True)
class Encoded:
    tokens: list[list[int]]
    masks: list[list[int]]
    dropped: int  # pairs longer than max_len


@dataclass(frozen=True)
class Built:
    path: Path | None  # the dataset directory, when written to one
    artifact: ArtifactRecord | None  # the dataset artifact, when stored as one
    manifest: dict[str, Any]


# Sources


def parse_jsonl(data: bytes, where: str) -> list[Pair]:
    """Pairs from JSONL bytes: `{"prompt": str, "response": str}` or `{"messages": [{"role",
    "content"}...]}` ending with the assistant's turn. A bad line raises naming `where:line`."""
    pairs = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            pairs.append(_pair(json.loads(raw.decode())))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            reason = exc.args[0] if isinstance(exc, _BadLine) else f"not a JSON object ({exc})"
            raise InvalidInput(f"{where}:{number}: {reason}"[:500]) from None
    if not pairs:
        raise InvalidInput(f"{where}: no examples")
    return pairs


class _BadLine(ValueError):
    pass


def _pair(row: Any) -> Pair:
    if not isinstance(row, dict):
        raise _BadLine("expected a JSON object")
    if set(row) == {"prompt", "response"}:
        prompt, response = row["prompt"], row["response"]
        if not (isinstance(prompt, str) and prompt and isinstance(response, str) and response):
            raise _BadLine("'prompt' and 'response' must be non-empty strings")
        return Pair((("user", prompt),), response)
    if set(row) != {"messages"}:
        raise _BadLine(f"expected keys prompt+response or messages, got {sorted(row)[:8]}")
    messages = row["messages"]
    if not isinstance(messages, list) or len(messages) < 2:
        raise _BadLine("'messages' must be a list of at least two turns")
    turns = []
    for index, message in enumerate(messages):
        ok = isinstance(message, dict) and set(message) == {"role", "content"}
        if not ok or message["role"] not in ROLES or not isinstance(message["content"], str):
            raise _BadLine(f"messages[{index}] must be {{role: {'|'.join(ROLES)}, content: str}}")
        turns.append((message["role"], message["content"]))
    if turns[-1][0] != "assistant" or not turns[-1][1]:
        raise _BadLine("the last message must be the assistant's, non-empty: the response")
    if not any(role == "user" for role, _ in turns[:-1]):
        raise _BadLine("no user turn before the response")
    return Pair(tuple(turns[:-1]), turns[-1][1])


def eval_questions() -> frozenset[str]:
    """Every question of every registered eval task (code tasks aside), whitespace-normalised:
    the items SFT data must never contain."""
    from shipyard.evals.tasks import registered

    held_out = set()
    for task in registered():
        if task.kind == "code":
            continue
        for item in (*task.load(), *task.fewshot):
            if "question" in item.fields:
                held_out.add(_normal(item.fields["question"]))
    return frozenset(held_out)


def reasoning_gym_pairs(task: str, count: int, seed: int, chat: bool = True) -> list[Pair]:
    """`count` items of the reasoning-gym generator `task`, none asking an eval task's question.

    The generator seeds item i of a dataset with `seed + i`; SFT items take the consecutive item
    seeds from `SEED_OFFSET + seed * SEED_STRIDE`, far from the eval tasks' (42 + i), and any
    that still repeats an eval question is skipped. Plain (not chat) prompts follow the rg-*
    eval template."""
    import reasoning_gym

    held_out = eval_questions()
    pairs: list[Pair] = []
    start = SEED_OFFSET + seed * SEED_STRIDE
    # at most len(held_out) items are skipped: this many chunks always suffice
    for chunk in range(len(held_out) // count + 2):
        try:
            made = reasoning_gym.create_dataset(task, size=count, seed=start + chunk * count)
        except (KeyError, ValueError) as exc:
            raise InvalidInput(f"reasoning-gym task {task!r}: {exc}") from None
        for row in made:
            question, answer = str(row["question"]).strip(), str(row["answer"])
            if _normal(question) in held_out:
                continue
            if chat:
                pairs.append(Pair((("user", question),), answer))
            else:  # the rg-* eval tasks' template, "{question}\nAnswer:", answered after a space
                pairs.append(Pair((("user", f"{question}\nAnswer:"),), f" {answer}"))
            if len(pairs) == count:
                return pairs
    raise InvalidInput(f"reasoning-gym {task!r} repeats eval items: {len(pairs)} of {count} new")


def text_pairs(texts: Sequence[str], tokenizer: Any, max_len: int) -> list[Pair]:
    """Per document, its first `max_len // 4` tokens as the prompt and the next as many as the
    response (room for the chat template and EOS); documents under `MIN_TEXT_TOKENS` are
    skipped."""
    half = max(max_len // 4, 1)
    pairs = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: 2 * half]
        if len(ids) < MIN_TEXT_TOKENS:
            continue
        cut = min(half, len(ids) // 2)
        prompt, response = tokenizer.decode(ids[:cut]), tokenizer.decode(ids[cut:])
        pairs.append(Pair((("user", prompt),), response))
    return pairs


def table_texts(table_dir: Path, where: str, count: int | None) -> list[str]:
    """The `text` of the rows of a data-pipeline table (Parquet parts) that satisfy `where`."""
    from shipyard.data.tokenize import select

    if not any(table_dir.glob("part-*.parquet")):
        raise InvalidInput("not a data-pipeline table: no part-*.parquet files")
    return select(table_dir, where).text[:count]


def _normal(text: str) -> str:
    return " ".join(text.split())


# Encoding and writing


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def encode(pairs: Sequence[Pair], tokenizer: Any, max_len: int, chat: bool) -> Encoded:
    """Token ids and loss masks per pair; pairs over `max_len` tokens are dropped and counted.
    Chat prompts are rendered and tokenised as the serving replica does; plain ones are one
    user turn's text, tokenised with the tokenizer's special tokens."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise InvalidInput("the model's tokenizer names no EOS token: responses could not end")
    tokens, masks, dropped = [], [], 0
    for pair in pairs:
        if chat:
            turns = [{"role": role, "content": content} for role, content in pair.turns]
            text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
            prompt = list(tokenizer(str(text), add_special_tokens=False)["input_ids"])
        elif len(pair.turns) == 1:
            prompt = list(tokenizer(pair.turns[0][1])["input_ids"])
        else:
            raise InvalidInput("multi-turn messages need a model with a chat template")
        response = [*tokenizer(pair.response, add_special_tokens=False)["input_ids"], eos]
        if len(prompt) + len(response) > max_len:
            dropped += 1
            continue
        tokens.append(prompt + response)
        masks.append([0] * len(prompt) + [1] * len(response))
    return Encoded(tokens, masks, dropped)


def write(dest: Path, encoded: Encoded, vocab_size: int, meta: dict[str, Any]) -> dict[str, Any]:
    """The token dataset and its `loss_mask/` sibling under `dest`, plus `manifest.json`."""
    if not encoded.tokens:
        raise InvalidInput(f"no examples fit: all {encoded.dropped} are longer than max_len")
    with (
        TokenDatasetWriter(dest, vocab_size) as tokens,
        TokenDatasetWriter(dest / LOSS_MASK_DIR, 2) as masks,
    ):
        for ids, mask in zip(encoded.tokens, encoded.masks, strict=True):
            tokens.add(ids)
            masks.add(mask)
    manifest = {
        "format": SFT_FORMAT,
        "vocab_size": vocab_size,
        "num_docs": len(encoded.tokens),
        "num_tokens": sum(map(len, encoded.tokens)),
        "target_tokens": sum(map(sum, encoded.masks)),
        "dropped_too_long": encoded.dropped,
        **meta,
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


# Building from the command line's sources


@dataclass(frozen=True)
class JsonlSource:
    path: Path


@dataclass(frozen=True)
class GymSource:
    task: str
    count: int
    seed: int


@dataclass(frozen=True)
class TableSource:
    ref: str  # a data-pipeline table artifact
    where: str
    count: int | None


Source = JsonlSource | GymSource | TableSource


def load_tokenizer(ws: Workspace, model: str) -> tuple[Any, str | None]:
    """The tokenizer of `model` (a local HF directory, or a model artifact: id, prefix or alias),
    and the artifact's id (None for a directory)."""
    from transformers import AutoTokenizer

    path, artifact = Path(model), None
    if not path.is_dir():
        from shipyard.serve.models import materialise

        artifact = ws.resolve(model)
        path = materialise(ws, artifact, shipyard_home() / MODEL_CACHE).path
    try:
        return AutoTokenizer.from_pretrained(path), artifact
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"model {model!r} has no usable tokenizer: {exc}"[:500]) from None


def build(
    ws: Workspace,
    model: str,
    source: Source,
    out: str,
    *,
    max_len: int = 1024,
    plain: bool = False,
    say: Callable[[str], None] = lambda text: None,
) -> Built:
    """Encode `source` with `model`'s tokenizer; store it as a dataset artifact aliased `out`,
    or, when `out` starts with '/' or '.', write it to that (new or empty) directory only.
    Everything is read and checked before anything is stored."""
    if max_len < 2:
        raise InvalidInput(f"max_len must be >= 2, got {max_len}")
    to_dir = out.startswith(("/", "."))
    if not to_dir:
        check_alias_name(out)  # before anything is stored under it
    with tempfile.TemporaryDirectory(prefix="shipyard-sft-") as tmp:
        jsonl = _read_jsonl(source.path, Path(tmp)) if isinstance(source, JsonlSource) else None
        tokenizer, model_id = load_tokenizer(ws, model)
        chat = has_chat_template(tokenizer) and not plain
        stored: list[str] = []
        if jsonl is not None:
            pairs, described = jsonl
        else:
            assert not isinstance(source, JsonlSource)
            pairs, described, stored = _pairs(ws, source, tokenizer, max_len, chat, Path(tmp))
        encoded = encode(pairs, tokenizer, max_len, chat)
        say(f"sft       {len(encoded.tokens)} examples, {encoded.dropped} over {max_len} tokens")
        dest = Path(tmp, "sft")
        meta = {
            "source": described,
            "model": model_id or str(Path(model).resolve()),
            "chat_template": chat,
            "eos_id": int(tokenizer.eos_token_id),
            "max_len": max_len,
        }
        manifest = write(dest, encoded, len(tokenizer), meta)
        if to_dir:
            return Built(_place(dest, Path(out)), None, manifest)
        inputs = [i for i in (model_id, *stored) if i]
        if isinstance(source, JsonlSource):  # stored only now: a refused build stores nothing
            inputs.append(ws.put(Path(tmp, "input"), "dataset", metadata=described).id)
        record = ws.put(
            dest,
            "dataset",
            name=out,
            inputs=inputs,
            metadata={"format": SFT_FORMAT, "source": described, "model": meta["model"]},
        )
        return Built(None, record, manifest)


def _read_jsonl(path: Path, tmp: Path) -> tuple[list[Pair], dict[str, Any]]:
    """The file's pairs and how to name it; its bytes are copied to `tmp/input/`, so what was
    parsed is what gets stored, whatever happens to the file meanwhile."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from None
    pairs = parse_jsonl(data, str(path))
    copy = tmp / "input" / path.name
    copy.parent.mkdir()
    copy.write_bytes(data)
    return pairs, {"jsonl": copy.name, "sha256": hashlib.sha256(data).hexdigest()}


def _pairs(
    ws: Workspace,
    source: GymSource | TableSource,
    tokenizer: Any,
    max_len: int,
    chat: bool,
    tmp: Path,
) -> tuple[list[Pair], dict[str, Any], list[str]]:
    """The source's pairs, how to name it, and the stored artifacts it came from."""
    if isinstance(source, GymSource):
        pairs = reasoning_gym_pairs(source.task, source.count, source.seed, chat)
        return pairs, {"reasoning_gym": source.task, "count": source.count, "seed": source.seed}, []
    table = ws.resolve(source.ref)
    if ws.manifest(table).kind != "dataset":
        raise InvalidInput(f"{source.ref!r} is not a dataset artifact")
    ws.get(table, tmp / "table")
    texts = table_texts(tmp / "table", source.where, source.count)
    pairs = text_pairs(texts, tokenizer, max_len)
    if not pairs:
        raise InvalidInput(f"{source.ref!r}: no selected document has {MIN_TEXT_TOKENS}+ tokens")
    return pairs, {"table": table, "where": source.where}, [table]


def _place(built: Path, dest: Path) -> Path:
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InvalidInput(f"{dest} exists and is not an empty directory")
    if dest.exists():
        dest.rmdir()
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(built, dest)
    return dest
