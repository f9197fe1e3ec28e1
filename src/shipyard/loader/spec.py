"""The loader's dataset spec: a typed, validated, JSON-round-trippable config.

The spec plus (step, rank, world size) determines every token a rank sees; checkpoints record it
(`to_dict`) next to the step, and a resumed run rebuilds the sampler from it.
"""

import itertools
from dataclasses import dataclass, field
from typing import Any

from shipyard.errors import InvalidInput
from shipyard.loader.mixing import Mixture


@dataclass(frozen=True)
class Source:
    """One token dataset directory, named so mixtures and positions can refer to it."""

    name: str
    path: str


@dataclass(frozen=True)
class MixturePhase:
    """From training step `start_step` on, draw from the sources with these weights."""

    start_step: int
    weights: tuple[float, ...]


@dataclass(frozen=True)
class LoaderSpec:
    """Everything the sample order depends on, apart from step, rank and world size.

    `global_batch` samples of `seq_len` tokens each per step. `mixture` phases are keyed by
    training step (the first must start at 0; default: equal weights). `skip` lists half-open
    ranges `[start, stop)` of data steps whose samples are never trained on.
    """

    sources: tuple[Source, ...]
    seq_len: int
    global_batch: int
    seed: int = 0
    mixture: tuple[MixturePhase, ...] = ()
    skip: tuple[tuple[int, int], ...] = field(default=())

    def __post_init__(self) -> None:
        _check(bool(self.sources), "sources", "at least one source is needed")
        names = [s.name for s in self.sources]
        _check(len(set(names)) == len(names), "sources", f"names must be unique, got {names}")
        _check(self.seq_len >= 1, "seq_len", f"must be >= 1, got {self.seq_len}")
        _check(self.global_batch >= 1, "global_batch", f"must be >= 1, got {self.global_batch}")
        _check(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        starts = [p.start_step for p in self.mixture]
        if self.mixture:
            _check(starts[0] == 0, "mixture", "the first phase must start at step 0")
            _check(
                all(a < b for a, b in itertools.pairwise(starts)),
                "mixture",
                f"phase start steps must increase, got {starts}",
            )
        for phase in self.mixture:
            _check(
                len(phase.weights) == len(self.sources),
                "mixture",
                f"phase at step {phase.start_step} has {len(phase.weights)} weights for "
                f"{len(self.sources)} sources",
            )
            Mixture(phase.weights)  # validates the weights
        previous_stop = 0
        for start, stop in sorted(self.skip):
            _check(
                0 <= start < stop and start >= previous_stop,
                "skip",
                f"windows must be non-empty, non-negative and disjoint, got {list(self.skip)}",
            )
            previous_stop = stop

    @property
    def phases(self) -> tuple[MixturePhase, ...]:
        return self.mixture or (MixturePhase(0, (1.0,) * len(self.sources)),)

    def with_phase(self, start_step: int, weights: tuple[float, ...]) -> "LoaderSpec":
        """This spec with a new mixture starting at `start_step` (later phases dropped)."""
        kept = tuple(p for p in self.phases if p.start_step < start_step)
        return _replace(self, mixture=(*kept, MixturePhase(start_step, tuple(weights))))

    def data_step(self, step: int) -> int:
        """The data step training step `step` reads: the `step`-th one outside the windows."""
        if step < 0:
            raise InvalidInput(f"step must be >= 0, got {step}")
        data_step = step
        for start, stop in sorted(self.skip):
            if data_step >= start:
                data_step += stop - start
        return data_step

    def skipping(self, step: int, count: int) -> "LoaderSpec":
        """This spec, with training steps from `step` on skipping the next `count` data steps."""
        start = self.data_step(step)
        return _replace(self, skip=(*self.skip, (start, start + count)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": [{"name": s.name, "path": s.path} for s in self.sources],
            "seq_len": self.seq_len,
            "global_batch": self.global_batch,
            "seed": self.seed,
            "mixture": [
                {"start_step": p.start_step, "weights": list(p.weights)} for p in self.mixture
            ],
            "skip": [list(w) for w in self.skip],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LoaderSpec":
        try:
            return cls(
                sources=tuple(Source(s["name"], s["path"]) for s in data["sources"]),
                seq_len=int(data["seq_len"]),
                global_batch=int(data["global_batch"]),
                seed=int(data.get("seed", 0)),
                mixture=tuple(
                    MixturePhase(int(p["start_step"]), tuple(float(w) for w in p["weights"]))
                    for p in data.get("mixture", [])
                ),
                skip=tuple((int(a), int(b)) for a, b in data.get("skip", [])),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"invalid loader spec: {exc!r}") from exc


def _check(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise InvalidInput(f"loader spec field {name!r}: {message}")


def _replace(spec: LoaderSpec, **changes: Any) -> LoaderSpec:
    data = {**spec.__dict__, **changes}
    return LoaderSpec(**data)
