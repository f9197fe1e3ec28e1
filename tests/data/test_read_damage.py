"""Poison WARC files: damage costs the damaged record only, every healthy record is read (at
least everything warcio reads), and each stretch that cannot be read is counted by offset."""

import gzip
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from shipyard.data.batch import Quarantine
from shipyard.data.config import ReadConfig
from shipyard.data.stages.read import UNREADABLE, read_warc
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
