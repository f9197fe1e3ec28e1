"""Restart time R: from a rank's SIGKILL to the first step completed after the restart.

Ours: a 2-rank run under the `shipyard.train` controller, its chaos killing a random rank with an
exponential gap (mean `--gap` s of running time); warm spare processes (torch imported) take the
new ranks, which restore the last checkpoint from the survivors' peer memory. Baseline: torchrun
`--standalone --max-restarts` over an equivalent DDP loop (same model, `torch.save` checkpoints),
killed the same way, both as is and with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; a kill that is not
followed by a completed step within `--timeout` s counts as a failed recovery (a fresh torchrun is
started for the next kill). The machine is shared: figures vary from run to run.

    .venv/bin/python benchmarks/restart_time.py [--kills 50] [--gap 2] [--timeout 30]
"""

import argparse
import contextlib
import csv
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SAY = (
    (lambda line: print(line, file=sys.stderr, flush=True))
    if os.environ.get("VERBOSE")
    else (lambda line: None)
)
MODEL = {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 2, "seq_len": 64}


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


# Ours ------------------------------------------------------------------------------------------


def make_tokens(root: Path) -> Path:
    from shipyard.loader import TokenDatasetWriter

    rng = np.random.default_rng(0)
    with TokenDatasetWriter(root, 256, shard_tokens=1 << 16) as writer:
        for _ in range(500):
            writer.add(rng.integers(0, 256, size=int(rng.integers(20, 200))))
    return root


def run_ours(kills: int, gap: float, spares: int, work: Path) -> dict[str, object]:
    os.environ["SHIPYARD_HOME"] = str(work / "home")
    from shipyard.train import Controller, RunTable, TrainConfig, create_run

    cfg = TrainConfig.from_dict(
        {
            "data": {"path": str(make_tokens(work / "tokens")), "global_batch": 8},
            "model": MODEL,
            "train": {"steps": 1_000_000, "checkpoint_every": 10},
            # stragglers are not measured here: no drains on this noisy shared machine
            "controller": {
                "max_failures": kills + 10,
                "hang_min_s": 5.0,
                "straggler_factor": 10,
                "spares": spares,
            },
            "chaos": {"mtbf_s": gap, "kinds": ["kill"], "seed": 1},
        }
    )
    run_id = create_run(cfg, 2)
    table = RunTable()
    steps_csv = Path(table.get(run_id).run_dir) / "steps.csv"

    def first_steps() -> dict[int, float]:
        firsts: dict[int, float] = {}
        with open(steps_csv) as rows:
            for row in csv.DictReader(rows):
                firsts.setdefault(int(row["attempt"]), float(row["at"]))
        return firsts

    def recovered_at(attempt: int, firsts: dict[int, float]) -> float | None:
        """When the first attempt after `attempt` that completed a step completed it."""
        later = [at for number, at in firsts.items() if number > attempt]
        return min(later) if later else None

    def enough() -> bool:
        chaos = table.events(run_id, "chaos")
        return len(chaos) >= kills and (
            recovered_at(chaos[kills - 1].detail["attempt"], first_steps()) is not None
        )

    Controller(run_id, say=SAY).run_to_end(stop=enough)
    chaos = table.events(run_id, "chaos")[:kills]
    restored = [e.detail["restored_from"] for e in table.events(run_id, "ready")]
    cold = {e.detail["attempt"]: e.detail["cold_ranks"] for e in table.events(run_id, "launch")}
    failures = len(table.events(run_id, "failure"))
    table.close()
    firsts = first_steps()
    # R: from the kill to the first step completed by a later attempt.
    recovered = [(e, recovered_at(e.detail["attempt"], firsts)) for e in chaos]
    times = [at - e.at for e, at in recovered if at is not None]
    warm = [
        at - e.at for e, at in recovered if at is not None and not cold[e.detail["attempt"] + 1]
    ]
    return {
        "median": statistics.median(times),
        "p95": percentile(times, 95),
        "max": max(times),
        "success_rate": len(times) / kills,
        "kills": kills,
        "failures": failures,  # more than kills: an attempt failed on its own after one
        "restored_from_peers": restored.count("peers") / max(1, len(restored)),
        "cold_launches": sum(1 for e in chaos if cold[e.detail["attempt"] + 1]),
        "p95_warm_launches": percentile(warm, 95),
    }


# torchrun ---------------------------------------------------------------------------------------


