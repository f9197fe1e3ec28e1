"""The router's request log: one JSON line per answered request, kept under `$SHIPYARD_HOME`.

Layout: `$SHIPYARD_HOME/serve/requests/requests.jsonl` is appended to; when it passes
`segment_bytes` it becomes `requests.<n>.jsonl` (n counting up) and the oldest segments beyond
`segments` are deleted, so the log holds at most `(segments + 1) * segment_bytes` bytes. Each
line is an `Answered` record. Appends and rotation hold `requests.lock` (flock), so routers that
share a home share one log.

The request path never waits on the disk: `Writer.record` queues the record and a thread of the
router writes queued records in batches; when the queue is full (a stalled disk) records are
dropped and counted, not waited for. Readers skip a damaged or half-written line.
"""

import contextlib
import fcntl
import json
import mmap
import os
import queue
import re
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shipyard.durable import write_fd
from shipyard.errors import StorageError
from shipyard.serve.request_id import check_request_id

CURRENT = "requests.jsonl"
_SEGMENT = re.compile(r"requests\.([0-9]{1,12})\.jsonl")
DEFAULT_SEGMENT_BYTES = 16 << 20
DEFAULT_SEGMENTS = 8
MAX_PENDING = 100_000  # records queued for the writer at most (about 30 MB)
RECENT_SCAN_BYTES = 4 << 20  # `recent` reads at most this much of the log's newest end
_ARTIFACT = re.compile(r"[0-9a-f]{64}")


def requests_dir(home: Path) -> Path:
    return home / "serve" / "requests"


@dataclass(frozen=True)
class Answered:
    """One answered request: who asked for what, and which model version and replica answered.

    `artifact` is the model artifact the replica serves (None when the replica did not say, as
    a server outside Shipyard does not); `adapter` the adapter the request named, if any. Tokens
    are the replica's own count (`usage`), None when its answer had none."""

    request_id: str
    time: float
    deployment: str
    version: str
    artifact: str | None
    adapter: str | None
    replica: str
    status: int
    tokens_in: int | None
    tokens_out: int | None
    stream: bool

    def line(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode() + b"\n"


def artifact_or_none(value: object) -> str | None:
    """A replica's claimed artifact id, if it is one (it comes in a response header)."""
    return value if isinstance(value, str) and _ARTIFACT.fullmatch(value) else None


class RequestLog:
    """The log's files: appending (with rotation) and reading."""

    def __init__(
        self,
        root: Path,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        segments: int = DEFAULT_SEGMENTS,
    ) -> None:
        self.root, self.segment_bytes, self.segments = root, segment_bytes, segments

    def append(self, lines: list[bytes]) -> None:
        """Append whole lines, then rotate if the current file is past its size."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with self._locked():
                fd = os.open(self.root / CURRENT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    write_fd(fd, b"".join(lines))
                    size = os.fstat(fd).st_size
                finally:
                    os.close(fd)
                if size >= self.segment_bytes:
                    self._rotate()
        except OSError as exc:
            raise StorageError(f"request log {self.root}: {exc.strerror or exc}") from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / "requests.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _numbered(self) -> list[tuple[int, Path]]:
        """The closed segments, oldest first."""
        found = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root):
                match = _SEGMENT.fullmatch(entry.name)
                if match:
                    found.append((int(match.group(1)), Path(entry.path)))
        return sorted(found)

    def _rotate(self) -> None:
        numbered = self._numbered()
        last = numbered[-1][0] if numbered else 0
        os.rename(self.root / CURRENT, self.root / f"requests.{last + 1}.jsonl")
        numbered.append((last + 1, self.root / f"requests.{last + 1}.jsonl"))
        for _, old in numbered[: max(0, len(numbered) - self.segments)]:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()

    def files(self) -> list[Path]:
        """The log's files, newest first."""
        return [self.root / CURRENT, *(p for _, p in reversed(self._numbered()))]

    def find(self, rid: str) -> dict[str, Any] | None:
        """The newest record of request `rid`, or None if the log (still) has none."""
        needle = b'"request_id":' + json.dumps(check_request_id(rid)).encode() + b","
        for path in self.files():
            try:
                with path.open("rb") as file, _mapped(file) as data:
                    end = len(data)
                    while (at := data.rfind(needle, 0, end)) >= 0:
                        start = data.rfind(b"\n", 0, at) + 1
                        stop = data.find(b"\n", at)
                        record = _record(data[start : stop if stop >= 0 else len(data)])
                        if record is not None and record.get("request_id") == rid:
                            return record
                        end = at
            except FileNotFoundError:
                continue  # rotated away while we looked: the next file has it, if any does
            except OSError as exc:
                raise StorageError(f"request log {path}: {exc.strerror or exc}") from None
        return None

    def recent(self, deployment: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """The newest records (of `deployment` if given), newest first, among the last
        RECENT_SCAN_BYTES of the log."""
        out: list[dict[str, Any]] = []
        budget = RECENT_SCAN_BYTES
        for path in self.files():
            try:
                with path.open("rb") as file:
                    size = file.seek(0, os.SEEK_END)
                    start = max(0, size - budget)
                    file.seek(start)
                    data = file.read(size - start)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageError(f"request log {path}: {exc.strerror or exc}") from None
            budget -= len(data)
            lines = data.split(b"\n")
            if start > 0:
                lines = lines[1:]  # the first line was cut by the budget
            for raw in reversed(lines):
                record = _record(raw)
                if record is not None and deployment in (None, record.get("deployment")):
                    out.append(record)
                    if len(out) == limit:
                        return out
            if budget <= 0:
                break
        return out


@contextlib.contextmanager
def _mapped(file: Any) -> Iterator[bytes | mmap.mmap]:
    """The whole file, mapped (an empty file cannot be mapped)."""
    if os.fstat(file.fileno()).st_size == 0:
        yield b""
        return
    data = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield data
    finally:
        data.close()


def _record(raw: bytes) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None  # damaged, or a line being written as we read
    return record if isinstance(record, dict) else None


class Writer:
    """Writes queued records from a thread of its own, in batches; never blocks `record`."""

    def __init__(self, log: RequestLog, max_pending: int = MAX_PENDING) -> None:
        self.log = log
        self.dropped = 0
        self.failed = 0
        self.last_error = ""
        self._queue: queue.Queue[Answered | None] = queue.Queue(max_pending)
        self._thread = threading.Thread(target=self._run, name="request-log", daemon=True)
        self._thread.start()

    def record(self, answered: Answered) -> None:
        try:
            self._queue.put_nowait(answered)
        except queue.Full:
            self.dropped += 1

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            batch = [] if item is None else [item]
            stop = item is None
            while not stop:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                else:
                    batch.append(more)
            if batch:
                try:
                    self.log.append([a.line() for a in batch])
                except StorageError as exc:
                    self.failed += len(batch)
                    self.last_error = str(exc)[:300]
            if stop:
                return


def usage_tokens(body: Any) -> tuple[int | None, int | None]:
    """(prompt, completion) tokens from an OpenAI answer's `usage`, None where it has none."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None, None
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
