"""Poison WARC files: damage costs the damaged record only, every healthy record is read (at
least everything warcio reads), and each stretch that cannot be read is counted by offset."""

import gzip
import random
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from shipyard.data.batch import Quarantine
from shipyard.data.config import ReadConfig
from shipyard.data.stages.read import UNREADABLE, read_warc
from shipyard.data.warcframe import Damage, records
from shipyard.data.warcpack import Page, record_bytes
from shipyard.errors import ShipyardError

PAGES = [Page(f"https://a.org/{i}", f"<p>page {i} {'x' * (i * 37)}</p>".encode()) for i in range(8)]


def members(pages: list[Page] = PAGES) -> list[bytes]:
    return [gzip.compress(record_bytes(p), mtime=0) for p in pages]


def write(tmp_path: Path, name: str, chunks: list[bytes]) -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(chunks))
    return path


def read(path: Path, config: ReadConfig | None = None) -> tuple[list[str], Quarantine]:
    quarantine = Quarantine(path.name)
    batch = read_warc(path, config or ReadConfig(), quarantine)
    return batch["url"], quarantine


def warcio_urls(path: Path) -> list[str]:
    """The responses warcio reads before it gives up on the file."""
    urls = []
    try:
        with open(path, "rb") as fh:
            for record in ArchiveIterator(fh):
                if record.rec_type == "response":
                    record.content_stream().read()
                    urls.append(record.rec_headers.get_header("WARC-Target-URI"))
    except Exception:
        pass
    return urls


def unreadable(quarantine: Quarantine) -> list[dict[str, str]]:
    return [row for row in quarantine.rows if row["reason"].startswith(UNREADABLE)]


def assert_adds_up(quarantine: Quarantine, kept: int) -> None:
    """records seen = kept + filtered + quarantined + unreadable (quarantine rows hold both)."""
    assert quarantine.seen == kept + sum(quarantine.policy.values()) + len(quarantine.rows)


def test_one_bad_header_among_healthy_records_costs_that_record(tmp_path: Path) -> None:
    chunks = members()
    bad = b"\x00\x17ARC/1.0" + record_bytes(PAGES[3])[8:]  # no longer a WARC header at all
    chunks[3] = gzip.compress(bad, mtime=0)
    path = write(tmp_path, "header.warc.gz", chunks)
    urls, quarantine = read(path)
    assert urls == [p.url for i, p in enumerate(PAGES) if i != 3]
    assert set(warcio_urls(path)) <= set(urls)
    [row] = unreadable(quarantine)
    assert row["doc_id"] == f"header.warc.gz@{sum(len(c) for c in chunks[:3])}"
    assert_adds_up(quarantine, len(urls))


def test_corrupt_gzip_member_among_intact_ones_costs_that_member(tmp_path: Path) -> None:
    chunks = members()
    broken = bytearray(chunks[2])
    for i in range(12, len(broken) - 8):  # the deflate data, not the gzip header
        broken[i] ^= 0x5A
    chunks[2] = bytes(broken)
    path = write(tmp_path, "member.warc.gz", chunks)
    urls, quarantine = read(path)
    assert urls == [p.url for i, p in enumerate(PAGES) if i != 2]
    assert set(warcio_urls(path)) <= set(urls)
    [row] = unreadable(quarantine)
    assert row["doc_id"] == f"member.warc.gz@{len(chunks[0]) + len(chunks[1])}"
    assert "gzip" in row["reason"]
    assert_adds_up(quarantine, len(urls))