def torchrun_worker(log: Path) -> None:
    """One rank under torchrun: DDP over the same GPT, checkpoint every 10 steps, log each step."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from shipyard.train.config import ModelConfig
    from shipyard.train.model import GPT, next_token_loss

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    (log.parent / f"pid-{rank}").write_text(f"{restart} {os.getpid()}")
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = GPT(ModelConfig(**MODEL))
    ddp = DistributedDataParallel(model)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ckpt = log.parent / "ckpt.pt"
    step = 0
    if ckpt.exists():
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        step = state["step"]
    gen = torch.Generator().manual_seed(rank)
    while True:
        tokens = torch.randint(0, 256, (4, 65), generator=gen)
        loss = next_token_loss(ddp, tokens)
        loss.backward()
        optim.step()
        optim.zero_grad()
        step += 1
        if step % 10 == 0 and rank == 0:
            torch.save(
                {"model": model.state_dict(), "optim": optim.state_dict(), "step": step}, ckpt
            )
        with open(log, "a") as out:
            out.write(f"{restart} {rank} {step} {time.time()}\n")


def last_restart_seen(log: Path) -> int:
    if not log.exists():
        return -1
    lines = log.read_text().splitlines()
    return max((int(line.split()[0]) for line in lines if line.strip()), default=-1)


def start_torchrun(work: Path, kills: int, fix: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if fix:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    else:
        env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun), "--standalone", "--nproc-per-node", "2"]
    command += ["--max-restarts", str(kills + 1), __file__, "--torchrun-worker", str(work / "log")]
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_torchrun(proc: subprocess.Popen[bytes], trial_dir: Path) -> None:
    """Kill the agent's group and its workers (which run in sessions of their own)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pid_file in trial_dir.glob("pid-*"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text().split()[1]), signal.SIGKILL)


def wait_for_restart(log: Path, restart: int, timeout: float) -> bool:
    """Wait until a step of torchrun restart number `restart` (or later) is logged."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if last_restart_seen(log) >= restart:
            return True
        time.sleep(0.01)
    return False


def run_torchrun(
    kills: int, gap: float, timeout: float, fix: bool, work: Path
) -> dict[str, object]:
    rng = random.Random(1)
    times: list[float] = []
    first_restart_ok = 0
    proc, trial = None, 0
    for _kill in range(kills):
        if proc is None:  # a fresh torchrun (the first, or after one that never recovered)
            trial += 1
            trial_dir = work / f"torchrun-{'fix' if fix else 'asis'}-{trial}"
            trial_dir.mkdir(parents=True)
            log = trial_dir / "log"
            proc = start_torchrun(trial_dir, kills, fix)
            current = 0
            if not wait_for_restart(log, 0, 120):
                stop_torchrun(proc, trial_dir)
                proc = None
                continue
        time.sleep(rng.expovariate(1.0 / gap))
        rank = rng.randrange(2)
        _seen, pid = (log.parent / f"pid-{rank}").read_text().split()
        os.kill(int(pid), signal.SIGKILL)
        killed_at = time.time()
        target = current + 1
        ok = wait_for_restart(log, target, timeout)
        if ok:
            line = next(
                line for line in log.read_text().splitlines() if int(line.split()[0]) >= target
            )
            times.append(float(line.split()[3]) - killed_at)
            first_restart_ok += int(last_restart_seen(log) == target)
            current = last_restart_seen(log)
        else:
            stop_torchrun(proc, trial_dir)
            proc = None
    if proc is not None:
        stop_torchrun(proc, trial_dir)
    return {
        "median": statistics.median(times) if times else float("nan"),
        "p95": percentile(times, 95),
        "success_rate": len(times) / kills,
        "first_restart_rate": first_restart_ok / kills,
        "kills": kills,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--gap", type=float, default=2.0, help="mean seconds between kills")
    parser.add_argument("--timeout", type=float, default=30.0, help="per recovery, torchrun")
    parser.add_argument(
        "--spares", type=int, default=4, help="sets of warm spares (a set warms up in seconds)"
    )
    parser.add_argument("--torchrun-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torchrun_worker:
        torchrun_worker(args.torchrun_worker)
        return
    with tempfile.TemporaryDirectory(prefix="restart-time-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        ours = run_ours(args.kills, args.gap, args.spares, work)
        print(f"shipyard.train: {ours}", flush=True)
        fixed = run_torchrun(args.kills, args.gap, args.timeout, True, work)
        print(f"torchrun, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: {fixed}", flush=True)
        as_is = run_torchrun(args.kills, args.gap, args.timeout, False, work)
        print(f"torchrun as is: {as_is}", flush=True)
    print(
        json.dumps(
            {
                "name": "restart_time",
                "value": ours["median"],
                "unit": "s",
                "p95": ours["p95"],
                "success_rate": ours["success_rate"],
                "cold_launches": ours["cold_launches"],  # kills whose restart found no warm spare
                "p95_warm_launches": ours["p95_warm_launches"],
                "kills": args.kills,
                "gap_s": args.gap,
                "spare_sets": args.spares,
                "baseline": fixed["median"],
                "baseline_p95": fixed["p95"],
                "baseline_fix_success_rate": fixed["success_rate"],
                "baseline_success_rate": as_is["success_rate"],
                "baseline_as_is_median": as_is["median"],
                "ratio": ours["median"] / fixed["median"] if fixed["median"] else None,
            }
        )
    )


if __name__ == "__main__":
    main()
