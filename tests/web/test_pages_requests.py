"""The console's request lineage page and a deployment's recent requests, read from the router's
request log and the catalog (the log's lines as the router writes them)."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.web.conftest import BASE

from shipyard.cli.main import main
from shipyard.serve.deploy.state import Records
from shipyard.serve.router.lineage import request_lineage
from shipyard.serve.router.requestlog import Answered, RequestLog, requests_dir
from shipyard.web import Console, create_app
from shipyard.workspace import Workspace


@pytest.fixture
def served(home: Path, tmp_path: Path) -> dict[str, str]:
    """dataset → checkpoint → model → eval report; two answers by the model, one elsewhere."""
    ws = Workspace.open(home)
    ids: dict[str, str] = {}
    for name, kind, parent in (
        ("data", "dataset", None),
        ("ckpt", "shipyard-checkpoint", "data"),
        ("model", "model", "ckpt"),
        ("report", "eval-report", "model"),
    ):
        source = tmp_path / name
        source.mkdir()
        (source / "part.txt").write_text(name)
        inputs = [ids[parent]] if parent else []
        ids[name] = ws.put(source, kind, inputs=inputs, metadata={"tasks": ["arith"]}).id
    ws.move_alias("prod", ids["model"])
    ws.close()
    Records(home).write("chat", {"name": "chat", "status": "stopped", "spec": {"model": "prod"}})
    log = RequestLog(requests_dir(home))
    for i, deployment in enumerate(("chat", "other", "chat")):
        answered = Answered(
            f"req-{i}", 1e9 + i, deployment, "v1", ids["model"], None, "r0", 200, 7, 3, False
        )
        log.append([answered.line()])
    return ids


@pytest.fixture
def bare(console: Console) -> Iterator[TestClient]:
    with TestClient(create_app(console), base_url=BASE) as client:
        yield client


def test_the_request_page_shows_the_answers_lineage(
    bare: TestClient, served: dict[str, str], home: Path
) -> None:
    page = bare.get("/serving/chat")
    assert page.status_code == 200, page.text
    assert page.text.index('href="/requests/req-2"') < page.text.index('href="/requests/req-0"')
    assert "/requests/req-1" not in page.text  # another deployment's
    listed = bare.get("/api/serving/chat/requests").json()
    assert [r["request_id"] for r in listed] == ["req-2", "req-0"]

    page = bare.get("/requests/req-0")
    assert page.status_code == 200, page.text
    for node in ("model", "ckpt", "data", "report"):
        assert f'href="/artifacts/{served[node]}"' in page.text
    assert "(prod)" in page.text and 'href="/serving/chat"' in page.text
    ws = Workspace.open(home)
    try:
        assert bare.get("/api/requests/req-0").json() == request_lineage(ws, home, "req-0")
    finally:
        ws.close()

    assert bare.get("/requests/never-asked").status_code == 404
    bad = bare.get("/requests/%3Cscript%3Ealert(1)")
    assert bad.status_code == 400 and "<script>" not in bad.text
    assert bare.get("/api/requests/-x").status_code == 400
    assert bare.get("/api/serving/nope/requests").status_code == 404


def test_an_answer_from_a_server_outside_shipyard_has_no_model(
    bare: TestClient, served: dict[str, str], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = Answered("ext-1", 1e9, "chat", "external", None, None, "x", 200, None, None, True)
    RequestLog(requests_dir(home)).append([outside.line()])
    page = bare.get("/requests/ext-1")
    assert page.status_code == 200 and "did not name its model artifact" in page.text
    found = bare.get("/api/requests/ext-1").json()
    assert found["model"] is None and found["sources"] == found["eval_reports"] == []
    assert main(["lineage", "request", "ext-1"]) == 0
    assert "model: unknown" in capsys.readouterr().out
