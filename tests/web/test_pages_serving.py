"""The console's serving pages and API read the deployment records `serve.deploy` writes."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.web.conftest import BASE

from shipyard.serve.deploy.state import Records
from shipyard.web import Console, create_app

CURRENT, CANDIDATE = "a" * 64, "b" * 64


@pytest.fixture
def bare(console: Console) -> Iterator[TestClient]:
    with TestClient(create_app(console), base_url=BASE) as client:
        yield client


def fill(home: Path) -> None:
    records = Records(home)
    replica = {"name": "chat-aaa-0", "url": "http://127.0.0.1:9001", "pid": 11, "load_s": 1.5}
    records.write(
        "chat",
        {
            "name": "chat",
            "spec": {"model": "chat-model", "canary": {"stages": [1, 5, 25, 100]}},
            "status": "running",
            "controller_pid": os.getpid(),
            "router": "http://127.0.0.1:8700",
            "current": CURRENT[:12],
            "previous": None,
            "artifacts": {CURRENT[:12]: CURRENT, CANDIDATE[:12]: CANDIDATE},
            "replicas": {CURRENT[:12]: [replica], CANDIDATE[:12]: []},
            "rollout": {
                "current": CURRENT,
                "candidate": CANDIDATE,
                "stage": 2,
                "status": "running",
            },
        },
    )
    for action, to in (("hold", 1), ("up", 3)):
        entry = {"kind": "autoscale", "version": CURRENT[:12], "action": action, "from": 1}
        entry.update(to=to, reason=f"why {action}", inputs={"queue_per_replica": 4.5})
        records.log("chat", entry)
    records.log("chat", {"kind": "canary", "action": "begin", "to": CANDIDATE})


def test_deployment_versions_weights_and_decisions(bare: TestClient, home: Path) -> None:
    fill(home)
    listed = bare.get("/api/serving").json()
    assert [(d["name"], d["status"], d["replicas"]) for d in listed] == [("chat", "running", 1)]
    one = bare.get("/api/serving/chat").json()
    weights = {v["version"]: v["weight"] for v in one["versions"]}
    assert weights == {CURRENT[:12]: 0.75, CANDIDATE[:12]: 0.25}
    assert one["versions"][0]["replicas"][0]["url"] == "http://127.0.0.1:9001"
    assert [d["action"] for d in one["decisions"]] == ["up", "hold"]  # newest first, no canary
    assert one["decisions"][0]["inputs"] == {"queue_per_replica": 4.5}
    page = bare.get("/serving/chat").text
    assert "75%" in page and "25%" in page and "why up" in page and "queue_per_replica=4.5" in page
    assert 'href="/serving/chat"' in bare.get("/serving").text


def test_serving_empty_and_unknown(bare: TestClient) -> None:
    assert bare.get("/api/serving").json() == []
    assert "no deployments" in bare.get("/serving").text
    missing = bare.get("/api/serving/nope")
    assert missing.status_code == 404 and "nope" in missing.text
    assert bare.get("/api/serving/BAD!").status_code == 400
