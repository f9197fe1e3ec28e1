"""Nested training state ⇄ (JSON skeleton, flat tensors), with no pickle.

A state is dicts (str or int keys), lists, tuples, tensors, numpy arrays and JSON scalars — what
`model.state_dict()` and `optimizer.state_dict()` hold. Tensors are pulled out under their path
("model/layer.weight", "optim/state/0/exp_avg"); everything else stays in a skeleton that
serializes to JSON and restores the exact structure, key types included.
"""

from typing import Any

import numpy as np
import torch

from shipyard.errors import InvalidInput

Skeleton = dict[str, Any]


def flatten(state: Any) -> tuple[Skeleton, dict[str, torch.Tensor]]:
    tensors: dict[str, torch.Tensor] = {}
    return _flatten(state, "", tensors), tensors


def _flatten(value: Any, path: str, tensors: dict[str, torch.Tensor]) -> Skeleton:
    if isinstance(value, torch.Tensor):
        tensors[path] = value.detach()
        return {"T": path}
    if isinstance(value, np.ndarray):
        tensors[path] = torch.from_numpy(np.ascontiguousarray(value))
        return {"N": path}
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if not isinstance(key, str | int) or isinstance(key, bool):
                raise InvalidInput(f"state key {key!r} at {path or '/'} must be a str or an int")
            items.append([key, _flatten(item, f"{path}/{key}" if path else str(key), tensors)])
        return {"D": items}
    if isinstance(value, list | tuple):
        kind = "L" if isinstance(value, list) else "U"
        return {kind: [_flatten(v, f"{path}/{i}", tensors) for i, v in enumerate(value)]}
    if value is None or isinstance(value, bool | int | float | str):
        return {"V": value}
    raise InvalidInput(f"state at {path or '/'} has unsupported type {type(value).__name__}")


def unflatten(skeleton: Skeleton, tensors: dict[str, torch.Tensor]) -> Any:
    ((kind, body),) = skeleton.items()
    if kind == "T":
        return tensors[body]
    if kind == "N":
        return tensors[body].numpy()
    if kind == "D":
        return {key: unflatten(item, tensors) for key, item in body}
    if kind in ("L", "U"):
        items = [unflatten(item, tensors) for item in body]
        return items if kind == "L" else tuple(items)
    if kind == "V":
        return body
    raise InvalidInput(f"unknown skeleton node {kind!r}")
