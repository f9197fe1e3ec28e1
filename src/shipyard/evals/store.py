"""Item-level results keyed by everything that changes a score, on Shipyard's database.

A run's key is the hash of (model id, task name and version, template hash, few-shot set hash,
sampling parameters, harness version). Outputs are stored under that key; scores under the key
and the judge version, so a new scorer re-scores stored outputs without regenerating them, and
two runs that differ in anything that matters never share a row.
"""

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from shipyard.db import Database, ensure
from shipyard.errors import NotFound
from shipyard.evals.schema import EVALS
from shipyard.evals.scoring import JUDGE_VERSIONS, SANDBOX_IMAGE, Score, score
from shipyard.evals.tasks import Task
from shipyard.hashing import canonical_json, sha256_hex

# Bump when the engine, encoding or prompt assembly changes in a way that can move a score.
HARNESS_VERSION = "1"


@dataclass(frozen=True)
class RunKey:
    model_id: str
    task: str
    task_version: str
    template_hash: str
    fewshot_hash: str
    sampling: str  # canonical JSON
    harness_version: str = HARNESS_VERSION

    @classmethod
    def of(cls, model_id: str, task: Task) -> "RunKey":
        sampling = canonical_json(task.sampling.as_json()).decode()
        return cls(
            model_id, task.name, task.version, task.template_hash, task.fewshot_hash, sampling
        )

    @property
    def hash(self) -> str:
        return sha256_hex(canonical_json(asdict(self)))[:32]


def judge_version(task: Task) -> str:
    judge = f"{task.scorer}:{JUDGE_VERSIONS[task.scorer]}:{task.judge_version}"
    return f"{judge}:{SANDBOX_IMAGE}" if task.scorer == "code" else judge


@dataclass(frozen=True)
class ScoreRow:
    item_id: str
    score: float
    outcome: str
    cluster: str | None


class ResultStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        ensure(db, EVALS)

    def add_run(self, key: RunKey, task_ref: str, items: int) -> str:
        self.db.run(
            "INSERT INTO eval_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_key) DO NOTHING",
            (
                key.hash,
                key.model_id,
                key.task,
                task_ref,
                key.task_version,
                key.template_hash,
                key.fewshot_hash,
                key.sampling,
                key.harness_version,
                items,
                time.time(),
            ),
        )
        return key.hash

    def run(self, run_key: str) -> dict[str, Any]:
        found = self.db.records("SELECT * FROM eval_runs WHERE run_key = ?", (run_key,))
        if not found:
            raise NotFound(f"no eval run {run_key!r}")
        return found[0]

    def runs(self, model_id: str | None = None) -> list[dict[str, Any]]:
        sql, params = "SELECT * FROM eval_runs", ()  # type: tuple[str, tuple[str, ...]]
        if model_id is not None:
            sql, params = sql + " WHERE model_id = ?", (model_id,)
        return self.db.records(sql + " ORDER BY created_at, task", params)

    @staticmethod
    def record(
        db: Database,
        run_key: str,
        judge: str,
        item_id: str,
        cluster: str | None,
        output: dict[str, Any],
        result: Score,
    ) -> None:
        """Write one item's output and score; used as a queue completion's effect, so both
        commit with the lease's end or not at all. A row already there is kept as it was."""
        db.run(
            "INSERT INTO eval_outputs VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (run_key, item_id, json.dumps(output, sort_keys=True), time.time()),
        )
        db.run(
            "INSERT INTO eval_scores VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (run_key, judge, item_id, result.value, result.outcome, result.detail, cluster),
        )

    def done_items(self, run_key: str) -> set[str]:
        rows = self.db.rows("SELECT item_id FROM eval_outputs WHERE run_key = ?", (run_key,))
        return {str(r[0]) for r in rows}

    def has_output(self, run_key: str, item_id: str) -> bool:
        return bool(
            self.db.rows(
                "SELECT 1 FROM eval_outputs WHERE run_key = ? AND item_id = ?", (run_key, item_id)
            )
        )

    def outputs(self, run_key: str) -> dict[str, dict[str, Any]]:
        rows = self.db.rows(
            "SELECT item_id, output FROM eval_outputs WHERE run_key = ?", (run_key,)
        )
        return {str(i): json.loads(o) for i, o in rows}

    def scores(self, run_key: str, judge: str) -> list[ScoreRow]:
        rows = self.db.rows(
            "SELECT item_id, score, outcome, cluster FROM eval_scores "
            "WHERE run_key = ? AND judge_version = ? ORDER BY item_id",
            (run_key, judge),
        )
        return [ScoreRow(str(i), float(s), str(o), c) for i, s, o, c in rows]

    def latest_judge(self, run_key: str) -> str | None:
        rows = self.db.rows(
            "SELECT DISTINCT judge_version FROM eval_scores WHERE run_key = ? "
            "ORDER BY judge_version DESC LIMIT 1",
            (run_key,),
        )
        return str(rows[0][0]) if rows else None

    def rescore(self, task: Task, run_key: str, judge: str | None = None) -> int:
        """Score the stored outputs of `run_key` under `judge` (default: the task's current
        judge) without running the model; returns how many items were newly scored."""
        judge = judge or judge_version(task)
        have = {row.item_id for row in self.scores(run_key, judge)}
        items = {item.id: item for item in task.load()}
        added = 0
        for item_id, output in sorted(self.outputs(run_key).items()):
            if item_id in have or item_id not in items:
                continue
            item = items[item_id]
            with self.db.transaction():
                self.record(
                    self.db,
                    run_key,
                    judge,
                    item_id,
                    item.cluster,
                    output,
                    score(task, item, output),
                )
            added += 1
        return added

    def seen_trigger(self, source: str, artifact_id: str) -> bool:
        return bool(
            self.db.rows(
                "SELECT 1 FROM eval_triggers WHERE source = ? AND artifact_id = ?",
                (source, artifact_id),
            )
        )

    def add_trigger(
        self, source: str, artifact_id: str, decide: Callable[[int], list[str]]
    ) -> list[str] | None:
        """Record a checkpoint seen on `source` with the tiers `decide(ordinal)` picks (its
        1-based ordinal there); None if it was seen before, so nothing is enqueued twice."""
        with self.db.transaction():
            if self.seen_trigger(source, artifact_id):
                return None
            rows = self.db.rows("SELECT COUNT(*) FROM eval_triggers WHERE source = ?", (source,))
            tiers = decide(int(rows[0][0]) + 1)
            self.db.run(
                "INSERT INTO eval_triggers VALUES (?, ?, ?, ?, ?)",
                (source, artifact_id, int(rows[0][0]) + 1, json.dumps(tiers), time.time()),
            )
        return tiers
