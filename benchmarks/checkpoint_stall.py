"""Checkpoint stall: what a save costs training, Shipyard vs torch.distributed.checkpoint (DCP).

Two gloo ranks train a model with ~400 MB of state per rank (parameters plus AdamW moments), and
every method saves that same state in the same run: Shipyard `save` (async: snapshot, then SHA-256,
fsync, peer push and commit in the background) and `save(blocking=True)`, DCP `async_save` and
`save` (on a process group of their own; DCP neither checksums nor fsyncs).

Paired, interleaved windows: a window is `--window` training steps (default: 3× the slowest save,
at least 10 steps, like a checkpoint interval); in a saving window a save starts at its first step
boundary and the window ends only when that save is done (so nothing it does is left out). Each
pair is one saving and one plain window back to back, in alternating order; pairs rotate over the
methods, so load swings on a shared machine hit every method alike, and are separated by an
unmeasured `sync` and two steps, so one save's write-back is not charged to the next window. The
effective stall of a method is the median over `--repeat` pairs of (saving − plain) window time,
the slowest rank's (not floored at 0), with a bootstrap 95% interval. Also reported: the time the
save call itself blocks (the critical path) and the extra CPU seconds the save costs a rank (paired
the same way): on a host whose cores the ranks keep busy, background work is paid for in CPU.

    .venv/bin/python benchmarks/checkpoint_stall.py [--width 2048] [--layers 8] [--repeat 12]
"""

import argparse
import json
import math
import os
import random
import shutil
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

from shipyard.checkpoint import CheckpointManager, Retention

Wait = Callable[[], object]  # waits for a save begun by a method; returns when it is done


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    model(x).square().mean().backward()
    for p in model.parameters():
        assert p.grad is not None
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()


def slowest(value: float) -> float:
    box = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return float(box.item())


def window(train: Callable[[], None], steps: int, begin: Callable[[], Wait] | None) -> dict:
    """`steps` steps, with a save begun before the first and waited for after the last."""
    dist.barrier()
    cpu, start = time.process_time(), time.perf_counter()
    wait = begin() if begin else None
    blocked = time.perf_counter() - start
    for _ in range(steps):
        train()
    if wait is not None:
        wait()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"wall": slowest(wall), "cpu": slowest(cpu), "blocked": slowest(blocked)}


def settle(train: Callable[[], None]) -> None:
    """Between pairs, unmeasured: dirty pages a save left (DCP does not fsync) are written out
    now, so their write-back is not charged to whichever window comes next."""
    os.sync()
    dist.barrier()
    for _ in range(2):
        train()


def median_ci(values: list[float], seed: int = 0, draws: int = 2000) -> tuple[float, float]:
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def worker(rank: int, port: int, root: str, args: argparse.Namespace, out: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        *[torch.nn.Linear(args.width, args.width) for _ in range(args.layers)]
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width)

    def train() -> None:
        step(model, opt, x)

    for _ in range(2):
        train()  # creates the AdamW moments
    state_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    state_bytes += sum(
        t.numel() * t.element_size()
        for slots in opt.state.values()
        for t in slots.values()
        if isinstance(t, torch.Tensor)
    )
    manager = CheckpointManager(Path(root) / "shipyard", retention=Retention(keep_last=1))
    dcp_group = dist.new_group(backend="gloo")
    saves = iter(range(1, 10**6))

    def state() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def dcp_dir() -> str:
        path = Path(root) / "dcp"
        dist.barrier(group=dcp_group)
        if rank == 0:  # keep one: the disk holds what a retention of 1 would
            shutil.rmtree(path, ignore_errors=True)
        dist.barrier(group=dcp_group)
        return str(path / str(next(saves)))

    def shipyard_async() -> Wait:
        manager.save(next(saves), state())
        return manager.wait

    def shipyard_sync() -> Wait:
        manager.save(next(saves), state(), blocking=True)
        return lambda: None

    def dcp_async() -> Wait:
        future = dcp.async_save(state(), checkpoint_id=dcp_dir(), process_group=dcp_group)
        return future.result  # type: ignore[union-attr]

    def dcp_sync() -> Wait:
        dcp.save(state(), checkpoint_id=dcp_dir(), process_group=dcp_group)
        return lambda: None

    methods = {
        "shipyard_async": shipyard_async,
        "shipyard_sync": shipyard_sync,
        "dcp_async": dcp_async,
        "dcp_sync": dcp_sync,
    }
    # Warm-up: every method once; then a window long enough for the slowest save to finish in it.
    started = time.perf_counter()
    for _ in range(3):
        train()
    step_s = slowest((time.perf_counter() - started) / 3)
    save_s = max(window(train, 0, begin)["wall"] for begin in methods.values())
    # A checkpoint interval's worth of steps: room for a background save to finish in it.
    steps = args.window or max(10, math.ceil(3 * save_s / step_s))
    diffs: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "cpu": [], "blocked": []} for name in methods
    }
    names = list(methods)
    for repeat in range(args.repeat):
        for i in range(len(names)):
            name = names[(repeat + i) % len(names)]  # rotate which method goes first
            saving_first = repeat % 2 == 0  # each method's pairs alternate their order
            settle(train)
            runs = [(True, methods[name]), (False, None)]
            measured = {
                s: window(train, steps, b) for s, b in (runs if saving_first else runs[::-1])
            }
            for key in ("wall", "cpu"):
                diffs[name][key].append(measured[True][key] - measured[False][key])
            diffs[name]["blocked"].append(measured[True]["blocked"])
        if rank == 0:
            print(f"pair {repeat + 1}/{args.repeat} done", flush=True)
    manager.close()
    if rank == 0:
        out.put({"diffs": diffs, "state_bytes": state_bytes, "step_s": step_s, "steps": steps})
    dist.barrier()
    dist.destroy_process_group()


