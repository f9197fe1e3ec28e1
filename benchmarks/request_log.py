"""What the router's request log costs a request, and how long `lineage request` looks take.

    .venv/bin/python benchmarks/request_log.py [--records 50000] [--mib 128]

Request path: `--records` answers recorded through the router's `Writer` (queued; a thread
writes batches), side by side with the baseline of appending each record to the file on the
request path (`RequestLog.append` per record: lock, write, unlock). Printed: microseconds per
record in the request path for each, and their ratio. Every queued record is then checked to be
on disk after `close`.

Lookup: a log filled to its `--mib` bound (rotation included), then `find` of the newest record,
of the oldest one still kept, and of an id it lacks (a scan of every file): milliseconds each.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from shipyard.serve.router.requestlog import DEFAULT_SEGMENTS, Answered, RequestLog, Writer

MIB = 1 << 20


def answered(i: int) -> Answered:
    return Answered(
        f"bench-{i:012d}",
        time.time(),
        "chat",
        "4f2a9c1d0b3e",
        "a" * 64,
        None,
        "r0",
        200,
        9,
        3,
        False,
    )


def request_path(root: Path, records: int) -> dict[str, float]:
    """Per-record cost on the request path: queued (the router's way) and appended directly."""
    ready = [answered(i) for i in range(records)]
    writer = Writer(RequestLog(root / "queued"))
    start = time.perf_counter()
    for one in ready:
        writer.record(one)
    queued_s = time.perf_counter() - start
    writer.close(timeout=600)
    written = sum(1 for _ in (root / "queued" / "requests.jsonl").open("rb"))
    if written != records or writer.dropped or writer.failed:
        raise SystemExit(f"queued: {written} of {records} written, {writer.dropped} dropped")
    direct = RequestLog(root / "direct")
    start = time.perf_counter()
    for one in ready:
        direct.append([one.line()])
    direct_s = time.perf_counter() - start
    return {
        "queued_us_per_record": queued_s / records * 1e6,
        "direct_us_per_record": direct_s / records * 1e6,
        "direct_over_queued": direct_s / queued_s,
    }


def lookup(root: Path, mib: float) -> dict[str, float]:
    """`find` times on a log filled to its bound."""
    segment = int(mib * MIB) // (DEFAULT_SEGMENTS + 1)
    log = RequestLog(root / "full", segment, DEFAULT_SEGMENTS)
    line = len(answered(0).line())
    total = int(mib * MIB) // line
    batch = 5000
    for first in range(0, total, batch):
        log.append([answered(i).line() for i in range(first, min(total, first + batch))])
    oldest_file = log.files()[-1]
    with oldest_file.open("rb") as file:
        oldest = json.loads(file.readline())["request_id"]
    out: dict[str, float] = {
        "log_mib": sum(p.stat().st_size for p in log.files() if p.exists()) / MIB,
    }
    for name, rid in (("newest", f"bench-{total - 1:012d}"), ("oldest", oldest)):
        start = time.perf_counter()
        found = log.find(rid)
        out[f"find_{name}_ms"] = (time.perf_counter() - start) * 1000
        if found is None:
            raise SystemExit(f"{rid} not found")
    start = time.perf_counter()
    if log.find("bench-missing") is not None:
        raise SystemExit("found a missing id")
    out["find_missing_ms"] = (time.perf_counter() - start) * 1000
    return out


def run(records: int, mib: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="shipyard-bench-requestlog-") as scratch:
        return request_path(Path(scratch), records) | lookup(Path(scratch), mib)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--mib", type=float, default=128.0)
    args = parser.parse_args()
    result = run(args.records, args.mib)
    print(
        f"request path: queued {result['queued_us_per_record']:.1f} us/record, direct append "
        f"{result['direct_us_per_record']:.1f} us/record: {result['direct_over_queued']:.1f}x"
    )
    print(
        f"lookup in a {result['log_mib']:.0f} MiB log: newest {result['find_newest_ms']:.1f} ms, "
        f"oldest {result['find_oldest_ms']:.1f} ms, missing {result['find_missing_ms']:.1f} ms"
    )


if __name__ == "__main__":
    main()
