"""A prefix KV cache: a trie of fixed-size token blocks, each holding its block's keys/values.

A prompt's longest cached prefix (whole blocks, and never the prompt's last token, whose logits
the engine must compute) is reused; a prompt's whole blocks are inserted after its prefill. Each
namespace (the base model, or one adapter) has its own root: an adapter changes the KV. The total
bytes stay under `budget_bytes` by evicting least-recently used leaves (a leaf first, so every
cached block keeps its whole prefix).
"""

import itertools
import threading
from dataclasses import dataclass, field

from shipyard.serve.engine.kv import Layers, nbytes, slice_time

_clock = itertools.count(1)


@dataclass(eq=False)
class _Node:
    parent: "_Node | None"
    key: tuple[int, ...]
    layers: Layers | None = None
    size: int = 0
    used: int = 0
    children: dict[tuple[int, ...], "_Node"] = field(default_factory=dict)


@dataclass(frozen=True)
class Hit:
    tokens: int  # prompt tokens covered by `blocks`
    blocks: list[Layers]  # each block's KV, in order (empty when nothing was reused)


class PrefixCache:
    def __init__(self, budget_bytes: int, block_size: int = 16) -> None:
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        self.budget_bytes = max(0, budget_bytes)
        self.block_size = block_size
        self.bytes = 0
        self.lookups = 0
        self.hits = 0
        self._roots: dict[str, _Node] = {}
        self._lock = threading.Lock()  # the engine thread writes; /health and /metrics read

    def _blocks(self, ids: list[int], limit: int) -> list[tuple[int, ...]]:
        b = self.block_size
        return [tuple(ids[i : i + b]) for i in range(0, limit - limit % b, b)]

    def lookup(self, namespace: str, ids: list[int]) -> Hit:
        """The longest cached prefix of `ids` that leaves at least one token to compute."""
        with self._lock:
            self.lookups += 1
            node = self._roots.get(namespace)
            path: list[_Node] = []
            for key in self._blocks(ids, len(ids) - 1):
                node = node.children.get(key) if node else None
                if node is None:
                    break
                path.append(node)
            if not path:
                return Hit(0, [])
            self.hits += 1
            now = next(_clock)
            for hit in path:
                hit.used = now
            blocks = [n.layers for n in path if n.layers is not None]
        return Hit(len(path) * self.block_size, blocks)

    def insert(self, namespace: str, ids: list[int], layers: Layers) -> None:
        """Add the whole blocks of `ids`, whose KV are `layers`' first columns (batch of one)."""
        if self.budget_bytes == 0:
            return
        with self._lock:
            node = self._roots.setdefault(namespace, _Node(None, ()))
            now = next(_clock)
            for index, key in enumerate(self._blocks(ids, len(ids))):
                child = node.children.get(key)
                if child is None:
                    start = index * self.block_size
                    block = slice_time(layers, start, start + self.block_size)
                    child = _Node(node, key, block, nbytes(block))
                    node.children[key] = child
                    self.bytes += child.size
                child.used = now
                node = child
            self._evict(protect=node)

    def _evict(self, protect: _Node) -> None:
        if self.bytes <= self.budget_bytes:
            return
        keep = set()
        walk: _Node | None = protect
        while walk is not None:  # the path just inserted goes last
            keep.add(id(walk))
            walk = walk.parent
        leaves = sorted((n for n in self._all() if not n.children), key=lambda n: n.used)
        while self.bytes > self.budget_bytes and leaves:
            leaf = leaves.pop(0)
            if id(leaf) in keep and any(id(n) not in keep for n in leaves):
                leaves.append(leaf)
                continue
            self._drop(leaf)
            parent = leaf.parent
            if parent is not None and parent.parent is not None and not parent.children:
                leaves.append(parent)  # now a leaf itself; older than anything below it
                leaves.sort(key=lambda n: n.used)

    def _drop(self, node: _Node) -> None:
        assert node.parent is not None
        del node.parent.children[node.key]
        self.bytes -= node.size

    def _all(self) -> list[_Node]:
        out: list[_Node] = []
        stack = [c for root in self._roots.values() for c in root.children.values()]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out
