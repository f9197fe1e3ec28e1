"""The gate and the flip: an alias may point only at an index whose measured recall@10 reaches
the threshold; flips and rollbacks are compare-and-swap moves of the alias, so history is kept
and two concurrent flips cannot both win."""

from shipyard.errors import Conflict, InvalidInput
from shipyard.workspace import Workspace


def check_gate(ws: Workspace, ref: str, min_recall: float) -> str:
    """The index's id if it may serve; else `Conflict` naming its recall and the threshold."""
    if not 0.0 <= min_recall <= 1.0:
        raise InvalidInput(f"min recall must be from 0 to 1, not {min_recall}")
    index_id = ws.resolve(ref)
    record = ws.catalog.get_artifact(index_id)
    if record is None or record.kind != "index":
        raise InvalidInput(f"{ref!r} is not an index artifact")
    recall = record.metadata.get("recall_at_10")
    if not isinstance(recall, (int, float)):
        raise Conflict(f"index {index_id[:16]} has no measured recall@10: flip refused")
    if recall < min_recall:
        raise Conflict(
            f"index {index_id[:16]}: recall@10 {recall:.3f} is below the threshold "
            f"{min_recall:.3f}: flip refused"
        )
    return index_id


def flip(ws: Workspace, alias: str, ref: str, min_recall: float, expect: str | None = None) -> str:
    """Point `alias` at index `ref` after the gate; returns the id it pointed at before (or "")."""
    index_id = check_gate(ws, ref, min_recall)
    current = ws.catalog.get_alias(alias) if expect is None else ws.resolve(expect)
    if current == index_id:
        raise Conflict(f"alias {alias!r} already points at {index_id[:16]}")
    ws.move_alias(alias, index_id, expect=current)
    return current or ""


def previous_target(ws: Workspace, alias: str) -> str:
    """The index the alias pointed at before its current one (what a rollback restores)."""
    history = ws.catalog.alias_history(alias)
    current = ws.catalog.get_alias(alias)
    for event in reversed(history):
        if event.old_id and event.old_id != current:
            return event.old_id
    raise Conflict(f"alias {alias!r} has no earlier index to roll back to")
