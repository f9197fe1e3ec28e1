"""A confidential artifact crosses the swarm as ciphertext: peers without the key fetch, verify
and relay its pieces, never its plaintext, and a host with the key materializes it from a peer's
store."""

import base64
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from shipyard.distribute import pull
from shipyard.errors import InvalidInput
from shipyard.store import LocalBackend, PieceStore, materialize, put_tree, verify
from shipyard.store.sealed import KEY_ENV, KEY_FILE_ENV, Keyring

from .conftest import PIECE, Cluster

MARKER = b"CONFIDENTIAL-PLAINTEXT-MARKER-41c9"


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_peers_without_the_key_hold_and_relay_only_ciphertext(
    cluster: Cluster, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "weights.bin").write_bytes(MARKER * (3 * PIECE // len(MARKER) + 7))
    (source / "sub" / "notes.txt").write_bytes(b"the plaintext: " + MARKER)
    save_file({"w": np.zeros(1000, np.float32)}, str(source / "model.safetensors"))
    key = os.urandom(32)
    origin = tmp_path / "origin"
    manifest = put_tree(
        PieceStore(LocalBackend(origin, fsync=False)),
        source,
        "model",
        PIECE,
        encrypt_with=Keyring((key,), "test key"),
    )
    hashes = {ref.hash for entry in manifest.files for ref in entry.pieces}

    first = cluster.peer("h0", [], "--origin", str(origin)).start()
    second = cluster.peer("h1", [first.address], "--origin", str(origin)).start()
    pull(first.port, manifest.id, stall_timeout=60)
    pull(second.port, manifest.id, stall_timeout=60)

    for peer in (first, second):
        assert peer.pieces_on_disk() == hashes
        stored = [p.read_bytes() for p in (peer.store / "pieces").rglob("*") if p.is_file()]
        assert stored and not any(MARKER in data for data in stored)
        assert verify(PieceStore(LocalBackend(peer.store)), manifest) == []  # no key needed

    # The daemon will not write ciphertext as if it were the files.
    with pytest.raises(InvalidInput, match="confidential"):
        pull(second.port, manifest.id, tmp_path / "ciphertext", stall_timeout=30)
    assert not (tmp_path / "ciphertext").exists()
    with pytest.raises(InvalidInput, match="confidential: --tensors"):  # headers are ciphertext
        pull(second.port, manifest.id, tensors="w", stall_timeout=30)

    # A host with the key materializes it from the peer's store: in process, and by the CLI.
    materialize(
        PieceStore(LocalBackend(second.store)),
        manifest,
        tmp_path / "plain",
        keys=Keyring((key,), "test key"),
    )
    assert files(tmp_path / "plain") == files(source)
    env = {k: v for k, v in os.environ.items() if k != KEY_FILE_ENV}
    env |= {
        "SHIPYARD_HOME": str(tmp_path / "home"),
        "SHIPYARD_STORE": str(second.store),
        KEY_ENV: base64.b64encode(key).decode(),
    }
    got = subprocess.run(
        [sys.executable, "-m", "shipyard", "artifact", "get", manifest.id, str(tmp_path / "cli")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    assert files(tmp_path / "cli") == files(source)
