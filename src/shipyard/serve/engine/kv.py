"""Key/value caches as plain per-layer tensors, and the batch surgery continuous batching needs.

A running batch is one `DynamicCache` of shape [batch, heads, time, dim] per layer, left-padded:
row r's real tokens are the last `len_r` columns and `mask[r]` marks them. A request joins after
its own prefill (its cache is padded to the batch's width and stacked) and leaves by row
selection; columns that no row uses any more are trimmed off the left.
"""

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

Layers = list[tuple[torch.Tensor, torch.Tensor]]


def kv_bytes_per_token(config: Any, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of keys and values one token holds across all layers."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    itemsize = torch.empty((), dtype=dtype).element_size()
    return int(config.num_hidden_layers * 2 * kv_heads * head_dim * itemsize)


def layers_of(cache: Any) -> Layers:
    """Each attention layer's (keys, values) of a full-attention cache."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_of(layers: Layers, spare: int = 64) -> DynamicCache:
    """A cache holding `layers` (copied once) with room for `spare` more tokens per layer."""
    return cache_of_blocks([layers], spare)


def cache_of_blocks(blocks: list[Layers], spare: int = 64) -> DynamicCache:
    """A cache holding `blocks` one after another in time (each copied once into place)."""
    cache = DynamicCache()
    cache.layers = [
        GrowingLayer([b[i][0] for b in blocks], [b[i][1] for b in blocks], spare)
        for i in range(len(blocks[0]))
    ]
    return cache


class GrowingLayer(DynamicLayer):  # type: ignore[no-untyped-call]
    """A layer whose keys/values live in a buffer with spare columns.

    `DynamicLayer` concatenates at every step, copying the whole cache to add one token; here a
    step writes its column in place (the buffer doubles when full), and `keys`/`values` are views
    of the filled part, so attention sees exactly the same numbers.
    """

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], spare: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.is_initialized = True
        self.device = keys[0].device
        self._n = 0
        first, room = keys[0], sum(k.shape[2] for k in keys) + max(1, spare)
        self._k = first.new_empty((*first.shape[:2], room, first.shape[3]))
        self._v = values[0].new_empty((*values[0].shape[:2], room, values[0].shape[3]))
        for k, v in zip(keys, values, strict=True):
            self.update(k, v)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, t = self._n, key_states.shape[2]
        if n + t > self._k.shape[2]:
            room = max(2 * self._k.shape[2], n + t)
            grown_k = self._k.new_empty((*self._k.shape[:2], room, self._k.shape[3]))
            grown_v = self._v.new_empty((*self._v.shape[:2], room, self._v.shape[3]))
            grown_k[:, :, :n] = self._k[:, :, :n]
            grown_v[:, :, :n] = self._v[:, :, :n]
            self._k, self._v = grown_k, grown_v
        self._k[:, :, n : n + t] = key_states
        self._v[:, :, n : n + t] = value_states
        self._n = n + t
        self.keys, self.values = self._k[:, :, : self._n], self._v[:, :, : self._n]
        return self.keys, self.values


def nbytes(layers: Layers) -> int:
    return sum(k.nbytes + v.nbytes for k, v in layers)


def slice_time(layers: Layers, start: int, end: int) -> Layers:
    """Columns [start, end) of every layer, copied so the source can be freed."""
    return [(k[:, :, start:end].clone(), v[:, :, start:end].clone()) for k, v in layers]


def _pad_left(t: torch.Tensor, width: int) -> torch.Tensor:
    extra = width - t.shape[2]
    if extra == 0:
        return t
    pad = t.new_zeros((t.shape[0], t.shape[1], extra, t.shape[3]))
    return torch.cat([pad, t], dim=2)


def stack_rows(
    batch: Layers | None, mask: torch.Tensor | None, row: Layers, row_len: int
) -> tuple[Layers, torch.Tensor]:
    """The batch with `row` (one sequence of `row_len` real tokens) appended as its last row."""
    row_mask = torch.ones((1, row_len), dtype=torch.long)
    if batch is None or mask is None:
        return row, row_mask
    width = max(mask.shape[1], row_len)
    merged = [
        (
            torch.cat([_pad_left(bk, width), _pad_left(rk, width)], dim=0),
            torch.cat([_pad_left(bv, width), _pad_left(rv, width)], dim=0),
        )
        for (bk, bv), (rk, rv) in zip(batch, row, strict=True)
    ]
    return merged, torch.cat([_pad_mask(mask, width), _pad_mask(row_mask, width)], dim=0)


def _pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    return torch.cat([mask.new_zeros((mask.shape[0], width - mask.shape[1])), mask], dim=1)


def keep_rows(layers: Layers, mask: torch.Tensor, rows: list[int]) -> tuple[Layers, torch.Tensor]:
    """Only `rows`, with the left columns that none of them uses trimmed away."""
    index = torch.tensor(rows, dtype=torch.long)
    mask = mask.index_select(0, index)
    used = mask.sum(dim=0).nonzero()
    start = int(used[0]) if len(used) else mask.shape[1]
    kept = [
        (
            k.index_select(0, index)[:, :, start:].contiguous(),
            v.index_select(0, index)[:, :, start:].contiguous(),
        )
        for k, v in layers
    ]
    return kept, mask[:, start:].contiguous()
