"""The activator (a version at zero): only a request a replica would take counts as demand."""

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from shipyard.httpguard.apikeys import ApiKeys, hash_key, new_key
from shipyard.serve.deploy.activator import Activator


@pytest.fixture
def activator(tmp_path: Path) -> Iterator[Activator]:
    endpoint = Activator("chat", tmp_path, CollectorRegistry())
    yield endpoint
    endpoint.close()


def test_a_pages_cross_origin_post_does_not_wake_a_deployment(activator: Activator) -> None:
    body = json.dumps({"model": "chat", "prompt": "hi"})
    url = f"{activator.url}/v1/completions"
    page = {"content-type": "text/plain;charset=UTF-8", "origin": "http://evil.example"}
    refused = httpx.post(url, content=body, headers=page)
    assert refused.status_code == 403 and "cross-origin" in refused.json()["error"]["message"]
    plain = httpx.post(url, content=body, headers={"content-type": "text/plain"})
    assert plain.status_code == 415
    assert activator.take_waiting() == 0 and activator.turned_away == 0
    woke = httpx.post(url, content=body, headers={"content-type": "application/json"})
    assert woke.status_code == 503 and woke.headers["retry-after"]
    assert activator.take_waiting() == 1


def test_a_request_without_the_api_key_does_not_wake_a_keyed_deployment(tmp_path: Path) -> None:
    key = new_key()
    endpoint = Activator("chat", tmp_path, CollectorRegistry(), ApiKeys((hash_key(key),)))
    try:
        url = f"{endpoint.url}/v1/completions"
        body = {"model": "chat", "prompt": "hi"}
        for auth in ({}, {"authorization": f"Bearer {new_key()}"}):
            assert httpx.post(url, json=body, headers=auth).status_code == 401
        assert endpoint.take_waiting() == 0
        woke = httpx.post(url, json=body, headers={"authorization": f"Bearer {key}"})
        assert woke.status_code == 503 and endpoint.take_waiting() == 1
    finally:
        endpoint.close()
