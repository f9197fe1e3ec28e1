"""The deployment spec: YAML in, typed and validated dataclasses out.

Every field is checked at this edge; a bad one is refused with `InvalidInput` naming the field
(`autoscale.queue_up`), what was given and what is allowed. Unknown keys are refused by name, so
a typo (`replica:`) never silently falls back to a default.
"""

import dataclasses
import itertools
import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlparse

import yaml

from shipyard.distribute.config import parse_address
from shipyard.errors import InvalidInput, ShipyardError
from shipyard.evals.tasks import get_task
from shipyard.httpguard.apikeys import parse_hashes

ENGINES = ("transformers", "openai")
TIERS = ("interactive", "standard", "batch")
MAX_SPEC_BYTES = 1 << 20
MAX_REPLICAS = 256
MAX_GATE_TASKS = 32
MAX_Z = 10.0
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")

T = TypeVar("T")


@dataclass(frozen=True)
class Engine:
    kind: Literal["transformers", "openai"] = "transformers"
    url: str | None = None  # openai: base URL of an OpenAI-compatible server
    max_batch: int | None = None  # transformers: passed to the replica as --max-batch
    kv_cache_mib: int | None = None  # transformers: --kv-cache-mib
    peer: str | None = None  # transformers: this host's peer daemon, HOST:PORT, to pull through


@dataclass(frozen=True)
class Replicas:
    min: int = 1
    max: int = 1


@dataclass(frozen=True)
class Slo:
    ttft_ms_p50: float = 1000.0
    ttft_ms_p99: float = 5000.0
    error_rate: float = 0.01


@dataclass(frozen=True)
class Autoscale:
    """Scale up early, down slowly: see docs/serving-deploy.md, "Autoscaler"."""

    interval_s: float = 5.0  # how often the controller reads the signals
    queue_up: float = 2.0  # queued requests per replica above which one is added
    queue_down: float = 0.5  # ... below which one may be removed (with the TTFT fraction)
    ttft_up: float = 0.7  # TTFT p50 or p99 above this fraction of its SLO: scale up
    ttft_down: float = 0.3  # both below this fraction (and the queue low): may scale down
    up_cooldown_s: float = 15.0  # after any change, no scale-up for this long
    down_cooldown_s: float = 120.0  # after any change, no scale-down for this long
    max_step: int = 2  # replicas added at once at most
    idle_to_zero_s: float | None = None  # no request for this long: scale to zero (None: never)


@dataclass(frozen=True)
class Canary:
    stages: tuple[float, ...] = (1.0, 5.0, 25.0, 100.0)  # percent of traffic on the candidate
    hold_s: float = 60.0  # time at each stage before it is judged
    min_requests: int = 0  # candidate requests a stage needs before it is judged
    max_stage_s: float = 600.0  # a stage without min_requests by then fails
    replicas: int | None = None  # candidate replicas (default: as many as the current version)


@dataclass(frozen=True)
class EvalGate:
    """Eval-platform tasks both versions run; the candidate fails a task when its paired
    difference from the current version is below -max_drop by more than z standard errors."""

    tasks: tuple[str, ...] = ()  # registered task names, or jsonl:PATH (none: no eval gate)
    max_drop: float = 0.0
    z: float = 1.96


@dataclass(frozen=True)
class DeploymentSpec:
    name: str
    model: str
    engine: Engine = field(default_factory=Engine)
    replicas: Replicas = field(default_factory=Replicas)
    tier: str = "standard"
    adapters: Mapping[str, str] = field(default_factory=dict)
    slo: Slo = field(default_factory=Slo)
    autoscale: Autoscale = field(default_factory=Autoscale)
    canary: Canary = field(default_factory=Canary)
    eval_gate: EvalGate = field(default_factory=EvalGate)
    api_keys: tuple[str, ...] = ()  # hashes of the keys inference needs (none: open)


