"""Keep/drop agreement of Shipyard's quality filters with datatrove's, per filter, on real pages.

Pages are extracted with Shipyard's extract stage (resiliparse); each document then goes through
Shipyard's rule and datatrove's filter of the same name (GopherRepetitionFilter,
GopherQualityFilter, C4QualityFilter, FineWebQualityFilter, all at their defaults, English). A
document agrees when both keep it or both drop it. Every disagreement is listed with both reasons
(`--show N`), so each remaining difference can be explained.

The reference needs datatrove and spaCy (its English word tokenizer), installed apart from
Shipyard's extras:
    .venv/bin/pip install --no-deps datatrove==0.10.1
    .venv/bin/pip install loguru humanize dill multiprocess tqdm spacy

Usage: .venv/bin/python benchmarks/filter_agreement.py --html DIR [--html DIR ...] [--docs 600]
       .venv/bin/python benchmarks/filter_agreement.py --warc FILE_OR_DIR [--docs 600]
Held-out pages used in docs/data.md: the Rust documentation books of a rustup toolchain
(`$(rustc --print sysroot)/share/doc/rust/html/{book,reference,nomicon,rust-by-example}`),
pages none of the tokenizer's rules were tuned on, and the crawl excerpt in data/crawl.
"""

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

from shipyard.data.batch import Quarantine
from shipyard.data.config import PipelineConfig
from shipyard.data.stages import get_stage
from shipyard.data.stages.filters import RULES
from shipyard.data.stages.read import read_warc
from shipyard.data.warcpack import Page, html_pages, write_warc
from shipyard.data.words import tokens


def reference_filters() -> dict[str, object]:
    try:
        from datatrove.pipeline.filters import (
            C4QualityFilter,
            FineWebQualityFilter,
            GopherQualityFilter,
            GopherRepetitionFilter,
        )
    except ImportError as exc:
        sys.exit(f"datatrove is needed for the reference ({exc}); see this script's docstring")
    return {
        "gopher_repetition": GopherRepetitionFilter(),
        "gopher_quality": GopherQualityFilter(),
        "c4": C4QualityFilter(),
        "fineweb": FineWebQualityFilter(),
    }


def extract_texts(warcs: list[Path]) -> list[tuple[str, str]]:
    config = PipelineConfig("agreement", ("-",))
    extract = get_stage("extract")(config)
    out = []
    for path in warcs:
        quarantine = Quarantine(path.name)
        batch = extract.process(read_warc(path, config.read, quarantine), quarantine)
        out += [(u, t) for u, t in zip(batch["url"], batch["text"], strict=True) if t.strip()]
    return out


def warcs_of(args: argparse.Namespace, tmp: Path) -> list[Path]:
    found = []
    for item in args.warc:
        path = Path(item)
        found += sorted(path.glob("*.warc*")) if path.is_dir() else [path]
    for index, root in enumerate(args.html):
        pages: list[Page] = list(html_pages(Path(root), f"https://html{index}.local"))
        dest = tmp / f"html-{index}.warc.gz"
        write_warc(dest, pages)
        found.append(dest)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warc", action="append", default=[], help="WARC file or folder")
    parser.add_argument("--html", action="append", default=[], help="folder of HTML pages")
    parser.add_argument("--docs", type=int, default=600, help="documents sampled (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=5, help="disagreements listed per filter")
    args = parser.parse_args()
    import tempfile

    from datatrove.data import Document

    reference = reference_filters()
    with tempfile.TemporaryDirectory() as tmp:
        docs = extract_texts(warcs_of(args, Path(tmp)))
    random.Random(args.seed).shuffle(docs)
    docs = docs[: args.docs] if args.docs else docs
    agree: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    differences: dict[str, list[str]] = {rule: [] for rule in RULES}
    cpu = {"shipyard": 0.0, "datatrove": 0.0}
    for url, text in docs:
        start = time.process_time()
        words = tokens(text)
        mine = {rule: check(text, words) for rule, check in RULES.items()}
        cpu["shipyard"] += time.process_time() - start
        for rule, filt in reference.items():
            start = time.process_time()
            verdict = filt.filter(Document(text=text, id=url))  # type: ignore[attr-defined]
            cpu["datatrove"] += time.process_time() - start
            theirs = (
                "" if verdict is True else (verdict[1] if isinstance(verdict, tuple) else "drop")
            )
            kept[rule] += not theirs
            if (not theirs) == (not mine[rule]):
                agree[rule] += 1
            else:
                differences[rule].append(
                    f"{url}: shipyard {mine[rule] or 'keep'}, datatrove {theirs or 'keep'}"
                )
    print(
        f"{len(docs)} documents; filter CPU seconds: shipyard {cpu['shipyard']:.2f}, "
        f"datatrove {cpu['datatrove']:.2f} ({cpu['datatrove'] / max(cpu['shipyard'], 1e-9):.1f}×)"
    )
    worst = 1.0
    for rule in RULES:
        rate = agree[rule] / max(len(docs), 1)
        worst = min(worst, rate)
        print(
            f"{rule:18s} agreement {rate:6.1%}  ({len(differences[rule])} differ; "
            f"datatrove keeps {kept[rule]})"
        )
        for line in differences[rule][: args.show]:
            print(f"    {line}")
    print(f"lowest agreement {worst:.1%} (goal ≥ 98%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
