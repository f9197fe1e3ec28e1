import gzip
from pathlib import Path

from shipyard.data.batch import Quarantine
from shipyard.data.config import ReadConfig
from shipyard.data.stages.read import domain_of, read_warc
from shipyard.data.warcpack import Page

from .conftest import MakeWarc, english_text, html_page


def test_reads_real_common_crawl_excerpt(crawl_dir: Path) -> None:
    quarantine = Quarantine("warcfile.warc.gz")
    batch = read_warc(crawl_dir / "warcfile.warc.gz", ReadConfig(), quarantine)
    assert len(batch["doc_id"]) == 16
    assert set(batch["crawl"]) == {"CC-MAIN-2020-34"}
    assert batch["url"][0].startswith("http://003338.cn/")
    assert all(isinstance(h, bytes) and len(h) > 1000 for h in batch["html"])
    assert quarantine.rows == []


def test_truncated_warc_keeps_what_was_read_and_quarantines_the_cut(crawl_dir: Path) -> None:
    quarantine = Quarantine("clipped.warc.gz")
    batch = read_warc(crawl_dir / "clipped.warc.gz", ReadConfig(), quarantine)
    assert batch["doc_id"] == []
    assert len(quarantine.rows) == 1
    assert quarantine.rows[0]["reason"].startswith("truncated: ")


def test_blocklist_duplicate_urls_and_content_types(make_warc: MakeWarc) -> None:
    page = html_page(english_text(1))
    path = make_warc(
        "a.warc.gz",
        [
            Page("https://good.org/a", page),
            Page("https://ads.spam.com/x", page),
            Page("https://good.org/a", page),
            Page("https://good.org/img.png", b"\x89PNG", content_type="image/png"),
            Page("https://good.org/missing", b"gone", status=404),
        ],
    )
    quarantine = Quarantine("a.warc.gz")
    batch = read_warc(path, ReadConfig(url_blocklist=("spam.com",)), quarantine)
    assert batch["url"] == ["https://good.org/a"]
    assert batch["domain"] == ["good.org"]
    assert batch["crawl"] == ["TEST"]
    assert dict(quarantine.policy) == {
        "read.blocklisted": 1,
        "read.duplicate_url": 1,
        "read.not_html": 1,
        "read.not_200": 1,
    }


def test_oversized_record_is_quarantined_unread(make_warc: MakeWarc) -> None:
    big = b"<html><body>" + b"x" * 300_000 + b"</body></html>"
    path = make_warc(
        "big.warc", [Page("https://a.org/big", big), Page("https://a.org/ok", b"<p>ok</p>")], "none"
    )
    quarantine = Quarantine("big.warc")
    batch = read_warc(path, ReadConfig(max_record_bytes=100_000), quarantine)
    assert batch["url"] == ["https://a.org/ok"]
    assert quarantine.rows[0]["doc_id"] == "big.warc:1"
    assert quarantine.rows[0]["reason"].startswith("oversized:")


def test_garbage_after_valid_records_ends_the_file_not_the_task(
    make_warc: MakeWarc, tmp_path: Path
) -> None:
    path = make_warc("g.warc.gz", [Page(f"https://a.org/{i}", b"<p>hi</p>") for i in range(3)])
    with open(path, "ab") as fh:
        fh.write(gzip.compress(b"WARC/1.0\r\nContent-Length: 99999\r\n\r\nshort"))
    quarantine = Quarantine("g.warc.gz")
    batch = read_warc(path, ReadConfig(), quarantine)
    assert len(batch["url"]) == 3


def test_domain_of_strips_www() -> None:
    assert domain_of("https://www.Example.org:8080/a?b") == "example.org"
    assert domain_of("not a url") == ""


def test_reads_lz4_compressed_warc(make_warc: MakeWarc) -> None:
    from fastwarc.stream_io import Lz4Writer

    plain = make_warc(
        "p.warc", [Page(f"https://a.org/{i}", b"<p>hi</p>") for i in range(3)], "none"
    )
    packed = plain.with_name("p.warc.lz4")
    writer = Lz4Writer(str(packed))
    writer.write(plain.read_bytes())
    writer.close()
    batch = read_warc(packed, ReadConfig(), Quarantine("p.warc.lz4"))
    assert batch["url"] == [f"https://a.org/{i}" for i in range(3)]
