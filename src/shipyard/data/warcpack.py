"""Pack HTML files into WARC response records: the Debian documentation corpus, and test data.

`write_warc` writes WARC/1.0 `response` records (HTTP status line, headers, body), each record
its own gzip member when compressed, as crawlers do. `pack_tree` turns a directory of HTML pages
into WARC files of `per_file` records, with URLs under a base URL.
"""

import gzip
import hashlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Compression = Literal["gzip", "none"]


@dataclass(frozen=True)
class Page:
    url: str
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    status: int = 200
    date: str = "2024-01-01T00:00:00Z"


def record_bytes(page: Page) -> bytes:
    """One WARC/1.0 response record for `page`, uncompressed."""
    http = (
        f"HTTP/1.1 {page.status} OK\r\nContent-Type: {page.content_type}\r\n"
        f"Content-Length: {len(page.body)}\r\n\r\n"
    ).encode() + page.body
    record_id = uuid.UUID(bytes=hashlib.sha256(page.url.encode() + page.body).digest()[:16])
    headers = (
        "WARC/1.0\r\nWARC-Type: response\r\n"
        f"WARC-Record-ID: <urn:uuid:{record_id}>\r\nWARC-Date: {page.date}\r\n"
        f"WARC-Target-URI: {page.url}\r\nContent-Type: application/http; msgtype=response\r\n"
        f"WARC-Identified-Payload-Type: {page.content_type.split(';')[0]}\r\n"
        f"Content-Length: {len(http)}\r\n\r\n"
    ).encode()
    return headers + http + b"\r\n\r\n"


def _warcinfo(crawl: str) -> bytes:
    body = f"isPartOf: {crawl}\r\nsoftware: shipyard-warcpack\r\n".encode()
    headers = (
        "WARC/1.0\r\nWARC-Type: warcinfo\r\nWARC-Date: 2024-01-01T00:00:00Z\r\n"
        f"WARC-Record-ID: <urn:uuid:{uuid.UUID(bytes=hashlib.sha256(body).digest()[:16])}>\r\n"
        f"Content-Type: application/warc-fields\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return headers + body + b"\r\n\r\n"


def write_warc(
    path: Path, pages: Iterable[Page], compression: Compression = "gzip", crawl: str | None = None
) -> int:
    """Write `pages` as one WARC file; return the number of records."""
    count = 0
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as out:
        chunks = ([_warcinfo(crawl)] if crawl else []) + [record_bytes(p) for p in pages]
        for chunk in chunks:
            out.write(
                gzip.compress(chunk, compresslevel=6, mtime=0) if compression == "gzip" else chunk
            )
            count += 1
    tmp.replace(path)
    return count - (1 if crawl else 0)


def html_pages(root: Path, base_url: str) -> Iterator[Page]:
    for path in sorted(root.rglob("*.html")):
        yield Page(f"{base_url.rstrip('/')}/{path.relative_to(root).as_posix()}", path.read_bytes())


def pack_tree(
    root: Path,
    base_url: str,
    dest: Path,
    prefix: str,
    per_file: int = 500,
    crawl: str = "debian-docs",
) -> list[Path]:
    """Pack every HTML page under `root` into `dest/<prefix>-NNNNN.warc.gz` files."""
    dest.mkdir(parents=True, exist_ok=True)
    pages = list(html_pages(root, base_url))
    written = []
    for index, lo in enumerate(range(0, len(pages), per_file)):
        path = dest / f"{prefix}-{index:05d}.warc.gz"
        write_warc(path, pages[lo : lo + per_file], crawl=crawl)
        written.append(path)
    return written
