"""The training run's typed config: model, data, optimizer, schedule, controller and chaos.

Loaded from a TOML or JSON file (`load_config`) or a dict (`TrainConfig.from_dict`); every field is
validated here, at the edge, and a bad one is named with the allowed values. `to_dict` round-trips,
so the catalog stores the exact config a run was started with.
"""

import json
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from shipyard.errors import InvalidInput

FAULT_KINDS = ("kill", "hang", "straggler", "nan")  # random (chaos.kinds) or scripted
# corrupt: flip a bit in the newest checkpoint's shard; corrupt-manifest: in its manifest's step
SCRIPTED_KINDS = (*FAULT_KINDS, "corrupt", "corrupt-manifest")


MODEL_KINDS = ("gpt", "hf")


@dataclass(frozen=True)
class ModelConfig:
    """`kind` "gpt": Shipyard's own small GPT, shaped by the fields below (pre-training demos).
    `kind` "hf": a Hugging Face causal LM to fine-tune from `source` (a local model directory or a
    model artifact: id, prefix or alias); its shape is its own, and only `seq_len` applies."""

    kind: str = "gpt"
    source: str = ""
    vocab_size: int = 512
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    seq_len: int = 64

    def validate(self) -> None:
        _check(self.kind in MODEL_KINDS, "model.kind", f"must be one of {MODEL_KINDS}")
        _check(
            (self.kind == "hf") == bool(self.source),
            "model.source",
            "names the model to fine-tune exactly when model.kind is 'hf'",
        )
        _positive(self, "vocab_size", "d_model", "n_layers", "n_heads", "seq_len")
        _check(self.d_model % self.n_heads == 0, "model.d_model", "must divide by model.n_heads")


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters (peft) on the modules whose names end with one of `targets`; `rank` 0 trains
    every weight instead (a full fine-tune). Only for `model.kind = "hf"`."""

    rank: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ("q_proj", "v_proj")

    def validate(self) -> None:
        _check(self.rank >= 0, "lora.rank", "must be >= 0 (0 = full fine-tune)")
        _check(self.alpha > 0, "lora.alpha", "must be > 0")
        _check(0 <= self.dropout < 1, "lora.dropout", "must be in [0, 1)")
        _check(
            all(isinstance(t, str) and t for t in self.targets) and bool(self.targets),
            "lora.targets",
            "must be a non-empty list of module names",
        )


@dataclass(frozen=True)
class EvalHookConfig:
    """Evals the controller enqueues on the work queue for every committed checkpoint: the `fast`
    tasks on each, the `full` tasks too on every `full_every`-th (and on a promotion candidate)."""

    fast: tuple[str, ...] = ()
    full: tuple[str, ...] = ()
    full_every: int = 5

    def validate(self) -> None:
        _check(self.full_every >= 1, "evals.full_every", "must be >= 1")
        _check(bool(self.fast) or not self.full, "evals.fast", "name a fast task to run full ones")


@dataclass(frozen=True)
class DeployHookConfig:
    """Roll a checkpoint that passes its gate out to `deployment` by canary. The gate compares the
    checkpoint with the model the deployment's alias serves on `gate_tasks` (default: the fast
    eval tasks) by the paired rule: promoted unless it is worse by more than `max_drop` with the
    paired standard error's `z` margin."""

    deployment: str = ""
    gate_tasks: tuple[str, ...] = ()
    max_drop: float = 0.0
    z: float = 1.96

    def validate(self) -> None:
        _check(self.max_drop >= 0, "deploy.max_drop", "must be >= 0")
        _check(self.z >= 0, "deploy.z", "must be >= 0")


@dataclass(frozen=True)
class DataConfig:
    """A token dataset directory (`path`) or artifact (`artifact`: id, prefix or alias)."""

    path: str = ""
    artifact: str = ""
    global_batch: int = 8
    seed: int = 0

    def validate(self) -> None:
        _check(bool(self.path) != bool(self.artifact), "data", "set exactly one of path, artifact")
        _positive(self, "global_batch")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 3e-3
    weight_decay: float = 0.0
    grad_clip: float = 1.0

    def validate(self) -> None:
        _positive(self, "lr", "grad_clip")
        _check(self.weight_decay >= 0, "optim.weight_decay", "must be >= 0")


@dataclass(frozen=True)
class ScheduleConfig:
    """`checkpoint_every`: steps between checkpoints; 0 = Young/Daly τ* from measured C and M."""

    steps: int = 100
    seed: int = 0
    checkpoint_every: int = 20
    gc_every: int = 50  # gc disabled, then collected on every rank at the same step; 0 = normal gc
    keep_checkpoints: int = 2

    def validate(self) -> None:
        _positive(self, "steps", "keep_checkpoints")
        _check(self.checkpoint_every >= 0, "train.checkpoint_every", "must be >= 0 (0 = auto)")
        _check(self.gc_every >= 0, "train.gc_every", "must be >= 0 (0 = normal gc)")


