import random
import time

import pytest

from shipyard.data.batch import Batch, Quarantine
from shipyard.data.config import DecontamConfig, ExtractConfig, PipelineConfig
from shipyard.data.stages import get_stage
from shipyard.data.stages.c4fineweb import c4, fineweb
from shipyard.data.stages.extract import register_extractor
from shipyard.data.stages.gopher import _ngram_scores, quality, repetition
from shipyard.data.stages.pii import redact
from shipyard.data.words import tokens
from shipyard.errors import InvalidInput

from .conftest import english_text, html_page

CONFIG = PipelineConfig("t", ("x",))


def batch_of(**columns: list[object]) -> Batch:
    n = len(next(iter(columns.values())))
    return {"doc_id": [f"d{i}" for i in range(n)], **columns}  # type: ignore[dict-item]


def test_extract_main_text_and_quarantine_undecodable() -> None:
    good = html_page(english_text(1), "Harbour news")
    junk = bytes(range(256)) * 40  # binary noise with NULs, declared as HTML
    batch = batch_of(html=[good, junk])
    quarantine = Quarantine("f")
    out = get_stage("extract")(CONFIG).process(batch, quarantine)
    assert out["doc_id"] == ["d0"]
    assert "html" not in out
    assert out["text"][0].startswith("Harbour news")
    assert english_text(1).split("\n\n")[0][:60] in out["text"][0]
    assert [r["doc_id"] for r in quarantine.rows] == ["d1"]
    assert "undecodable" in quarantine.rows[0]["reason"]


def test_trafilatura_extracts_the_same_main_text() -> None:
    page = html_page(english_text(3), "Harbour news")
    config = PipelineConfig("t", ("x",), extract=ExtractConfig(engine="trafilatura"))
    out = get_stage("extract")(config).process(batch_of(html=[page]), Quarantine("f"))
    assert english_text(3).split("\n\n")[1][:60] in out["text"][0]


def test_hanging_extractor_costs_one_record_not_the_task() -> None:
    def slow(html: str, main: bool) -> str:
        if "hang" in html:
            time.sleep(60)
        return html

    register_extractor("sleepy", slow)
    config = PipelineConfig("t", ("x",), extract=ExtractConfig(engine="sleepy", timeout_s=0.3))
    batch = batch_of(html=[b"<p>fine</p>", b"<p>hang</p>", b"<p>also fine</p>"])
    quarantine = Quarantine("f")
    started = time.monotonic()
    out = get_stage("extract")(config).process(batch, quarantine)
    assert time.monotonic() - started < 30  # generous: only proves the sleep was cut short
    assert out["doc_id"] == ["d0", "d2"]
    assert quarantine.rows[0]["doc_id"] == "d1"
    assert quarantine.rows[0]["reason"].startswith("timeout")


def test_deeply_nested_page_times_out_inside_native_code() -> None:
    # resiliparse's time grows much faster than linearly with nesting: 8,000 levels take
    # seconds of C++ that no signal handler interrupts; the worker is killed instead
    depth = 8000
    nested = ("<html><body>" + "<div><span>x " * depth + "</span></div>" * depth).encode()
    fine = html_page(english_text(1))
    config = PipelineConfig("t", ("x",), extract=ExtractConfig(timeout_s=0.5))
    quarantine = Quarantine("f")
    out = get_stage("extract")(config).process(batch_of(html=[fine, nested, fine]), quarantine)
    assert out["doc_id"] == ["d0", "d2"]
    assert quarantine.rows == [
        {
            "doc_id": "d1",
            "source": "f",
            "stage": "extract",
            "reason": "timeout after 0.5s in extract",
        }
    ]


def test_unknown_extractor_is_rejected() -> None:
    config = PipelineConfig("t", ("x",), extract=ExtractConfig(engine="nope"))
    with pytest.raises(InvalidInput, match=r"extract\.engine 'nope'"):
        get_stage("extract")(config)


def test_langid_columns() -> None:
    texts = [
        "The harbour master checked every vessel before the storm arrived in the evening.",
        "Le capitaine du navire a vérifié les cordes avant que la tempête n'arrive ce soir.",
        "Der Kapitän hat die Seile geprüft, bevor der Sturm am Abend den Hafen erreichte.",
        "",
    ]
    out = get_stage("langid")(CONFIG).process(batch_of(text=texts), Quarantine("f"))
    assert out["language"] == ["en", "fr", "de", "und"]
    assert all(s > 0.5 for s in out["language_score"][:3]) and out["language_score"][3] == 0.0


