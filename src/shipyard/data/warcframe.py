"""Find the WARC records in a file, streaming, stepping over damage instead of stopping at it.

A crawl file is gzip members (one record each, as crawlers write them), lz4 frames or plain
bytes. `records` reads it in bounded pieces and yields every record it can read and one `Damage`
per stretch it cannot: a gzip member that fails to decompress is skipped to the next member that
does; bytes that are not a record are skipped to the next `WARC/x.y` header line; a record whose
`Content-Length` points past the end of the file is damage, and reading resumes at the first
header line after its own header; a record cut short by the end of the file (no header line
after it) is `Truncated`. A block longer than `max_block` is never held: it is skipped as it
streams by and reported as `Oversized`. Every event carries the byte offset where it starts (the
gzip member's offset in compressed files, the byte offset in plain ones), so a lost record can be
found again. Memory is bounded by `max_block` plus a few MiB, whatever the file's size, and time
is linear in its size however its records are split into gzip members.
"""

import bisect
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b\x08"
LZ4_MAGIC = b"\x04\x22\x4d\x18"
_FEED = 1 << 16  # compressed bytes handed to zlib at a time
_CHUNK = 1 << 20  # decompressed bytes handed to the parser at a time, at most
_MAX_HEADER = 1 << 16  # a WARC header longer than this is damage, not a header
_OVERLAP = 80  # bytes kept from skipped data, so a header line split across pieces is found
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
class Oversized:
    offset: int
    headers: dict[str, str]
    declared: int  # its Content-Length, over the reader's `max_block`


@dataclass(frozen=True)
class Damage:
    offset: int
    reason: str


Event = Record | Truncated | Oversized | Damage

# Where a piece of decompressed bytes comes from: (gzip member's file offset, or 0 in lz4 and
# plain files; position in the member's decompressed bytes, or the file offset in plain files).
Place = tuple[int, int]


@dataclass(frozen=True)
class _Piece:
    place: Place
    data: bytes
    first: bool = False  # starts a gzip member
    last: bool = False  # ends a gzip member
    error: str | None = None  # a stretch that does not decompress, at `place`


def records(path: Path, max_block: int | None = None) -> Iterator[Event]:
    with open(path, "rb") as fh:
        head = fh.read(1 << 20)
        if not head:
            return
        kind = "gzip" if _is_gzip(head) else "lz4" if head.startswith(LZ4_MAGIC) else "plain"
        parser = _Parser(kind == "gzip", max_block)
        start: Place = (0, 0)
        while True:
            for piece in _pieces(fh, path, kind, start):
                yield from parser.feed(piece)
                if parser.restart is not None:
                    break
            else:
                yield from parser.finish()
            if parser.restart is None:
                return
            start, parser = parser.restart, _Parser(kind == "gzip", max_block)


def _is_gzip(head: bytes) -> bool:
    """gzip unless the file says otherwise: a damaged first member still leaves later members."""
    if head.startswith((GZIP_MAGIC, LZ4_MAGIC)) or b"WARC/" in head:
        return head.startswith(GZIP_MAGIC)
    return GZIP_MAGIC in head


def _pieces(fh: BinaryIO, path: Path, kind: str, start: Place) -> Iterator[_Piece]:
    if kind == "gzip":
        return _gzip_pieces(fh, start)
    if kind == "lz4":
        return _lz4_pieces(path, start[1])
    return _plain_pieces(fh, start[1])


def _plain_pieces(fh: BinaryIO, at: int) -> Iterator[_Piece]:
    fh.seek(at)
    while data := fh.read(_CHUNK):
        yield _Piece((0, at), data)
        at += len(data)


def _lz4_pieces(path: Path, skip: int) -> Iterator[_Piece]:
    from fastwarc.stream_io import Lz4Reader

    reader = Lz4Reader(str(path))
    at = 0
    try:
        while True:
            try:
                data = reader.read(_CHUNK)
            except Exception as exc:  # fastwarc raises plain exceptions for a broken frame
                yield _Piece((0, at), b"", error=f"lz4 data does not decompress: {exc}")
                return
            if not data:
                return
            if at + len(data) > skip:
                cut = max(skip - at, 0)
                yield _Piece((0, at + cut), data[cut:])
            at += len(data)
    finally:
        reader.close()


