"""Checkpoint stall: how long training is held up by a save, Shipyard async vs sync vs DCP.

Two gloo ranks train a model with ~400 MB of state per rank (parameters plus AdamW moments).
For each method a save is started at a step boundary; the effective stall is the time the save
call blocks plus the extra time of the steps that overlap its background work (their time minus
the median step time without saves). Methods: Shipyard `save` (async: snapshot, then hash, fsync,
peer push and commit in the background), Shipyard `save(blocking=True)`, and
`torch.distributed.checkpoint` `async_save` and `save` (on a process group of their own; DCP
neither checksums nor fsyncs its files). The median of `--repeat` saves per method, max over ranks.

    .venv/bin/python benchmarks/checkpoint_stall.py [--width 2048] [--layers 8] [--repeat 3]
"""

import argparse
import json
import os
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

Done = Callable[[], bool]


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> float:
    start = time.perf_counter()
    model(x).square().mean().backward()
    for p in model.parameters():
        assert p.grad is not None
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
    return time.perf_counter() - start


def measure(
    begin: Callable[[int], Done],
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    base: float,
    at: int,
) -> float:
    """Blocking time of `begin(at)` plus the extra time of the steps its background work spans."""
    start = time.perf_counter()
    done = begin(at)
    blocked = time.perf_counter() - start
    extra = 0.0
    while True:
        # Every rank must run the same number of steps: agree on "all finished before it".
        finished = torch.tensor([int(done())])
        dist.all_reduce(finished, op=dist.ReduceOp.MIN)
        extra += step(model, opt, x) - base
        if finished.item():
            break
    return blocked + max(0.0, extra)


def worker(rank: int, port: int, root: str, args: argparse.Namespace, out: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(args.width, args.width) for _ in range(args.layers)]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width)
    for _ in range(2):
        step(model, opt, x)  # creates the AdamW moments
    state_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    state_bytes += sum(
        t.numel() * t.element_size()
        for slots in opt.state.values()
        for t in slots.values()
        if isinstance(t, torch.Tensor)
    )
    base = statistics.median(step(model, opt, x) for _ in range(5))
    manager = CheckpointManager(Path(root) / "shipyard", retention=Retention(keep_last=1))
    dcp_group = dist.new_group(backend="gloo")
    counter = iter(range(10**6))

    def state() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def shipyard_async(at: int) -> Done:
        handle = manager.save(at, state())
        return handle.done

    def shipyard_sync(at: int) -> Done:
        manager.save(at, state(), blocking=True)
        return lambda: True

    def dcp_async(at: int) -> Done:
        future = dcp.async_save(
            state(), checkpoint_id=f"{root}/dcp-{at}-{next(counter)}", process_group=dcp_group
        )
        return future.done  # type: ignore[union-attr]

    def dcp_sync(at: int) -> Done:
        dcp.save(
            state(), checkpoint_id=f"{root}/dcps-{at}-{next(counter)}", process_group=dcp_group
        )
        return lambda: True

    methods = {
        "shipyard_async": shipyard_async,
        "shipyard_sync": shipyard_sync,
        "dcp_async": dcp_async,
        "dcp_sync": dcp_sync,
    }
    results: dict[str, list[float]] = {name: [] for name in methods}
    at = 0
    for round_ in range(args.repeat + 1):  # round 0 warms every method up and is not counted
        for name, begin in methods.items():
            at += 1
            stall = measure(begin, model, opt, x, base, at)
            manager.wait()
            if round_:
                results[name].append(stall)
                print(f"rank {rank} {name}: {stall:.3f} s", flush=True)
            for _ in range(2):  # let the system settle between methods
                step(model, opt, x)
    manager.close()
    medians = {name: statistics.median(values) for name, values in results.items()}
    gathered: list[Any] = [None, None]
    dist.all_gather_object(gathered, (medians, state_bytes, base))
    if rank == 0:
        out.put(gathered)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory(dir=os.environ.get("SHIPYARD_BENCH_DIR")) as root:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        mp.start_processes(worker, args=(port, root, args, queue), nprocs=2, start_method="spawn")
        gathered = queue.get()
    medians = {name: max(r[0][name] for r in gathered) for name in gathered[0][0]}
    state_mb = gathered[0][1] / 1e6
    base = max(r[2] for r in gathered)
    for name, value in medians.items():
        print(f"{name:>15}: effective stall {value:.3f} s")
    print(f"state per rank {state_mb:.0f} MB, step {base:.3f} s, 2 gloo ranks")
    result = {
        "name": "checkpoint_stall",
        "value": round(medians["shipyard_async"], 4),
        "unit": "s",
        "baseline": round(medians["shipyard_sync"], 4),
        "ratio": round(medians["shipyard_async"] / medians["shipyard_sync"], 3),
        "dcp_async_stall": round(medians["dcp_async"], 4),
        "dcp_sync_stall": round(medians["dcp_sync"], 4),
        "state_mb_per_rank": round(state_mb),
        "step_s": round(base, 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