def breakdown(megabytes: int, root: str) -> None:
    """Where a Shipyard save's time goes, one part at a time, for one rank's share of the state."""
    import hashlib
    import secrets
    import zlib

    from shipyard.checkpoint.peer import PeerMemory, push
    from shipyard.checkpoint.safetensors_io import raw_bytes, write_safetensors

    source = torch.randn(megabytes * (1 << 20) // 4)
    snapshot = torch.empty_like(source)
    view = raw_bytes(snapshot)
    peer = PeerMemory(secrets.token_bytes(32))
    key = peer.client_key()

    def push_once() -> None:
        peer.expect(1, 0, view.nbytes)  # a put is taken once, when announced
        push(peer.address, 1, 0, [view], key)

    parts: dict[str, Callable[[], object]] = {
        "snapshot copy (blocks the trainer)": lambda: snapshot.copy_(source),
        "SHA-256": lambda: hashlib.sha256(view).digest(),
        "CRC-32": lambda: zlib.crc32(view),
        "write shard (SHA-256, CRC-32, write, fsync)": lambda: write_safetensors(
            Path(root) / "shard.safetensors", [("w@0", snapshot)]
        ),
        "peer push (both ends, one host)": push_once,
    }
    for name, part in parts.items():
        walls, cpus = [], []
        for _ in range(3):
            cpu, start = time.process_time(), time.perf_counter()
            part()
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
        print(
            f"{name:>45}: {statistics.median(walls):.3f} s wall, "
            f"{statistics.median(cpus):.3f} s CPU ({megabytes} MB)"
        )
    peer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=12, help="pairs of windows per method")
    parser.add_argument("--window", type=int, default=0, help="steps per window; 0: automatic")
    parser.add_argument(
        "--breakdown", type=int, metavar="MB", help="only time each part of a save of MB"
    )
    args = parser.parse_args()
    if args.breakdown:
        with tempfile.TemporaryDirectory(dir=os.environ.get("SHIPYARD_BENCH_DIR")) as root:
            breakdown(args.breakdown, root)
        return
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory(dir=os.environ.get("SHIPYARD_BENCH_DIR")) as root:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        mp.start_processes(worker, args=(port, root, args, queue), nprocs=2, start_method="spawn")
        got = queue.get()
    figures: dict[str, dict[str, float]] = {}
    for name, d in got["diffs"].items():
        low, high = median_ci(d["wall"])
        figures[name] = {
            "stall_s": statistics.median(d["wall"]),
            "ci95": [low, high],  # type: ignore[dict-item]
            "blocked_s": statistics.median(d["blocked"]),
            "extra_cpu_s": statistics.median(d["cpu"]),
        }
        print(
            f"{name:>15}: effective stall {figures[name]['stall_s']:.3f} s "
            f"[{low:.3f}, {high:.3f}], call blocks {figures[name]['blocked_s']:.3f} s, "
            f"extra CPU {figures[name]['extra_cpu_s']:.3f} s per rank"
        )
    state_mb = got["state_bytes"] / 1e6
    print(
        f"state per rank {state_mb:.0f} MB, step {got['step_s']:.3f} s, "
        f"windows of {got['steps']} steps, {args.repeat} pairs per method, 2 gloo ranks"
    )
    ours, dcp_async = figures["shipyard_async"]["stall_s"], figures["dcp_async"]["stall_s"]
    result = {
        "name": "checkpoint_stall",
        "value": ours,
        "unit": "s",
        "baseline": dcp_async,  # DCP async_save, same state, same run
        "ratio": ours / dcp_async if dcp_async > 0 else None,
        "methods": figures,
        "pairs": args.repeat,
        "window_steps": got["steps"],
        "state_mb_per_rank": round(state_mb),
        "step_s": round(got["step_s"], 4),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
