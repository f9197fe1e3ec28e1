"""Evaluation of checkpoints and models: tasks, queued runs, item-level results, statistics.

    queue = open_queue()
    plan(queue, model_id, ["arith-mc", "humaneval"])       # enqueue (idempotent, resumable)
    work(queue, workspace, model_id)                        # one warm engine, every task
    report = model_report(ResultStore(queue.db), model_id)  # mean ± (clustered) SE per run

See docs/evals.md.
"""

from shipyard.evals.canary import CanaryMoved, CanaryResult
from shipyard.evals.contamination import ContaminationIndex, export_benchmarks
from shipyard.evals.report import compare, model_report, put_report
from shipyard.evals.runner import EvalWorker, materialise, plan, queue_name, warm_engine, work
from shipyard.evals.stats import Alert, Estimate, estimate, paired, regression_alert
from shipyard.evals.store import HARNESS_VERSION, ResultStore, RunKey, judge_version
from shipyard.evals.tasks import Item, Sampling, Task, get_task, register, registered
from shipyard.evals.triggers import TriggerPolicy, on_checkpoint, watch

__all__ = [
    "HARNESS_VERSION",
    "Alert",
    "CanaryMoved",
    "CanaryResult",
    "ContaminationIndex",
    "Estimate",
    "EvalWorker",
    "Item",
    "ResultStore",
    "RunKey",
    "Sampling",
    "Task",
    "TriggerPolicy",
    "compare",
    "estimate",
    "export_benchmarks",
    "get_task",
    "judge_version",
    "materialise",
    "model_report",
    "on_checkpoint",
    "paired",
    "plan",
    "put_report",
    "queue_name",
    "register",
    "registered",
    "regression_alert",
    "warm_engine",
    "watch",
    "work",
]