def test_clipped_file_keeps_every_record_before_the_cut(tmp_path: Path) -> None:
    chunks = members()
    noise = random.Random(1).randbytes(50_000)  # incompressible: the cut lands in the body
    chunks[-1] = gzip.compress(record_bytes(Page("https://a.org/big", noise)), mtime=0)
    data = b"".join(chunks)
    path = write(tmp_path, "clipped.warc.gz", [data[: len(data) - len(chunks[-1]) // 2]])
    urls, quarantine = read(path, ReadConfig(max_record_bytes=10_000))
    assert urls == [p.url for p in PAGES[:-1]]
    # warcio hands out the cut record's partial bytes as if whole; it is not a healthy record
    assert set(warcio_urls(path)) - {"https://a.org/big"} <= set(urls)
    [row] = quarantine.rows
    # over the size limit, but what matters is that it was cut short
    assert row["reason"].startswith("truncated: ")
    assert row["doc_id"] == f"clipped.warc.gz:{len(PAGES)}"
    assert_adds_up(quarantine, len(urls))


def test_junk_between_plain_records_is_skipped_to_the_next_header(tmp_path: Path) -> None:
    records = [record_bytes(p) for p in PAGES]
    chunks = [*records[:4], b"\x00garbage that is not a record\r\n" * 40, *records[4:]]
    path = write(tmp_path, "junk.warc", chunks)
    urls, quarantine = read(path)
    assert urls == [p.url for p in PAGES]
    [row] = unreadable(quarantine)
    assert row["doc_id"] == f"junk.warc@{sum(len(r) for r in records[:4])}"
    assert_adds_up(quarantine, len(urls))


def test_real_clipped_crawl_file_reports_truncated(crawl_dir: Path) -> None:
    urls, quarantine = read(crawl_dir / "clipped.warc.gz", ReadConfig(max_record_bytes=1000))
    assert urls == []
    assert [r["reason"].split(":")[0] for r in quarantine.rows] == ["truncated"]


# --- WARC record boundaries, property-based -------------------------------------------------


@st.composite
def damaged_files(draw: st.DrawFn) -> tuple[bytes, list[str], bool]:
    """(file bytes, URLs of the records no damage touched, gzip?) for a file of healthy records
    with flipped bytes, spliced fragments of other records, junk or a truncation."""
    count = draw(st.integers(1, 6))
    pages = [
        Page(f"https://b.org/{i}", draw(st.binary(min_size=0, max_size=300)) + b"<p>x</p>")
        for i in range(count)
    ]
    compressed = draw(st.booleans())
    chunks = members(pages) if compressed else [record_bytes(p) for p in pages]
    intact = [True] * count
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, count - 1))
        chunk = bytearray(chunks[index])
        if not chunk:  # cut away by an earlier truncation
            continue
        kind = draw(st.sampled_from(["flip", "splice", "junk", "truncate"]))
        if kind == "flip":
            at = draw(st.integers(0, len(chunk) - 1))
            chunk[at] ^= draw(st.integers(1, 255))
        elif kind == "splice":  # a piece of another record inside this one
            other = chunks[draw(st.integers(0, count - 1))] or b"WARC/1.0\r\n"
            lo = draw(st.integers(0, len(other) - 1))
            at = draw(st.integers(0, len(chunk)))
            chunk[at:at] = other[lo : lo + draw(st.integers(1, 200))]
        elif kind == "junk":
            chunk[draw(st.integers(0, len(chunk))) :] += draw(st.binary(min_size=1, max_size=64))
        else:
            del chunk[draw(st.integers(0, len(chunk) - 1)) :]
        if bytes(chunk) != chunks[index]:
            chunks[index] = bytes(chunk)
            intact[index] = False
    # a plain record that grew or shrank can hide the record after it (its length is wrong);
    # a gzip member ends where it ends, so its neighbours are always safe
    urls = [p.url for i, p in enumerate(pages) if intact[i] and (compressed or _safe(intact, i))]
    return b"".join(chunks), urls, compressed


def _safe(intact: list[bool], index: int) -> bool:
    return index == 0 or intact[index - 1]


@pytest.mark.fuzz
@settings(max_examples=200, deadline=None)
@given(damaged_files())
def test_damage_never_escapes_and_intact_records_after_it_are_read(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[bytes, list[str], bool]
) -> None:
    data, intact_urls, compressed = case
    path = tmp_path_factory.mktemp("fuzz") / ("f.warc.gz" if compressed else "f.warc")
    path.write_bytes(data)
    quarantine = Quarantine(path.name)
    try:
        batch = read_warc(path, ReadConfig(content_types=("text/html",)), quarantine)
    except ShipyardError:
        return
    assert set(intact_urls) <= set(batch["url"])
    assert_adds_up(quarantine, len(batch["url"]))


def test_a_length_in_other_digits_is_damage_not_a_crash(tmp_path: Path) -> None:
    records = [record_bytes(p) for p in PAGES[:3]]
    records[1] = records[1].replace(b"Content-Length: ", b"Content-Length: \xc2\xb2", 1)  # "²"
    records[2] = records[2].replace(b"HTTP/1.1 200", "HTTP/1.1 ²0".encode(), 1)  # same length
    urls, quarantine = read(write(tmp_path, "digits.warc", records))
    assert urls == [PAGES[0].url, PAGES[2].url]
    assert len(unreadable(quarantine)) == 1


def test_random_bytes_are_unreadable_not_an_error(tmp_path: Path) -> None:
    rng = random.Random(7)
    path = write(tmp_path, "noise.warc.gz", [b"\x1f\x8b\x08" + rng.randbytes(5000)])
    urls, quarantine = read(path)
    assert urls == []
    assert len(unreadable(quarantine)) == 1


# --- a wrong length, a record in many members, a file larger than memory ----------------------


def _lying(record: bytes, length: int) -> bytes:
    head, sep, rest = record.partition(b"\r\n\r\n")
    lines = [
        f"Content-Length: {length}".encode() if line.startswith(b"Content-Length:") else line
        for line in head.split(b"\r\n")
    ]
    return b"\r\n".join(lines) + sep + rest


@pytest.mark.parametrize("framing", ["plain", "one gzip member"])
@pytest.mark.parametrize("length", [10_000_000, 200_000])  # skipped unheld, and held
def test_a_length_past_the_end_costs_its_record_only(
    tmp_path: Path, framing: str, length: int
) -> None:
    records = [record_bytes(p) for p in PAGES[:6]]
    records[2] = _lying(records[2], length)
    data = b"".join(records)
    name = "past.warc" if framing == "plain" else "past.warc.gz"
    path = write(tmp_path, name, [data if framing == "plain" else gzip.compress(data, mtime=0)])
    urls, quarantine = read(path, ReadConfig(max_record_bytes=1_000_000))
    assert urls == [p.url for i, p in enumerate(PAGES[:6]) if i != 2]
    [row] = quarantine.rows
    offset = sum(map(len, records[:2])) if framing == "plain" else 0
    assert row["reason"] == (
        f"{UNREADABLE} at byte {offset}: Content-Length {length} points past the end of the file"
    )
    assert quarantine.seen == 6
    assert_adds_up(quarantine, len(urls))


def test_a_record_without_a_type_is_counted_in_every_framing(tmp_path: Path) -> None:
    records = [record_bytes(p) for p in PAGES[:3]]
    records[1] = records[1].replace(b"WARC-Type: response\r\n", b"")
    for name, chunks in [
        ("typeless.warc", records),
        ("typeless.warc.gz", [gzip.compress(r, mtime=0) for r in records]),
    ]:
        urls, quarantine = read(write(tmp_path, name, chunks))
        assert urls == [PAGES[0].url, PAGES[2].url]
        [row] = unreadable(quarantine)
        assert row["reason"].endswith("WARC header without WARC-Type")
        assert_adds_up(quarantine, len(urls))


def _split_members(data: bytes, size: int) -> bytes:
    return b"".join(gzip.compress(data[i : i + size], mtime=0) for i in range(0, len(data), size))


def test_a_record_split_into_many_gzip_members_reads_in_linear_time(tmp_path: Path) -> None:
    body = random.Random(3).randbytes(8_000_000).hex().encode()  # 16 MB
    record = record_bytes(Page("https://a.org/long", b"<p>" + body + b"</p>"))
    whole = write(tmp_path, "whole.warc.gz", [gzip.compress(record, mtime=0)])
    split = write(tmp_path, "split.warc.gz", [_split_members(record, 4096)])  # ~4,000 members

    def cpu_seconds(path: Path) -> float:
        started = time.process_time()
        urls, quarantine = read(path, ReadConfig(max_record_bytes=32_000_000))
        assert urls == ["https://a.org/long"] and not quarantine.rows
        return time.process_time() - started

    # CPU time, not wall-clock: a loaded machine slows both alike. When every member re-copied
    # the record so far, the split file took about 100 times the whole one; now about twice.
    assert cpu_seconds(split) < 5 * cpu_seconds(whole) + 0.5


def test_memory_stays_bounded_whatever_the_file_size(tmp_path: Path) -> None:
    """Streaming: the reader holds a few MiB, not the file, nor a block it does not keep."""
    rng = random.Random(5)
    pages = [Page(f"https://m.org/{i}", rng.randbytes(200_000).hex().encode()) for i in range(60)]
    big = Page("https://m.org/huge", rng.randbytes(20_000_000))  # over max_record_bytes
    plain = write(tmp_path, "big.warc", [record_bytes(p) for p in [*pages, big, *pages[:3]]])
    zipped = write(tmp_path, "big.warc.gz", [gzip.compress(plain.read_bytes(), mtime=0)])
    for path in (plain, zipped):  # 45 MB: a plain file, and one gzip member
        tracemalloc.start()
        count = 0
        for event in records(path, max_block=1_000_000):
            count += 1
            assert not isinstance(event, Damage)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert count == 64
        assert peak < 12_000_000, f"{path.name}: {peak} bytes held"
