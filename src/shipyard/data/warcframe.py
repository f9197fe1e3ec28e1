"""Find the WARC records in a file's bytes, stepping over damage instead of stopping at it.

A crawl file is gzip members (one record each, as crawlers write them), lz4 frames or plain
bytes. `records` yields every record it can read and one `Damage` per stretch it cannot: a gzip
member that fails to decompress is skipped to the next member that does; bytes that are not a
record are skipped to the next `WARC/x.y` header line; a record cut short by the end of the file
is `Truncated`. Every event carries the byte offset where it starts (the gzip member's offset in
compressed files, the byte offset in plain ones), so a lost record can be found again.
"""

import bisect
import mmap
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b\x08"
LZ4_MAGIC = b"\x04\x22\x4d\x18"
_FEED = 1 << 16  # compressed bytes handed to zlib at a time
_MAX_HEADER = 1 << 16  # a WARC header longer than this is damage, not a header
# The version line: 1.0, 1.1, ClueWeb's 0.18; like warcio, anything after "WARC/" is accepted,
# but a resynchronizing search wants a version number.
_HEADER_AT = re.compile(rb"WARC/[^\r\n]{0,64}\r?\n")
_HEADER_LINE = re.compile(rb"(?:^|\n)WARC/[0-9]\.[0-9]{1,2}\r?\n")


@dataclass(frozen=True)
class Record:
    offset: int
    headers: dict[str, str]  # WARC header names lowercased
    block: bytes


@dataclass(frozen=True)
class Truncated:
    offset: int
    headers: dict[str, str]
    got: int  # bytes of the block present
    declared: int  # its Content-Length


@dataclass(frozen=True)
class Damage:
    offset: int
    reason: str


Event = Record | Truncated | Damage


@dataclass
class _Unit:
    """A run of decompressed bytes: a gzip member, or the whole of an lz4 or plain file."""

    offset: int
    data: bytes
    error: str | None = None


def records(path: Path) -> Iterator[Event]:
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        if size == 0:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            compressed = _is_gzip(mapped[: 1 << 20])
            if compressed:
                units: Iterator[_Unit] = _gzip_members(mapped)
            elif mapped[:4] == LZ4_MAGIC:
                units = _lz4(path)
            else:
                units = iter([_Unit(0, mapped[:])])
            yield from _parse(units, compressed)


def _is_gzip(head: bytes) -> bool:
    """gzip unless the file says otherwise: a damaged first member still leaves later members."""
    if head.startswith((GZIP_MAGIC, LZ4_MAGIC)) or b"WARC/" in head:
        return head.startswith(GZIP_MAGIC)
    return GZIP_MAGIC in head


def _gzip_members(data: mmap.mmap) -> Iterator[_Unit]:
    """Each gzip member's decompressed bytes; a member that fails becomes one error unit, and
    decoding resumes at the next offset where a member decodes."""
    pos = 0
    damaged_at: int | None = None  # start of the current run of undecodable bytes
    while pos < len(data):
        out, consumed, error = _inflate(data, pos)
        if error is None:
            if damaged_at is not None:
                yield _Unit(damaged_at, b"", "gzip data does not decompress")
                damaged_at = None
            yield _Unit(pos, out)
            pos += consumed
            continue
        damaged_at = pos if damaged_at is None else damaged_at
        found = data.find(GZIP_MAGIC, pos + 1)
        pos = len(data) if found < 0 else found
    if damaged_at is not None:
        yield _Unit(damaged_at, b"", "gzip data does not decompress")


