"""The annotated table: every document with every stage's columns, one Parquet part per input.

Parts are cast to one fixed schema so that an empty input file and a full one read as the same
table (DuckDB and pyarrow union them by name and type).
"""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from shipyard.data.stages.filters import RULES

_RULE_FIELDS = [
    f for rule in RULES for f in ((f"{rule}_ok", pa.bool_()), (f"{rule}_reason", pa.string()))
]

SCHEMA = pa.schema(
    [
        ("doc_number", pa.int64()),
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("ordinal", pa.int64()),
        ("url", pa.string()),
        ("domain", pa.string()),
        ("crawl", pa.string()),
        ("date", pa.string()),
        ("text", pa.string()),
        ("language", pa.string()),
        ("language_score", pa.float64()),
        *_RULE_FIELDS,
        ("content_hash", pa.int64()),
        ("pii_count", pa.int64()),
        ("contaminated", pa.bool_()),
        ("keep_url", pa.bool_()),
        ("keep_exact", pa.bool_()),
        ("dup_cluster", pa.int64()),
        ("keep_minhash", pa.bool_()),
    ]
)


def write_part(stage_output: Path, dedup: pa.Table, dest: Path) -> int:
    """Join one file's last-stage output with its dedup columns; return its row count."""
    data = pq.read_table(stage_output)
    columns = {}
    for field in SCHEMA:
        source = dedup if field.name in dedup.column_names else data
        if field.name in source.column_names:
            columns[field.name] = source.column(field.name).cast(field.type)
        else:
            columns[field.name] = pa.nulls(data.num_rows, field.type)
    pq.write_table(pa.table(columns, schema=SCHEMA), dest, compression="zstd")
    return int(data.num_rows)
