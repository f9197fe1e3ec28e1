"""The lineage of an answer: from its request id to the model version, and from there up the
catalog (checkpoint, training data, base model, ...) and down to the eval reports about it.

`shipyard lineage request ID` and the console's /requests/ID page both show `request_lineage`.
"""

from pathlib import Path
from typing import Any

from shipyard.catalog import LineageEdge
from shipyard.errors import NotFound
from shipyard.serve.request_id import check_request_id
from shipyard.serve.router.requestlog import RequestLog, requests_dir
from shipyard.workspace import Workspace

MAX_NODES = 400  # a lineage bigger than this is cut; `truncated` says so
REPORT_KIND = "eval-report"


def request_lineage(ws: Workspace, home: Path, rid: str) -> dict[str, Any]:
    """What produced the answer to request `rid`: InvalidInput for a malformed id, NotFound
    when the request log (of `home`) has no such request."""
    check_request_id(rid)
    record = RequestLog(requests_dir(home)).find(rid)
    if record is None:
        raise NotFound(
            f"request {rid!r}: not in the request log under {requests_dir(home)} "
            "(never answered here, or older than the log keeps)"
        )
    artifact = record.get("artifact")
    out: dict[str, Any] = {
        "request": record,
        "model": None,
        "edges": [],
        "sources": [],
        "eval_reports": [],
        "truncated": False,
    }
    if not isinstance(artifact, str) or ws.catalog.get_artifact(artifact) is None:
        return out  # answered by a server outside Shipyard, or a model this catalog lacks
    aliases = _aliases(ws)
    out["model"] = _artifact(ws, artifact, aliases, 0)
    edges = ws.catalog.lineage(artifact, "up", max_nodes=MAX_NODES)
    out["edges"] = [_edge(e) for e in edges]
    out["truncated"] = len({artifact, *(e.parent for e in edges)}) > MAX_NODES
    depths: dict[str, int] = {}
    for edge in edges:
        if not edge.parent.startswith("run-"):
            depths.setdefault(edge.parent, edge.depth)
    out["sources"] = [_artifact(ws, node, aliases, depth) for node, depth in depths.items()]
    # An eval report's run takes the model as an input: model → run → report.
    below = ws.catalog.lineage(artifact, "down", max_depth=2, max_nodes=MAX_NODES)
    reports = []
    for edge in below:
        if edge.depth == 2:
            found = ws.catalog.get_artifact(edge.child)
            if found is not None and found.kind == REPORT_KIND:
                reports.append(_artifact(ws, edge.child, aliases, 2))
    out["eval_reports"] = sorted(reports, key=lambda r: r["created_at"], reverse=True)
    return out


def _aliases(ws: Workspace) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, target in ws.catalog.list_aliases().items():
        out.setdefault(target, []).append(name)
    return out


def _artifact(
    ws: Workspace, node: str, aliases: dict[str, list[str]], depth: int
) -> dict[str, Any]:
    record = ws.catalog.get_artifact(node)
    return {
        "id": node,
        "kind": record.kind if record else None,
        "depth": depth,
        "aliases": sorted(aliases.get(node, [])),
        "created_at": record.created_at if record else None,
        "metadata": record.metadata if record else {},
    }


def _edge(edge: LineageEdge) -> dict[str, Any]:
    return {"parent": edge.parent, "child": edge.child, "depth": edge.depth}
