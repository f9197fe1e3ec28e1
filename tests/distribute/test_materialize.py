"""`pull --dest`: the daemon writes the files itself from its store (see `materialize`), as the
pieces arrive, under temp names renamed once whole; only for a client on its host running as
its user or root."""

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipyard.distribute import pull
from shipyard.distribute.config import DaemonConfig
from shipyard.distribute.copy import Copier, clone, copy_range, read_write
from shipyard.distribute.local_peer import requester_uid
from shipyard.distribute.messages import check_request
from shipyard.distribute.transfer import piece_request
from shipyard.errors import InvalidInput
from shipyard.store import LocalBackend, Manifest, PieceStore, put_tree
from shipyard.store.pieces import piece_key

from .conftest import PIECE, Cluster, free_port
from .rawwire import exchange, frame
from .test_upload_slots import BIG, stalled_upload

MODES = {"bin/run.sh": 0o755, "data/a.bin": 0o640, "data/deep/b.bin": 0o600, "empty": 0o644}


def multi_file(root: Path) -> tuple[Path, Manifest]:
    """An artifact of several files in nested directories, with their own modes."""
    source = root / "src"
    sizes = {"bin/run.sh": 1000, "data/a.bin": 5 * PIECE + 7, "data/deep/b.bin": 3 * PIECE}
    for path, mode in MODES.items():
        target = source / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(os.urandom(sizes.get(path, 0)))
        target.chmod(mode)
    store = root / "origin"
    return source, put_tree(PieceStore(LocalBackend(store, fsync=False)), source, "model", PIECE)


def test_the_daemon_writes_identical_files_with_their_modes(
    cluster: Cluster, tmp_path: Path
) -> None:
    source, manifest = multi_file(tmp_path)
    seeder = cluster.seeder("seed", [], tmp_path / "origin").start()
    out = tmp_path / "out"
    result = pull(seeder.port, manifest.id, out, stall_timeout=30)
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == sorted(MODES)  # no temp file left behind
    for path, mode in MODES.items():
        assert (out / path).read_bytes() == (source / path).read_bytes()
        assert stat.S_IMODE((out / path).stat().st_mode) == mode
    assert result.copy in ("clone", "copy_range", "read_write")
    assert result.already_held == (result.pieces, manifest.size)  # the seeder held it all


