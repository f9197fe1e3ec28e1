from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shipyard.data.config import TokenizeConfig
from shipyard.data.tokenize import select, train_tokenizer, write_tokens
from shipyard.errors import InvalidInput
from shipyard.loader import TokenDataset

from .conftest import english_text


def table(folder: Path) -> Path:
    folder.mkdir()
    rows = {
        "doc_number": [2, 0, 1],
        "source": ["b.warc", "a.warc", "a.warc"],
        "ordinal": [1, 1, 2],
        "language": ["fr", "en", "en"],
        "text": ["Le navire est au port.", english_text(1), english_text(2)],
        "keep": [True, True, False],
    }
    pq.write_table(pa.table(rows), folder / "part-00000.parquet")
    return folder


def test_select_is_a_query_in_document_order(tmp_path: Path) -> None:
    chosen = select(table(tmp_path / "t"), "keep")
    assert chosen.doc_number == [0, 2] and chosen.language == ["en", "fr"]
    with pytest.raises(InvalidInput, match=r"select\.where"):
        select(tmp_path / "t", "no_such_column > 1")


def test_tokens_and_manifest(tmp_path: Path) -> None:
    chosen = select(table(tmp_path / "t"), "TRUE")
    tokenizer = train_tokenizer(chosen.text, TokenizeConfig(vocab_size=300), tmp_path / "tok")
    manifest = write_tokens(chosen, tokenizer, 1 << 20, tmp_path / "tokens")
    dataset = TokenDataset(tmp_path / "tokens")
    assert dataset.num_docs == manifest["num_docs"] == 3
    eod = manifest["eod_id"]
    assert all(int(dataset.document(i)[-1]) == eod for i in range(3))
    assert tokenizer.decode(dataset.document(2)[:-1].tolist()) == "Le navire est au port."
    shard = manifest["shards"][0]
    assert shard["sources"] == {"a.warc": [1, 2], "b.warc": [1, 1]}
    by_language = shard["tokens_by_language"]
    assert set(by_language) == {"en", "fr"} and sum(by_language.values()) == shard["num_tokens"]
