"""The default serving engine: transformers + torch, continuous batching, a prefix KV cache."""

from shipyard.serve.engine.adapters import AdapterSet
from shipyard.serve.engine.core import Engine, EngineConfig
from shipyard.serve.engine.load import Loaded, load_causal_lm
from shipyard.serve.engine.local import Completion, EngineFailed, LocalEngine
from shipyard.serve.engine.request import (
    TIERS,
    Done,
    Failed,
    GenRequest,
    LogLikelihood,
    Sampling,
    ScoreRequest,
    Tier,
    Token,
)
from shipyard.serve.engine.tiers import Overloaded, TooLarge

__all__ = [
    "TIERS",
    "AdapterSet",
    "Completion",
    "Done",
    "Engine",
    "EngineConfig",
    "EngineFailed",
    "Failed",
    "GenRequest",
    "Loaded",
    "LocalEngine",
    "LogLikelihood",
    "Overloaded",
    "Sampling",
    "ScoreRequest",
    "Tier",
    "Token",
    "TooLarge",
    "load_causal_lm",
]
