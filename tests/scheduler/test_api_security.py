"""The scheduler's HTTP API under attack: real requests to a real `shipyard scheduler serve`.

One service serves the whole module; every test leaves it serving, and the module's end checks
that it printed no traceback whatever it was sent.
"""

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .live import Live, scheduler, shipyard, wait_for

SPEC = {"team": "a", "gpus": 1, "time_limit": 60, "command": ["true"]}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("security")
    with scheduler(workdir / "home", workdir) as service:
        yield service


def jobs(live: Live) -> list[dict[str, Any]]:
    code, rows = live.request("GET", "/jobs")
    assert code == 200
    return list(rows)


def audit(live: Live) -> list[dict[str, Any]]:
    path = live.home / "audit" / "scheduler.log"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_token_file_is_private(live: Live) -> None:
    path = live.home / "tokens" / "scheduler.token"
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(live.token) >= 32


def test_job_commands_are_not_readable_without_the_token(live: Live) -> None:
    secret = "--password=hunter2-" + "x" * 8
    code, body = live.request("POST", "/jobs", {**SPEC, "command": ["echo", secret]})
    assert code == 200
    for path in ("/jobs", f"/jobs/{body['id']}", "/jobs?state=queued"):
        code, reply = live.request("GET", path, auth=False)
        assert code == 401 and secret not in json.dumps(reply)
    code, rows = live.request("GET", "/jobs")
    assert code == 200 and any(secret in row["command"] for row in rows)
    assert live.request("GET", "/status", auth=False)[0] == 200  # the summary stays open
    # Let it finish, so that the module's other tests see no job change state under them.
    wait_for(lambda: live.request("GET", f"/jobs/{body['id']}")[1]["state"] == "done")


def test_browser_cross_origin_text_plain_post_starts_nothing(live: Live, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    attack = {**SPEC, "command": [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]}
    before = jobs(live)
    # What a page's `fetch(url, {method: "POST", mode: "no-cors", body})` sends: no preflight.
    headers = {"Content-Type": "text/plain;charset=UTF-8", "Origin": "http://evil.example"}
    code, body = live.request("POST", "/jobs", attack, headers, auth=False)
    assert code == 403 and "cross-origin" in body["error"]
    # Even without the Origin header (old browsers, same-site pages), no token means no job.
    code, _ = live.request("POST", "/jobs", attack, {"Content-Type": "text/plain"}, auth=False)
    assert code == 401
    assert jobs(live) == before


@pytest.mark.parametrize(
    ("headers", "auth", "status"),
    [
        ({}, False, 401),  # no token
        ({"Authorization": "Bearer " + "x" * 43}, False, 401),  # wrong token
        ({"Authorization": "Basic dXNlcjpwYXNz"}, False, 401),  # another scheme
        ({"Content-Type": "text/plain"}, True, 415),
        ({"Content-Type": "application/x-www-form-urlencoded"}, True, 415),
        ({"Content-Type": "multipart/form-data; boundary=x"}, True, 415),
        ({"Origin": "http://evil.example"}, True, 403),
        ({"Origin": "null"}, True, 403),
        ({"Origin": "http://127.0.0.1:1"}, True, 403),  # another port is another origin
        ({"Host": "evil.example"}, True, 421),  # DNS rebinding
        ({"Transfer-Encoding": "chunked"}, True, 411),
    ],
)
def test_mutations_breaking_a_rule_are_refused(
    live: Live, headers: dict[str, str], auth: bool, status: int
) -> None:
    before = jobs(live)
    code, body = live.request("POST", "/jobs", SPEC, headers, auth=auth)
    assert code == status, body
    code, body = live.request("DELETE", "/jobs/x", None, headers, auth=auth)
    assert code == status, body
    assert jobs(live) == before


def test_host_must_name_this_server_for_reads_too(live: Live) -> None:
    for path in ("/status", "/jobs", "/metrics"):
        for host in ("evil.example", f"evil.example:{live.port}", "127.0.0.1.evil.example", ""):
            code, body = live.request("GET", path, headers={"Host": host})
            assert code == 421, (path, host, body)
        assert live.request("GET", path, headers={"Host": f"localhost:{live.port}"})[0] == 200


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deep"),
        (b"[1, 2]", 400, "expected a JSON object"),
        (b'{"gpus": NaN}', 400, "not JSON"),
        (b"\xff\xfe", 400, "not JSON"),
        (b'{"team": "a"', 400, "not JSON"),
    ],
)
def test_bad_bodies_are_refused(live: Live, body: bytes, status: int, says: str) -> None:
    code, reply = live.request("POST", "/jobs", body)
    assert code == status and says in reply["error"], reply


