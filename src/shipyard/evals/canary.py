"""The harness's own canary: a frozen reference model with known scores.

The baseline file records the reference model, the fingerprint of everything in the harness that
can move a score (harness version, each task's version, template, few-shot set and judge — the
judge includes the sandbox image for code tasks) and the score of each task. `check` re-runs the
reference whenever that fingerprint changed; a score that moved raises `CanaryMoved` (a non-zero
exit), which blocks the change until someone looks and re-records the baseline on purpose.
"""

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.errors import Conflict, InvalidInput
from shipyard.evals.report import summarize
from shipyard.evals.runner import plan
from shipyard.evals.store import HARNESS_VERSION, ResultStore, judge_version
from shipyard.evals.tasks import get_task
from shipyard.queue import Queue

Work = Callable[[str], None]  # works the reference model's queue until it is empty


class CanaryMoved(Conflict):
    """The reference model's score moved under a harness, template or sandbox change."""


@dataclass(frozen=True)
class CanaryResult:
    ran: bool  # False: nothing that can move a score changed, so nothing was re-run
    scores: dict[str, float]
    moved: dict[str, tuple[float, float]]  # task → (recorded, now)


def fingerprint(task_refs: Sequence[str]) -> dict[str, Any]:
    tasks = {}
    for ref in task_refs:
        task = get_task(ref)
        tasks[ref] = {
            "version": task.version,
            "template": task.template_hash,
            "fewshot": task.fewshot_hash,
            "judge": judge_version(task),
        }
    return {"harness_version": HARNESS_VERSION, "tasks": tasks}


def load_baseline(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InvalidInput(f"canary baseline {path}: {exc.strerror}; record one first") from None
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested past the parser
        raise InvalidInput(f"canary baseline {path}: not JSON") from None
    if not isinstance(data, dict) or not {"model_id", "fingerprint", "scores"} <= set(data):
        raise InvalidInput(f"canary baseline {path}: needs model_id, fingerprint and scores")
    scores = data["scores"]
    if not isinstance(data["model_id"], str) or not isinstance(data["fingerprint"], dict):
        raise InvalidInput(
            f"canary baseline {path}: model_id must be a string, fingerprint an object"
        )
    if (
        not isinstance(scores, dict)
        or not scores
        or not all(isinstance(k, str) and _finite(v) for k, v in scores.items())
    ):
        raise InvalidInput(f"canary baseline {path}: scores must map task names to numbers")
    return data


def _finite(value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value)


def record(
    queue: Queue, model_id: str, task_refs: Sequence[str], work: Work, path: Path
) -> dict[str, float]:
    """Run the reference on `task_refs` and write the baseline file."""
    scores = _scores(queue, model_id, task_refs, work)
    baseline = {"model_id": model_id, "fingerprint": fingerprint(task_refs), "scores": scores}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(baseline, indent=2, sort_keys=True) + "\n")
    return scores


def check(
    queue: Queue, path: Path, work: Work, tolerance: float = 1e-9, force: bool = False
) -> CanaryResult:
    """Re-run the reference if the fingerprint moved (or `force`); raise `CanaryMoved` when a
    task's score is not what the baseline recorded."""
    baseline = load_baseline(path)
    refs = list(baseline["scores"])
    if not force and fingerprint(refs) == baseline["fingerprint"]:
        return CanaryResult(False, dict(baseline["scores"]), {})
    scores = _scores(queue, str(baseline["model_id"]), refs, work)
    moved = {
        ref: (float(baseline["scores"][ref]), now)
        for ref, now in scores.items()
        if not math.isclose(now, float(baseline["scores"][ref]), abs_tol=tolerance)
    }
    if moved:
        said = ", ".join(f"{t}: {a:.4f} → {b:.4f}" for t, (a, b) in sorted(moved.items()))
        raise CanaryMoved(
            f"the reference model's scores moved ({said}); the harness change is blocked. If the "
            f"move is intended, re-record the baseline {path} with `shipyard eval canary --record`"
        )
    return CanaryResult(True, scores, {})


def _scores(queue: Queue, model_id: str, refs: Sequence[str], work: Work) -> dict[str, float]:
    planned = plan(queue, model_id, refs)
    work(model_id)
    store = ResultStore(queue.db)
    scores = {}
    for ref, p in zip(refs, planned, strict=True):
        store.rescore(get_task(ref), p.run_key)  # a new judge scores the stored outputs
        line = summarize(store, store.run(p.run_key))
        if line["mean"] is None or line["scored"] != line["items"]:
            raise InvalidInput(
                f"canary task {ref}: {line['scored']} of {line['items']} items scored; "
                "see `shipyard queue dead eval.<model>`"
            )
        scores[ref] = float(line["mean"])
    return scores
