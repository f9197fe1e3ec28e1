"""The prefix KV cache: longest whole-block prefix, namespaces, LRU eviction under a byte bound."""

import torch

from shipyard.serve.engine.kv import Layers
from shipyard.serve.engine.prefix_cache import PrefixCache

BLOCK = 4
BYTES_PER_TOKEN = 2 * 2 * 1 * 2 * 4  # layers * (k, v) * heads * dim * float32


def kv_for(ids: list[int]) -> Layers:
    """Fake KV whose values encode the token ids, so reuse can be checked column by column."""
    column = torch.tensor(ids, dtype=torch.float32).view(1, 1, -1, 1).expand(1, 1, -1, 2)
    return [(column.clone(), -column.clone()) for _ in range(2)]


def test_longest_prefix_whole_blocks_never_the_last_token() -> None:
    cache = PrefixCache(budget_bytes=1 << 20, block_size=BLOCK)
    prompt = list(range(100, 112))  # 3 blocks
    cache.insert("", prompt, kv_for(prompt))
    assert cache.bytes == 12 * BYTES_PER_TOKEN

    hit = cache.lookup("", prompt)  # all 12 cached, but the last token must be computed
    assert hit.tokens == 8 and len(hit.blocks) == 2
    keys = torch.cat([block[0][0] for block in hit.blocks], dim=2)  # layer 0's keys
    assert keys[0, 0, :, 0].tolist() == prompt[:8]

    longer = [*prompt, 7, 8, 9]
    assert cache.lookup("", longer).tokens == 12
    diverged = prompt[:6] + [0] * 10
    assert cache.lookup("", diverged).tokens == 4
    assert cache.lookup("", [1, 2, 3]).tokens == 0
    assert cache.lookup("adapter-a", longer).tokens == 0  # another namespace, other KV
    assert (cache.lookups, cache.hits) == (5, 3)


def test_eviction_keeps_the_bound_and_drops_least_recently_used_leaves() -> None:
    cache = PrefixCache(budget_bytes=16 * BYTES_PER_TOKEN, block_size=BLOCK)  # 4 blocks
    a = [1] * 8
    b = [2] * 8
    cache.insert("", [*a, 0], kv_for([*a, 0]))
    cache.insert("", [*b, 0], kv_for([*b, 0]))
    assert cache.bytes == 16 * BYTES_PER_TOKEN
    assert cache.lookup("", [*a, 5]).tokens == 8  # a is now more recent than b

    c = [3] * 8
    cache.insert("", [*c, 0], kv_for([*c, 0]))
    assert cache.bytes <= cache.budget_bytes
    assert cache.lookup("", [*c, 5]).tokens == 8  # the newest stays
    assert cache.lookup("", [*a, 5]).tokens == 8  # recently used stays
    assert cache.lookup("", [*b, 5]).tokens == 0  # least recently used went, leaf first


def test_a_zero_budget_caches_nothing() -> None:
    cache = PrefixCache(budget_bytes=0, block_size=BLOCK)
    ids = list(range(20))
    cache.insert("", ids, kv_for(ids))
    assert cache.bytes == 0 and cache.lookup("", ids).tokens == 0
