"""What a run config's `evals` and `deploy` sections ask of the run, checked before it starts.

Light on imports: `train status` and the console read it for every run.
"""

from shipyard.errors import InvalidInput, ShipyardError
from shipyard.evals.tasks import get_task
from shipyard.train.config import TrainConfig
from shipyard.workspace import Workspace


def source(run_id: str) -> str:
    """The trigger source of a run's checkpoints (eval_triggers.source)."""
    return f"train:{run_id}"


def wired(cfg: TrainConfig) -> bool:
    """Whether the run's checkpoints are evaluated (and so need the lifecycle agent)."""
    return bool(cfg.evals.fast or cfg.deploy.deployment)


def gate_tasks(cfg: TrainConfig) -> tuple[str, ...]:
    return cfg.deploy.gate_tasks or cfg.evals.fast


def check_hooks(cfg: TrainConfig) -> None:
    """Refuse (InvalidInput, naming the field and the name) an eval task that does not load,
    a deployment that does not exist, or a GPT run whose data has no tokenizer to import by."""
    from shipyard.serve.deploy.state import Records

    named = (
        ("evals.fast", cfg.evals.fast),
        ("evals.full", cfg.evals.full),
        ("deploy.gate_tasks", cfg.deploy.gate_tasks),
    )
    for where, refs in named:
        for ref in refs:
            try:
                get_task(ref)
            except ShipyardError as exc:
                raise InvalidInput(
                    f"train config field {where!r}: eval task {ref!r}: {exc}"
                ) from None
    if cfg.deploy.deployment:
        try:
            Records().read(cfg.deploy.deployment)
        except ShipyardError as exc:
            raise InvalidInput(f"train config field 'deploy.deployment': {exc}") from None
    if wired(cfg):
        ws = Workspace.open()
        try:
            tokenizer_id(ws, cfg)
        finally:
            ws.close()


def tokenizer_id(ws: Workspace, cfg: TrainConfig) -> str | None:
    """The tokenizer a GPT run's checkpoints are imported with: the nearest `tokenizer`
    artifact upstream of its data artifact (the data pipeline's); None for a Hugging Face run."""
    if cfg.model.kind == "hf":
        return None
    why = "evals of a GPT run need a tokenizer: set data.artifact to the data pipeline's tokens"
    if not cfg.data.artifact:
        raise InvalidInput(f"train config field 'data.artifact': {why}")
    data = ws.resolve(cfg.data.artifact)
    for edge in ws.catalog.lineage(data, "up"):
        record = ws.catalog.get_artifact(edge.parent)
        if record is not None and record.kind == "tokenizer":
            return record.id
    raise InvalidInput(f"train config field 'data.artifact': {data[:16]} has no tokenizer; {why}")
