"""Read one WARC file (gzip, lz4 or plain) into a batch of HTML responses.

One task per file. Damage does not end the file: `warcframe` resumes at the next gzip member or
`WARC/1.x` header, and every stretch it could not read becomes one quarantine row named
`<file>@<byte offset>` with a reason starting "unreadable". The URL blocklist and per-file
exact-URL dedup apply here; oversized payloads and records cut short by the end of the file go to
quarantine under their record's name.
"""

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from shipyard.data.batch import Batch, Quarantine
from shipyard.data.config import ReadConfig
from shipyard.data.warcframe import Damage, Event, Oversized, Record, Truncated, records

COLUMNS = ("doc_id", "source", "ordinal", "url", "domain", "crawl", "date", "html")
UNREADABLE = "unreadable"


def domain_of(url: str) -> str:
    host = urlsplit(url).hostname or ""
    return host.removeprefix("www.")


def blocked(domain: str, blocklist: tuple[str, ...]) -> bool:
    return any(domain == b or domain.endswith("." + b) for b in blocklist)


SLICE_ROWS = 1000  # a slice ends at this many records
SLICE_BYTES = 16 << 20  # or at this many bytes of HTML, whichever comes first


def read_warc(path: Path, config: ReadConfig, quarantine: Quarantine) -> Batch:
    """The whole file as one batch (small files, tests)."""
    whole: Batch = {name: [] for name in COLUMNS}
    for batch in SliceReader(path, config, quarantine):
        for name in COLUMNS:
            whole[name] += batch[name]
    return whole


class SliceReader:
    """The file's responses in slices of at most `rows` records or about `size` bytes of HTML:
    the reader streams, so a task holds one slice, not the file. The last slice may be empty.
    `at` is the file offset reading has reached, of `total` bytes, for progress."""

    unit = "bytes"

    def __init__(
        self,
        path: Path,
        config: ReadConfig,
        quarantine: Quarantine,
        rows: int = SLICE_ROWS,
        size: int = SLICE_BYTES,
    ) -> None:
        self.path, self.config, self.quarantine = path, config, quarantine
        self.rows, self.size = rows, size
        self.at = 0
        self.total = path.stat().st_size if path.exists() else 0

    def __iter__(self) -> Iterator[Batch]:
        reader = _Reader(self.path, self.config, self.quarantine)
        batch: Batch = {name: [] for name in COLUMNS}
        held = 0
        try:
            for event in records(self.path, self.config.max_record_bytes):
                self.at = event.offset
                held += reader.take(event, batch)
                if len(batch["doc_id"]) >= self.rows or held >= self.size:
                    yield batch
                    batch, held = {name: [] for name in COLUMNS}, 0
        except OSError as exc:
            self.quarantine.seen += 1
            reason = f"{UNREADABLE}: cannot read file: {exc}"
            self.quarantine.add(f"{self.path.name}@0", "read", reason)
        yield batch


class _Reader:
    """What reading a file remembers from record to record: the crawl's name (from warcinfo),
    the URLs seen (exact-URL dedup within the file) and the response count."""

    def __init__(self, path: Path, config: ReadConfig, quarantine: Quarantine) -> None:
        self.name = path.name
        self.config = config
        self.quarantine = quarantine
        self.crawl = path.name.split(".")[0]
        self.seen_urls: set[str] = set()
        self.ordinal = 0

    def take(self, event: Event, batch: Batch) -> int:
        """Account for one event (a row of `batch`, a quarantine row, a count, or nothing);
        return the bytes of HTML it added."""
        quarantine, config = self.quarantine, self.config
        if isinstance(event, Damage):
            quarantine.seen += 1
            reason = f"{UNREADABLE} at byte {event.offset}: {event.reason}"
            quarantine.add(f"{self.name}@{event.offset}", "read", reason)
            return 0
        kind = event.headers.get("warc-type", "").lower()
        if not kind:  # a record of no known kind: damage, whatever the file's framing
            quarantine.seen += 1
            reason = f"{UNREADABLE} at byte {event.offset}: WARC header without WARC-Type"
            quarantine.add(f"{self.name}@{event.offset}", "read", reason)
            return 0
        if kind == "warcinfo" and isinstance(event, Record):
            self.crawl = _crawl_name(event.block) or self.crawl
        if kind != "response":
            return 0
        self.ordinal += 1
        quarantine.seen += 1
        doc_id = f"{self.name}:{self.ordinal}"
        if isinstance(event, Truncated):
            reason = f"truncated: {event.got} of {event.declared} bytes at byte {event.offset}"
            quarantine.add(doc_id, "read", reason)
            return 0
        if isinstance(event, Oversized):
            reason = f"oversized: {event.declared} bytes > {config.max_record_bytes}"
            quarantine.add(doc_id, "read", reason)
            return 0
        url = event.headers.get("warc-target-uri", "").strip("<>")
        domain = domain_of(url)
        status, content_type, html = _http(event)
        policy = _policy_drop(status, content_type, url, domain, self.seen_urls, config)
        if policy:  # a policy drop, not a fault: counted, not quarantined
            quarantine.count(policy)
            return 0
        self.seen_urls.add(url)
        date = _date(event.headers.get("warc-date", ""))
        row = (doc_id, self.name, self.ordinal, url, domain, self.crawl, date, html)
        for name, value in zip(COLUMNS, row, strict=True):
            batch[name].append(value)
        return len(html)


def _http(record: Record) -> tuple[int | None, str, bytes]:
    """(status, content type, body) of a response record; a block that is not an HTTP message
    is its own body, typed by the WARC header."""
    block = record.block
    if not block.startswith(b"HTTP/"):
        return None, record.headers.get("content-type", ""), block
    end = block.find(b"\r\n\r\n")
    sep = 4
    if end < 0:
        end, sep = block.find(b"\n\n"), 2
    if end < 0:
        end, sep = len(block), 0
    lines = block[:end].decode("latin-1").splitlines()
    parts = lines[0].split(" ", 2)
    code = parts[1] if len(parts) > 1 else ""
    status = int(code) if code.isascii() and code.isdigit() and len(code) < 6 else None
    content_type = "text/html"
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-type":
            content_type = value.strip()
    return status, content_type, block[end + sep :]


def _policy_drop(
    status: int | None,
    content_type: str,
    url: str,
    domain: str,
    seen: set[str],
    config: ReadConfig,
) -> str | None:
    if blocked(domain, config.url_blocklist):
        return "read.blocklisted"
    if url in seen:
        return "read.duplicate_url"
    if status not in (None, 200):
        return "read.not_200"
    if (content_type or "text/html").split(";")[0].strip().lower() not in config.content_types:
        return "read.not_html"
    return None


def _crawl_name(block: bytes) -> str | None:
    for line in block.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "ispartof" and value.strip():
            return value.strip()
    return None


def _date(value: str) -> str:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).isoformat()
    except ValueError:  # no or a malformed WARC-Date
        return ""
