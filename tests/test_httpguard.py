"""`shipyard.httpguard`: token files, the request rules, and a guarded server under fuzzing."""

import contextlib
import http.client
import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipyard.errors import InvalidInput, NotFound, StorageError
from shipyard.httpguard import (
    Guard,
    Refused,
    call,
    is_loopback,
    load_or_create_token,
    read_token,
    token_path,
)
from shipyard.httpguard.asgi import guard_middleware, json_errors, start_server

TOKEN = "k" * 43


def test_token_is_made_private_once_and_reused(tmp_path: Path) -> None:
    first = load_or_create_token("svc", tmp_path)
    path = token_path("svc", tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(first) >= 32 and load_or_create_token("svc", tmp_path) == first
    assert read_token("svc", tmp_path) == first
    assert [p.name for p in path.parent.iterdir()] == ["svc.token"]  # no temp file left


def test_concurrent_first_starts_agree_on_one_token(tmp_path: Path) -> None:
    tokens: list[str] = []
    threads = [
        threading.Thread(target=lambda: tokens.append(load_or_create_token("svc", tmp_path)))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tokens) == 8 and len(set(tokens)) == 1


def test_unsafe_token_files_are_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = token_path("svc", tmp_path)
    load_or_create_token("svc", tmp_path)
    for mode in (0o644, 0o640, 0o602):
        path.chmod(mode)
        with pytest.raises(StorageError, match=f"{path} has mode {mode:04o}"):
            load_or_create_token("svc", tmp_path)
    path.chmod(0o600)
    # Owned by someone else: a real chown where we may, else we pretend to be someone else.
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: path.stat().st_uid + 1)
    with pytest.raises(StorageError, match=f"{path} is owned by uid"):
        read_token("svc", tmp_path)
    monkeypatch.undo()
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StorageError, match="cannot open safely"):
        load_or_create_token("svc", tmp_path)
    path.unlink()
    for bad in ("short", "x" * 40 + " y", "é" * 40):
        path.write_text(bad)
        path.chmod(0o600)
        with pytest.raises(StorageError, match="URL-safe characters"):
            read_token("svc", tmp_path)
    path.unlink()
    with pytest.raises(StorageError, match="does not exist"):
        read_token("svc", tmp_path)


def test_token_directory_others_can_reach_is_refused(tmp_path: Path) -> None:
    path = token_path("svc", tmp_path)
    load_or_create_token("svc", tmp_path)
    for mode in (0o777, 0o755, 0o750):
        path.parent.chmod(mode)
        with pytest.raises(StorageError, match=f"directory {path.parent} has mode {mode:04o}"):
            read_token("svc", tmp_path)
    path.parent.chmod(0o700)
    # A home whose tokens/ is a symlink to a directory someone else controls.
    other = tmp_path / "other"
    (other / "tokens").mkdir(parents=True, mode=0o777)
    (other / "tokens").chmod(0o777)
    (other / "tokens" / "svc.token").write_text("t" * 43)
    (other / "tokens" / "svc.token").chmod(0o600)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "tokens").symlink_to(other / "tokens")
    with pytest.raises(StorageError, match="symbolic link"):
        read_token("svc", linked)
    with pytest.raises(StorageError, match="symbolic link"):
        load_or_create_token("svc", linked)


def test_a_fifo_token_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    path = token_path("svc", tmp_path)
    path.parent.mkdir(mode=0o700)
    os.mkfifo(path, 0o600)
    with pytest.raises(StorageError, match="not a regular file"):
        load_or_create_token("svc", tmp_path)


def test_loopback_and_host_rules() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "example.com", ""))
    local = Guard("svc", TOKEN, "127.0.0.1")
    for host in ("127.0.0.1", "127.0.0.1:8642", "localhost:1", "[::1]:8642", "LOCALHOST"):
        assert local.allows_host(host), host
    for host in ("evil.example", "10.0.0.1", "127.0.0.1@evil", "127.0.0.1/x", "", "a b", "[::1"):
        assert not local.allows_host(host), host
    public = Guard("svc", TOKEN, "0.0.0.0")
    assert public.allows_host("10.1.2.3:8642") and public.allows_host("[fe80::1]")
    assert not public.allows_host("evil.example")  # a name can be rebound; an IP cannot
    named = Guard("svc", TOKEN, "gpu-head", extra_hosts=frozenset({"sched.corp"}))
    assert named.allows_host("gpu-head:8642") and named.allows_host("sched.corp")
    assert not named.allows_host("10.1.2.3")


