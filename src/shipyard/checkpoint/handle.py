"""A save in flight: what the background thread works on, and the handle the trainer holds."""

import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from shipyard.checkpoint.manifest import Committed
from shipyard.checkpoint.plan import Piece, TensorMeta


@dataclass
class SaveJob:
    step: int
    skeleton: dict[str, Any]
    pieces: list[Piece]
    mine: list[tuple[Piece, torch.Tensor]]
    rng: dict[str, Any]
    loader: dict[str, Any] | None
    metadata: dict[str, Any]
    metas: list[TensorMeta]
    done: threading.Event = field(default_factory=threading.Event)
    result: Committed | None = None
    error: BaseException | None = None
    artifact_id: str | None = None
    reported: bool = False  # the error reached the trainer; a later wait() need not raise it


class SaveHandle:
    """A save in progress: `result()` waits for its commit and returns it (or raises)."""

    def __init__(self, job: SaveJob) -> None:
        self._job = job

    @property
    def step(self) -> int:
        return self._job.step

    def done(self) -> bool:
        return self._job.done.is_set()

    def result(self) -> Committed:
        self._job.done.wait()
        if self._job.error is not None:
            self._job.reported = True
            raise self._job.error
        assert self._job.result is not None
        return self._job.result

    @property
    def artifact_id(self) -> str | None:
        self.result()
        return self._job.artifact_id
