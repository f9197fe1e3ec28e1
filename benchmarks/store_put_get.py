"""Put and get a large file through the local backend, side by side with `cp` on the same disk.

    .venv/bin/python benchmarks/store_put_get.py [--size-mib 1024] [--repeat 3] [--no-fsync]

`value` is put MB/s (hash every piece, write it, write the manifest), `baseline` is `cp` MB/s of
the same file into the same filesystem, `ratio` = put/cp; `get_ratio` is the same for get (read
every piece, verify its hash, write the file, rename into place). By default the store fsyncs every
piece, so the baseline is `cp` followed by an fsync of the copy (equal durability); `--no-fsync`
turns both off. The page cache is flushed (`sync`) before each timed step, the source file stays
cached for every contender, and each figure is the median of `--repeat` runs.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from shipyard.store import LocalBackend, PieceStore, materialize, put_tree


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def copy_file(source: Path, dest: Path, fsync: bool) -> None:
    subprocess.run(["cp", str(source), str(dest)], check=True)
    if fsync:
        fd = os.open(dest, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def make_file(path: Path, size: int) -> None:
    chunk = os.urandom(64 << 20)
    with open(path, "wb") as out:
        for offset in range(0, size, len(chunk)):
            out.write(chunk[: size - offset] if size - offset < len(chunk) else chunk)
            chunk = chunk[1:] + chunk[:1]  # vary pieces so nothing deduplicates


def run_once(
    work: Path, source: Path, attempt: int, args: argparse.Namespace
) -> tuple[float, float, float]:
    """One timed cp, put and get, each after flushing dirty pages so none pays for another."""
    fsync = not args.no_fsync
    copy = work / f"copy-{attempt}"
    os.sync()
    cp_time = timed(lambda: copy_file(source, copy, fsync))
    copy.unlink()
    os.sync()
    store = PieceStore(LocalBackend(work / f"store-{attempt}", fsync=fsync))
    start = time.perf_counter()
    manifest = put_tree(store, source.parent, "blob", args.piece_size_mib << 20)
    put_time = time.perf_counter() - start
    os.sync()
    dest = work / f"out-{attempt}"
    get_time = timed(lambda: materialize(store, manifest, dest))
    shutil.rmtree(dest)
    shutil.rmtree(work / f"store-{attempt}")
    return cp_time, put_time, get_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--piece-size-mib", type=int, default=16)
    parser.add_argument("--no-fsync", action="store_true", help="skip fsync, as cp does")
    parser.add_argument("--dir", type=Path, help="where to work (default: a temp directory)")
    args = parser.parse_args()

    size = args.size_mib << 20
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="shipyard-bench-") as tmp:
        work = Path(tmp)
        (work / "src").mkdir()
        source = work / "src" / "blob.bin"
        make_file(source, size)
        runs = [run_once(work, source, attempt, args) for attempt in range(args.repeat)]
    cp_times, put_times, get_times = (list(column) for column in zip(*runs, strict=True))

    mb = size / 1e6
    cp_rate, put_rate, get_rate = (
        mb / statistics.median(times) for times in (cp_times, put_times, get_times)
    )
    cp_name = "cp+fsync" if not args.no_fsync else "cp"
    print(f"{cp_name:<8} {cp_rate:8.1f} MB/s  runs {[round(t, 2) for t in cp_times]}")
    print(f"{'put':<8} {put_rate:8.1f} MB/s  runs {[round(t, 2) for t in put_times]}")
    print(f"{'get':<8} {get_rate:8.1f} MB/s  runs {[round(t, 2) for t in get_times]}")
    print(
        json.dumps(
            {
                "name": "store_put_get",
                "value": round(put_rate, 1),
                "unit": "MB/s",
                "baseline": round(cp_rate, 1),
                "ratio": round(put_rate / cp_rate, 3),
                "get_value": round(get_rate, 1),
                "get_ratio": round(get_rate / cp_rate, 3),
                "size_mib": args.size_mib,
                "fsync": not args.no_fsync,
                "repeat": args.repeat,
            }
        )
    )


if __name__ == "__main__":
    main()
