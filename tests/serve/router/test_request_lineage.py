"""An answer's lineage end to end: a real router in front of a real replica of a tiny model whose
catalog lineage is dataset → checkpoint → model, with an eval report about the model."""

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.serve.router_stub import Proc, start_router

from shipyard.cli.main import main
from shipyard.httpguard import read_token
from shipyard.serve.models import put_model_dir
from shipyard.serve.request_id import well_formed
from shipyard.serve.router.requestlog import RequestLog, requests_dir
from shipyard.workspace import Workspace

HOSTILE = ["<script>alert(1)</script>", "x" * 129, "../../etc/passwd", "a b", "-rf", "é"]


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def put_dir(ws: Workspace, tmp: Path, name: str, kind: str, inputs: list[str], **meta: Any) -> str:
    source = tmp / name
    source.mkdir()
    (source / "part.txt").write_text(f"{name}\n")
    return ws.put(source, kind, inputs=inputs, metadata=meta).id


@pytest.fixture
def chain(workspace: Workspace, tiny_model_dir: Path, tmp_path: Path) -> dict[str, str]:
    """dataset → checkpoint → model (alias `tuned`) → eval report."""
    data = put_dir(workspace, tmp_path, "data", "dataset", [])
    ckpt = put_dir(workspace, tmp_path, "ckpt", "shipyard-checkpoint", [data], step=100)
    model = put_model_dir(
        workspace, tiny_model_dir, "tuned", source="test:tuned", inputs=(ckpt,)
    ).id
    report = put_dir(
        workspace, tmp_path, "report", "eval-report", [model], model_id=model, tasks=["arith"]
    )
    return {"data": data, "ckpt": ckpt, "model": model, "report": report}


@pytest.fixture
def router(shipyard_home: Path) -> Iterator[list[Proc]]:
    procs = [start_router(shipyard_home)]
    yield procs
    for proc in procs:
        proc.stop()


def deploy(router: Proc, home: Path, replica_url: str) -> None:
    body = {"versions": [{"version": "v1", "replicas": [{"name": "r0", "url": replica_url}]}]}
    reply = httpx.put(
        f"{router.url}/admin/deployments/chat",
        content=json.dumps(body),
        headers={
            "authorization": f"Bearer {read_token('router', home)}",
            "content-type": "application/json",
        },
    )
    assert reply.status_code == 200, reply.text


def logged(home: Path, rid: str) -> dict[str, Any] | None:
    return RequestLog(requests_dir(home)).find(rid)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The real command, in this process (a subprocess costs seconds of imports)."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ask(router: Proc, rid: str | None = None, **body: Any) -> httpx.Response:
    headers: dict[str, str | bytes] = {"content-type": "application/json"}
    if rid is not None:
        headers["x-request-id"] = rid.encode()  # as bytes: a hostile client sends any
    sent = {"model": "chat", "prompt": "Hello", "max_tokens": 3, "temperature": 0} | body
    return httpx.post(f"{router.url}/v1/completions", json=sent, headers=headers, timeout=120)


@pytest.mark.slow
def test_an_answer_names_its_request_and_the_log_leads_to_its_lineage(
    chain: dict[str, str],
    router: list[Proc],
    start_replica: Callable[..., Any],
    shipyard_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    replica = start_replica("--model", "tuned", "--name", "r0", "--served-model-name", "chat")
    deploy(router[0], shipyard_home, replica.url)

    # A client's well-formed id comes back in the header and the body, and is logged.
    reply = ask(router[0], "client-req.1")
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-request-id"] == "client-req.1"
    assert reply.json()["id"] == "cmpl-client-req.1"
    record = wait_for(lambda: logged(shipyard_home, "client-req.1"), "the log record")
    assert record["deployment"] == "chat" and record["version"] == "v1"
    assert record["artifact"] == chain["model"] and record["replica"] == "r0"
    assert record["status"] == 200 and record["stream"] is False
    assert record["tokens_out"] == 3 and record["tokens_in"] > 0
    assert any('"request_id": "client-req.1"' in line for line in replica.stderr)  # replica log

    # A stream without an id gets the router's, in the header and in every chunk.
    streamed = httpx.post(
        f"{router[0].url}/v1/chat/completions",
        json={"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
        | {"max_tokens": 2, "temperature": 0},
        headers={"content-type": "application/json"},
        timeout=120,
    )
    rid = streamed.headers["x-request-id"]
    assert well_formed(rid)
    events = [
        json.loads(line[5:]) for line in streamed.text.splitlines() if line.startswith("data: {")
    ]
    assert events and all(e["id"] == f"chatcmpl-{rid}" for e in events)
    record = wait_for(lambda: logged(shipyard_home, rid), "the streamed request's record")
    assert record["stream"] is True and record["status"] == 200 and record["tokens_out"] == 2

    # A hostile id is replaced by a fresh one; the raw one reaches neither answer nor log.
    for bad in HOSTILE:
        reply = ask(router[0], bad)
        assert reply.status_code == 200, reply.text
        fresh = reply.headers["x-request-id"]
        assert fresh != bad and well_formed(fresh) and reply.json()["id"] == f"cmpl-{fresh}"
        wait_for(lambda rid=fresh: logged(shipyard_home, rid), "the replaced id's record")
    text = "".join(p.read_text() for p in requests_dir(shipyard_home).glob("*.jsonl"))
    assert not any(json.dumps(bad)[1:-1] in text for bad in HOSTILE)

    # The replica applies the same rule to whoever calls it.
    direct = httpx.post(
        f"{replica.url}/v1/completions",
        json={"model": "chat", "prompt": "Hi", "max_tokens": 1},
        headers={"content-type": "application/json", "x-request-id": "bad id"},
        timeout=120,
    )
    fresh = direct.headers["x-request-id"]
    assert fresh != "bad id" and well_formed(fresh) and direct.json()["id"] == f"cmpl-{fresh}"
    assert direct.headers["x-shipyard-artifact"] == chain["model"]

    # `shipyard lineage request ID` walks from the answer to the checkpoint, data and report.
    code, out, err = cli(capsys, "lineage", "request", "client-req.1", "--json")
    assert code == 0, err
    found = json.loads(out)
    assert found["model"]["id"] == chain["model"] and found["model"]["aliases"] == ["tuned"]
    kinds = {s["id"]: s["kind"] for s in found["sources"]}
    assert kinds == {chain["ckpt"]: "shipyard-checkpoint", chain["data"]: "dataset"}
    assert [r["id"] for r in found["eval_reports"]] == [chain["report"]]
    code, out, err = cli(capsys, "lineage", "request", "client-req.1")
    assert code == 0, err
    for node in (chain["model"], chain["ckpt"], chain["data"], chain["report"]):
        assert node[:16] in out
    code, out, err = cli(capsys, "lineage", "request", "<bad id>")
    assert code == 2 and err.count("\n") == 1 and "request id" in err
    code, out, err = cli(capsys, "lineage", "request", "never-asked")
    assert code == 4 and err.count("\n") == 1 and "never-asked" in err

    # A router stopped right after answering writes what it queued; a new one keeps the log.
    last = ask(router[0], "just-before-stop")
    assert last.status_code == 200
    router[0].popen.send_signal(signal.SIGTERM)
    router[0].popen.wait(timeout=60)
    assert logged(shipyard_home, "just-before-stop") is not None
    router.append(start_router(shipyard_home))
    deploy(router[1], shipyard_home, replica.url)
    assert ask(router[1], "after-restart").status_code == 200
    wait_for(lambda: logged(shipyard_home, "after-restart"), "the new router's record")
    assert logged(shipyard_home, "client-req.1") is not None
