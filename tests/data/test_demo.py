from pathlib import Path

import pytest

from shipyard.data.demo import crawl_to_tokens
from shipyard.loader import TokenDataset
from shipyard.workspace import Workspace


def test_demo_skips_without_the_crawl_excerpt(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHIPYARD_DEMO_CRAWL", str(tmp_path / "absent.warc.gz"))
    assert crawl_to_tokens(workspace) == []
    assert workspace.catalog.list_artifacts() == []


def test_demo_turns_the_crawl_excerpt_into_tokens(
    crawl_dir: Path, workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHIPYARD_DEMO_CRAWL", str(crawl_dir / "warcfile.warc.gz"))
    [tokens] = crawl_to_tokens(workspace)
    workspace.get(tokens, tmp_path / "tokens")
    dataset = TokenDataset(tmp_path / "tokens")
    assert dataset.num_docs >= 10 and dataset.num_tokens > 1000
    kinds = {
        workspace.catalog.get_artifact(e.parent).kind
        for e in workspace.catalog.lineage(tokens, "up")  # type: ignore[union-attr]
        if not e.parent.startswith("run-")
    }
    assert kinds == {"crawl", "dataset", "tokenizer"}
