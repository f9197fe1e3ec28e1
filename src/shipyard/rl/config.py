"""The RL run's typed config, loaded from YAML or JSON and validated at the edge.

Every section is a frozen dataclass; an unknown key or a bad value is refused with the field's
dotted name and what is allowed, before any process starts.
"""

import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from shipyard.errors import InvalidInput
from shipyard.train.config import ModelConfig

ENVS = ("arith", "code", "planted-length")
SYNC_MODES = ("shm", "artifact")
SANDBOXES = ("local", "service")


RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _check(ok: bool, name: str, rule: str) -> None:
    if not ok:
        raise InvalidInput(f"rl config: {name} {rule}")


@dataclass(frozen=True)
class TaskConfig:
    """Procedural arithmetic from reasoning-gym's `basic_arithmetic`, scored by its verifier.

    `think_mean` > 0 makes the warm-up targets start with a run of '.' "thinking" tokens whose
    length is geometric with that mean, capped at `think_max`: the policy learns a long-tailed
    generation length.
    """

    env: str = "arith"
    seed: int = 0
    max_digits: int = 1
    max_terms: int = 2
    operators: tuple[str, ...] = ("+", "-")
    heldout: int = 64
    think_mean: float = 0.0
    think_max: int = 0

    def longest_example(self) -> int:
        """Tokens of the longest warm-up row: BOS, prompt, thinking, answer, EOS."""
        prompt = self.max_terms * self.max_digits + (self.max_terms - 1) * 3 + 1  # "a + b="
        answer = self.max_terms * self.max_digits + 1  # a product's digits, or a sign
        return 1 + prompt + self.think_max + answer + 1

    def validate(self) -> None:
        _check(self.env in ENVS, "task.env", f"must be one of {ENVS}")
        _check(1 <= self.max_digits <= 3, "task.max_digits", "must be in 1..3")
        _check(2 <= self.max_terms <= 4, "task.max_terms", "must be in 2..4")
        _check(
            bool(self.operators) and set(self.operators) <= {"+", "-", "*"},
            "task.operators",
            "must be a non-empty subset of ['+', '-', '*']",
        )
        _check(self.heldout > 0, "task.heldout", "must be > 0")
        _check(self.think_mean >= 0 and self.think_max >= 0, "task.think_*", "must be >= 0")


@dataclass(frozen=True)
class WarmupConfig:
    steps: int = 300
    batch: int = 32
    lr: float = 3e-3

    def validate(self) -> None:
        _check(self.steps >= 0, "warmup.steps", "must be >= 0")
        _check(self.batch > 0 and self.lr > 0, "warmup.batch/lr", "must be > 0")


@dataclass(frozen=True)
class RolloutConfig:
    """`token_budget`: tokens a worker decodes per dispatch before it hands back what it has
    (unfinished sequences continue at the next dispatch: partial rollouts). `temperature` and
    `top_p` shape the serving engine's sampling. `step_latency_s` adds wall time per decode
    step, emulating an accelerator engine that does not use host CPU."""

    workers: int = 2
    group_size: int = 8
    prompts_per_step: int = 4
    max_new_tokens: int = 24
    temperature: float = 1.0
    top_p: float = 1.0
    token_budget: int = 64
    step_latency_s: float = 0.0

    def validate(self) -> None:
        _check(1 <= self.workers <= 64, "rollout.workers", "must be in 1..64")
        _check(self.group_size >= 2, "rollout.group_size", "must be >= 2")
        _check(self.prompts_per_step >= 1, "rollout.prompts_per_step", "must be >= 1")
        _check(self.max_new_tokens >= 1, "rollout.max_new_tokens", "must be >= 1")
        _check(self.temperature > 0, "rollout.temperature", "must be > 0")
        _check(0 < self.top_p <= 1, "rollout.top_p", "must be in (0, 1]")
        _check(self.token_budget >= 1, "rollout.token_budget", "must be >= 1")
        _check(self.step_latency_s >= 0, "rollout.step_latency_s", "must be >= 0")


@dataclass(frozen=True)
class TrainerConfig:
    """GRPO: `eta` is the maximum staleness (0 = synchronous); `is_cap` truncates the
    importance weight between the trainer's and the rollout engine's log-probs."""

    steps: int = 20
    eta: int = 0
    lr: float = 3e-4
    clip_eps: float = 0.2
    is_cap: float = 2.0
    minibatches: int = 2
    checkpoint_every: int = 0
    eval_every: int = 0
    deadline_s: float = 0.0

    def validate(self) -> None:
        _check(self.steps >= 1, "trainer.steps", "must be >= 1")
        _check(0 <= self.eta <= 16, "trainer.eta", "must be in 0..16")
        _check(self.lr > 0 and self.clip_eps > 0, "trainer.lr/clip_eps", "must be > 0")
        _check(self.is_cap >= 1, "trainer.is_cap", "must be >= 1")
        _check(self.minibatches >= 1, "trainer.minibatches", "must be >= 1")
        _check(self.checkpoint_every >= 0, "trainer.checkpoint_every", "must be >= 0 (0 = off)")
        _check(self.eval_every >= 0, "trainer.eval_every", "must be >= 0 (0 = end only)")
        _check(self.deadline_s >= 0, "trainer.deadline_s", "must be >= 0 (0 = none)")