def test_oversized_and_lying_bodies_are_refused(live: Live) -> None:
    # Declared over 1 MiB: refused from the header, before a byte of it is read.
    code, reply = live.request("POST", "/jobs", b"", {"Content-Length": str((1 << 20) + 1)})
    assert code == 413 and "limit" in reply["error"]
    # A length that is not a byte count: the HTTP server refuses it before the app sees it.
    before = jobs(live)
    code, reply = live.request("POST", "/jobs", b"{}", {"Content-Length": "-1"})
    assert code == 400 and jobs(live) == before, reply
    assert live.request("GET", "/status")[0] == 200  # still serving


def test_a_correct_request_creates_a_job_and_is_audited(live: Live) -> None:
    origin = {"Origin": f"http://127.0.0.1:{live.port}"}  # the console's own pages may send it
    code, body = live.request("POST", "/jobs", SPEC, origin)
    assert code == 200
    assert live.request("GET", f"/jobs/{body['id']}")[1]["spec"]["team"] == "a"
    lines = audit(live)
    created = [r for r in lines if r["method"] == "POST" and r["status"] == 200]
    assert created and created[-1]["path"] == "/jobs" and created[-1]["client"] == "127.0.0.1"
    assert set(created[-1]) == {"time", "service", "method", "path", "client", "status"}
    # Refusals are in the log too, with the reason (never the token).
    refused = live.request("POST", "/jobs", SPEC, auth=False)
    assert refused[0] == 401
    last = audit(live)[-1]
    assert last["status"] == 401 and "bearer token" in last["reason"]
    log = live.home / "audit" / "scheduler.log"
    assert live.token not in log.read_text() and stat.S_IMODE(log.stat().st_mode) == 0o600
    # Reads are not audited (unless refused).
    count = len(audit(live))
    live.request("GET", "/status")
    assert len(audit(live)) == count


def test_serve_refuses_an_unsafe_token_file_and_a_public_bind(tmp_path: Path) -> None:
    home = tmp_path / "home"
    token = home / "tokens" / "scheduler.token"
    token.parent.mkdir(parents=True, mode=0o700)
    token.write_text("t" * 43)
    token.chmod(0o644)
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"nodes": [{"name": "n0", "gpus": 1}], "teams": [
        {"team": "a", "nominal": {"gpu": 1}}]}))  # fmt: skip
    result = shipyard("scheduler", "serve", "--config", str(cluster), "--port", "0", home=home)
    assert result.returncode == 6 and str(token) in result.stderr and "0644" in result.stderr
    assert "Traceback" not in result.stderr
    token.chmod(0o600)
    result = shipyard(
        "scheduler", "serve", "--config", str(cluster), "--host", "0.0.0.0", home=home
    )
    assert result.returncode == 2 and "--allow-remote" in result.stderr


def test_serve_refuses_an_open_token_directory_and_a_fifo_token(tmp_path: Path) -> None:
    home = tmp_path / "home"
    token = home / "tokens" / "scheduler.token"
    token.parent.mkdir(parents=True, mode=0o700)
    token.write_text("t" * 43)
    token.chmod(0o600)
    token.parent.chmod(0o755)  # any local user may list it, or (0777) swap the token in
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"nodes": [{"name": "n0", "gpus": 1}], "teams": [
        {"team": "a", "nominal": {"gpu": 1}}]}))  # fmt: skip
    serve = ("scheduler", "serve", "--config", str(cluster), "--port", "0")
    result = shipyard(*serve, home=home)
    assert result.returncode == 6 and f"{token.parent} has mode 0755" in result.stderr
    token.parent.chmod(0o700)
    token.unlink()
    os.mkfifo(token, 0o600)  # opening it for reading used to wait for a writer forever
    result = shipyard(*serve, home=home)
    assert result.returncode == 6 and "not a regular file" in result.stderr
    assert "Traceback" not in result.stderr