def _inflate(data: mmap.mmap, pos: int) -> tuple[bytes, int, str | None]:
    """(decompressed bytes, compressed bytes used, error) of the member starting at `pos`. A
    member the file ends inside gives what it holds: the record parser reports the cut."""
    inflater = zlib.decompressobj(31)
    parts = []
    fed = pos
    try:
        while not inflater.eof and fed < len(data):
            chunk = data[fed : fed + _FEED]
            fed += len(chunk)
            parts.append(inflater.decompress(chunk))
        parts.append(inflater.flush())
    except zlib.error as exc:
        return b"", 0, str(exc)
    if not inflater.eof:
        # the member never ended: cut short, with the next member (if any) read as its tail
        nxt = data.find(GZIP_MAGIC, pos + 1)
        if nxt >= 0:
            return b"".join(parts), nxt - pos, None
    return b"".join(parts), fed - pos - len(inflater.unused_data), None


def _lz4(path: Path) -> Iterator[_Unit]:
    from fastwarc.stream_io import Lz4Reader

    parts = []
    reader = Lz4Reader(str(path))
    try:
        while chunk := reader.read(1 << 20):
            parts.append(chunk)
    except Exception as exc:  # fastwarc raises plain exceptions for a broken frame
        yield _Unit(0, b"".join(parts))
        yield _Unit(reader.tell(), b"", f"lz4 data does not decompress: {exc}")
        return
    finally:
        reader.close()
    yield _Unit(0, b"".join(parts))


class _Buffer:
    """Decompressed bytes not yet parsed, with the file offset each unit started at."""

    def __init__(self, compressed: bool) -> None:
        self.data = bytearray()
        self.starts: list[tuple[int, int]] = []  # (position in data, file offset)
        self.compressed = compressed

    def add(self, unit: _Unit) -> None:
        self.starts.append((len(self.data), unit.offset))
        self.data += unit.data

    def offset(self, pos: int) -> int:
        index = bisect.bisect_right(self.starts, (pos, float("inf"))) - 1
        at, file_offset = self.starts[max(index, 0)]
        return file_offset if self.compressed else file_offset + pos - at


def _parse(units: Iterator[_Unit], compressed: bool) -> Iterator[Event]:
    buf = _Buffer(compressed)
    base = 0  # plain files: file offset of buf.data[0]
    for unit in units:
        if unit.error is not None:
            if _meaningful(buf.data):  # a record begun before the damage is lost with it
                yield Damage(_at(buf, _skip_blank(buf.data, 0), base), f"cut by {unit.error}")
            else:
                yield Damage(unit.offset, unit.error)
            buf = _Buffer(compressed)
            continue
        if compressed and _meaningful(buf.data) and _HEADER_AT.match(unit.data[:16]):
            # the next member starts a new record: what is left of the last one never ended
            at = _at(buf, _skip_blank(buf.data, 0), base)
            yield Damage(at, "record cut short: the next gzip member starts anew")
            buf = _Buffer(compressed)
        buf.add(unit)
        consumed = 0
        # in a gzip file a record without a usable length ends where its member ends
        for event, consumed in _complete(buf.data, bounded=compressed):  # noqa: B007
            yield _placed(event, buf, base)
        base += consumed
        buf = _rebased(buf, consumed, compressed)
    yield from _rest(buf, base)


def _rest(buf: _Buffer, base: int) -> Iterator[Event]:
    """What the file ends inside of: a record cut short, or damage."""
    pos = _skip_blank(buf.data, 0)
    if pos >= len(buf.data) or not _meaningful(buf.data):
        return
    offset = _at(buf, pos, base)
    if not _HEADER_AT.match(buf.data, pos):
        yield Damage(offset, "bytes that are not a WARC record")
        return
    headers, body_at = _header(buf.data, pos)
    declared = _length(headers) if headers is not None else None
    if headers is None or declared is None:
        yield Damage(offset, "file ends inside a record header")
        return
    yield Truncated(offset, headers, len(buf.data) - body_at, declared)


def _at(buf: _Buffer, pos: int, base: int) -> int:
    return buf.offset(pos) if buf.compressed else base + pos


def _placed(event: Event, buf: _Buffer, base: int) -> Event:
    pos = event.offset  # a position in buf.data until placed
    offset = _at(buf, pos, base)
    if isinstance(event, Record):
        return Record(offset, event.headers, event.block)
    if isinstance(event, Damage):
        return Damage(offset, event.reason)
    return event


