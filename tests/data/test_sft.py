"""`shipyard data sft`: the token dataset and loss mask it writes, its sources and their lineage,
and what it refuses."""

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipyard.data import sft
from shipyard.errors import InvalidInput
from shipyard.evals.tasks import get_task
from shipyard.loader import TokenDataset, open_loss_mask
from shipyard.workspace import Workspace

Cli = Callable[..., subprocess.CompletedProcess[str]]

PAIRS = [
    {"prompt": "What is 2 + 2?", "response": "4"},
    {
        "messages": [
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": "What is 3 * 3?"},
            {"role": "assistant", "content": "9"},
        ]
    },
]


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def read(directory: Path) -> tuple[TokenDataset, TokenDataset]:
    tokens = TokenDataset(directory)
    masks = open_loss_mask(tokens)  # the loader's own reader accepts it
    assert masks is not None
    return tokens, masks


def inputs_of(ws: Workspace, artifact_id: str) -> tuple[str, ...]:
    record = ws.catalog.get_artifact(artifact_id)
    assert record is not None and record.run_id is not None
    run = ws.catalog.get_run(record.run_id)
    assert run is not None
    return run.inputs


def test_prompt_is_served_text_and_only_the_response_is_a_target(
    workspace: Workspace, smol_tokenizer_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    source = sft.JsonlSource(write_jsonl(tmp_path / "pairs.jsonl", PAIRS))
    built = sft.build(workspace, str(smol_tokenizer_dir), source, str(tmp_path / "out"))
    assert built.path == tmp_path / "out"
    tokens, masks = read(built.path)
    assert built.artifact is None and tokens.num_docs == masks.num_docs == 2
    assert masks.vocab_size == 2 and np.array_equal(tokens.doc_lengths, masks.doc_lengths)
    tokenizer = AutoTokenizer.from_pretrained(smol_tokenizer_dir)
    for number, turns in enumerate(
        [[{"role": "user", "content": "What is 2 + 2?"}], PAIRS[1]["messages"][:2]]  # type: ignore[index]
    ):
        # what the serving replica feeds the model for this chat request
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        served = tokenizer(text, add_special_tokens=False)["input_ids"]
        doc, mask = tokens.document(number), masks.document(number)
        assert doc[: len(served)].tolist() == served
        assert mask[: len(served)].sum() == 0 and mask[len(served) :].all()
        response = doc[len(served) :].tolist()
        assert response[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(response[:-1]) == ["4", "9"][number]
    manifest = json.loads((built.path / "manifest.json").read_text())
    assert manifest["format"] == sft.SFT_FORMAT and manifest["chat_template"] is True
    assert manifest["target_tokens"] == int(sum(masks.document(i).sum() for i in range(2)))


def test_plain_prompts_and_too_long_pairs(
    workspace: Workspace, smol_tokenizer_dir: Path, tmp_path: Path
) -> None:
    long = {"prompt": "word " * 200, "response": "x"}
    rows = [PAIRS[0], long]
    source = sft.JsonlSource(write_jsonl(tmp_path / "pairs.jsonl", rows))
    out = tmp_path / "out"
    sft.build(workspace, str(smol_tokenizer_dir), source, str(out), max_len=64, plain=True)
    tokens, masks = read(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert tokens.num_docs == 1 and manifest["dropped_too_long"] == 1
    assert manifest["chat_template"] is False
    prompt_len = int((masks.document(0) == 0).sum())
    assert tokens.document(0)[:prompt_len].tolist() != []
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smol_tokenizer_dir)
    assert tokenizer.decode(tokens.document(0)[:prompt_len]) == "What is 2 + 2?"


def test_cli_stores_the_dataset_with_its_model_and_input_as_lineage(
    cli: Cli,
    workspace: Workspace,
    tiny_llama_dirs: Callable[[int], Path],
    tmp_path: Path,
) -> None:
    model = workspace.put(tiny_llama_dirs(0), "model", name="base", metadata={"format": "hf"}).id
    path = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    done = cli("data", "sft", "--model", "base", "--out", "sft-demo", "--input", str(path))
    assert done.returncode == 0, done.stderr
    dataset = done.stdout.strip()
    assert workspace.resolve("sft-demo") == dataset
    inputs = inputs_of(workspace, dataset)
    assert model in inputs and len(inputs) == 2
    (jsonl,) = (i for i in inputs if i != model)
    workspace.get(jsonl, tmp_path / "stored")
    assert (tmp_path / "stored" / "pairs.jsonl").read_bytes() == path.read_bytes()
    workspace.get(dataset, tmp_path / "got")
    assert read(tmp_path / "got")[0].num_docs == 2


BAD_LINES = [
    (b"not json", "not a JSON object"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"prompt": "a"}', "expected keys"),
    (b'{"prompt": "a", "response": 3}', "non-empty strings"),
    (b'{"prompt": "", "response": "b"}', "non-empty strings"),
    (b'{"messages": [{"role": "user", "content": "a"}]}', "at least two turns"),
    (b'{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}', "last"),
    (
        b'{"messages": [{"role": "bot", "content": "a"}, {"role": "assistant", "content": "b"}]}',
        "messages[0]",
    ),
    (
        b'{"messages": [{"role": "system", "content": "a"}, '
        b'{"role": "assistant", "content": "b"}]}',
        "no user",
    ),
    (b'{"prompt": "\xff", "response": "b"}', "not a JSON object"),
    (b"[" * 100_000, "not a JSON object"),
]


@pytest.mark.parametrize(("line", "reason"), BAD_LINES)
def test_a_bad_line_is_named_by_file_and_line(line: bytes, reason: str) -> None:
    data = json.dumps(PAIRS[0]).encode() + b"\n\n" + line + b"\n"
    with pytest.raises(InvalidInput) as caught:
        sft.parse_jsonl(data, "in.jsonl")
    assert str(caught.value).startswith("in.jsonl:3: ") and reason in str(caught.value)


def test_cli_refuses_a_bad_file_with_exit_2_and_stores_nothing(
    cli: Cli, workspace: Workspace, smol_tokenizer_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(json.dumps(PAIRS[0]).encode() + b'\n{"prompt": 1, "response": "b"}\n')
    done = cli(
        "data", "sft", "--model", str(smol_tokenizer_dir), "--out", "x", "--input", str(path)
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{path}:2: " in done.stderr
    assert workspace.catalog.list_artifacts() == [] and workspace.catalog.get_alias("x") is None


@pytest.mark.fuzz
@given(
    st.binary(max_size=300) | st.lists(st.text(max_size=20)).map(lambda x: json.dumps(x).encode())
)
def test_fuzz_jsonl_gives_pairs_or_a_named_refusal(data: bytes) -> None:
    try:
        pairs = sft.parse_jsonl(data, "f.jsonl")
    except InvalidInput as exc:
        assert str(exc).startswith("f.jsonl")
    else:
        assert all(p.response and isinstance(p.response, str) for p in pairs)


def test_reasoning_gym_items_never_repeat_an_eval_question(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    evals = {
        " ".join(str(i.fields["question"]).split()) for i in get_task("rg-basic-arithmetic").load()
    }
    pairs = sft.reasoning_gym_pairs("basic_arithmetic", 100, 0)
    assert len(pairs) == 100 and not {p.turns[0][1] for p in pairs} & evals
    # Even a generator seeded exactly as the eval task is (seed 42) yields no eval item.
    monkeypatch.setattr(sft, "SEED_OFFSET", 42)
    pairs = sft.reasoning_gym_pairs("basic_arithmetic", 30, 0)
    assert len(pairs) == 30 and not {p.turns[0][1] for p in pairs} & evals


def test_text_table_pairs_keep_lineage_to_the_table(
    workspace: Workspace, smol_tokenizer_dir: Path, tmp_path: Path
) -> None:
    texts = ["short text", "The harbour was quiet at dawn. " * 20, "Ships left the bay. " * 20]
    table = tmp_path / "table"
    table.mkdir()
    columns = {
        "doc_number": list(range(3)),
        "source": ["crawl.warc.gz"] * 3,
        "ordinal": list(range(3)),
        "language": ["en"] * 3,
        "keep": [True, True, False],
        "text": texts,
    }
    pq.write_table(pa.table(columns), table / "part-00000.parquet")
    table_id = workspace.put(table, "dataset", metadata={"table": "annotated"}).id
    source = sft.TableSource(table_id, "keep", None)
    built = sft.build(workspace, str(smol_tokenizer_dir), source, "crawl-sft", max_len=64)
    assert built.artifact is not None and inputs_of(workspace, built.artifact.id) == (table_id,)
    workspace.get(built.artifact.id, tmp_path / "got")
    tokens, masks = read(tmp_path / "got")
    assert tokens.num_docs == 1  # the short text is too short, the third is filtered out
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smol_tokenizer_dir)
    doc, mask = tokens.document(0), masks.document(0)
    continuation = tokenizer.decode(doc[mask == 1][:-1])
    assert continuation and continuation in texts[1] and len(doc) <= 64
    assert tokenizer.decode(doc[mask == 0]).count("The harbour was quiet") >= 1
