"""Token shards and the deterministic, resumable sampler.

Writers (`TokenShardWriter`, `TokenDatasetWriter`) produce memory-mapped token shards;
`TokenDataset` reads a directory of them. `Sampler(LoaderSpec)` gives each rank its part of each
step's global batch as a pure function of (spec, step, rank, world size), with the tokens' loss
mask when the dataset has one (`loss_mask/`).
"""

from shipyard.loader.dataset import TokenDataset, TokenDatasetWriter
from shipyard.loader.loss_mask import LOSS_MASK_DIR, open_loss_mask
from shipyard.loader.sampler import Batch, Sampler, rank_range
from shipyard.loader.shards import (
    TOKEN_SHARD_VERSION,
    ShardInfo,
    TokenShard,
    TokenShardWriter,
    token_dtype,
)
from shipyard.loader.spec import LoaderSpec, MixturePhase, Source

__all__ = [
    "LOSS_MASK_DIR",
    "TOKEN_SHARD_VERSION",
    "Batch",
    "LoaderSpec",
    "MixturePhase",
    "Sampler",
    "ShardInfo",
    "Source",
    "TokenDataset",
    "TokenDatasetWriter",
    "TokenShard",
    "TokenShardWriter",
    "open_loss_mask",
    "rank_range",
    "token_dtype",
]
