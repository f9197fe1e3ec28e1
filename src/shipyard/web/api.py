"""The console's JSON API under /api: every page is drawn from these same functions.

Reads need nothing; changes (PUT an alias, cancel a job, requeue dead items) pass the guard in
`shipyard.httpguard.asgi` first, and their JSON body arrives in `request.state.body`.
"""

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from shipyard.errors import InvalidInput, NotFound
from shipyard.provenance import current_user
from shipyard.web import artifacts, batch, evals, ops, rl, runs, serving
from shipyard.web.context import Console

Direction = Literal["up", "down"]


def router(console: Console) -> APIRouter:
    api = APIRouter(prefix="/api")

    # The two big replies skip FastAPI's per-field encoding (a third of a large graph's time):
    # they are plain JSON already.
    @api.get(
        "/artifacts",
        summary="Search artifacts by id, alias or name, and kind; newest first, a page at a time",
        response_class=JSONResponse,
    )
    def search(
        q: str = "",
        kind: str = "",
        offset: int = Query(0, ge=0),
        limit: int = Query(artifacts.MAX_RESULTS, ge=1, le=artifacts.MAX_RESULTS),
    ) -> JSONResponse:
        return JSONResponse(artifacts.search(console.workspace(), q, kind, offset, limit))

    @api.get("/artifacts/{ref}", summary="An artifact: files, pieces, aliases, alias history")
    def artifact(ref: str) -> dict[str, Any]:
        return artifacts.detail(console.workspace(), ref)

    @api.get(
        "/artifacts/{ref}/lineage",
        summary="Lineage graph up or down, to a depth",
        response_class=JSONResponse,
    )
    def lineage(
        ref: str,
        direction: Direction = "up",
        depth: int = Query(5, ge=1, le=artifacts.MAX_DEPTH),
    ) -> JSONResponse:
        return JSONResponse(artifacts.lineage(console.workspace(), ref, direction, depth))

    @api.get("/aliases", summary="Every alias and the artifact it points at")
    def aliases() -> dict[str, str]:
        return console.workspace().catalog.list_aliases()

    @api.put("/aliases/{name}", summary="Move an alias by compare-and-swap (token needed)")
    def move_alias(name: str, request: Request) -> dict[str, Any]:
        body = request.state.body
        target, expect = body.get("target"), body.get("expect", False)
        if not isinstance(target, str) or not target:
            raise InvalidInput("alias move: 'target' must be an artifact id, prefix or alias")
        if expect is not None and not isinstance(expect, str):
            raise InvalidInput(
                "alias move: 'expect' must be the id the alias points at now, or null if unset"
            )
        ws = console.workspace()
        new_id = ws.resolve(target)
        old = None if expect is None else ws.resolve(expect)
        ws.catalog.set_alias(name, new_id, old, f"{current_user()} via console")
        return {"alias": name, "target": new_id, "previous": old}

    @api.get("/runs", summary="Training runs, newest first")
    def train_runs() -> list[dict[str, Any]]:
        return runs.list_runs(console.runs())

    @api.get("/runs/{run_id}", summary="A run: goodput, loss curve, step-time heatmap, failures")
    def train_run(run_id: str) -> dict[str, Any]:
        return runs.run_detail(console.runs(), run_id)

    @api.get("/scheduler", summary="Jobs per team; free GPUs, largest gang, quota use")
    def scheduler() -> dict[str, Any]:
        return ops.scheduler(console.scheduler_url)

    @api.post("/scheduler/jobs/{job_id}/cancel", summary="Cancel a job (token needed)")
    def cancel(job_id: str) -> dict[str, Any]:
        return ops.cancel_job(job_id)

    @api.get("/queues", summary="Work queues: depth, oldest item, dead letters")
    def queues() -> dict[str, Any]:
        return ops.queues()

    @api.post("/queues/{queue}/requeue", summary="Requeue dead items (token needed)")
    def requeue(queue: str, request: Request) -> dict[str, Any]:
        ids = request.state.body.get("ids")
        if ids is not None and (
            not isinstance(ids, list) or not all(type(i) is int for i in ids) or len(ids) > 10_000
        ):
            raise InvalidInput("requeue: 'ids' must be a list of item ids (or null for all)")
        return ops.requeue(queue, ids)

    @api.get("/data/runs", summary="Data pipeline runs, newest first")
    def data_runs() -> list[dict[str, Any]]:
        return ops.data_runs(console.home)

    @api.get("/data/runs/{ref}", summary="A data run: survival funnel, quarantine, drift")
    def data_run(ref: str) -> dict[str, Any]:
        return ops.data_run(console.home, ref)

    @api.get("/peers", summary="Each configured peer daemon's holdings and sources")
    def peers() -> list[dict[str, Any]]:
        return ops.peers(list(console.peers), console.swarm_key_file)

    @api.get("/serving", summary="Serving deployments: status, versions, replicas")
    def deployments() -> list[dict[str, Any]]:
        return serving.deployments(console.home)

    @api.get(
        "/serving/{name}", summary="A deployment: versions' weights and replicas, autoscaler log"
    )
    def deployment(name: str) -> dict[str, Any]:
        return serving.deployment(console.home, name)

    @api.get("/evals/runs", summary="Eval runs by model and task, each with mean ± SE")
    def eval_runs() -> list[dict[str, Any]]:
        return evals.runs(console.home)

    @api.get(
        "/evals/tasks/{task}",
        summary="One task's mean ± SE on each model, oldest first, or on one source's checkpoints",
    )
    def eval_series(task: str, source: str = "") -> dict[str, Any]:
        return evals.series(console.home, task, source)

    @api.get("/evals/compare", summary="Paired difference a - b of two runs; changed items")
    def eval_compare(a: str, b: str) -> dict[str, Any]:
        return evals.compare(console.home, a, b)

    @api.get("/batch/jobs", summary="Batch jobs, newest first: progress, ETA, cost")
    def batch_jobs() -> dict[str, Any]:
        return batch.jobs(console.home)

    @api.get("/rl/runs", summary="RL run reports: reward and held-out accuracy, first to last")
    def rl_runs() -> list[dict[str, Any]]:
        return rl.runs(console.home)

    @api.get("/rl/runs/{name}", summary="An RL run's report, staleness histogram included")
    def rl_run(name: str) -> dict[str, Any]:
        return rl.run(console.home, name)

    @api.get("/{rest:path}", include_in_schema=False)
    def unknown(rest: str) -> None:
        raise NotFound(f"no API route /api/{rest} (see /api/docs)")

    return api
