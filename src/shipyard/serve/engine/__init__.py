"""The default serving engine: transformers + torch, continuous batching, a prefix KV cache."""

from shipyard.serve.engine.adapters import AdapterSet
from shipyard.serve.engine.core import Engine, EngineConfig
from shipyard.serve.engine.request import TIERS, Done, Failed, GenRequest, Sampling, Tier, Token
from shipyard.serve.engine.tiers import Overloaded, TooLarge

__all__ = [
    "TIERS",
    "AdapterSet",
    "Done",
    "Engine",
    "EngineConfig",
    "Failed",
    "GenRequest",
    "Overloaded",
    "Sampling",
    "Tier",
    "Token",
    "TooLarge",
]
