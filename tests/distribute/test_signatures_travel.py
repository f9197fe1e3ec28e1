"""Signatures travel with manifests between peers and from an HTTP origin, and `shipyard pull`
checks them against the puller's trust policy before the daemon writes a file."""

import base64
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.trust.conftest import make_key, write_policy

from shipyard.distribute.client import _signature_file
from shipyard.errors import InvalidInput
from shipyard.store import LocalBackend, Manifest
from shipyard.trust.keys import load_signing_key
from shipyard.trust.signatures import (
    MAX_FILE_BYTES,
    add_signature,
    read_signatures,
    sign,
    signatures_key,
)

from .conftest import Cluster, make_artifact

PULL = [sys.executable, "-m", "shipyard.cli.main", "pull"]


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A release key the puller's policy requires; returns the private key file."""
    home = tmp_path / "home"
    monkeypatch.setenv("SHIPYARD_HOME", str(home))
    private, public = make_key(home / "keys", "release")
    write_policy(home / "trust" / "policy.toml", [{"public_key": str(public), "kinds": ["*"]}])
    return private


def signed(store: Path, manifest: Manifest, private: Path) -> None:
    add_signature(LocalBackend(store), sign(manifest, [], load_signing_key(private)))


def pull(peer: str, artifact: str, dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PULL, artifact, "--peer", peer, "--dest", str(dest)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_signature_reaches_the_puller_through_a_peer(
    cluster: Cluster, tmp_path: Path, release: Path
) -> None:
    seed_store = tmp_path / "seed-store"
    good = make_artifact(seed_store, tmp_path / "a", 300_000)
    unsigned = make_artifact(seed_store, tmp_path / "b", 200_000)
    signed(seed_store, good, release)
    seeder = cluster.seeder("seed", [], seed_store).start()
    host = cluster.peer("host", [seeder.address]).start()
    done = pull(host.address, good.id, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "blob.bin").stat().st_size == 300_000
    # The host kept the signature file beside the manifest, byte for byte.
    assert read_signatures(LocalBackend(host.store), good.id) == read_signatures(
        LocalBackend(seed_store), good.id
    )
    refused = pull(host.address, unsigned.id, tmp_path / "no")
    assert refused.returncode == 8, refused.stderr
    assert "it is not signed" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "no").exists()


def test_a_peer_cannot_pass_off_another_artifacts_signature(
    cluster: Cluster, tmp_path: Path, release: Path
) -> None:
    seed_store = tmp_path / "seed-store"
    good = make_artifact(seed_store, tmp_path / "a", 100_000)
    evil = make_artifact(seed_store, tmp_path / "b", 100_000)
    signed(seed_store, good, release)
    backend = LocalBackend(seed_store)
    stolen = read_signatures(backend, good.id)
    assert stolen is not None
    backend.put(signatures_key(evil.id), stolen)  # a liar serves it under the other id
    seeder = cluster.seeder("seed", [], seed_store).start()
    host = cluster.peer("host", [seeder.address]).start()
    done = pull(host.address, evil.id, tmp_path / "out")
    assert done.returncode == 8, done.stderr
    assert "it is not signed" in done.stderr  # the host dropped the mismatched file
    assert read_signatures(LocalBackend(host.store), evil.id) is None
    assert not (tmp_path / "out").exists()


def test_a_signature_comes_from_an_http_origin(
    cluster: Cluster,
    tmp_path: Path,
    release: Path,
    origin: tuple[Path, Manifest],
    http_origin: tuple[str, Manifest, list[int], Counter[str]],
) -> None:
    store, manifest = origin
    url = http_origin[0]
    signed(store, manifest, release)
    host = cluster.peer("host", [], "--origin", url).start()
    done = pull(host.address, manifest.id, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert read_signatures(LocalBackend(host.store), manifest.id) is not None


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (7, "not base64 of at most"),
        ("A" * (2 * MAX_FILE_BYTES + 4), "not base64 of at most"),
        (base64.b64encode(b"x" * (MAX_FILE_BYTES + 1)).decode(), "not base64 of at most"),
        ("not base64!", "not base64"),
    ],
)
def test_a_fetch_replys_signatures_are_checked(value: object, named: str) -> None:
    with pytest.raises(InvalidInput, match=f"fetch reply: signatures is {named}"):
        _signature_file(value)
    assert _signature_file(None) is None
    assert _signature_file(base64.b64encode(b"[]").decode()) == b"[]"
