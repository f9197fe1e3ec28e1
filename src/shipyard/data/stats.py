"""Per-stage survival statistics by language, domain and crawl, and drift between runs.

Survival is cumulative in stage order: a stage's rate is the share of documents alive before it
that it keeps. Statistics are written with every run under `$SHIPYARD_HOME/data/runs/`.
"""

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shipyard.errors import InvalidInput, NotFound

FUNNEL = (
    ("langid", "language != 'und'"),
    ("gopher_repetition", "gopher_repetition_ok"),
    ("gopher_quality", "gopher_quality_ok"),
    ("c4", "c4_ok"),
    ("fineweb", "fineweb_ok"),
    ("url_dedup", "keep_url"),
    ("exact_dedup", "keep_exact"),
    ("minhash_dedup", "keep_minhash"),
    ("decontam", "NOT contaminated"),
)
TOP_DOMAINS = 20
MIN_GROUP_DOCS = 20  # groups smaller than this are reported but never flagged for drift


def _passes(table: pa.Table, stage: str) -> np.ndarray:
    if stage == "langid":
        known = pc.not_equal(table.column("language"), "und")
        return np.asarray(known.to_numpy(zero_copy_only=False), dtype=bool)
    column = dict(FUNNEL)[stage].removeprefix("NOT ")
    values = np.asarray(
        table.column(column).fill_null(False).to_numpy(zero_copy_only=False), dtype=bool
    )
    return ~values if dict(FUNNEL)[stage].startswith("NOT ") else values


def _funnel(alive_by_stage: list[np.ndarray], mask: np.ndarray) -> list[dict[str, Any]]:
    rows = []
    before = int(mask.sum())
    for (stage, _), alive in zip(FUNNEL, alive_by_stage, strict=True):
        after = int((alive & mask).sum())
        rows.append({"stage": stage, "in": before, "out": after, "rate": _rate(after, before)})
        before = after
    return rows


def _rate(after: int, before: int) -> float:
    return round(after / before, 6) if before else 1.0


def survival(table: pa.Table) -> dict[str, Any]:
    alive = np.ones(table.num_rows, dtype=bool)
    alive_by_stage = []
    for stage, _ in FUNNEL:
        alive = alive & _passes(table, stage)
        alive_by_stage.append(alive)
    everything = np.ones(table.num_rows, dtype=bool)
    by: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for key in ("language", "domain", "crawl"):
        values = np.asarray(table.column(key).fill_null("").to_numpy(zero_copy_only=False))
        counts = Counter(values.tolist())
        keep = [v for v, _ in counts.most_common(TOP_DOMAINS if key == "domain" else None)]
        by[key] = {v: _funnel(alive_by_stage, values == v) for v in sorted(keep)}
    return {"documents": table.num_rows, "stages": _funnel(alive_by_stage, everything), "by": by}


def runs_dir(home: Path) -> Path:
    return home / "data" / "runs"


def save(home: Path, run_id: str, report: dict[str, Any]) -> Path:
    folder = runs_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{run_id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**report, "run": run_id, "saved_at": time.time()}, indent=1))
    tmp.replace(path)
    return path


def load(home: Path, ref: str) -> dict[str, Any]:
    """A run's statistics by run id, unique prefix, or `latest`."""
    reports = _all(home)
    if ref == "latest":
        if not reports:
            raise NotFound("no data pipeline run has been recorded yet")
        return reports[-1]
    matches = [r for r in reports if str(r["run"]).startswith(ref)]
    if not matches:
        raise NotFound(f"no data pipeline run {ref!r} (see {runs_dir(home)})")
    if len(matches) > 1:
        raise InvalidInput(f"run {ref!r} is ambiguous: {', '.join(r['run'][:12] for r in matches)}")
    return matches[0]


def previous(home: Path, report: dict[str, Any]) -> dict[str, Any] | None:
    """The latest earlier run of the same pipeline name."""
    earlier = [
        r
        for r in _all(home)
        if r.get("name") == report.get("name") and r["saved_at"] < report["saved_at"]
    ]
    return earlier[-1] if earlier else None


def _all(home: Path) -> list[dict[str, Any]]:
    folder = runs_dir(home)
    reports = [json.loads(p.read_text()) for p in folder.glob("*.json")] if folder.is_dir() else []
    return sorted(reports, key=lambda r: r["saved_at"])


def drift(current: dict[str, Any], before: dict[str, Any], threshold: float) -> list[str]:
    """One line per stage (overall, or within a language) whose survival rate moved > threshold."""
    flags = _compare(
        "overall", current["survival"]["stages"], before["survival"]["stages"], threshold
    )
    now_langs = current["survival"]["by"]["language"]
    old_langs = before["survival"]["by"]["language"]
    for language in sorted(set(now_langs) & set(old_langs)):
        flags += _compare(
            f"language={language}", now_langs[language], old_langs[language], threshold
        )
    return flags


def _compare(
    scope: str, now: list[dict[str, Any]], old: list[dict[str, Any]], threshold: float
) -> list[str]:
    old_by_stage = {row["stage"]: row for row in old}
    flags = []
    for row in now:
        prior = old_by_stage.get(row["stage"])
        if not prior or (min(row["in"], prior["in"]) < MIN_GROUP_DOCS and scope != "overall"):
            continue
        moved = row["rate"] - prior["rate"]
        if abs(moved) > threshold:
            flags.append(
                f"{scope} {row['stage']}: survival {prior['rate']:.3f} → {row['rate']:.3f} "
                f"({moved:+.3f})"
            )
    return flags