def test_filters_annotate_without_deleting() -> None:
    good = english_text(7)
    repeated = "\n".join(["Buy cheap tickets now for the best price in town."] * 30)
    short = "Too short to be a document."
    out = get_stage("filters")(CONFIG).process(
        batch_of(text=[good, repeated, short]), Quarantine("f")
    )
    assert len(out["text"]) == 3
    # as in datatrove, the most common 2-gram counts even when it occurs once: in a six-word
    # document "Too short" alone is a third of the characters
    assert out["gopher_repetition_ok"] == [True, False, False]
    assert out["gopher_repetition_reason"][2] == "top_2_gram"
    assert out["gopher_repetition_reason"][1] == "dup_para_frac" or out["gopher_repetition_reason"][
        1
    ].startswith("dup_line")
    # one distinct stop word ("the", thirty times) is not two, as in the reference
    assert out["gopher_quality_ok"] == [True, False, False]
    assert out["gopher_quality_reason"][1] == "gopher_enough_stop_words"
    assert out["gopher_quality_reason"][2] == "gopher_short_doc"
    assert out["c4_ok"][0] and out["fineweb_ok"][0]


def _reference_dup_ngram_chars(words: list[str], n: int) -> int:
    """datatrove's `find_all_duplicate`, verbatim in effect: scan left to right; an n-gram seen
    before counts its characters and the scan jumps past it."""
    seen: set[str] = set()
    chars = i = 0
    while i < len(words) - n + 1:
        gram = "".join(words[i : i + n])
        if gram in seen:
            chars += len(gram)
            i += n
        else:
            seen.add(gram)
            i += 1
    return chars


def test_gopher_duplicated_ngrams_match_the_reference_scan() -> None:
    rng = random.Random(3)
    for _ in range(50):
        vocab = [f"w{i}" * rng.randint(1, 3) for i in range(rng.randint(2, 12))]
        words = [rng.choice(vocab) for _ in range(rng.randint(0, 120))]
        scores = {rule: chars for rule, chars, _ in _ngram_scores(words)}
        for n in range(5, 11):
            if len(words) >= n:
                assert scores[f"duplicated_{n}_n_grams"] == _reference_dup_ngram_chars(words, n)


def test_gopher_repetition_flags_a_repeated_slice() -> None:
    base = tokens(english_text(3))
    words = base + base[10 : 10 + len(base) // 3]
    assert repetition(" ".join(words), words) == "duplicated_5_n_grams"
    clean = english_text(4)
    assert repetition(clean, tokens(clean)) == ""


def test_gopher_quality_rules() -> None:
    text = english_text(5)
    assert quality(text, tokens(text)) == ""
    no_stop = " ".join(["harbour crane vessel cargo river bridge"] * 20)
    assert quality(no_stop, tokens(no_stop)) == "gopher_enough_stop_words"
    hashes = " ".join(["#tag the and"] * 30)
    assert quality(hashes, tokens(hashes)) == "gopher_too_many_hashes"
    # punctuation tokens are words that are not alphabetic, as in the reference
    dotted = " ".join(["the cargo , the river ; the crane : and ( vessel ) ."] * 10)
    assert quality(dotted, tokens(dotted)) == "gopher_below_alpha_threshold"


def test_c4_and_fineweb_rules() -> None:
    text = english_text(6)
    assert c4(text) == "" and fineweb(text, tokens(text)) == ""
    assert c4(text + "\nlorem ipsum dolor sit amet.") == "lorem_ipsum"
    assert c4(text + "\nCall the function { like this } now.") == "curly_bracket"
    # only lines C4 would keep are judged: a brace in a line without end punctuation is dropped
    assert c4(text + "\nfunction() { return 1; }") == ""
    assert c4("One line only. Two sentences.") == "too_few_sentences"
    menu = "\n".join(["Home", "About", "Contact", "Shop", "Blog"] * 5)
    assert fineweb(menu, tokens(menu)) == "line_punct_ratio"


def test_pii_redaction() -> None:
    text = (
        "Write to jane.doe+ships@harbour.example.org or call +1 415-555-0132, "
        "server 192.168.10.4 and 2001:db8::1 and fe80:0:0:0:200:f8ff:fe21:67cf. "
        "Version 3.11.4 and the year 2024 stay."
    )
    out, count = redact(text)
    assert "jane.doe" not in out and "<EMAIL>" in out
    assert "555-0132" not in out and "<PHONE>" in out
    assert "192.168.10.4" not in out and "fe80:0:0:0:200:f8ff:fe21:67cf" not in out
    assert out.count("<IP>") == 3
    assert "3.11.4" in out and "2024" in out
    assert count == 5
    code, n = redact("use std::vector and a::b here")
    assert n == 0 and code == "use std::vector and a::b here"
    stage_out = get_stage("pii")(CONFIG).process(batch_of(text=[text]), Quarantine("f"))
    assert stage_out["text"] == [out] and stage_out["pii_count"] == [5]


def test_decontamination_flags_shared_long_ngrams(tmp_path: object) -> None:
    from pathlib import Path

    bench = Path(str(tmp_path)) / "bench.txt"
    question = "what is the name of the captain who sailed the old ship across the river at dawn"
    bench.write_text(question + "\nshort line\n")
    config = PipelineConfig("t", ("x",), decontam=DecontamConfig(benchmarks=(str(bench),)))
    texts = [english_text(1) + " " + question.upper() + ".", english_text(2)]
    out = get_stage("decontam")(config).process(batch_of(text=texts), Quarantine("f"))
    assert out["contaminated"] == [True, False]
