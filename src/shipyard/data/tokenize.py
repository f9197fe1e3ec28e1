"""Selection, tokenizer training and token shards.

Selection is a SQL `WHERE` over the annotated table (DuckDB over its Parquet files), so changing a
filter threshold is a query, not a re-crawl. A byte-level BPE tokenizer is trained with HF
`tokenizers` on the selected text; documents are encoded with an end-of-document id appended and
written with the loader's `TokenDatasetWriter` (format in docs/formats.md), plus `manifest.json`
naming, per shard, its source files, their row ranges and its token counts per language.
"""

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from shipyard.data.config import TokenizeConfig
from shipyard.errors import InvalidInput
from shipyard.loader import TokenDatasetWriter

EOD = "<|endoftext|>"
ENCODE_BATCH = 256


@dataclass(frozen=True)
class Selected:
    doc_number: list[int]
    source: list[str]
    ordinal: list[int]
    language: list[str]
    text: list[str]


def select(table_dir: Path, where: str) -> Selected:
    """Rows of the annotated table that satisfy `where`, in document-number order."""
    query = (
        "SELECT doc_number, source, ordinal, language, text "
        f"FROM read_parquet('{table_dir}/part-*.parquet') WHERE ({where}) ORDER BY doc_number"
    )
    try:
        rows = duckdb.connect().execute(query).fetchall()
    except duckdb.Error as exc:
        raise InvalidInput(f"select.where {where!r} is not a valid filter: {exc}") from None
    columns = list(zip(*rows, strict=True)) if rows else [(), (), (), (), ()]
    return Selected(*[list(c) for c in columns])


def train_tokenizer(texts: list[str], config: TokenizeConfig, dest: Path) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        special_tokens=[EOD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(dest / "tokenizer.json"))
    return tokenizer


def write_tokens(
    selected: Selected, tokenizer: Tokenizer, shard_tokens: int, dest: Path
) -> dict[str, Any]:
    """Encode the selection into token shards under `dest`; return (and write) the manifest."""
    eod = tokenizer.token_to_id(EOD)
    if eod is None:
        raise InvalidInput(f"tokenizer has no {EOD} token")
    vocab = tokenizer.get_vocab_size()
    shards: list[dict[str, Any]] = []
    with TokenDatasetWriter(dest, vocab, shard_tokens=shard_tokens) as writer:
        for lo in range(0, len(selected.text), ENCODE_BATCH):
            encoded = tokenizer.encode_batch(selected.text[lo : lo + ENCODE_BATCH])
            for offset, enc in enumerate(encoded):
                row = lo + offset
                index = len(writer.shards)
                if index == len(shards):
                    shards.append({"sources": {}, "tokens_by_language": defaultdict(int)})
                entry = shards[index]
                ids = [*enc.ids, eod]
                writer.add(ids)
                span = entry["sources"].setdefault(selected.source[row], [None, None])
                span[0] = selected.ordinal[row] if span[0] is None else span[0]
                span[1] = selected.ordinal[row]
                entry["tokens_by_language"][selected.language[row]] += len(ids)
                entry.setdefault("first_doc", selected.doc_number[row])
                entry["last_doc"] = selected.doc_number[row]
    for entry, info in zip(shards, writer.shards, strict=True):
        entry.update(shard=info.stem.name, num_docs=info.num_docs, num_tokens=info.num_tokens)
        entry["tokens_by_language"] = dict(sorted(entry["tokens_by_language"].items()))
    manifest = {
        "format": "shipyard-token-dataset/1",
        "vocab_size": vocab,
        "eod_id": eod,
        "num_docs": sum(s["num_docs"] for s in shards),
        "num_tokens": sum(s["num_tokens"] for s in shards),
        "shards": shards,
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return manifest