def _gzip_pieces(fh: BinaryIO, start: Place) -> Iterator[_Piece]:
    """Each gzip member's decompressed bytes in pieces; a run of bytes that does not decompress
    becomes one error piece, and decoding resumes at the next offset where a member decodes."""
    pos, skip = start
    size = fh.seek(0, 2)
    damaged_at: int | None = None  # start of the current run of undecodable bytes
    while pos < size:
        member = _Member(fh, pos, skip)
        skip = 0
        for piece in member.pieces():
            if damaged_at is not None:
                yield _Piece((damaged_at, 0), b"", error="gzip data does not decompress")
                damaged_at = None
            yield piece
        if member.error is None:
            pos = member.end
            continue
        if member.yielded:  # its first part is out: the parser learns that the rest is lost
            yield _Piece((pos, 0), b"", error="gzip data does not decompress")
        else:
            damaged_at = pos if damaged_at is None else damaged_at
        found = _find(fh, GZIP_MAGIC, pos + 1, size)
        pos = size if found < 0 else found
    if damaged_at is not None:
        yield _Piece((damaged_at, 0), b"", error="gzip data does not decompress")


class _Member:
    """One gzip member, decompressed incrementally. Its first `_CHUNK` bytes are held back until
    the member ends or outgrows them, so a small member that fails is one error, not a part."""

    def __init__(self, fh: BinaryIO, pos: int, skip: int) -> None:
        self.fh, self.pos, self.skip = fh, pos, skip
        self.end = pos  # file offset just past the member, once it ended
        self.error: str | None = None
        self.yielded = False

    def pieces(self) -> Iterator[_Piece]:
        inflater = zlib.decompressobj(31)
        self.fh.seek(self.pos)
        fed = self.pos
        held = bytearray()
        out_at = 0  # decompressed bytes of this member handed on (or skipped) so far
        try:
            while not inflater.eof and (chunk := self.fh.read(_FEED)):
                fed += len(chunk)
                while chunk and not inflater.eof:  # at most _CHUNK out per call: no bomb
                    held += inflater.decompress(chunk, _CHUNK)
                    chunk = inflater.unconsumed_tail
                    if len(held) >= _CHUNK:
                        yield from self._piece(held, out_at, last=False)
                        out_at += len(held)
                        held = bytearray()
            held += inflater.flush()
        except zlib.error as exc:
            self.error = str(exc)
            return
        if inflater.eof:
            self.end = fed - len(inflater.unused_data)
        else:
            # the member never ended: cut short, with the next member (if any) read as its tail
            nxt = _find(self.fh, GZIP_MAGIC, self.pos + 1, fed)
            self.end = nxt if nxt >= 0 else fed
        yield from self._piece(held, out_at, last=True)

    def _piece(self, data: bytearray, out_at: int, last: bool) -> Iterator[_Piece]:
        cut = min(max(self.skip - out_at, 0), len(data))
        if cut < len(data) or last:
            self.yielded = True
            first = out_at + cut == 0
            yield _Piece((self.pos, out_at + cut), bytes(data[cut:]), first, last)


def _find(fh: BinaryIO, needle: bytes, start: int, end: int) -> int:
    """The file offset of `needle` in [start, end), or -1."""
    at = start
    while at < end:
        fh.seek(at)
        block = fh.read(min(_CHUNK, end - at) + len(needle) - 1)
        found = block.find(needle)
        if found >= 0:
            return at + found
        at += _CHUNK
    return -1


