"""Executors run a pipeline's tasks: local processes (default) or Ray."""

from shipyard.data.config import ExecutorConfig
from shipyard.data.executors.base import Executor, Outcome
from shipyard.data.executors.local import LocalExecutor


def make_executor(config: ExecutorConfig) -> Executor:
    if config.kind == "ray":
        from shipyard.data.executors.ray_executor import RayExecutor

        return RayExecutor(config.workers, config.task_timeout_s, config.max_retries)
    return LocalExecutor(config.workers, config.task_timeout_s, config.max_retries)


__all__ = ["Executor", "LocalExecutor", "Outcome", "make_executor"]
