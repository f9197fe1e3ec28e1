"""Stages by name. Each module registers its stage class with `register`."""

from shipyard.data.stages.base import DOC_STAGES, Stage, get_stage, register

__all__ = ["DOC_STAGES", "Stage", "get_stage", "register"]
