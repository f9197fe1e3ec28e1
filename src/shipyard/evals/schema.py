"""The evals tables (schema `evals`): runs, item outputs, item scores, checkpoint triggers.

Kept apart from the store so that `shipyard db upgrade` can import it without the rest."""

from shipyard.db import Schema
from shipyard.db.url import Dialect


def _v1(dialect: Dialect) -> str:
    del dialect  # the same SQL on both engines
    return """
    CREATE TABLE IF NOT EXISTS eval_runs (
        run_key TEXT PRIMARY KEY, model_id TEXT NOT NULL, task TEXT NOT NULL,
        task_ref TEXT NOT NULL, task_version TEXT NOT NULL, template_hash TEXT NOT NULL,
        fewshot_hash TEXT NOT NULL, sampling TEXT NOT NULL, harness_version TEXT NOT NULL,
        items INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL);
    CREATE INDEX IF NOT EXISTS eval_runs_model ON eval_runs (model_id, task);
    CREATE TABLE IF NOT EXISTS eval_outputs (
        run_key TEXT NOT NULL, item_id TEXT NOT NULL, output TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (run_key, item_id));
    CREATE TABLE IF NOT EXISTS eval_scores (
        run_key TEXT NOT NULL, judge_version TEXT NOT NULL, item_id TEXT NOT NULL,
        score DOUBLE PRECISION NOT NULL, outcome TEXT NOT NULL, detail TEXT NOT NULL,
        cluster TEXT, PRIMARY KEY (run_key, judge_version, item_id));
    CREATE TABLE IF NOT EXISTS eval_triggers (
        source TEXT NOT NULL, artifact_id TEXT NOT NULL, ordinal INTEGER NOT NULL,
        tiers TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, PRIMARY KEY (source, artifact_id))
    """


EVALS = Schema("evals", (_v1,))
