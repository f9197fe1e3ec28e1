"""LoRA fine-tuning throughput: Shipyard's trainer against a plain peft + HF `Trainer` loop.

Both fine-tune the same model (default SmolLM2-135M-Instruct, float32) with LoRA (rank 8, alpha
16, on q_proj and v_proj) on the same SFT data (`shipyard data sft` over reasoning-gym
`basic_arithmetic`), the same sequence length and batch, one process each pinned to one thread,
with a checkpoint every `--checkpoint-every` steps. Shipyard's side is `shipyard train run
--nprocs 1` (controller, one rank, sharded checkpoints); the baseline is `transformers.Trainer`
over a peft model with the same data packed the same way (documents back to back, cut into
`seq_len + 1` token windows, loss on the response tokens only), `save_steps` as often.

Throughput is training tokens (batch × seq_len per step) per second of wall time between the end
of step `--warmup` and the last step, checkpoints included, from each side's own per-step times.
Then Shipyard's run is repeated with its rank SIGKILLed at step `--kill-at`: the resumed run's
per-step losses must equal the uninterrupted run's exactly (float.hex).

    .venv/bin/python benchmarks/finetune_throughput.py [--steps 40] [--batch 4] [--seq-len 256]
    .venv/bin/python benchmarks/finetune_throughput.py --quick     # 8 steps, a smoke run

`--model DIR` takes any local HF causal LM directory instead of SmolLM2. The last line printed is
JSON: tokens/s of each side, their ratio (goal >= 0.9), both loss series and whether they match.
The machine is shared: figures vary from run to run.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PINNED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
LORA = {"rank": 8, "alpha": 16.0, "dropout": 0.0, "targets": ["q_proj", "v_proj"]}
LR = 1e-4
FULL = {"steps": 40, "batch": 4, "seq_len": 256, "examples": 400, "checkpoint_every": 10}
QUICK = {"steps": 8, "batch": 2, "seq_len": 64, "examples": 100, "checkpoint_every": 4}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a local HF model directory (default: SmolLM2-135M)")
    parser.add_argument("--steps", type=int, help="default 40 (--quick: 8)")
    parser.add_argument("--batch", type=int, help="default 4 (--quick: 2)")
    parser.add_argument("--seq-len", type=int, help="default 256 (--quick: 64)")
    parser.add_argument("--examples", type=int, help="SFT examples (default 400, --quick: 100)")
    parser.add_argument("--checkpoint-every", type=int, help="default 10 (--quick: 4)")
    parser.add_argument("--kill-at", type=int, help="step the rank is killed at (default: 3/4)")
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of the timing")
    parser.add_argument("--quick", action="store_true", help="smaller defaults: a smoke run")
    parser.add_argument("--baseline-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_child:
        baseline_child(json.loads(args.baseline_child.read_text()))
        return
    sizes = QUICK if args.quick else FULL
    for name, value in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    kill_at = args.kill_at if args.kill_at is not None else args.steps * 3 // 4
    if not 0 < kill_at < args.steps or args.warmup + 2 > args.steps:
        parser.error("need 0 < --kill-at < --steps and --warmup + 2 <= --steps")
    with tempfile.TemporaryDirectory(prefix="shipyard-finetune-") as tmp:
        work = Path(tmp)
        os.environ.update(PINNED, SHIPYARD_HOME=str(work / "home"), HF_HUB_OFFLINE="1")
        model = Path(args.model).resolve() if args.model else smollm2_dir(work)
        data = build_sft(model, work / "sft", args.examples, args.seq_len)
        shape = {"steps": args.steps, "batch": args.batch, "seq_len": args.seq_len}
        base = run_baseline(model, data, work / "baseline", shape, args.checkpoint_every)
        ours = run_shipyard(model, data, work, shape, args.checkpoint_every, kill_at=None)
        resumed = run_shipyard(model, data, work, shape, args.checkpoint_every, kill_at=kill_at)
    tokens = args.batch * args.seq_len
    base_rate = rate(base["ends"], tokens, args.warmup)
    our_rate = rate(ours["ends"], tokens, args.warmup)
    same = ours["losses"] == resumed["losses"]
    print(f"baseline (peft + HF Trainer)  {base_rate:10.1f} tokens/s")
    print(f"shipyard train run            {our_rate:10.1f} tokens/s")
    print(f"ratio shipyard / baseline     {our_rate / base_rate:10.3f}   (goal >= 0.9)")
    print(f"kill at step {kill_at}: attempts {resumed['attempts']}, losses equal: {same}")
    for step, (a, b) in enumerate(zip(ours["losses"], resumed["losses"], strict=True)):
        print(f"  step {step:4d}  {float.fromhex(a):.6f}  {float.fromhex(b):.6f}")
    print(f"baseline losses (first steps): {[round(x, 4) for x in base['losses'][:5]]}")
    result = {
        "name": "finetune_throughput",
        "value": our_rate / base_rate,
        "unit": "ratio",
        "shipyard_tokens_per_s": our_rate,
        "baseline_tokens_per_s": base_rate,
        "tokens_per_step": tokens,
        **shape,
        "baseline_steps": len(base["ends"]),
        "shipyard_steps": len(ours["ends"]),
        "kill_at": kill_at,
        "resumed_attempts": resumed["attempts"],
        "losses": ours["losses"],
        "resumed_losses": resumed["losses"],
        "losses_equal": same,
    }
    print(json.dumps(result))


def rate(ends: list[float], tokens_per_step: int, warmup: int) -> float:
    """Tokens per second from the end of step `warmup - 1` to the end of the last step."""
    timed = ends[warmup - 1 :] if warmup else [ends[0], *ends]
    return tokens_per_step * (len(timed) - 1) / (timed[-1] - timed[0])


# Data


def smollm2_dir(work: Path) -> Path:
    """SmolLM2-135M-Instruct dequantised to float32, as an HF directory (via its model artifact)."""
    from shipyard.serve.model_import import import_smollm2
    from shipyard.serve.models import materialise
    from shipyard.workspace import Workspace

    ws = Workspace.open()
    try:
        record = import_smollm2(ws, "smollm2")
        return materialise(ws, record.id, work / "models").path
    finally:
        ws.close()


def build_sft(model: Path, dest: Path, examples: int, seq_len: int) -> Path:
    """The SFT dataset both sides train on; examples fit one `seq_len + 1` window."""
    from shipyard.data import sft
    from shipyard.workspace import Workspace

    ws = Workspace.open()
    try:
        source = sft.GymSource("basic_arithmetic", examples, 0)
        built = sft.build(ws, str(model), source, str(dest), max_len=seq_len + 1)
    finally:
        ws.close()
    assert built.path is not None
    return built.path


def packed_windows(data: Path, seq_len: int) -> tuple[list[list[int]], list[list[int]]]:
    """Documents back to back in dataset order, cut into `seq_len + 1` windows (the tail
    dropped): the tokens and loss masks of each window."""
    import numpy as np

    from shipyard.loader import TokenDataset, open_loss_mask

    tokens = TokenDataset(data)
    masks = open_loss_mask(tokens)
    assert masks is not None
    stream = np.concatenate([tokens.document(i) for i in range(tokens.num_docs)])
    mask = np.concatenate([masks.document(i) for i in range(masks.num_docs)])
    width = seq_len + 1
    count = len(stream) // width
    return (
        stream[: count * width].reshape(count, width).tolist(),
        mask[: count * width].reshape(count, width).tolist(),
    )


# The baseline: peft + transformers.Trainer


def run_baseline(
    model: Path, data: Path, out: Path, shape: dict[str, int], checkpoint_every: int
) -> dict[str, Any]:
    from shipyard.children import reap, spawn

    out.mkdir()
    spec = out / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "model": str(model),
                "data": str(data),
                "out": str(out),
                "checkpoint_every": checkpoint_every,
                **shape,
            }
        )
    )
    log = open(out / "log.txt", "wb")  # noqa: SIM115 - closed below
    try:
        proc = spawn(
            [sys.executable, __file__, "--baseline-child", str(spec)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **PINNED},
        )
        code = proc.wait()
        reap(proc)
    finally:
        log.close()
    if code != 0:
        raise SystemExit(f"baseline failed ({code}):\n{(out / 'log.txt').read_text()[-3000:]}")
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    return result


def baseline_child(spec: dict[str, Any]) -> None:
    """One process: peft LoRA over the model, trained by `transformers.Trainer`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoModelForCausalLM,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    torch.set_num_threads(1)
    seq_len = spec["seq_len"]
    windows, masks = packed_windows(Path(spec["data"]), seq_len)
    rows = [
        {
            "input_ids": w[:seq_len],
            # HF shifts labels inside the model: label i is the target of position i - 1
            "labels": [t if m else -100 for t, m in zip(w[:seq_len], mask[:seq_len], strict=True)],
        }
        for w, mask in zip(windows, masks, strict=True)
    ]
    base = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    lora = LoraConfig(
        r=LORA["rank"],
        lora_alpha=LORA["alpha"],
        lora_dropout=LORA["dropout"],
        target_modules=LORA["targets"],
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(base, lora)
    ends: list[float] = []
    losses: list[float] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            ends.append(time.monotonic())

        def on_log(self, *args: Any, logs: dict[str, float] | None = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    arguments = TrainingArguments(
        output_dir=spec["out"],
        per_device_train_batch_size=spec["batch"],
        max_steps=spec["steps"],
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=1.0,
        save_strategy="steps",
        save_steps=spec["checkpoint_every"],
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    Trainer(model=model, args=arguments, train_dataset=rows, callbacks=[Clock()]).train()
    Path(spec["out"], "result.json").write_text(json.dumps({"ends": ends, "losses": losses}))


# Shipyard: `shipyard train run`


def run_shipyard(
    model: Path,
    data: Path,
    work: Path,
    shape: dict[str, int],
    checkpoint_every: int,
    kill_at: int | None,
) -> dict[str, Any]:
    """A run of `shipyard train run --nprocs 1`: its per-step end times and losses (float.hex,
    from the attempt that last ran each step) and its number of attempts."""
    from shipyard.children import reap, spawn
    from shipyard.train.runs import RunTable

    config = {
        "data": {"path": str(data), "global_batch": shape["batch"]},
        "model": {"kind": "hf", "source": str(model), "seq_len": shape["seq_len"]},
        "lora": LORA,
        "optim": {"lr": LR, "grad_clip": 1.0},
        "train": {"steps": shape["steps"], "checkpoint_every": checkpoint_every},
        "controller": {"startup_timeout_s": 600.0, "hang_min_s": 120.0, "spares": 0},
        "chaos": {"faults": [{"kind": "kill", "step": kill_at}] if kill_at is not None else []},
    }
    name = "resumed" if kill_at is not None else "straight"
    path = work / f"{name}.json"
    path.write_text(json.dumps(config))
    log = work / f"{name}.log"
    with open(log, "wb") as out:
        proc = spawn(
            [sys.executable, "-m", "shipyard", "train", "run", str(path), "--nprocs", "1"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **PINNED},
        )
        code = proc.wait()
        reap(proc)
    text = log.read_text()
    run_ids = [line.split()[1] for line in text.splitlines() if line.startswith("run ")]
    if code != 0 or not run_ids:
        raise SystemExit(f"shipyard train run failed ({code}):\n{text[-3000:]}")
    table = RunTable()
    try:
        steps_csv = Path(table.get(run_ids[0]).run_dir) / "steps.csv"
    finally:
        table.close()
    last: dict[int, dict[str, str]] = {}
    with open(steps_csv) as rows:
        for row in csv.DictReader(rows):
            if row["rank"] == "0":
                last[int(row["step"])] = row
    ordered = [last[step] for step in sorted(last)]
    return {
        "ends": [float(row["at"]) for row in ordered],
        "losses": [row["loss"] for row in ordered],
        "attempts": len({row["attempt"] for row in ordered}),
    }


if __name__ == "__main__":
    main()
