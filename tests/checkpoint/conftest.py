"""Helpers for the checkpoint tests: a small model with optimizer state, exact comparisons."""

import hashlib
from typing import Any

import torch


def trained_state(seed: int = 0) -> dict[str, Any]:
    """A model and AdamW state after one step, plus non-tensor entries, as a trainer saves it."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Embedding(300, 32), torch.nn.Linear(32, 64), torch.nn.Linear(64, 7)
    ).to(torch.float64)
    model[2].to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    out = model[2](model[1](model[0](torch.arange(10))).to(torch.bfloat16))
    out.float().sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optim": opt.state_dict(), "extra": {"epoch": 3}}


def state_hash(state: Any) -> str:
    """A digest of every tensor's bytes, dtype and shape, and of the structure around them."""
    h = hashlib.sha256()

    def walk(value: Any, path: str) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            h.update(f"{path}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(value, dict):
            for key in sorted(value, key=repr):
                walk(value[key], f"{path}/{key!r}")
        elif isinstance(value, list | tuple):
            h.update(f"{path}:{type(value).__name__}{len(value)}".encode())
            for i, item in enumerate(value):
                walk(item, f"{path}/{i}")
        else:
            h.update(f"{path}={value!r}".encode())

    walk(state, "")
    return h.hexdigest()
