"""`shipyard peer serve` that cannot start says why in one line, with its exit code: the port is
taken, or the store cannot be made."""

import subprocess
import sys
from pathlib import Path
from typing import Any

from shipyard.errors import InvalidInput, StorageError


def serve(address: str, store: Path) -> subprocess.CompletedProcess[str]:
    args = ["peer", "serve", "--listen", address, "--store", str(store), "--no-fsync"]
    return subprocess.run(
        [sys.executable, "-m", "shipyard.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_port_in_use_is_named(cluster: Any, tmp_path: Path) -> None:
    running = cluster.peer("first", []).start()
    second = serve(running.address, tmp_path / "second")
    assert second.returncode == InvalidInput.exit_code
    assert (
        second.stderr.strip()
        == f"error: cannot listen on {running.address}: Address already in use"
    )
    assert running.proc.poll() is None  # the daemon already there is untouched


def test_a_store_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = serve("127.0.0.1:9", blocker / "store")  # the store is opened before listening
    assert result.returncode == StorageError.exit_code
    assert (
        result.stderr.strip()
        == f"error: cannot use {blocker / 'store'} as a store: Not a directory"
    )
    assert blocker.read_text() == "not a directory"
