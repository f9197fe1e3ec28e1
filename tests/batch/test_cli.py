"""`shipyard batch` commands end to end, through the module's own parser (the lead registers it
in `shipyard.cli.main`): snapshot → run → status → index with catch-up → flip → rollback."""

import argparse
import json
from pathlib import Path

import pytest

from shipyard.cli import batch
from shipyard.errors import Conflict, InvalidInput
from shipyard.workspace import Workspace

from .conftest import words


def shipyard(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="shipyard")
    batch.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code: int = args.func(args)
    return code


def test_the_cli_runs_a_backfill_and_a_cut_over(
    workspace: Workspace, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace.put(tiny_model_dir, "model", name="tiny")
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    for n in range(30):
        (docs / "guide" / f"page{n}.txt").write_text(words(20 + 7 * n, n))
    (docs / "index.html").write_text(
        "<html><body><main><p>" + words(60, 99) + "</p></main></body></html>"
    )
    (docs / "broken.txt").write_bytes(b"\xff\xfe\x00bad")
    assert shipyard("batch", "snapshot", str(docs), "--name", "docs") == 0
    common = ["--model", "tiny", "--runtime", "sentence-transformers", "--max-tokens", "32"]
    assert shipyard("batch", "run", "--snapshot", "docs", *common, "--shard-minutes", "0.01") == 0
    out, err = capsys.readouterr()
    job = out.split()[-1]
    assert "non_utf8 1" in err and "long_docs" in err
    assert shipyard("batch", "status", job[:12], "--json") == 0
    state = json.loads(capsys.readouterr().out)
    assert state["done"] == state["shards"] and state["docs"] == 32
    changed = tmp_path / "changed"
    (changed / "guide").mkdir(parents=True)
    (changed / "guide" / "page3.txt").write_text("rewritten")
    assert shipyard(
        "batch", "snapshot", str(changed), "--changes-of", "docs",
        "--delete", "guide/page4.txt", "--name", "delta",
    ) == 0  # fmt: skip
    assert shipyard("batch", "index", job, "--changes", "delta", "--kind", "flat") == 0
    first = capsys.readouterr().out.split()[-1]
    assert shipyard("batch", "index", job, "--kind", "flat", "--name", "second") == 0
    assert shipyard("batch", "flip", "serving", first) == 0
    assert shipyard("batch", "flip", "serving", "second") == 0
    assert shipyard("batch", "rollback", "serving") == 0
    assert workspace.catalog.get_alias("serving") == first
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:  # a usage error, before anything is touched
        shipyard("batch", "flip", "serving", "second", "--min-recall", "1.5")
    assert refused.value.code == 2 and "--min-recall" in capsys.readouterr().err
    assert workspace.catalog.get_alias("serving") == first
    with pytest.raises(Conflict, match="already points"):
        shipyard("batch", "flip", "serving", first)
    with pytest.raises(InvalidInput):
        shipyard("batch", "snapshot", str(docs), "--delete", "x")