def headers(**values: str) -> dict[str, str]:
    base = {
        "Host": "127.0.0.1:8642",
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json; charset=utf-8",
    }
    base.update({k.replace("_", "-"): v for k, v in values.items()})
    return {k: v for k, v in base.items() if v != "-"}


@pytest.mark.parametrize(
    ("method", "sent", "status"),
    [
        ("GET", headers(Authorization="-", Content_Type="-"), None),
        ("GET", headers(Host="evil.example"), 421),
        ("POST", headers(), None),
        ("DELETE", headers(Origin="http://127.0.0.1:8642"), None),
        ("POST", headers(Authorization="-"), 401),
        ("PUT", headers(Authorization="bearer " + TOKEN[:-1]), 401),
        ("PATCH", headers(Authorization="Bearer " + TOKEN + "x"), 401),
        ("POST", headers(Authorization="Bearer é"), 401),  # non-ASCII: refused, not a crash
        ("POST", headers(Content_Type="text/plain"), 415),
        ("POST", headers(Content_Type="-"), 415),
        ("POST", headers(Origin="https://127.0.0.1:8642"), 403),
    ],
)
def test_check(method: str, sent: dict[str, str], status: int | None) -> None:
    guard = Guard("svc", TOKEN, "127.0.0.1")
    if status is None:
        guard.check(method, sent)
        return
    with pytest.raises(Refused) as refused:
        guard.check(method, sent)
    assert refused.value.status == status


def test_repeated_security_headers_are_refused() -> None:
    guard = Guard("svc", TOKEN, "127.0.0.1")
    twice = [("Host", "127.0.0.1"), ("Host", "evil.example")]
    with pytest.raises(Refused, match="Host sent twice"):
        guard.check("GET", _Pairs(twice))


