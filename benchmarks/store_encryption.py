"""The cost of encryption at rest: put and get of one file, confidential and plain, side by side.

    .venv/bin/python benchmarks/store_encryption.py [--size-mib 256] [--repeat 3] [--no-fsync]

Each round puts the same file into a fresh local store twice, plain and confidential (AES-256-GCM
under a random key), then gets each back; the order of the two alternates between rounds, the
page cache is flushed (`sync`) before every timed step, and each figure is the median over
`--repeat` rounds. `value` is the confidential put's MB/s, `baseline` the plain put's, `ratio`
= value/baseline (1.0: encryption costs nothing); `get_value`, `get_baseline` and `get_ratio` are
the same for get. `identical` says every file that came back equals the source.
"""

import argparse
import filecmp
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from shipyard.store import LocalBackend, PieceStore, materialize, put_tree
from shipyard.store.sealed import Keyring


def make_file(path: Path, size: int) -> None:
    chunk = os.urandom(16 << 20)
    with open(path, "wb") as out:
        for offset in range(0, size, len(chunk)):
            out.write(chunk[: size - offset])
            chunk = chunk[1:] + chunk[:1]  # vary pieces so nothing deduplicates


def put_get(
    work: Path, source: Path, name: str, keys: Keyring | None, args: argparse.Namespace
) -> tuple[float, float, bool]:
    """Seconds to put, seconds to get, and whether the file came back whole."""
    store = PieceStore(LocalBackend(work / f"store-{name}", fsync=not args.no_fsync))
    os.sync()
    start = time.perf_counter()
    manifest = put_tree(store, source.parent, "blob", args.piece_size_mib << 20, encrypt_with=keys)
    put_time = time.perf_counter() - start
    os.sync()
    dest = work / f"out-{name}"
    start = time.perf_counter()
    materialize(store, manifest, dest, keys=keys)
    get_time = time.perf_counter() - start
    identical = filecmp.cmp(source, dest / source.name, shallow=False)
    shutil.rmtree(dest)
    shutil.rmtree(work / f"store-{name}")
    return put_time, get_time, identical


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--piece-size-mib", type=int, default=16)
    parser.add_argument("--no-fsync", action="store_true", help="skip fsync of pieces")
    parser.add_argument("--dir", type=Path, help="where to work (default: a temp directory)")
    args = parser.parse_args()

    size = args.size_mib << 20
    keys = Keyring((os.urandom(32),), "benchmark key")
    plain: list[tuple[float, float, bool]] = []
    sealed: list[tuple[float, float, bool]] = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="shipyard-bench-") as tmp:
        work = Path(tmp)
        (work / "src").mkdir()
        source = work / "src" / "blob.bin"
        make_file(source, size)
        for attempt in range(args.repeat):
            order = [("plain", None, plain), ("sealed", keys, sealed)]
            for name, ring, runs in order if attempt % 2 == 0 else order[::-1]:
                runs.append(put_get(work, source, name, ring, args))

    mb = size / 1e6

    def rates(runs: list[tuple[float, float, bool]], column: int) -> tuple[float, list[float]]:
        times = [run[column] for run in runs]
        return mb / statistics.median(times), [round(t, 2) for t in times]

    (plain_put, plain_put_runs), (plain_get, plain_get_runs) = rates(plain, 0), rates(plain, 1)
    (sealed_put, sealed_put_runs), (sealed_get, sealed_get_runs) = (
        rates(sealed, 0),
        rates(sealed, 1),
    )
    print(f"put plain        {plain_put:8.1f} MB/s  runs {plain_put_runs}")
    print(f"put confidential {sealed_put:8.1f} MB/s  runs {sealed_put_runs}")
    print(f"get plain        {plain_get:8.1f} MB/s  runs {plain_get_runs}")
    print(f"get confidential {sealed_get:8.1f} MB/s  runs {sealed_get_runs}")
    print(
        json.dumps(
            {
                "name": "store_encryption",
                "value": round(sealed_put, 1),
                "unit": "MB/s",
                "baseline": round(plain_put, 1),
                "ratio": round(sealed_put / plain_put, 3),
                "get_value": round(sealed_get, 1),
                "get_baseline": round(plain_get, 1),
                "get_ratio": round(sealed_get / plain_get, 3),
                "identical": all(run[2] for run in plain + sealed),
                "size_mib": args.size_mib,
                "fsync": not args.no_fsync,
                "repeat": args.repeat,
            }
        )
    )


if __name__ == "__main__":
    main()
