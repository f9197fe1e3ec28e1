"""Crawl-to-tokens data pipeline: WARC → annotated table → tokenizer → token shards.

Stages are small typed units registered by name (`shipyard.data.stages`); a TOML config
(`load_config`) chooses their settings and the executor (local processes or Ray).
"""

from shipyard.data.config import PipelineConfig, load_config
from shipyard.data.pipeline import PipelineResult, run_pipeline

__all__ = ["PipelineConfig", "PipelineResult", "load_config", "run_pipeline"]
