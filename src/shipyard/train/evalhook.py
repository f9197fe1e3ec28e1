"""A run's checkpoints → evals: publish each committed checkpoint, import it, enqueue its tasks.

Each step leaves a run event (`checkpoint-published`, then `evals-enqueued` or `evals-failed`)
and is idempotent, so the lifecycle agent that calls these can be killed anywhere and started
again: a checkpoint published but not yet enqueued is enqueued by the next agent, and one
enqueued twice adds no queue item (the trigger table records its tiers once per source, the
import is content-addressed, the plan is keyed by run and item). `check_hooks` refuses a config
whose tasks or deployment do not exist before a run starts.
"""

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from shipyard.checkpoint import committed
from shipyard.checkpoint.publish import Publish, publish
from shipyard.errors import ShipyardError, StorageError
from shipyard.evals.runner import plan
from shipyard.evals.triggers import TriggerPolicy, trigger_commit
from shipyard.queue import Queue
from shipyard.train.config import TrainConfig
from shipyard.train.hooks import gate_tasks, source, tokenizer_id
from shipyard.train.state import RunTable, TrainRun
from shipyard.train.worker import checkpoint_root
from shipyard.workspace import Workspace


def policy(cfg: TrainConfig) -> TriggerPolicy:
    return TriggerPolicy(cfg.evals.fast or gate_tasks(cfg), cfg.evals.full, cfg.evals.full_every)


def tokenizer_path(ws: Workspace, cfg: TrainConfig, run_dir: Path) -> Path | None:
    """The run's tokenizer, fetched once into the run directory (None for a Hugging Face run)."""
    found = tokenizer_id(ws, cfg)
    if found is None:
        return None
    dest = run_dir / "tokenizer"
    if not dest.exists():
        with tempfile.TemporaryDirectory(prefix=".tokenizer-", dir=run_dir) as scratch:
            ws.get(found, Path(scratch) / "t")
            shutil.move(Path(scratch) / "t", dest)  # whole or absent
    return dest


@dataclass(frozen=True)
class Enqueued:
    step: int
    checkpoint: str
    model: str
    tasks: list[str]


def publish_new(table: RunTable, run: TrainRun) -> int:
    """Store each committed checkpoint not published yet as a `checkpoint` artifact, an output
    of the run (so its lineage reaches the run's inputs); returns how many were published."""
    done = {e.detail["step"] for e in table.events(run.run_id, "checkpoint-published")}
    done |= {e.detail["step"] for e in table.events(run.run_id, "checkpoint-gone")}
    count = 0
    for found in committed(checkpoint_root(run.run_dir)):
        if found.step in done:
            continue
        try:
            artifact = publish(found, Publish(run_id=run.run_id))
        except (OSError, ShipyardError) as exc:
            if found.path.exists():
                raise
            # retention removed it while it was being read: a newer one was committed
            table.event(run.run_id, "checkpoint-gone", step=found.step, error=str(exc))
            continue
        table.event(run.run_id, "checkpoint-published", step=found.step, checkpoint=artifact)
        count += 1
    return count


def enqueue_new(ws: Workspace, queue: Queue, table: RunTable, run: TrainRun) -> list[Enqueued]:
    """Import each published checkpoint not enqueued yet and enqueue its evals (the policy's
    tiers, plus the gate tasks when the run deploys); one whose import fails is recorded
    (`evals-failed`, with the reason) and not tried again."""
    cfg = TrainConfig.from_dict(run.config)
    handled = {
        e.detail["step"]
        for kind in ("evals-enqueued", "evals-failed")
        for e in table.events(run.run_id, kind)
    }
    todo = [e.detail for e in table.events(run.run_id, "checkpoint-published")]
    todo = sorted((d for d in todo if d["step"] not in handled), key=lambda d: int(d["step"]))
    if not todo:
        return []
    tokenizer = tokenizer_path(ws, cfg, Path(run.run_dir))
    heads = cfg.model.n_heads if cfg.model.kind == "gpt" else None
    out = []
    for detail in todo:
        step, checkpoint = int(detail["step"]), str(detail["checkpoint"])
        final = step >= cfg.train.steps  # the run's result: the promotion candidate
        try:
            found = trigger_commit(
                queue, ws, policy(cfg), checkpoint, tokenizer, source(run.run_id), heads, final
            )
            tasks = list(found.tasks)
            if cfg.deploy.deployment:
                extra = [t for t in gate_tasks(cfg) if t not in tasks]
                plan(queue, found.model_id, extra)
                tasks += extra
        except StorageError:
            raise  # the database or store, not this checkpoint: the next agent tries again
        except Exception as exc:  # a checkpoint that does not import: recorded, not retried
            error = f"{type(exc).__name__}: {exc}"
            table.event(run.run_id, "evals-failed", step=step, checkpoint=checkpoint, error=error)
            continue
        done = Enqueued(step, checkpoint, found.model_id, tasks)
        table.event(run.run_id, "evals-enqueued", **done.__dict__)
        out.append(done)
    return out
