"""The request log's files: rotation keeps it bounded, damaged lines are skipped, and a stalled
disk makes the writer drop records rather than hold up a request."""

import fcntl
import importlib.util
import os
import time
from pathlib import Path

from shipyard.serve.router.requestlog import CURRENT, Answered, RequestLog, Writer

BENCH = Path(__file__).parents[3] / "benchmarks" / "request_log.py"


def answered(i: int, deployment: str = "chat") -> Answered:
    return Answered(
        f"req-{i}", 1000.0 + i, deployment, "v1", "a" * 64, None, "r0", 200, 5, 3, False
    )


def test_rotation_keeps_the_newest_records_within_the_bound(tmp_path: Path) -> None:
    log = RequestLog(tmp_path, segment_bytes=2000, segments=2)
    for i in range(200):
        log.append([answered(i).line()])
    line = len(answered(199).line())
    files = sorted(tmp_path.glob("*.jsonl"))
    assert len(files) == 3  # the current file and two closed segments
    assert sum(f.stat().st_size for f in files) <= 3 * (2000 + line)
    assert log.find("req-199") == answered(199).__dict__ | {"request_id": "req-199"}
    assert log.find("req-0") is None  # past the bound: deleted
    newest = log.recent(limit=10)
    assert [r["request_id"] for r in newest] == [f"req-{i}" for i in range(199, 189, -1)]


def test_damaged_and_half_written_lines_are_skipped(tmp_path: Path) -> None:
    log = RequestLog(tmp_path)
    log.append([answered(1).line(), b"{not json\n", b"[1, 2]\n", answered(2, "other").line()])
    with (tmp_path / CURRENT).open("ab") as file:
        file.write(b'{"request_id":"req-3","time":')  # a writer caught mid-line
    assert log.find("req-1") is not None and log.find("req-3") is None
    assert [r["request_id"] for r in log.recent("chat")] == ["req-1"]
    assert [r["request_id"] for r in log.recent()] == ["req-2", "req-1"]


def test_a_stalled_disk_drops_records_instead_of_blocking(tmp_path: Path) -> None:
    log = RequestLog(tmp_path)
    writer = Writer(log, max_pending=5)
    tmp_path.mkdir(exist_ok=True)
    fd = os.open(tmp_path / "requests.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another process holds the log: the writer's append waits
    try:
        writer.record(answered(0))
        deadline = time.monotonic() + 60
        while writer._queue.qsize() and time.monotonic() < deadline:
            time.sleep(0.01)  # the writer took record 0 and is stuck in append
        for i in range(1, 51):
            writer.record(answered(i))  # returns at once, full queue or not
        assert writer.dropped == 45
    finally:
        os.close(fd)
    writer.close()
    assert [r["request_id"] for r in log.recent()] == [f"req-{i}" for i in range(5, -1, -1)]


def test_small_benchmark_writes_every_record_and_finds_them() -> None:
    spec = importlib.util.spec_from_file_location("request_log_bench", BENCH)
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.run(records=500, mib=1.0)  # it checks every queued record reached the disk
    assert 0.5 < result["log_mib"] <= 1.01
    assert all(value > 0 for value in result.values())
