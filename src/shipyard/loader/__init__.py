"""Token shards and the deterministic, resumable sampler.

Writers (`TokenShardWriter`, `TokenDatasetWriter`) produce memory-mapped token shards;
`TokenDataset` reads a directory of them.
"""

from shipyard.loader.dataset import TokenDataset, TokenDatasetWriter
from shipyard.loader.shards import (
    TOKEN_SHARD_VERSION,
    ShardInfo,
    TokenShard,
    TokenShardWriter,
    token_dtype,
)

__all__ = [
    "TOKEN_SHARD_VERSION",
    "ShardInfo",
    "TokenDataset",
    "TokenDatasetWriter",
    "TokenShard",
    "TokenShardWriter",
    "token_dtype",
]