class _Parser:
    """Records from a stream of pieces. `data[start:]` is what is not parsed yet; positions in
    `data` map back to file places through `marks` (one per piece)."""

    def __init__(self, compressed: bool, max_block: int | None) -> None:
        self.compressed = compressed
        self.max_block = max_block
        self.data = bytearray()
        self.start = 0
        self.base = 0  # stream position of data[0]
        self.marks: list[tuple[int, Place]] = []  # (stream position, place) of each piece
        self.member_ends: list[int] = []  # stream positions where gzip members end
        self.junk = False  # inside bytes that are not a record (already reported)
        self.skipping: _Skip | None = None  # inside a block too long to hold
        self.restart: Place | None = None  # set when reading must resume at this place

    # --- pieces in ----------------------------------------------------------------------------

    def feed(self, piece: _Piece) -> Iterator[Event]:
        if piece.error is not None:
            yield from self._lost(piece)
            return
        if self.compressed and piece.first and _HEADER_AT.match(piece.data[:80]):
            # a member that starts a record starts afresh: what is left of the last one (if
            # anything) never ended
            if self.skipping or self._meaningful():
                at = self.skipping.offset if self.skipping else self._offset(self._first())
                yield Damage(at, "record cut short: the next gzip member starts anew")
            self._clear()
        self.marks.append((self.base + len(self.data), piece.place))
        self.data += piece.data
        if piece.last:
            self.member_ends.append(self.base + len(self.data))
        # in a gzip file a member's end bounds its record (crawlers write one record each)
        yield from self._parse(final=False, bounded=self.compressed and piece.last)
        self._compact()

    def finish(self) -> Iterator[Event]:
        yield from self._parse(final=True, bounded=True)
        if self.restart is not None or self.skipping is not None:
            if self.skipping is not None:
                yield from self._skip_ended_early()
            return
        pos = self._first()
        if pos >= len(self.data) or self.junk:
            return
        offset = self._offset(pos)
        headers, body_at = _header(self.data, pos)
        declared = _length(headers) if headers is not None else None
        if headers is None or declared is None:
            yield Damage(offset, "file ends inside a record header")
            return
        # the block runs past the end: a wrong length if another record starts inside it
        nxt = _next_header(self.data, body_at - 1)  # from the newline a header line needs
        if nxt >= 0:
            yield Damage(offset, f"Content-Length {declared} points past the end of the file")
            self.restart = self._place(nxt)
            return
        yield Truncated(offset, headers, len(self.data) - body_at, declared)

    def _lost(self, piece: _Piece) -> Iterator[Event]:
        reason = piece.error or ""
        if self.skipping is not None:
            yield Damage(self.skipping.offset, f"cut by {reason}")
        elif self._meaningful():  # a record begun before the damage is lost with it
            yield Damage(self._offset(self._first()), f"cut by {reason}")
        else:
            yield Damage(piece.place[0] if self.compressed else piece.place[1], reason)
        self._clear()

    # --- parsing ------------------------------------------------------------------------------

    def _parse(self, final: bool, bounded: bool) -> Iterator[Event]:
        """Every record complete in the buffer. `bounded`: no more bytes belong to the last
        record (the file or its gzip member ended), so its closing lines need not follow."""
        data = self.data
        while self.restart is None:
            if self.skipping is not None:
                yield from self._skip(bounded)
                if self.skipping is not None:
                    return
                continue
            pos = _skip_blank(data, self.start)
            if pos >= len(data):
                self.start = pos
                return
            if self.junk or not _HEADER_AT.match(data, pos):
                # reported junk may end at a header line right here (its newline skipped above)
                nxt = _next_header(data, max(pos - 1, 0) if self.junk else pos + 1)
                if nxt < 0:
                    if not self.junk and len(data) - pos < _MAX_HEADER and not final:
                        return  # maybe a header split across pieces; decided at the end
                    if not self.junk:
                        yield Damage(self._offset(pos), "bytes that are not a WARC record")
                        self.junk = True
                    self.start = max(pos, len(data) - _OVERLAP)
                    return
                if not self.junk:
                    yield Damage(self._offset(pos), "bytes that are not a WARC record")
                self.junk, self.start = False, nxt
                continue
            headers, body_at = _header(data, pos)
            if headers is None:
                if len(data) - pos < _MAX_HEADER and not final:
                    return  # header not complete yet
                if final and len(data) - pos < _MAX_HEADER:
                    return  # the file ends inside it: `finish` reports it
                yield from self._resync(pos, "WARC header that does not end")
                continue
            length = _length(headers)
            if length is None and self.compressed:
                # as warcio does: the block is the rest of the gzip member
                ends = [e - self.base for e in self.member_ends if e - self.base > body_at]
                end = ends[0] if ends else len(data) if final else -1
                if end < 0 and len(data) - body_at > (self.max_block or 1 << 62) + _MAX_HEADER:
                    yield from self._resync(pos, "record without a Content-Length too long")
                    continue
                if end < 0:
                    return  # its member has not ended yet
                length = end - body_at - (4 if data.startswith(b"\r\n\r\n", end - 4) else 0)
            if length is None:
                yield from self._resync(pos, "WARC header without a valid Content-Length")
                continue
            if self.max_block is not None and length > self.max_block:
                self.skipping = _Skip(self._offset(pos), headers, length, self.base + body_at)
                self.start = body_at
                continue
            end = body_at + length
            if end > len(data):
                self.start = pos  # more is to come, or `finish` reports a cut or a wrong length
                return
            if len(data) < end + 4 and not bounded:
                return  # its closing lines may be in the next piece
            if not data.startswith(b"\r\n\r\n", end) and len(data) >= end + 4:
                # the block does not end where its Content-Length says: the length is wrong
                yield from self._resync(pos, "record does not end where its Content-Length says")
                continue
            yield Record(self._offset(pos), headers, bytes(data[body_at:end]))
            self.start = _skip_blank(data, end)  # the closing blank lines go with the record

    def _resync(self, pos: int, reason: str) -> Iterator[Event]:
        yield Damage(self._offset(pos), reason)
        nxt = _next_header(self.data, pos + 1)
        if nxt < 0:
            self.junk = True  # reported: skip quietly to the next header line
            self.start = max(pos + 1, len(self.data) - _OVERLAP)
        else:
            self.start = nxt

    def _skip(self, bounded: bool) -> Iterator[Event]:
        """Let a block too long to hold stream by; note where a header line first shows inside
        it, in case its length turns out wrong."""
        skip = self.skipping
        assert skip is not None
        data, block_end = self.data, skip.block_end - self.base
        upto = min(len(data), block_end)
        if skip.candidate is None:
            # from the newline before, which a header line needs
            frm = max(self.start, skip.body_at - self.base) - 1
            nxt = _next_header(data, max(frm, 0), upto)
            if nxt >= 0:
                skip.candidate = self._place(nxt)
        if len(data) < block_end + 4 and not (bounded and len(data) >= block_end):
            self.start = max(self.start, upto - _OVERLAP)
            return
        self.skipping = None
        if data.startswith(b"\r\n\r\n", block_end) or len(data) < block_end + 4:
            yield Oversized(skip.offset, skip.headers, skip.declared)
            self.start = _skip_blank(data, block_end)
            return
        yield Damage(skip.offset, "record does not end where its Content-Length says")
        if skip.candidate is not None:
            self.restart = skip.candidate
        else:
            self.junk, self.start = True, block_end

    def _skip_ended_early(self) -> Iterator[Event]:
        skip = self.skipping
        assert skip is not None
        self.skipping = None
        if skip.candidate is not None:
            yield Damage(
                skip.offset, f"Content-Length {skip.declared} points past the end of the file"
            )
            self.restart = skip.candidate
            return
        got = self.base + len(self.data) - skip.body_at
        yield Truncated(skip.offset, skip.headers, got, skip.declared)

    # --- bookkeeping --------------------------------------------------------------------------

    def _first(self) -> int:
        return _skip_blank(self.data, self.start)

    def _meaningful(self) -> bool:
        rest = memoryview(self.data)[self.start : self.start + _MAX_HEADER]
        return bool(bytes(rest).strip(b"\r\n \t\x00")) and not self.junk

    def _place(self, pos: int) -> Place:
        stream = self.base + pos
        index = bisect.bisect_right(self.marks, (stream, (1 << 62, 0))) - 1
        at, (member, inner) = self.marks[max(index, 0)]
        return member, inner + stream - at

    def _offset(self, pos: int) -> int:
        member, inner = self._place(pos)
        return member if self.compressed else inner

    def _clear(self) -> None:
        self.base += len(self.data)
        self.data = bytearray()
        self.start = 0
        self.marks, self.member_ends = [], []
        self.junk = False
        self.skipping = None

    def _compact(self) -> None:
        """Drop parsed bytes once they are most of the buffer: linear time overall."""
        if self.start < _CHUNK or self.start < len(self.data) // 2:
            return
        del self.data[: self.start]
        self.base += self.start
        self.start = 0
        keep = bisect.bisect_right(self.marks, (self.base, (1 << 62, 0))) - 1
        self.marks = self.marks[max(keep, 0) :]
        self.member_ends = [e for e in self.member_ends if e > self.base]


@dataclass
class _Skip:
    offset: int  # the record's offset, as reported
    headers: dict[str, str]
    declared: int
    body_at: int  # stream position where the block starts
    candidate: Place | None = None  # first header line inside the block

    @property
    def block_end(self) -> int:
        return self.body_at + self.declared


def _skip_blank(data: bytearray, pos: int) -> int:
    while pos < len(data) and data[pos] in b"\r\n":
        pos += 1
    return pos


def _next_header(data: bytearray, start: int, end: int | None = None) -> int:
    match = _HEADER_LINE.search(data, start, len(data) if end is None else end)
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