@dataclass(frozen=True)
class RewardConfig:
    """Alerts: error rate above `max_error_rate` over the last `window` scores; a mean reward
    rise above `jump` between consecutive windows together with a relative length shift above
    `length_shift` (a reward hack's signature)."""

    threads: int = 2
    timeout_s: float = 10.0
    sandbox: str = "local"  # code verifiers: "local" (in the reward process) or "service"
    window: int = 64
    max_error_rate: float = 0.2
    jump: float = 0.3
    length_shift: float = 0.5

    def validate(self) -> None:
        _check(1 <= self.threads <= 64, "reward.threads", "must be in 1..64")
        _check(self.timeout_s > 0, "reward.timeout_s", "must be > 0")
        _check(self.sandbox in SANDBOXES, "reward.sandbox", f"must be one of {SANDBOXES}")
        _check(self.window >= 2, "reward.window", "must be >= 2")
        _check(0 <= self.max_error_rate <= 1, "reward.max_error_rate", "must be in [0, 1]")
        _check(self.jump > 0 and self.length_shift > 0, "reward.jump/length_shift", "must be > 0")


def _small_model() -> ModelConfig:
    return ModelConfig(vocab_size=98, d_model=64, n_layers=2, n_heads=4, seq_len=64)


@dataclass(frozen=True)
class RLConfig:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=_small_model)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sync: str = "shm"
    seed: int = 0
    name: str = "rl"

    def __post_init__(self) -> None:
        for part in (self.task, self.warmup, self.rollout, self.trainer, self.reward):
            part.validate()
        self.model.validate()
        _check(
            self.model.kind == "gpt",
            "model.kind",
            "must be 'gpt' (a small model of this shape over the task's character vocabulary)",
        )
        _check(self.model.vocab_size >= 98, "model.vocab_size", "must be >= 98 (the char vocab)")
        _check(self.sync in SYNC_MODES, "sync", f"must be one of {SYNC_MODES}")
        need = self.task.longest_example()
        _check(self.model.seq_len >= need, "model.seq_len", f"must be >= {need} for this task")
        _check(
            RUN_NAME.fullmatch(self.name) is not None,
            "name",
            "must be 1-100 of A-Z a-z 0-9 . _ - (it names the run's report file)",
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: object) -> "RLConfig":
        if not isinstance(raw, dict):
            raise InvalidInput("rl config must be a mapping of sections")
        sections = {
            "task": TaskConfig,
            "model": ModelConfig,
            "warmup": WarmupConfig,
            "rollout": RolloutConfig,
            "trainer": TrainerConfig,
            "reward": RewardConfig,
        }
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in set(raw) - allowed)
        _check(not unknown, "config", f"has unknown keys {unknown}; allowed: {sorted(allowed)}")
        built: dict[str, Any] = {}
        for key, value in raw.items():
            kind = sections.get(key)
            if key == "model" and isinstance(value, dict):  # over this task's small model
                value = {**asdict(_small_model()), **value}
            built[key] = _build(kind, value, key) if kind else _scalar(cls, key, value)
        try:
            return cls(**built)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"rl config: {exc}") from exc


T = TypeVar("T")


def _scalar(cls: type, key: str, value: object) -> object:
    want = {f.name: f.type for f in fields(cls)}[key]
    ok = isinstance(value, int) and not isinstance(value, bool) if want is int else None
    if want is str:
        ok = isinstance(value, str)
    _check(bool(ok), key, f"must be {getattr(want, '__name__', want)}, got {value!r}")
    return value


def _build(kind: type[T], raw: object, section: str) -> T:
    _check(isinstance(raw, dict), section, "must be a mapping")
    assert isinstance(raw, dict)
    types = {f.name: f.type for f in fields(kind)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = f"{section}.{key}"
        _check(key in types, name, f"is unknown; allowed: {sorted(types)}")
        values[key] = _coerce(types[key], value, name)
    return kind(**values)


def _coerce(want: object, value: object, name: str) -> object:
    if want in (int, "int"):
        _check(isinstance(value, int) and not isinstance(value, bool), name, "must be an integer")
    elif want in (float, "float"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        _check(ok, name, "must be a number")
        return float(value)  # type: ignore[arg-type]
    elif want in (str, "str"):
        _check(isinstance(value, str), name, "must be a string")
    else:  # tuple[str, ...]
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        _check(ok, name, "must be a list of strings")
        return tuple(value)  # type: ignore[arg-type]
    return value


def load_config(path: str | Path) -> RLConfig:
    """Read a `.yaml`/`.yml` or `.json` RL config file."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read rl config {path}: {exc}") from exc
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise InvalidInput(f"rl config {path} is not valid {path.suffix[1:]}: {exc}") from exc
    return RLConfig.from_dict(raw if raw is not None else {})
