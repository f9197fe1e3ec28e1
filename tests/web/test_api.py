"""The JSON API over a real catalog: reads, lineage depth, and the guarded alias move."""

import json
import socket
from pathlib import Path

from fastapi.testclient import TestClient
from tests.web.conftest import auth

from shipyard.web import Console
from shipyard.workspace import Workspace


def test_search_by_alias_name_and_kind(client: TestClient, chain: list[str]) -> None:
    found = client.get("/api/artifacts", params={"q": "prod"}).json()
    assert [a["id"] for a in found] == [chain[5]]
    assert found[0]["aliases"] == ["prod"]
    by_name = client.get("/api/artifacts", params={"q": "step-2"}).json()
    assert [a["id"] for a in by_name] == [chain[2]]
    models = client.get("/api/artifacts", params={"kind": "model"}).json()
    assert {a["id"] for a in models} == set(chain[3:])


def test_artifact_detail_has_files_pieces_and_alias_history(
    client: TestClient, chain: list[str]
) -> None:
    detail = client.get("/api/artifacts/prod").json()
    assert detail["id"] == chain[5]
    assert detail["files"][0]["path"] == "part.txt"
    assert detail["files"][0]["pieces"][0]["size"] == detail["files"][0]["size"]
    history = detail["alias_history"]["prod"]
    assert [(e["old_id"], e["new_id"]) for e in history] == [(None, chain[5])]


def test_lineage_depth_limits_the_walk(client: TestClient, chain: list[str]) -> None:
    # Each step is artifact → run → artifact: two edges.
    up2 = client.get("/api/artifacts/prod/lineage", params={"direction": "up", "depth": 2}).json()
    artifacts = {n["id"] for n in up2["nodes"] if n["type"] == "artifact"}
    assert artifacts == {chain[5], chain[4]}
    assert max(e["depth"] for e in up2["edges"]) == 2
    up = client.get("/api/artifacts/prod/lineage", params={"depth": 20}).json()
    assert {n["id"] for n in up["nodes"] if n["type"] == "artifact"} == set(chain)
    down = client.get(
        f"/api/artifacts/{chain[0]}/lineage", params={"direction": "down", "depth": 4}
    ).json()
    assert {n["id"] for n in down["nodes"] if n["type"] == "artifact"} == set(chain[:3])


def test_bad_requests_are_named_errors(client: TestClient) -> None:
    bad_depth = client.get("/api/artifacts/prod/lineage", params={"depth": 0})
    assert bad_depth.status_code == 400
    assert "depth" in bad_depth.json()["error"]
    missing = client.get("/api/artifacts/nosuchalias")
    assert missing.status_code == 404
    assert "nosuchalias" in missing.json()["error"]
    assert client.get("/api/nothing-here").status_code == 404
    page = client.get("/artifacts/nosuchalias")
    assert page.status_code == 404 and "nosuchalias" in page.text


def test_alias_move_needs_token_json_and_same_origin(
    client: TestClient, console: Console, chain: list[str], home: Path
) -> None:
    body = {"target": chain[4], "expect": chain[5]}
    assert client.put("/api/aliases/prod", json=body).status_code == 401
    wrong_type = {**auth(console), "Content-Type": "text/plain"}
    assert (
        client.put("/api/aliases/prod", content=json.dumps(body), headers=wrong_type).status_code
        == 415
    )
    foreign = {**auth(console), "Origin": "http://evil.example"}
    assert client.put("/api/aliases/prod", json=body, headers=foreign).status_code == 403
    assert client.get("/api/aliases").json()["prod"] == chain[5]  # nothing moved

    moved = client.put("/api/aliases/prod", json=body, headers=auth(console))
    assert moved.status_code == 200, moved.text
    assert client.get("/api/aliases").json()["prod"] == chain[4]
    stale = client.put("/api/aliases/prod", json=body, headers=auth(console))
    assert stale.status_code == 409  # compare-and-swap: it no longer points at chain[5]
    assert "expected" in stale.json()["error"]

    audit = [json.loads(line) for line in (home / "audit" / "console.log").read_text().splitlines()]
    assert [a["status"] for a in audit] == [401, 415, 403, 200, 409]
    assert all(a["path"] == "/api/aliases/prod" for a in audit)
    history = Workspace.open(home).catalog.alias_history("prod")
    assert history[-1].by.endswith("via console")


def test_alias_move_refuses_bad_bodies(client: TestClient, console: Console) -> None:
    for body in (
        {},
        {"target": 5, "expect": None},
        {"target": "prod"},
        {"target": "x", "expect": 3},
    ):
        reply = client.put("/api/aliases/prod", json=body, headers=auth(console))
        assert reply.status_code == 400, body
    not_object = client.put("/api/aliases/prod", content=b"[1]", headers=auth(console))
    assert not_object.status_code == 400
    assert client.put("/api/aliases/x", content=b"NaN", headers=auth(console)).status_code == 400


