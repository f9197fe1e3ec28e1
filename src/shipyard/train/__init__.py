"""Fault-tolerant training: a small GPT trainer over the loader and checkpoints, and the
controller that keeps it making progress through kills, hangs, stragglers and NaNs.

`create_run(config, nprocs)` records a run in the catalog; `Controller(run_id).run_to_end()`
drives it (and re-attaches with `attach=True` after the controller's own restart);
`status`/`report` summarize it, goodput breakdown included. Importing this package does not
import torch (the CLI's status and report stay fast); `Controller` loads it on first use.
"""

from typing import Any

from shipyard.train.config import (
    ChaosConfig,
    ControllerConfig,
    DataConfig,
    Fault,
    ModelConfig,
    OptimConfig,
    ScheduleConfig,
    TrainConfig,
    load_config,
)
from shipyard.train.goodput import Ledger, model_goodput, young_daly
from shipyard.train.report import report, status
from shipyard.train.runs import create_run
from shipyard.train.state import RunTable, TrainRun

__all__ = [
    "ChaosConfig",
    "Controller",
    "ControllerConfig",
    "DataConfig",
    "Fault",
    "Ledger",
    "ModelConfig",
    "OptimConfig",
    "RunTable",
    "ScheduleConfig",
    "TrainConfig",
    "TrainRun",
    "create_run",
    "load_config",
    "model_goodput",
    "report",
    "status",
    "young_daly",
]


def __getattr__(name: str) -> Any:
    if name == "Controller":
        from shipyard.train.controller import Controller

        return Controller
    raise AttributeError(f"module 'shipyard.train' has no attribute {name!r}")
