"""Peak memory per worker of `shipyard data run` on a 1 GB WARC file, against the 512 MiB goal,
and of the whole-file reader it replaced, side by side on the same file.

The file is a plain (uncompressed) WARC of the crawl excerpt's HTML responses (`data/crawl`),
repeated under new URLs, each page grown to about 1 MB by a `<script>` block of random hex
before `</body>` (so reading, framing and extraction see every byte, while the filters and the
tokenizer see the page's own text). It is written under --dir and deleted afterwards, with the
run's home.

Shipyard: `shipyard data run` in a fresh `$SHIPYARD_HOME` (tokenizing off: the run's subject is
the per-file tasks), one worker; the run report's `memory` gives each file's task process peak
resident memory (VmHWM, since its fork) and its largest record worker's (`getrusage` of its
children). Baseline: the reader as of commit 83d6f08 (`git show`), which mapped the file and
copied it whole before parsing, against today's reader, each over the same file in its own
process, peak resident memory from VmHWM.

Usage: .venv/bin/python benchmarks/data_big_warc.py [--size-mb 1024] [--dir /tmp] [--keep]
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shipyard.data.warcframe import Record, records
from shipyard.data.warcpack import Page, record_bytes

ROOT = Path(__file__).resolve().parents[1]
GOAL = 512 << 20
OLD_READER = "83d6f08"  # the last commit with the whole-file reader

READ_ALL = """
import sys, importlib.util
spec = importlib.util.spec_from_file_location("frame", sys.argv[1])
frame = importlib.util.module_from_spec(spec)
spec.loader.exec_module(frame)
count = sum(1 for _ in frame.records(__import__("pathlib").Path(sys.argv[2])))
peak = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(count, int(peak) * 1024)
"""


def crawl_pages() -> list[tuple[bytes, str]]:
    """(HTML body, content type) of every HTML response in the crawl excerpt."""
    pages = []
    for path in sorted((ROOT / "data" / "crawl").glob("*.warc.gz")):
        for event in records(path):
            if not isinstance(event, Record):
                continue
            if event.headers.get("warc-type") != "response":
                continue
            head, _, body = event.block.partition(b"\r\n\r\n")
            if b" 200 " in head.split(b"\r\n")[0] and b"text/html" in head.lower():
                pages.append(body)
    return [(page, "text/html; charset=utf-8") for page in pages]


def build(path: Path, size: int) -> int:
    pages = crawl_pages()
    rng = random.Random(1)
    written = count = 0
    with open(path, "wb") as out:
        while written < size:
            body, kind = pages[count % len(pages)]
            pad = f"<script>/*{rng.randbytes(500_000).hex()}*/</script></body>".encode()
            html = body.replace(b"</body>", pad, 1) if b"</body>" in body else body + pad
            record = record_bytes(Page(f"https://big.example/{count}", html, kind))
            out.write(record)
            written += len(record)
            count += 1
    return count


def run_shipyard(warc: Path, home: Path) -> dict[str, object]:
    config = home / "big.toml"
    home.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'name = "big"\ninputs = ["{warc}"]\n[tokenize]\nenabled = false\n'
        "[executor]\nworkers = 1\ntask_timeout_s = 36000\n"
    )
    env = {**os.environ, "SHIPYARD_HOME": str(home), "OMP_NUM_THREADS": "1"}
    env.pop("SHIPYARD_STORE", None)
    env.pop("SHIPYARD_CATALOG", None)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "shipyard.cli.main", "data", "run", str(config)],
        env=env,
        check=True,
    )
    [report_path] = (home / "data" / "runs").glob("*.json")
    report: dict[str, object] = json.loads(report_path.read_text())
    report["wall_s"] = time.monotonic() - started
    return report


def reader_peak(frame: Path, warc: Path) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", READ_ALL, str(frame), str(warc)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--keep", action="store_true", help="keep the WARC file and home")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shipyard-big-warc-", dir=args.dir))
    try:
        warc = work / "big.warc"
        count = build(warc, args.size_mb << 20)
        size = warc.stat().st_size
        print(f"WARC: {size / 1e9:.2f} GB, {count} responses ({warc})", flush=True)

        old = work / "old_warcframe.py"
        old.write_text(
            subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{OLD_READER}:src/shipyard/data/warcframe.py"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        new_events, new_peak = reader_peak(ROOT / "src/shipyard/data/warcframe.py", warc)
        old_events, old_peak = reader_peak(old, warc)
        print(
            f"reader alone: streaming {new_peak / (1 << 20):.0f} MiB peak ({new_events} events) "
            f"vs whole-file {old_peak / (1 << 20):.0f} MiB ({old_events} events): "
            f"{old_peak / new_peak:.1f}x less",
            flush=True,
        )

        report = run_shipyard(warc, work / "home")
        files = report["files"]
        memory = report["memory"]
        assert isinstance(files, dict) and isinstance(memory, dict)
        counts = files["big.warc"]
        peak = memory["big.warc"]
        print(
            f"shipyard data run: {counts['kept']} of {counts['seen']} documents kept, "
            f"{report['wall_s']:.0f} s wall; peak memory per worker: task "
            f"{peak['task'] / (1 << 20):.0f} MiB, record worker "
            f"{peak['record_worker'] / (1 << 20):.0f} MiB (goal ≤ {GOAL >> 20} MiB: "
            f"{'met' if max(peak['task'], peak['record_worker']) <= GOAL else 'MISSED'}); "
            f"load average {os.getloadavg()[0]:.1f}"
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