def test_the_daemon_writes_no_group_or_other_writable_file_and_honours_its_umask(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Modes 0o777 and 0o666 in a manifest come out as 0o750 and 0o640 under umask 0o027."""
    source = tmp_path / "src"
    source.mkdir()
    for name, mode in {"all": 0o777, "shared": 0o666, "private": 0o600}.items():
        (source / name).write_bytes(name.encode())
        (source / name).chmod(mode)
    manifest = put_tree(PieceStore(LocalBackend(tmp_path / "origin")), source, "model", PIECE)
    before = os.umask(0o027)  # the daemon inherits it
    try:
        seeder = cluster.seeder("seed", [], tmp_path / "origin").start()
    finally:
        os.umask(before)
    pull(seeder.port, manifest.id, tmp_path / "out", stall_timeout=30)
    written = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()}
    assert written == {"all": 0o750, "shared": 0o640, "private": 0o600}


def test_files_appear_whole_under_their_names_while_pieces_still_arrive(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A watcher lists the directory being written throughout the pull: a file under its own
    name is always whole, and the first one appears before the store holds every piece."""
    source, manifest = multi_file(tmp_path)
    seeder = cluster.seeder("seed", [], tmp_path / "origin", "--upload-limit-mbit", "4")
    seeder.start()
    host = cluster.peer("host", [seeder.address]).start()
    total = len({p.hash for f in manifest.files for p in f.pieces})
    seen: dict[str, int] = {}  # final names seen, with the pieces stored when first seen
    temps: set[str] = set()
    bad: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for staging in tmp_path.glob(".out.partial-*"):
                # os.walk, not rglob: it skips what vanishes while it looks (the directory moves
                # to its place at the end).
                files = [Path(d, f) for d, _, fs in os.walk(staging) for f in fs]
                for path in files:
                    name = str(path.relative_to(staging))
                    if name not in MODES:
                        temps.add(name)
                        continue
                    seen.setdefault(name, len(host.pieces_on_disk()))
                    try:
                        if path.read_bytes() != (source / name).read_bytes():
                            bad.append(name)
                    except FileNotFoundError:
                        pass  # the directory moved to its place meanwhile

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        pull(host.port, manifest.id, tmp_path / "out", stall_timeout=60)
    finally:
        stop.set()
        watcher.join()
    assert not bad
    assert temps  # files were written under temp names first
    # The first whole file with pieces came before the last piece (the empty one is whole at once).
    assert min(n for name, n in seen.items() if name != "empty") < total
    for path in MODES:
        assert (tmp_path / "out" / path).read_bytes() == (source / path).read_bytes()


def test_a_pull_needs_no_upload_slot(cluster: Cluster, tmp_path: Path) -> None:
    """Other peers hold every upload slot of the daemon, which holds the whole artifact: the
    pull still writes the files (it used to fail: all 4 upload slots are in use)."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "blob.bin").write_bytes(os.urandom(2 * BIG))
    manifest = put_tree(PieceStore(LocalBackend(tmp_path / "seed")), source, "model", BIG)
    seeder = cluster.seeder("seeder", [], tmp_path / "seed").start()
    piece = manifest.files[0].pieces[0].hash
    request = piece_request(piece, manifest.id, "127.0.0.1:9", 0, relay=False)
    with ExitStack() as held:
        for _ in range(DaemonConfig(seeder.port, str(tmp_path)).upload_slots):
            held.enter_context(stalled_upload(seeder.port, request))
        pull(seeder.port, manifest.id, tmp_path / "out", stall_timeout=30)
    assert (tmp_path / "out" / "blob.bin").read_bytes() == (source / "blob.bin").read_bytes()


def test_verify_finds_a_corrupt_stored_piece(cluster: Cluster, tmp_path: Path) -> None:
    _, manifest = multi_file(tmp_path)
    store = tmp_path / "seed-store"
    shutil.copytree(tmp_path / "origin", store)
    ref = next(f for f in manifest.files if f.path == "data/a.bin").pieces[2]
    stored = LocalBackend(store).path(piece_key(ref.hash))
    data = bytearray(stored.read_bytes())
    data[100] ^= 0xFF  # same size: only a hash tells
    stored.write_bytes(bytes(data))
    seeder = cluster.seeder("seed", [], store).start()
    cli = [sys.executable, "-m", "shipyard.cli.main", "pull", manifest.id, "--peer"]
    done = subprocess.run(
        [*cli, seeder.address, "--dest", str(tmp_path / "out"), "--verify"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 5, done.stderr
    assert f"data/a.bin: the piece at offset {ref.offset} ({ref.hash[:16]})" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.partial-*"))


def materialize(address: tuple[str, int], manifest: Manifest, directory: str) -> Any:
    request = {"op": "materialize", "artifact": manifest.id, "dir": directory, "wait": 1}
    return exchange(address, frame(request))


def test_bad_directories_are_refused_by_name(cluster: Cluster, tmp_path: Path) -> None:
    _, manifest = multi_file(tmp_path)
    seeder = cluster.seeder("seed", [], tmp_path / "origin").start()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "full")
    (tmp_path / "file").write_text("not a directory")
    cases = {
        "relative/dir": ("InvalidInput", "is not an absolute path"),
        str(tmp_path / "missing"): ("NotFound", "does not exist"),
        str(tmp_path / "full"): ("InvalidInput", "is not empty"),
        str(tmp_path / "link"): ("InvalidInput", "is not a directory (or is a link)"),
        str(tmp_path / "file"): ("InvalidInput", "is not a directory (or is a link)"),
    }
    for directory, (kind, words) in cases.items():
        reply = materialize(seeder.port, manifest, directory)
        assert reply is not None
        assert (reply["state"], reply["kind"]) == ("failed", kind), directory
        assert words in reply["reason"]
    assert (tmp_path / "full" / "x").read_text() == "mine"
    bad = {"op": "materialize", "artifact": manifest.id, "dir": 7}
    reply = exchange(seeder.port, frame(bad))
    assert reply is not None and "materialize: dir 7 is not" in reply["error"]


def test_only_the_daemons_user_or_root_may_ask(cluster: Cluster, tmp_path: Path) -> None:
    """Asked by another user (a forked child that became `nobody`), a daemon running as root
    refuses: it would write as root where only that user may."""
    if os.geteuid() != 0:
        pytest.skip("needs root to ask as another user")
    _, manifest = multi_file(tmp_path)
    seeder = cluster.seeder("seed", [], tmp_path / "origin").start()
    out = tmp_path / "out"
    out.mkdir()
    os.chown(out, 65534, 65534)
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's coverage is not collected)
        try:
            os.setgid(65534)
            os.setuid(65534)
            reply = materialize(seeder.port, manifest, str(out))
            os.write(writing, json.dumps(reply).encode())
        finally:
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as replies:
        reply = json.loads(replies.read())
    os.waitpid(child, 0)
    assert (reply["state"], reply["kind"]) == ("failed", "InvalidInput")
    assert "the client runs as uid 65534 and this daemon as uid 0" in reply["reason"]
    assert list(out.iterdir()) == []


def test_the_requester_is_found_only_on_this_host() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        conn, _ = server.accept()
        with client, conn:
            assert requester_uid(conn.getpeername(), conn.getsockname()) == os.geteuid()
    # A client elsewhere owns no socket in this host's table.
    assert requester_uid(("10.255.255.1", free_port()), ("127.0.0.1", free_port())) is None
    assert requester_uid(None, None) is None


@pytest.mark.parametrize(
    "methods", [(clone, copy_range, read_write), (copy_range,), (read_write,), (clone, read_write)]
)
def test_every_copy_method_places_the_same_bytes(tmp_path: Path, methods: Any) -> None:
    copier = Copier(methods)
    pieces = [os.urandom(PIECE), os.urandom(PIECE), os.urandom(1234)]
    target = tmp_path / "file"
    with open(target, "wb") as out:
        out.truncate(2 * PIECE + 1234)
        for index in (2, 0, 1):  # out of order, as pieces arrive
            source = tmp_path / f"piece{index}"
            source.write_bytes(pieces[index])
            with open(source, "rb") as f:
                copier.copy(f.fileno(), out.fileno(), len(pieces[index]), index * PIECE)
    assert target.read_bytes() == b"".join(pieces)
    assert copier.method in [m.__name__ for m in methods]


@pytest.mark.fuzz
@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(["artifact", "dir", "pieces", "verify", "wait"]),
    value=st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.lists(st.text()),
)
def test_a_materialize_request_is_checked_field_by_field(field: str, value: Any) -> None:
    """Whatever one field holds, the check passes or refuses by name: nothing else escapes."""
    request = {"op": "materialize", "artifact": "a" * 64, "dir": "/d", "pieces": None}
    try:
        assert check_request(request | {field: value}) == "materialize"
    except InvalidInput as exc:
        assert str(exc).startswith("materialize: ")
