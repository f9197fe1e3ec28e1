"""Per-document dedup keys: a normalized-content hash and MinHash-LSH band keys.

The global dedup step (`shipyard.data.dedup`) reads only these two columns from every task's
output, so clustering never re-reads text except for the few documents that share a bucket.
"""

import hashlib
from typing import ClassVar

from shipyard.data.batch import Batch, Quarantine
from shipyard.data.config import PipelineConfig
from shipyard.data.minhash import band_keys, batch_signatures, permutations, shingle_batch
from shipyard.data.stages.base import Stage, register
from shipyard.data.words import words


def content_hash(text: str) -> int:
    """64-bit hash of the text with case, punctuation and spacing normalized away."""
    digest = hashlib.blake2b(" ".join(words(text)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


@register
class MinHashKeys(Stage):
    name: ClassVar[str] = "minhash"
    version: ClassVar[str] = "2"
    section: ClassVar[str] = "dedup"
    fields: ClassVar[tuple[str, ...] | None] = ("ngram", "bands", "rows", "seed")

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config.dedup
        self.perms = permutations(self.config.bands * self.config.rows, self.config.seed)

    def process(self, batch: Batch, quarantine: Quarantine) -> Batch:
        hashes, offsets = shingle_batch(batch["text"], self.config.ngram)
        sigs = batch_signatures(hashes, offsets, self.perms)
        keys = band_keys(sigs, self.config.bands, self.config.rows)
        batch["content_hash"] = [content_hash(t) for t in batch["text"]]
        batch["band_keys"] = [row.tobytes() for row in keys]
        return batch
