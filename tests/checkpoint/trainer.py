"""A tiny data-parallel trainer over the loader and checkpoints, run as rank processes by tests.

The update is bitwise independent of the world size: every rank computes per-sample gradients for
its part of the global batch, all ranks gather them and sum them in global sample order. So a run
that changes world size, or is killed and resumed, must end with the same bits as one that
is not. Rank 0 logs a hash of each step's global batch and, at the end, of the state.
"""

import argparse
import hashlib
import json
import os
import signal
from typing import Any

import torch
import torch.distributed as dist

from shipyard.checkpoint import CheckpointManager, Retention
from shipyard.loader import LoaderSpec, Sampler, Source

VOCAB = 256


def gather(value: Any, world: int) -> list[Any]:
    if world == 1:
        return [value]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, value)
    return out


def state_digest(state: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(state["model"].items()):
        h.update(name.encode() + tensor.numpy().tobytes())
    for index, slots in sorted(state["optim"]["state"].items()):
        for key, tensor in sorted(slots.items()):
            h.update(f"{index}/{key}".encode() + tensor.numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--until", type=int, required=True)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--die-at", type=int, default=-1)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    paths = args.data.split(",")
    spec = LoaderSpec(
        sources=tuple(Source(f"s{i}", p) for i, p in enumerate(paths)),
        seq_len=16,
        global_batch=12,
        seed=11,
    )
    sampler = Sampler(spec)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    manager = CheckpointManager(args.root, retention=Retention(keep_last=2, keep_every=0))
    start = 0
    if manager.latest_committed() is not None:
        loaded = manager.load()
        model.load_state_dict(loaded.state["model"])
        opt.load_state_dict(loaded.state["optim"])
        loaded.restore_rng(rank)
        start = loaded.step
    log = open(args.log, "a") if rank == 0 else None  # noqa: SIM115
    for step in range(start, args.until):
        if step != start and step % args.save_every == 0:
            state = {"model": model.state_dict(), "optim": opt.state_dict()}
            manager.save(step, state, loader=sampler.position(step))
        if step == args.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        batch = sampler.batch(step, rank, world)
        grads = []
        for row in torch.from_numpy(batch.tokens) % VOCAB:
            model.zero_grad()
            logits = model(row[:-1])
            torch.nn.functional.cross_entropy(logits, row[1:]).backward()
            grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        everyone = gather((batch.tokens.tobytes(), grads), world)
        total = torch.zeros_like(grads[0]) if grads else None
        for _, part in everyone:
            for grad in part:
                total = grad.clone() if total is None else total + grad
        assert total is not None
        offset = 0
        for p in model.parameters():
            p.grad = (total[offset : offset + p.numel()] / spec.global_batch).view_as(p)
            offset += p.numel()
        opt.step()
        if log:
            digest = hashlib.sha256(b"".join(tokens for tokens, _ in everyone)).hexdigest()
            log.write(json.dumps({"step": step, "batch": digest}) + "\n")
            log.flush()
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    manager.save(args.until, state, loader=sampler.position(args.until), blocking=True)
    if log:
        log.write(json.dumps({"final": state_digest(state), "step": args.until}) + "\n")
        log.close()
    manager.close()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