class _Pairs:
    """Headers as a list of pairs, the way a request may repeat one."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs

    def items(self) -> list[tuple[str, str]]:
        return self.pairs


def test_read_json_bounds_and_shapes() -> None:
    guard = Guard("svc", TOKEN, "127.0.0.1", max_body=100)

    def read(body: bytes, length: str | None = None) -> dict[str, Any]:
        sent = {"Content-Length": str(len(body)) if length is None else length}
        return guard.read_json(sent, lambda n: body[:n])

    assert read(b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    assert read(b"") == {}
    for body, length, status in (
        (b"{}", "101", 413),
        (b"{}", "3", 400),  # shorter than declared
        (b"{}", "1e3", 400),
        (b"{}", "9" * 40, 400),
        (b"[]", None, 400),
        (b'"x"', None, 400),
        (b"[" * 50 + b"]" * 50, None, 400),
        (b'{"a": Infinity}', None, 400),
    ):
        with pytest.raises(Refused) as refused:
            read(body, length)
        assert refused.value.status == status, (body, length)
    deep = Guard("svc", TOKEN, "127.0.0.1")
    nested = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(Refused, match="nested too deep"):
        deep.read_json({"Content-Length": str(len(nested))}, lambda n: nested[:n])


def test_audit_lines(tmp_path: Path) -> None:
    guard = Guard("svc", TOKEN, "127.0.0.1", tmp_path / "audit" / "svc.log")
    guard.audit("POST", "/x?a=\n", "127.0.0.1", 200)
    guard.audit("DELETE", "/y", "127.0.0.1", 401, "a bearer token is required")
    lines = (tmp_path / "audit" / "svc.log").read_text().splitlines()
    assert len(lines) == 2 and '"path": "/x?a=\\n"' in lines[0]  # one line, even with a newline
    assert '"status": 401' in lines[1] and '"reason"' in lines[1]


def test_audit_never_records_a_credential_in_the_query(tmp_path: Path) -> None:
    guard = Guard("svc", TOKEN, "127.0.0.1", tmp_path / "audit" / "svc.log")
    guard.audit("POST", f"/x?token={TOKEN}&n=1", "127.0.0.1", 401)
    guard.audit("POST", "/x?api_key=sk-live-123&Access%5FToken=abc&page=2", "127.0.0.1", 200)
    guard.audit("GET", f"/x/{TOKEN}?q={TOKEN[:10]}", "127.0.0.1", 404)
    text = (tmp_path / "audit" / "svc.log").read_text()
    assert TOKEN not in text and "sk-live-123" not in text and "abc" not in text
    lines = [json.loads(line)["path"] for line in text.splitlines()]
    assert lines[0] == "/x?token=[redacted]&n=1"
    assert lines[1] == "/x?api_key=[redacted]&Access%5FToken=[redacted]&page=2"
    assert lines[2] == f"/x/[redacted]?q={TOKEN[:10]}"


# A guarded toy service over real HTTP


def echo_app(guard: Guard) -> FastAPI:
    app = FastAPI()
    json_errors(app, guard.service)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    def echo(path: str, request: Request) -> Any:
        if path == "missing":
            raise NotFound("no such thing")
        if path == "bad":
            raise InvalidInput("bad thing")
        body = getattr(request.state, "body", {})
        return {"method": request.method, "parts": path.split("/"), "body": body}

    app.middleware("http")(guard_middleware(guard))
    return app


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Guard]]:
    guard = Guard.start("echo", tmp_path_factory.mktemp("echo"), "127.0.0.1")
    server = start_server(echo_app(guard), "127.0.0.1", 0, "echo")
    yield f"http://127.0.0.1:{server.port}", guard
    server.stop()


def test_a_real_requests_credentials_stay_out_of_the_audit_log(echo: tuple[str, Guard]) -> None:
    url, guard = echo
    assert guard.audit_path is not None
    presented = "p" * 43
    with pytest.raises(StorageError, match="401"):
        call(f"{url}/a?access_token={presented}&token={guard.token}", "POST", {}, presented)
    call(f"{url}/b?api_key={presented}", "POST", {"x": 1}, guard.token)
    text = guard.audit_path.read_text()
    assert "/a?access_token=[redacted]&token=[redacted]" in text and "/b?api_key=[redacted]" in text
    assert presented not in text and guard.token not in text


def test_client_maps_replies_to_errors(echo: tuple[str, Guard], tmp_path: Path) -> None:
    url, guard = echo
    assert call(f"{url}/a/b", "POST", {"x": 1}, guard.token)["body"] == {"x": 1}
    assert call(f"{url}/a")["parts"] == ["a"]
    with pytest.raises(NotFound, match=f"{url}/missing: 404 no such thing"):
        call(f"{url}/missing")
    with pytest.raises(InvalidInput, match="400 bad thing"):
        call(f"{url}/bad", "DELETE", None, guard.token)
    with pytest.raises(StorageError, match="401"):
        call(f"{url}/a", "POST", {}, "wrong")
    with pytest.raises(InvalidInput, match="expected http"):
        call(f"file://{tmp_path}")
    with pytest.raises(StorageError, match=r"no answer from http://127\.0\.0\.1:9/"):
        call("http://127.0.0.1:9/")


# What a client may send: any method, headers from a small hostile vocabulary, any body.
_VALUES = st.sampled_from(
    ["", "application/json", "text/plain", "Bearer ", "null", "evil.example", "127.0.0.1",
     "-1", "0", "99999999999999999999", "chunked", "http://127.0.0.1", "é", "\t"]
)  # fmt: skip
_NAMES = st.sampled_from(
    ["Host", "Origin", "Authorization", "Content-Type", "Content-Length", "Transfer-Encoding"]
)
_KNOWN = {200, 400, 401, 403, 404, 411, 413, 415, 421}


def _is_object(body: bytes) -> bool:
    """The guard's contract: UTF-8 JSON, an object or nothing, no NaN or Infinity."""

    def refuse(name: str) -> None:
        raise ValueError(name)

    try:
        return not body or isinstance(json.loads(body.decode(), parse_constant=refuse), dict)
    except (ValueError, RecursionError):
        return False


@pytest.mark.fuzz
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]),
    sent=st.lists(st.tuples(_NAMES, _VALUES | st.text(max_size=20)), max_size=6),
    good=st.booleans(),
    body=st.binary(max_size=300)
    | st.recursive(st.just({}), lambda c: st.lists(c) | st.dictionaries(st.text(), c))
    .map(lambda v: json.dumps(v).encode()),
)  # fmt: skip
def test_fuzzed_requests_get_a_refusal_or_an_answer(
    echo: tuple[str, Guard], method: str, sent: list[tuple[str, str]], good: bool, body: bytes
) -> None:
    url, guard = echo
    port = int(url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, "/x", skip_host=True, skip_accept_encoding=True)
        if good:  # a well-formed request, then the fuzzed headers on top
            conn.putheader("Host", f"127.0.0.1:{port}")
            conn.putheader("Authorization", f"Bearer {guard.token}")
            conn.putheader("Content-Type", "application/json")
        for name, value in sent:
            with contextlib.suppress(ValueError):  # http.client refuses a line break
                conn.putheader(name, value)
        if not any(name == "Content-Length" for name, _ in sent):
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        assert response.status in _KNOWN, (response.status, response.read())
        if good and not sent:  # nothing fuzzed but the body: it alone decides
            assert (response.status == 200) == (method == "GET" or _is_object(body)), body
    finally:
        conn.close()
    assert call(f"{url}/alive")["parts"] == ["alive"]  # and it keeps serving
