"""The run's report (a JSON-able dict) and its Prometheus metrics, both read from the controller."""

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from shipyard.prometheus import Families, Sample, snapshot_registry
from shipyard.rl.report_stats import quantiles

if TYPE_CHECKING:
    from shipyard.httpguard.asgi import BackgroundServer
    from shipyard.rl.controller import Controller


def reports_dir(home: Path) -> Path:
    """Where `shipyard rl run` keeps each run's report, as `<name>.json` (the console reads it)."""
    return home / "rl" / "reports"


def report(c: "Controller") -> dict[str, Any]:
    n = c.counters
    wall = max(c.elapsed(), 1e-9)
    pushes = c.publisher.push_s if c.publisher else []
    history = n.history
    return {
        "name": c.cfg.name,
        "eta": c.cfg.trainer.eta,
        "versions": c.version,
        "seconds": round(wall, 3),
        "reward": {
            "first": history[0]["reward"] if history else None,
            "last": history[-1]["reward"] if history else None,
            "per_step": [round(h["reward"], 4) for h in history],
        },
        "heldout_accuracy": {
            "warmup": c.warmup_accuracy,
            "final": c.accuracy[-1][2] if c.accuracy else None,
            "curve": [
                {"version": v, "seconds": round(s, 3), "accuracy": a} for v, s, a in c.accuracy
            ],
        },
        "staleness_histogram": {str(k): v for k, v in sorted(n.staleness.items())},
        "dropped_stale_groups": n.dropped_stale,
        "dropped_unscored_groups": n.dropped_unscored,
        "time_s": {
            "training": n.train_s,
            "training_cpu": n.train_cpu_s,
            "decoding_summed_over_workers": n.rollout_s,
            "decoding_cpu_summed_over_workers": n.rollout_cpu_s,
        },
        "tokens_per_s": {
            "rollout": n.rollout_tokens / wall,
            "rollout_while_decoding": n.rollout_tokens / max(n.rollout_s, 1e-9),
            "training": n.train_tokens / max(n.train_s, 1e-9),
        },
        "weight_sync": {
            "pushes": len(pushes),
            "push_s_total": sum(pushes),
            "load_s_total": sum(n.sync_s),
            "load_s_p50": quantiles(n.sync_s).get("p50", 0.0),
            "worker_versions": {str(k): v for k, v in sorted(n.worker_versions.items())},
        },
        "idle_s": {
            "trainer": n.trainer_idle_s,
            "rollout_workers": {str(w.index): max(0.0, wall - w.busy_s) for w in c.workers},
            "reward_service": max(0.0, wall - c.reward.busy_s / c.cfg.reward.threads),
        },
        "importance_ratio": quantiles(list(n.is_ratio)),
        "engine_vs_trainer_logprob_diff": quantiles(list(n.logp_diff)),
        "reward_errors": dict(c.monitor.errors),
        "quarantined": dict(n.quarantined),
        "alerts": [{"kind": a.kind, "env": a.env, "detail": a.detail} for a in c.monitor.alerts],
        "faults": {
            "worker_deaths": n.worker_deaths,
            "lost_dispatches_redone": n.lost_dispatches,
            "reward_service_restarts": c.reward.restarts,
        },
    }


FAMILIES: Families = {
    "shipyard_rl_policy_version": ("gauge", "Trainer's policy version (optimizer steps)"),
    "shipyard_rl_worker_version": ("gauge", "Policy version each rollout worker last served"),
    "shipyard_rl_rollout_tokens_total": ("counter", "Tokens decoded by rollout workers"),
    "shipyard_rl_train_tokens_total": ("counter", "Tokens the trainer trained on"),
    "shipyard_rl_trajectories_trained_total": ("counter", "Trajectories consumed by the trainer"),
    "shipyard_rl_staleness_trajectories_total": ("counter", "Trained trajectories by staleness"),
    "shipyard_rl_dropped_stale_groups_total": ("counter", "Groups dropped as staler than eta"),
    "shipyard_rl_reward_errors_total": ("counter", "Reward errors by environment"),
    "shipyard_rl_quarantined_total": ("counter", "Trajectories quarantined by environment"),
    "shipyard_rl_alerts_total": ("counter", "Reward alerts raised by kind"),
    "shipyard_rl_weight_push_seconds_total": ("counter", "Time publishing weight versions"),
    "shipyard_rl_weight_load_seconds_total": ("counter", "Time workers spent loading weights"),
    "shipyard_rl_trainer_idle_seconds_total": ("counter", "Time the trainer waited for data"),
    "shipyard_rl_worker_restarts_total": ("counter", "Rollout workers restarted after a death"),
    "shipyard_rl_reward_restarts_total": ("counter", "Reward service restarts after a death"),
}


def _samples(c: "Controller") -> Iterable[Sample]:
    n = c.counters
    yield "shipyard_rl_policy_version", {}, c.version
    for worker in c.workers:
        yield "shipyard_rl_worker_version", {"worker": str(worker.index)}, worker.version
        yield "shipyard_rl_worker_restarts_total", {"worker": str(worker.index)}, worker.restarts
    yield "shipyard_rl_rollout_tokens_total", {}, n.rollout_tokens
    yield "shipyard_rl_train_tokens_total", {}, n.train_tokens
    yield "shipyard_rl_trajectories_trained_total", {}, len(c.buffer.consumed)
    for staleness, count in n.staleness.items():
        yield "shipyard_rl_staleness_trajectories_total", {"staleness": str(staleness)}, count
    yield "shipyard_rl_dropped_stale_groups_total", {}, n.dropped_stale
    for env, count in c.monitor.errors.items():
        yield "shipyard_rl_reward_errors_total", {"env": env}, count
    for env, count in n.quarantined.items():
        yield "shipyard_rl_quarantined_total", {"env": env}, count
    for kind in ("error-rate", "reward-hack"):
        raised = sum(a.kind == kind for a in c.monitor.alerts)
        yield "shipyard_rl_alerts_total", {"kind": kind}, raised
    yield (
        "shipyard_rl_weight_push_seconds_total",
        {},
        sum(c.publisher.push_s if c.publisher else []),
    )
    yield "shipyard_rl_weight_load_seconds_total", {}, sum(n.sync_s)
    yield "shipyard_rl_trainer_idle_seconds_total", {}, n.trainer_idle_s
    yield "shipyard_rl_reward_restarts_total", {}, c.reward.restarts


def metrics_text(c: "Controller") -> bytes:
    return generate_latest(snapshot_registry(FAMILIES, lambda: _samples(c)))


def serve_metrics(c: "Controller", listen: str, home: Path) -> "BackgroundServer":
    """`GET /metrics` on a loopback HOST:PORT, behind Shipyard's HTTP guard."""
    from fastapi import FastAPI, Response

    from shipyard.errors import InvalidInput
    from shipyard.httpguard import Guard, is_loopback
    from shipyard.httpguard.asgi import guard_middleware, json_errors, start_server

    host, _, port = listen.rpartition(":")
    if not is_loopback(host) or not port.isdigit():
        raise InvalidInput(f"--metrics-listen {listen!r}: expected a loopback HOST:PORT")
    guard = Guard.start("rl", home, host)
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    json_errors(app, guard.service)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(metrics_text(c), media_type=CONTENT_TYPE_LATEST)

    app.middleware("http")(guard_middleware(guard))
    return start_server(app, host, int(port), "rl-metrics")
