"""The data pipeline's part of `shipyard demo`: the bundled crawl excerpt → token shards.

Runs when `data/crawl/warcfile.warc.gz` (vendored in the project checkout, or the path in
`$SHIPYARD_DEMO_CRAWL`) exists and the `data` extra is installed; otherwise says why it skipped.
"""

import os
import sys
from collections.abc import Callable
from pathlib import Path

import shipyard
from shipyard.workspace import Workspace, shipyard_home

# the excerpt is 16 mostly non-English pages: select on dedup and contamination only
DEMO_SELECT = "keep_exact AND keep_minhash AND NOT contaminated"
DEFAULT_CRAWL = Path(shipyard.__file__).resolve().parents[2] / "data" / "crawl" / "warcfile.warc.gz"


def crawl_to_tokens(ws: Workspace) -> list[str]:
    """Token dataset ids made from the crawl excerpt (empty when it cannot run)."""
    crawl = Path(os.environ.get("SHIPYARD_DEMO_CRAWL") or DEFAULT_CRAWL)
    if not crawl.is_file():
        print(f"crawl     skipped: no crawl excerpt at {crawl}", file=sys.stderr)
        return []
    try:
        from shipyard.data.config import PipelineConfig, SelectConfig, TokenizeConfig
        from shipyard.data.pipeline import run_pipeline
    except ImportError as exc:
        print(f"crawl     skipped: pip install 'shipyard[data]' ({exc.name})", file=sys.stderr)
        return []
    config = PipelineConfig(
        "demo",
        (str(crawl.resolve()),),
        select=SelectConfig(where=DEMO_SELECT),
        tokenize=TokenizeConfig(vocab_size=2000, shard_tokens=1 << 16),
    )
    result = run_pipeline(config, ws, shipyard_home(), print)
    return [result.tokens_id] if result.tokens_id else []


def crawl_sft(ws: Workspace, model: str, say: Callable[[str], None] = print) -> str:
    """SFT data from the crawl's selected text (a document's opening as the prompt, its
    continuation as the response) in `model`'s chat format, stored as `demo-sft`; its id."""
    from shipyard.data.sft import TableSource, build

    built = build(ws, model, TableSource("demo-annotated", DEMO_SELECT, None), "demo-sft", say=say)
    assert built.artifact is not None  # stored under an alias, never only written to a directory
    return built.artifact.id