@dataclass(frozen=True)
class ControllerConfig:
    max_failures: int = 5  # stop when more than this many failures fall in `failure_window_s`
    failure_window_s: float = 600.0
    heartbeat_s: float = 0.1
    hang_factor: float = 20.0  # k: a hang is no global progress for k × median step time
    hang_min_s: float = 2.0  # ... but never less than this
    startup_timeout_s: float = 120.0
    straggler_factor: float = 1.1
    straggler_windows: int = 3
    window_steps: int = 10
    spike_factor: float = 0.0  # loss above this × the recent median is a spike; 0 = NaN/inf only
    skip_steps: int = 1  # data steps skipped after a NaN or spike
    lr_scale_on_spike: float = 1.0
    mtbf_prior_s: float = 3600.0
    spares: int = 2  # sets of warm spare processes (world size each); 0 = cold starts
    metrics_port: int = -1  # Prometheus /metrics on this port; 0 = any free port, -1 = off

    def validate(self) -> None:
        _positive(
            self,
            "max_failures",
            "failure_window_s",
            "heartbeat_s",
            "hang_factor",
            "startup_timeout_s",
            "straggler_factor",
            "straggler_windows",
            "window_steps",
            "skip_steps",
            "lr_scale_on_spike",
            "mtbf_prior_s",
        )
        _check(self.hang_min_s >= 0, "controller.hang_min_s", "must be >= 0")
        _check(self.spike_factor >= 0, "controller.spike_factor", "must be >= 0 (0 = off)")
        _check(self.metrics_port >= -1, "controller.metrics_port", "must be >= -1")
        _check(self.spares >= 0, "controller.spares", "must be >= 0 (0 = no warm spares)")


@dataclass(frozen=True)
class Fault:
    """A scripted fault: `kind` on `rank` at training `step` of `attempt`.

    A `nan` fault with `data_step` >= 0 poisons whichever step reads that data step, on every
    attempt: it behaves like bad data, which only a skip window gets past.
    """

    kind: str
    rank: int = 0
    step: int = 0
    attempt: int = 0
    data_step: int = -1

    def validate(self) -> None:
        _check(self.kind in SCRIPTED_KINDS, "chaos.faults.kind", f"must be one of {SCRIPTED_KINDS}")
        _check(min(self.rank, self.step, self.attempt) >= 0, "chaos.faults", "must be >= 0")


@dataclass(frozen=True)
class ChaosConfig:
    """Random faults with mean time between them `mtbf_s` (0 = none), plus scripted `faults`."""

    mtbf_s: float = 0.0
    kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    faults: tuple[Fault, ...] = ()

    def validate(self) -> None:
        _check(self.mtbf_s >= 0, "chaos.mtbf_s", "must be >= 0 (0 = off)")
        for kind in self.kinds:
            _check(kind in FAULT_KINDS, "chaos.kinds", f"must be among {FAULT_KINDS}")
        for fault in self.faults:
            fault.validate()


@dataclass(frozen=True)
class TrainConfig:
    data: DataConfig
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: ScheduleConfig = field(default_factory=ScheduleConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    chaos: ChaosConfig = field(default_factory=ChaosConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    evals: EvalHookConfig = field(default_factory=EvalHookConfig)
    deploy: DeployHookConfig = field(default_factory=DeployHookConfig)
    alias: str = ""  # moved to the model artifact when the run succeeds

    def __post_init__(self) -> None:
        parts = (self.data, self.model, self.optim, self.train, self.controller, self.chaos)
        for part in (*parts, self.lora, self.evals, self.deploy):
            part.validate()
        _check(self.model.kind == "hf" or not self.lora.rank, "lora.rank", "needs model.kind 'hf'")
        _check(
            not self.deploy.deployment or bool(self.deploy.gate_tasks or self.evals.fast),
            "deploy.gate_tasks",
            "a deployment needs gate tasks (or evals.fast to default to)",
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "TrainConfig":
        if not isinstance(raw, dict):
            raise InvalidInput("train config must be a table/object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        _check(not unknown, "config", f"unknown sections {unknown}; allowed: {sorted(known)}")
        chaos = dict(raw.get("chaos", {}))
        chaos["kinds"] = tuple(chaos.get("kinds", FAULT_KINDS))
        chaos["faults"] = tuple(_build(Fault, f, "chaos.faults") for f in chaos.get("faults", []))
        return cls(
            data=_build(DataConfig, raw.get("data", {}), "data"),
            model=_build(ModelConfig, raw.get("model", {}), "model"),
            optim=_build(OptimConfig, raw.get("optim", {}), "optim"),
            train=_build(ScheduleConfig, raw.get("train", {}), "train"),
            controller=_build(ControllerConfig, raw.get("controller", {}), "controller"),
            chaos=_build(ChaosConfig, chaos, "chaos"),
            lora=_build(LoraConfig, raw.get("lora", {}), "lora"),
            evals=_build(EvalHookConfig, raw.get("evals", {}), "evals"),
            deploy=_build(DeployHookConfig, raw.get("deploy", {}), "deploy"),
            alias=str(raw.get("alias", "")),
        )


def load_config(path: str | Path) -> TrainConfig:
    """Read a `.toml` or `.json` train config file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInput(f"cannot read train config {path}: {exc}") from exc
    try:
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"train config {path} is not valid {path.suffix[1:]}: {exc}") from exc
    return TrainConfig.from_dict(raw)


_T = TypeVar("_T")


def _build(cls: type[_T], raw: Any, where: str) -> _T:
    if not isinstance(raw, dict):
        raise InvalidInput(f"train config section {where!r} must be a table/object")
    allowed = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(allowed))
    _check(not unknown, where, f"unknown fields {unknown}; allowed: {sorted(allowed)}")
    values = {}
    for name, value in raw.items():
        default = getattr(cls(**{} if cls is not Fault else {"kind": "kill"}), name)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            value = float(value) if ok else value
        elif isinstance(default, str):
            ok = isinstance(value, str)
        elif isinstance(default, tuple) and name != "faults":
            ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
            value = tuple(value) if ok else value
        else:
            ok = True
        wanted = "list of strings" if isinstance(default, tuple) else type(default).__name__
        _check(ok, f"{where}.{name}", f"must be a {wanted}, got {value!r}")
        values[name] = value
    return cls(**values)


def _positive(section: Any, *names: str) -> None:
    for name in names:
        value = getattr(section, name)
        _check(value > 0, f"{type(section).__name__}.{name}", f"must be > 0, got {value}")


def _check(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise InvalidInput(f"train config field {where!r}: {message}")