def load_spec(path: Path) -> DeploymentSpec:
    """Read and validate the spec at `path`; a relative `jsonl:PATH` gate task is taken from its
    folder."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"deployment spec {path}: cannot read ({exc.strerror})") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise InvalidInput(f"deployment spec {path}: larger than {MAX_SPEC_BYTES} bytes")
    return parse_spec(raw, where=str(path), base=path.parent)


def parse_spec(text: str | bytes, where: str = "spec", base: Path | None = None) -> DeploymentSpec:
    """Parse YAML text into a spec; only `InvalidInput` escapes."""
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError, ValueError) as exc:
        why = " ".join(str(exc).split())[:200]
        raise InvalidInput(f"{where}: not valid YAML ({why})") from None
    return spec_from_dict(data, where, base)


def spec_from_dict(data: Any, where: str = "spec", base: Path | None = None) -> DeploymentSpec:
    top = _section(data, where, tuple(f.name for f in dataclasses.fields(DeploymentSpec)))
    for required in ("name", "model"):
        if required not in top:
            raise InvalidInput(f"{where}: missing required field {required!r}")
    name = _string(top["name"], f"{where}: name", NAME, "lowercase letters, digits, . _ -")
    model = _string(top["model"], f"{where}: model", _REF, "an alias or artifact id")
    engine = _engine(top.get("engine"), f"{where}: engine")
    replicas = _replicas(top.get("replicas"), f"{where}: replicas")
    tier = top.get("tier", "standard")
    if tier not in TIERS:
        raise InvalidInput(f"{where}: tier {tier!r}: allowed {', '.join(TIERS)}")
    adapters = _adapters(top.get("adapters"), f"{where}: adapters")
    slo = _build(Slo, top.get("slo"), f"{where}: slo")
    if slo.error_rate > 1:
        raise InvalidInput(f"{where}: slo.error_rate {slo.error_rate}: allowed 0 to 1")
    autoscale = _build(Autoscale, top.get("autoscale"), f"{where}: autoscale")
    _check_autoscale(autoscale, f"{where}: autoscale")
    canary = _canary(top.get("canary"), f"{where}: canary")
    gate = _eval_gate(top.get("eval_gate"), f"{where}: eval_gate", base)
    api_keys = parse_hashes(top.get("api_keys"), f"{where}: api_keys")
    if engine.kind == "openai" and adapters:
        raise InvalidInput(
            f"{where}: adapters need engine transformers (openai servers own theirs)"
        )
    return DeploymentSpec(
        name, model, engine, replicas, str(tier), adapters, slo, autoscale, canary, gate, api_keys
    )


def spec_to_dict(spec: DeploymentSpec) -> dict[str, Any]:
    """The spec as plain data (what `spec_from_dict` reads back), for the state record."""
    gate = spec.eval_gate
    return {
        "name": spec.name,
        "model": spec.model,
        "engine": _plain(spec.engine),
        "replicas": _plain(spec.replicas),
        "tier": spec.tier,
        "adapters": dict(spec.adapters),
        "slo": _plain(spec.slo),
        "autoscale": _plain(spec.autoscale),
        "canary": {**_plain(spec.canary), "stages": list(spec.canary.stages)},
        "eval_gate": {**_plain(gate), "tasks": list(gate.tasks)},
        "api_keys": list(spec.api_keys),
    }


# Sections


def _engine(data: Any, where: str) -> Engine:
    if isinstance(data, str):  # `engine: transformers` is short for `engine: {kind: ...}`
        data = {"kind": data}
    engine = _build(Engine, data, where)
    if engine.kind not in ENGINES:
        raise InvalidInput(f"{where}.kind {engine.kind!r}: allowed {', '.join(ENGINES)}")
    if engine.kind == "openai":
        if engine.url is None:
            raise InvalidInput(f"{where}: engine openai needs url: http://HOST:PORT")
        parsed = urlparse(engine.url)
        try:
            port = parsed.port
        except ValueError:
            port = None
        if parsed.scheme not in ("http", "https") or not parsed.hostname or port is None:
            raise InvalidInput(f"{where}.url {_show(engine.url)}: expected http(s)://HOST:PORT")
        if parsed.path not in ("", "/") or parsed.query or parsed.username is not None:
            raise InvalidInput(f"{where}.url {_show(engine.url)}: the server's root, no path")
    elif engine.url is not None:
        raise InvalidInput(f"{where}.url: only engine openai takes a url")
    if engine.peer is not None:
        if engine.kind == "openai":
            raise InvalidInput(f"{where}.peer: only engine transformers pulls weights")
        parse_address(engine.peer, f"{where}.peer")
    for knob in ("max_batch", "kv_cache_mib"):
        value = getattr(engine, knob)
        if value is not None and value < 1:
            raise InvalidInput(f"{where}.{knob} {value}: allowed 1 or more")
    return engine


def _replicas(data: Any, where: str) -> Replicas:
    if isinstance(data, int) and not isinstance(data, bool):  # `replicas: 2`: fixed count
        data = {"min": data, "max": data}
    replicas = _build(Replicas, data, where)
    if not 0 <= replicas.min <= replicas.max <= MAX_REPLICAS or replicas.max < 1:
        raise InvalidInput(
            f"{where}: min {replicas.min}, max {replicas.max}: allowed 0 <= min <= max, "
            f"1 <= max <= {MAX_REPLICAS}"
        )
    return replicas


def _adapters(data: Any, where: str) -> dict[str, str]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidInput(f"{where}: expected a mapping of adapter name to artifact ref")
    adapters = {}
    for key, ref in data.items():
        name = _string(key, f"{where}: adapter name", NAME, "lowercase letters, digits, . _ -")
        adapters[name] = _string(ref, f"{where}.{name}", _REF, "an alias or artifact id")
    return adapters


def _check_autoscale(auto: Autoscale, where: str) -> None:
    if auto.interval_s <= 0 or auto.max_step < 1:
        raise InvalidInput(f"{where}: interval_s must be > 0 and max_step >= 1")
    if not 0 <= auto.queue_down < auto.queue_up:
        raise InvalidInput(f"{where}: allowed 0 <= queue_down < queue_up (hysteresis)")
    if not 0 <= auto.ttft_down < auto.ttft_up <= 1:
        raise InvalidInput(f"{where}: allowed 0 <= ttft_down < ttft_up <= 1 (fractions of the SLO)")
    if auto.idle_to_zero_s is not None and auto.idle_to_zero_s <= 0:
        raise InvalidInput(f"{where}.idle_to_zero_s: allowed a positive number or null")


def _canary(data: Any, where: str) -> Canary:
    canary = _build(Canary, data, where)
    stages = canary.stages
    if not stages or stages[-1] != 100 or any(not 0 < s <= 100 for s in stages):
        raise InvalidInput(f"{where}.stages {list(stages)}: percents in (0, 100] ending at 100")
    if any(b <= a for a, b in itertools.pairwise(stages)):
        raise InvalidInput(f"{where}.stages {list(stages)}: must increase")
    if canary.replicas is not None and not 1 <= canary.replicas <= MAX_REPLICAS:
        raise InvalidInput(f"{where}.replicas {canary.replicas}: allowed 1 to {MAX_REPLICAS}")
    if canary.min_requests < 0 or canary.max_stage_s < canary.hold_s:
        raise InvalidInput(f"{where}: allowed min_requests >= 0 and max_stage_s >= hold_s")
    return canary


def _eval_gate(data: Any, where: str, base: Path | None) -> EvalGate:
    if isinstance(data, dict) and "items" in data:
        raise InvalidInput(
            f"{where}.items: the gate's own item file is gone; name eval tasks in "
            f"{where}.tasks (a JSONL task file as jsonl:PATH, see docs/serving-deploy.md)"
        )
    rest = {k: v for k, v in data.items() if k != "tasks"} if isinstance(data, dict) else data
    gate = _build(EvalGate, rest, where)
    if not 0 <= gate.max_drop <= 1:
        raise InvalidInput(f"{where}.max_drop {gate.max_drop}: allowed 0 to 1")
    if gate.z > MAX_Z:
        raise InvalidInput(f"{where}.z {gate.z}: allowed 0 to {MAX_Z:g}")
    tasks = _gate_tasks(data.get("tasks") if isinstance(data, dict) else None, where, base)
    return dataclasses.replace(gate, tasks=tasks)


def _gate_tasks(data: Any, where: str, base: Path | None) -> tuple[str, ...]:
    """Task refs, each one the eval platform loads now: an unknown name or a flawed JSONL file
    is refused here, not when a rollout is under way."""
    if data is None:
        return ()
    if not isinstance(data, list) or len(data) > MAX_GATE_TASKS:
        raise InvalidInput(f"{where}.tasks: expected a list of up to {MAX_GATE_TASKS} task names")
    refs: list[str] = []
    for given in data:
        if not isinstance(given, str) or not given or "\x00" in given or len(given) > 4096:
            raise InvalidInput(f"{where}.tasks {_show(given)}: expected a task name or jsonl:PATH")
        ref = given
        if given.startswith("jsonl:"):
            path = Path(given[len("jsonl:") :])
            ref = f"jsonl:{base / path if base is not None and not path.is_absolute() else path}"
        try:
            get_task(ref)
        except ShipyardError as exc:  # a missing task is bad input to this spec: exit 2
            raise InvalidInput(f"{where}.tasks {_show(given)}: {exc}") from None
        if ref in refs:
            raise InvalidInput(f"{where}.tasks {_show(given)}: named twice")
        refs.append(ref)
    return tuple(refs)


# Generic field checking, driven by each dataclass's field types


def _build(cls: type[T], data: Any, where: str) -> T:
    """`cls` from a mapping whose keys are its fields, each checked against its field's type."""
    types = {f.name: f.type for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = _section(data, where, tuple(types))
    kwargs = {key: _coerce(types[key], value, f"{where}.{key}") for key, value in values.items()}
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    options = typing.get_args(hint) if typing.get_origin(hint) is types.UnionType else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise InvalidInput(f"{where}: a value is required")
    kind = options[0]
    if typing.get_origin(kind) is tuple:
        if not isinstance(value, list) or len(value) > 16:
            raise InvalidInput(f"{where}: expected a list of up to 16 numbers")
        return tuple(_number(v, where) for v in value)
    if kind is float:
        return _number(value, where)
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > 10**9:
            raise InvalidInput(f"{where} {_show(value)}: expected a whole number")
        return value
    if not isinstance(value, str) or len(value) > 2048:
        raise InvalidInput(f"{where} {_show(value)}: expected a string")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{where} {_show(value)}: expected a number")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise InvalidInput(f"{where} {value!r}: expected a finite number >= 0")
    return number


def _section(data: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidInput(f"{where}: expected a mapping with keys {', '.join(allowed)}")
    unknown = [key for key in data if key not in allowed]
    if unknown:
        raise InvalidInput(
            f"{where}: unknown field {_show(unknown[0])}: allowed {', '.join(allowed)}"
        )
    return data


def _string(value: Any, where: str, pattern: re.Pattern[str], allowed: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidInput(f"{where} {_show(value)}: allowed {allowed}")
    return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}
