"""Read one WARC file (gzip, lz4 or plain) into a batch of HTML responses.

One task per file. Damage does not end the file: `warcframe` resumes at the next gzip member or
`WARC/1.x` header, and every stretch it could not read becomes one quarantine row named
`<file>@<byte offset>` with a reason starting "unreadable". The URL blocklist and per-file
exact-URL dedup apply here; oversized payloads and records cut short by the end of the file go to
quarantine under their record's name.
"""

from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from shipyard.data.batch import Batch, Quarantine
from shipyard.data.config import ReadConfig
from shipyard.data.warcframe import Damage, Oversized, Record, Truncated, records

COLUMNS = ("doc_id", "source", "ordinal", "url", "domain", "crawl", "date", "html")
UNREADABLE = "unreadable"


def domain_of(url: str) -> str:
    host = urlsplit(url).hostname or ""
    return host.removeprefix("www.")


def blocked(domain: str, blocklist: tuple[str, ...]) -> bool:
    return any(domain == b or domain.endswith("." + b) for b in blocklist)


def read_warc(path: Path, config: ReadConfig, quarantine: Quarantine) -> Batch:
    batch: Batch = {name: [] for name in COLUMNS}
    crawl = path.name.split(".")[0]
    seen_urls: set[str] = set()
    ordinal = 0
    try:
        events = list(records(path, config.max_record_bytes))
    except OSError as exc:
        quarantine.seen += 1
        quarantine.add(f"{path.name}@0", "read", f"{UNREADABLE}: cannot read file: {exc}")
        return batch
    for event in events:
        if isinstance(event, Damage):
            quarantine.seen += 1
            quarantine.add(
                f"{path.name}@{event.offset}",
                "read",
                f"{UNREADABLE} at byte {event.offset}: {event.reason}",
            )
            continue
        kind = event.headers.get("warc-type", "").lower()
        if not kind:  # a record of no known kind: damage, whatever the file's framing
            quarantine.seen += 1
            reason = f"{UNREADABLE} at byte {event.offset}: WARC header without WARC-Type"
            quarantine.add(f"{path.name}@{event.offset}", "read", reason)
            continue
        if kind == "warcinfo" and isinstance(event, Record):
            crawl = _crawl_name(event.block) or crawl
            continue
        if kind != "response":
            continue
        ordinal += 1
        quarantine.seen += 1
        doc_id = f"{path.name}:{ordinal}"
        if isinstance(event, Truncated):
            reason = f"truncated: {event.got} of {event.declared} bytes at byte {event.offset}"
            quarantine.add(doc_id, "read", reason)
            continue
        if isinstance(event, Oversized):
            reason = f"oversized: {event.declared} bytes > {config.max_record_bytes}"
            quarantine.add(doc_id, "read", reason)
            continue
        url = event.headers.get("warc-target-uri", "").strip("<>")
        domain = domain_of(url)
        status, content_type, html = _http(event)
        policy = _policy_drop(status, content_type, url, domain, seen_urls, config)
        if policy:  # a policy drop, not a fault: counted, not quarantined
            quarantine.count(policy)
            continue
        seen_urls.add(url)
        date = _date(event.headers.get("warc-date", ""))
        row = (doc_id, path.name, ordinal, url, domain, crawl, date, html)
        for name, value in zip(COLUMNS, row, strict=True):
            batch[name].append(value)
    return batch


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
