"""Read one WARC file (gzip, lz4 or plain) into a batch of HTML responses.

One task per file. The URL blocklist and per-file exact-URL dedup apply here; oversized payloads,
truncated records and a stream that breaks mid-file go to quarantine, and every record read
before the break is kept.
"""

from pathlib import Path
from urllib.parse import urlsplit

from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType

from shipyard.data.batch import Batch, Quarantine
from shipyard.data.config import ReadConfig

COLUMNS = ("doc_id", "source", "ordinal", "url", "domain", "crawl", "date", "html")


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
    wanted = WarcRecordType.response | WarcRecordType.warcinfo
    try:
        with open(path, "rb") as fh:
            for record in ArchiveIterator(fh, record_types=wanted, parse_http=True):
                if record.record_type == WarcRecordType.warcinfo:
                    crawl = _crawl_name(record) or crawl
                    continue
                ordinal += 1
                doc_id = f"{path.name}:{ordinal}"
                if record.content_length > config.max_record_bytes:
                    reason = f"oversized: {record.content_length} bytes > {config.max_record_bytes}"
                    quarantine.add(doc_id, "read", reason)
                    continue
                url = record.headers.get("WARC-Target-URI") or ""
                domain = domain_of(url)
                policy = _policy_drop(record, url, domain, seen_urls, config)
                if policy:  # a policy drop, not a fault: counted, not quarantined
                    quarantine.count(policy)
                    continue
                seen_urls.add(url)
                html = record.reader.read()
                if len(html) < record.content_length:
                    quarantine.add(
                        doc_id, "read", f"truncated: {len(html)} of {record.content_length} bytes"
                    )
                    continue
                for name, value in zip(
                    COLUMNS,
                    (doc_id, path.name, ordinal, url, domain, crawl, _date(record), html),
                    strict=True,
                ):
                    batch[name].append(value)
    except Exception as exc:  # a broken stream ends the file, not the task
        quarantine.add(f"{path.name}:*", "read", f"stream broken after record {ordinal}: {exc}")
    return batch


def _policy_drop(
    record: WarcRecord, url: str, domain: str, seen: set[str], config: ReadConfig
) -> str | None:
    if blocked(domain, config.url_blocklist):
        return "read.blocklisted"
    if url in seen:
        return "read.duplicate_url"
    if record.is_http and record.http_headers.status_code not in (None, 200):
        return "read.not_200"
    content_type = (record.http_content_type or "text/html").split(";")[0].strip().lower()
    if content_type not in config.content_types:
        return "read.not_html"
    return None


def _crawl_name(record: WarcRecord) -> str | None:
    for line in record.reader.read().decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "ispartof" and value.strip():
            return value.strip()
    return None


def _date(record: WarcRecord) -> str:
    try:
        return record.record_date.isoformat()
    except Exception:  # records with no or a malformed WARC-Date
        return ""