def _rebased(buf: _Buffer, consumed: int, compressed: bool) -> _Buffer:
    out = _Buffer(compressed)
    out.data = buf.data[consumed:]
    if compressed:
        kept = [(at - consumed, off) for at, off in buf.starts if at >= consumed]
        before = [off for at, off in buf.starts if at < consumed]
        if before and (not kept or kept[0][0] > 0):
            kept.insert(0, (0, before[-1]))
        out.starts = kept
    else:
        out.starts = [(0, 0)]
    return out


def _meaningful(data: bytearray | bytes) -> bool:
    return bool(data.strip(b"\r\n \t\x00"))


def _complete(data: bytearray, bounded: bool) -> Iterator[tuple[Event, int]]:
    """Every whole record (or stretch of damage) at the front of `data`, each with the position
    just past it; an incomplete record at the end is left for more data. `bounded`: `data` ends
    where its last gzip member ends."""
    pos = 0
    while True:
        pos = _skip_blank(data, pos)
        if pos >= len(data):
            return
        if not _HEADER_AT.match(data, pos):
            nxt = _next_header(data, pos + 1)
            if nxt < 0:
                if len(data) - pos < _MAX_HEADER:
                    return  # maybe a header split across units; decided at the end
                nxt = len(data)
            yield Damage(pos, "bytes that are not a WARC record"), nxt
            pos = nxt
            continue
        headers, body_at = _header(data, pos)
        if headers is None:
            if body_at < 0 and len(data) - pos < _MAX_HEADER:
                return  # header not complete yet
            nxt = _next_header(data, pos + 1)
            nxt = len(data) if nxt < 0 else nxt
            yield Damage(pos, "WARC header that does not end"), nxt
            pos = nxt
            continue
        length = _length(headers)
        if length is None and bounded:  # as warcio does: the block is the rest of the member
            length = len(data) - body_at - (4 if data.endswith(b"\r\n\r\n") else 0)
        if length is None:
            nxt = _next_header(data, pos + 1)
            nxt = len(data) if nxt < 0 else nxt
            yield Damage(pos, "WARC header without a valid Content-Length"), nxt
            pos = nxt
            continue
        end = body_at + length
        if end > len(data):
            return  # the rest of the block is in later units (or the file was cut)
        block = bytes(data[body_at:end])
        if not data.startswith(b"\r\n\r\n", end) and len(data) >= end + 4:
            # the block does not end where its Content-Length says: the length is wrong
            nxt = _next_header(data, pos + 1)
            nxt = len(data) if nxt < 0 else nxt
            yield Damage(pos, "record does not end where its Content-Length says"), nxt
            pos = nxt
            continue
        start, pos = pos, _skip_blank(data, end)  # the closing blank lines go with the record
        yield Record(start, headers, block), pos


def _skip_blank(data: bytearray, pos: int) -> int:
    while pos < len(data) and data[pos] in b"\r\n":
        pos += 1
    return pos


def _next_header(data: bytearray, start: int) -> int:
    match = _HEADER_LINE.search(data, start)
    if match is None:
        return -1
    return match.start() + (1 if data[match.start()] == 0x0A else 0)


def _header(data: bytearray | bytes, pos: int) -> tuple[dict[str, str] | None, int]:
    """The header fields of the record at `pos` and where its block starts; (None, -1) when the
    header does not end within `_MAX_HEADER` bytes."""
    end = data.find(b"\r\n\r\n", pos, pos + _MAX_HEADER)
    if end < 0:
        return None, -1
    lines = bytes(data[pos:end]).decode("utf-8", "replace").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:  # a line without a colon (a folded continuation, or noise) is skipped
            headers[name.strip().lower()] = value.strip()
    return headers, end + 4


def _length(headers: dict[str, str]) -> int | None:
    value = headers.get("content-length", "")
    # isascii: str.isdigit accepts "²", which int() refuses
    return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else None
