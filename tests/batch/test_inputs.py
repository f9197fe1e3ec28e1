"""Hostile snapshots and text: only Shipyard's errors escape; chunks cover every token."""

import contextlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from shipyard.batch import ChunkPolicy, EncodeConfig, IndexConfig
from shipyard.batch.chunker import Chunker
from shipyard.batch.encoder import batches
from shipyard.batch.snapshot import DOCS_FILE, DocTable, decode, write_docs
from shipyard.errors import InvalidInput, ShipyardError

from .conftest import MINILM

TOKENIZER = Tokenizer.from_file(str(MINILM / "tokenizer.json"))
CHUNKER = Chunker(TOKENIZER, ChunkPolicy(max_tokens=16, overlap=4), window=256)


def test_decode_names_empty_and_non_utf8_documents() -> None:
    assert decode("a", b"  \n").problem == "empty"
    assert decode("b", b"\xc3\x28").problem == "non_utf8"
    assert decode("c", "naïve".encode()).text == "naïve"


def test_bad_snapshots_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="appears twice"):
        write_docs([("a", b"x"), ("a", b"y")], tmp_path / "dup")
    pq.write_table(pa.table({"doc_id": [1, 2], "text": [b"x", b"y"]}), tmp_path / DOCS_FILE)
    with pytest.raises(InvalidInput, match="column 'doc_id' is int64"):
        DocTable(tmp_path / DOCS_FILE)
    (tmp_path / DOCS_FILE).write_bytes(b"PAR1 not really")
    with pytest.raises(InvalidInput, match="not a readable Parquet file"):
        DocTable(tmp_path / DOCS_FILE)


def test_configs_name_the_bad_field() -> None:
    with pytest.raises(InvalidInput, match="chunk overlap"):
        ChunkPolicy(max_tokens=16, overlap=9)
    with pytest.raises(InvalidInput, match="runtime must be one of"):
        EncodeConfig(runtime="tensorrt")
    with pytest.raises(InvalidInput, match="min_recall"):
        IndexConfig(min_recall=1.5)
    with pytest.raises(InvalidInput, match="exceeds the model's window"):
        Chunker(TOKENIZER, ChunkPolicy(max_tokens=300), window=256)


def _valid_snapshot() -> bytes:
    import io

    buffer = io.BytesIO()
    table = pa.table({"doc_id": ["a", "b", "c"], "text": [b"one", b"\xff", b"three words here"]})
    pq.write_table(table, buffer)
    return buffer.getvalue()


VALID = _valid_snapshot()


@pytest.mark.fuzz
@settings(max_examples=80, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=2000),
        st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=6).map(
            lambda edits: bytes(_edit(VALID, edits))
        ),
        st.integers(0, len(VALID)).map(lambda n: VALID[:n]),
    )
)
def test_snapshot_reader_survives_any_bytes(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / DOCS_FILE
    path.write_bytes(raw)
    with contextlib.suppress(ShipyardError):
        for doc in DocTable(path).docs():
            assert doc.text is not None or doc.problem in ("empty", "non_utf8")


def test_a_doc_id_that_is_not_utf8_is_refused_by_column(tmp_path: Path) -> None:
    # Parquet strings are bytes with a promise; a hostile file breaks the promise.
    ids = pa.array([b"a", b"\x80"], pa.binary()).cast(pa.string(), safe=False)
    texts = pa.array([b"one", b"two"], pa.binary())
    path = tmp_path / DOCS_FILE
    pq.write_table(pa.table({"doc_id": ids, "text": texts}), path)
    with pytest.raises(InvalidInput, match="column 'doc_id' holds bytes that are not UTF-8"):
        DocTable(path)


def _edit(data: bytes, edits: list[tuple[int, int]]) -> bytearray:
    out = bytearray(data)
    for position, value in edits:
        out[position] = value
    return out


@pytest.mark.fuzz
@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=400), max_size=8))
def test_any_document_bytes_are_chunked_or_counted(texts: list[bytes]) -> None:
    docs = [decode(f"d{i}", raw) for i, raw in enumerate(texts)]
    out = CHUNKER.chunk(docs)
    stats = out.stats
    assert stats.docs == len(docs)
    assert stats.empty + stats.non_utf8 + len(set(out.doc_ids)) == len(docs)
    for doc in docs:
        if doc.text is None:
            continue
        ids = CHUNKER.tokenizer.encode(doc.text, add_special_tokens=False).ids
        windows = [w[1:-1] for d, w in zip(out.doc_ids, out.ids, strict=True) if d == doc.doc_id]
        assert all(len(w) <= 16 for w in windows)
        rebuilt = list(windows[0]) if windows else []
        for w in windows[1:]:
            rebuilt += w[4:]  # each later window repeats `overlap` tokens
        assert rebuilt == ids  # every token, in order: nothing truncated


@given(st.lists(st.integers(1, 300), max_size=200), st.integers(16, 2048))
@settings(max_examples=100, deadline=None)
def test_batches_respect_the_token_budget(lengths: list[int], budget: int) -> None:
    config = EncodeConfig(token_budget=budget, max_batch=64)
    groups = batches(lengths, config)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        longest = max(lengths[i] for i in group)
        assert len(group) == 1 or len(group) * longest <= budget
        assert len(group) <= 64


def test_a_column_name_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / DOCS_FILE
    path.write_bytes(VALID.replace(b"\x18\x04text", b"\x18\x04\x80ext"))  # the footer's name
    assert path.read_bytes() != VALID
    with pytest.raises(InvalidInput, match="a column name is not UTF-8"):
        DocTable(path)