def test_foreign_host_is_refused_even_for_reads(client: TestClient) -> None:
    reply = client.get("/api/artifacts", headers={"Host": "evil.example"})
    assert reply.status_code == 421


def test_every_page_renders(client: TestClient, chain: list[str]) -> None:
    for path in (
        "/",
        "/artifacts?q=a",
        f"/artifacts/{chain[3]}",
        "/artifacts/prod/lineage?direction=up&depth=6",
        f"/artifacts/{chain[0]}/lineage?direction=down&depth=3",
        "/runs",
        "/scheduler",
        "/data",
        "/queues",
        "/distribution",
        "/api/docs",
    ):
        reply = client.get(path)
        assert reply.status_code == 200, (path, reply.text[:500])
        assert "<nav>" in reply.text
    graph = client.get("/artifacts/prod/lineage?depth=20").text
    assert graph.count('class="node artifact"') == 6
    assert "cdn" not in client.get("/").text.lower()


def test_openapi_and_metrics(client: TestClient) -> None:
    paths = client.get("/api/openapi.json").json()["paths"]
    assert "/api/artifacts/{ref}/lineage" in paths
    assert "put" in paths["/api/aliases/{name}"]
    client.get("/api/artifacts")
    metrics = client.get("/metrics").text
    assert 'shipyard_web_requests_total{route="/api/artifacts",status="200"}' in metrics


def test_search_pages_newest_first_and_reads_the_query_literally(
    client: TestClient, chain: list[str], home: Path
) -> None:
    from shipyard.catalog import ArtifactRecord

    names = ["a%b", "a_b", "axb", 'say "Hi"', "back\\slash", "ÉCLAIR step", "plain"]
    ws = Workspace.open(home)
    for index, name in enumerate(names * 40):
        record = ArtifactRecord(f"{index:064x}", "extra", 1, 1, 1e9 + index, None, {"name": name})
        ws.catalog.add_artifact(record)
    ws.close()

    def ids(**params: object) -> list[str]:
        reply = client.get("/api/artifacts", params=params)
        assert reply.status_code == 200, reply.text
        return [a["id"] for a in reply.json()]

    everything = ids(limit=200) + ids(offset=200, limit=200)  # newest first: the chain, then these
    assert len(everything) == len(names) * 40 + len(chain)
    assert everything[len(chain) : len(chain) + 2] == [f"{i:064x}" for i in (279, 278)]
    assert ids(offset=5, limit=7) == everything[5:12]
    for query, matching in [
        ("a%b", {"a%b"}),
        ("a_b", {"a_b"}),
        ('"hi', {'say "Hi"'}),
        ("k\\s", {"back\\slash"}),
        ("éclair", set()),  # only ASCII letters are folded
        ("ÉCLAIR STEP", {"ÉCLAIR step"}),
    ]:
        got = ids(q=query, kind="extra", limit=200)
        want = [f"{i:064x}" for i in reversed(range(len(names) * 40)) if names[i % 7] in matching]
        assert got == want, query
    assert client.get("/api/artifacts", params={"limit": 0}).status_code == 400
    assert client.get("/api/artifacts", params={"offset": -1}).status_code == 400
    page = client.get("/artifacts", params={"kind": "extra"}).text
    assert 'id="next"' in page and "offset=200" in page
    assert 'id="next"' not in client.get("/artifacts", params={"kind": "extra", "offset": 200}).text


def _read_reply(sock: socket.socket) -> str:
    """One whole HTTP reply: its head, then as many body bytes as its Content-Length says (the
    two may arrive in separate packets)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data.decode()
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return (head + b"\r\n\r\n" + body).decode()


def test_an_oversized_declared_body_is_refused_before_it_is_read(console: Console) -> None:
    import threading
    import time

    import uvicorn

    from shipyard.web import create_app

    config = uvicorn.Config(create_app(console), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not (server.started and server.servers):
        assert time.monotonic() < deadline, "console did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            headers = {**auth(console), "Host": "127.0.0.1", "Content-Length": str(2 << 20)}
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            sock.sendall(f"PUT /api/aliases/x HTTP/1.1\r\n{head}\r\n".encode())  # no body sent
            reply = _read_reply(sock)
        assert reply.startswith("HTTP/1.1 413"), reply[:200]
        assert "limit" in reply
    finally:
        server.should_exit = True


def test_the_scheduler_view_never_shows_a_jobs_command(client: TestClient, home: Path) -> None:
    from shipyard.scheduler.model import Job
    from shipyard.scheduler.store import JobStore

    store = JobStore()
    try:
        store.submit(
            Job(id="j1", team="ml", gpus=1, time_limit=60.0), ["train.py", "--db-password=hunter2"]
        )
    finally:
        store.close()
    reply = client.get("/api/scheduler")
    assert reply.status_code == 200
    assert [job["spec"]["team"] for job in reply.json()["jobs"]] == ["ml"]
    assert "hunter2" not in reply.text
    assert "hunter2" not in client.get("/scheduler").text
