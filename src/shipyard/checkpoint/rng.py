"""Random-number-generator states (Python, NumPy, torch) as JSON, to save and restore exactly."""

import base64
import binascii
import random
from typing import Any

import numpy as np
import torch

from shipyard.errors import InvalidInput


def capture_rng() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, np.asarray(keys).tolist(), pos, has_gauss, cached],
        "torch": _b64(torch.get_rng_state()),
    }
    if torch.cuda.is_available():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Set every RNG from `state`; InvalidInput (and no RNG changed) if it is not one we wrote."""
    try:
        version, internal, gauss = state["python"]
        kind, keys, pos, has_gauss, cached = state["numpy"]
        python = (version, tuple(internal), gauss)
        numpy = (kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached)
        torch_state = _unb64(state["torch"])
        cuda = [_unb64(s) for s in state["cuda"]] if "cuda" in state else None
        # Applied to scratch generators first: a state that does not fit raises here, untouched.
        random.Random().setstate(python)
        np.random.RandomState().set_state(numpy)
        torch.Generator().set_state(torch_state)
    except (LookupError, TypeError, ValueError, OverflowError, RuntimeError, binascii.Error) as exc:
        raise InvalidInput(f"a checkpoint's RNG state is malformed ({exc!r})") from None
    random.setstate(python)
    np.random.set_state(numpy)
    torch.set_rng_state(torch_state)
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def _b64(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.numpy().tobytes()).decode()


def _unb64(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)
