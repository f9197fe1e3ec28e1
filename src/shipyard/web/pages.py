"""The console's HTML pages, rendered on the server from the same functions as /api."""

from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from shipyard.web import answers, artifacts, batch, evals, ops, rl, runs, serving, svg
from shipyard.web.context import Console

TEMPLATES = Jinja2Templates(directory=Path(__file__).parent / "templates")


def _funnel(stages: list[dict[str, Any]]) -> Markup:
    first = stages[0]["in"] if stages else 0
    rows = [
        (s["stage"], s["out"] / first if first else 0.0, f"{s['out']:,} ({s['rate']:.1%})")
        for s in stages
    ]
    return Markup(svg.bars(rows))


def _goodput(breakdown: dict[str, float]) -> Markup:
    wall = breakdown.get("wall") or 1.0
    rows = [
        (bucket, seconds / wall, f"{seconds:.2f}s ({seconds / wall:.1%})")
        for bucket, seconds in breakdown.items()
        if bucket not in ("wall", "goodput")
    ]
    return Markup(svg.bars(rows))


def router(console: Console) -> APIRouter:
    pages = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

    def page(request: Request, name: str, **values: Any) -> HTMLResponse:
        return TEMPLATES.TemplateResponse(request, name, values)

    @pages.get("/")
    def index(request: Request) -> HTMLResponse:
        ws = console.workspace()
        return page(
            request,
            "index.html",
            aliases=ws.catalog.list_aliases(),
            recent=artifacts.search(ws, limit=20),
        )

    @pages.get("/artifacts")
    def artifact_search(
        request: Request, q: str = "", kind: str = "", offset: int = Query(0, ge=0)
    ) -> HTMLResponse:
        found = artifacts.search(console.workspace(), q, kind, offset)
        more = len(found) == artifacts.MAX_RESULTS  # perhaps; the next page says
        return page(
            request,
            "artifacts.html",
            found=found,
            q=q,
            kind=kind,
            offset=offset,
            more=more,
            size=artifacts.MAX_RESULTS,
        )

    @pages.get("/artifacts/{ref}")
    def artifact(request: Request, ref: str) -> HTMLResponse:
        return page(request, "artifact.html", a=artifacts.detail(console.workspace(), ref))

    @pages.get("/artifacts/{ref}/lineage")
    def lineage(
        request: Request,
        ref: str,
        direction: Literal["up", "down"] = "up",
        depth: int = Query(5, ge=1, le=artifacts.MAX_DEPTH),
    ) -> HTMLResponse:
        graph = artifacts.lineage(console.workspace(), ref, direction, depth)
        drawing = Markup(svg.lineage_graph(graph))
        return page(request, "lineage.html", g=graph, drawing=drawing, ref=ref)

    @pages.get("/runs")
    def run_list(request: Request) -> HTMLResponse:
        return page(request, "runs.html", runs=runs.list_runs(console.runs()))

    @pages.get("/runs/{run_id}")
    def run(request: Request, run_id: str) -> HTMLResponse:
        info = runs.run_detail(console.runs(), run_id)
        return page(
            request,
            "run.html",
            r=info,
            loss=Markup(svg.line_chart(info["loss_curve"], "loss")),
            goodput=_goodput(info["breakdown"]),
            heatmap=Markup(svg.heatmap(info["heatmap"])),
        )

    @pages.get("/scheduler")
    def scheduler(request: Request) -> HTMLResponse:
        return page(request, "scheduler.html", s=ops.scheduler(console.scheduler_url))

    @pages.get("/data")
    def data_runs(request: Request) -> HTMLResponse:
        return page(request, "data.html", runs=ops.data_runs(console.home))

    @pages.get("/data/{ref}")
    def data_run(request: Request, ref: str) -> HTMLResponse:
        info = ops.data_run(console.home, ref)
        return page(request, "data_run.html", d=info, funnel=_funnel(info["survival"]["stages"]))

    @pages.get("/queues")
    def queues(request: Request) -> HTMLResponse:
        return page(request, "queues.html", q=ops.queues())

    @pages.get("/distribution")
    def distribution(request: Request) -> HTMLResponse:
        found = ops.peers(list(console.peers), console.swarm_key_file)
        return page(request, "distribution.html", peers=found)

    @pages.get("/serving")
    def deployments(request: Request) -> HTMLResponse:
        return page(request, "serving.html", deployments=serving.deployments(console.home))

    @pages.get("/serving/{name}")
    def deployment(request: Request, name: str) -> HTMLResponse:
        found = serving.deployment(console.home, name)
        return page(request, "deployment.html", d=found, recent=answers.recent(console.home, name))

    @pages.get("/requests/{rid}")
    def answer(request: Request, rid: str) -> HTMLResponse:
        return page(request, "request.html", r=answers.lineage(console, rid))

    @pages.get("/evals")
    def eval_runs(request: Request) -> HTMLResponse:
        return page(request, "evals.html", runs=evals.runs(console.home))

    @pages.get("/evals/tasks/{task}")
    def eval_task(request: Request, task: str, source: str = "") -> HTMLResponse:
        found = evals.series(console.home, task, source)
        chart = Markup(evals.error_bars(found["points"], task))
        return page(request, "evals_task.html", s=found, chart=chart)

    @pages.get("/evals/compare")
    def eval_compare(request: Request, a: str, b: str) -> HTMLResponse:
        return page(request, "evals_compare.html", c=evals.compare(console.home, a, b))

    @pages.get("/batch")
    def batch_jobs(request: Request) -> HTMLResponse:
        return page(request, "batch.html", b=batch.jobs(console.home))

    @pages.get("/rl")
    def rl_runs(request: Request) -> HTMLResponse:
        return page(request, "rl.html", runs=rl.runs(console.home))

    @pages.get("/rl/{name}")
    def rl_run(request: Request, name: str) -> HTMLResponse:
        report = rl.run(console.home, name)
        accuracy = (report.get("heldout_accuracy") or {}).get("curve")
        reward = (report.get("reward") or {}).get("per_step")
        return page(
            request,
            "rl_run.html",
            r=report,
            reward=Markup(svg.line_chart(rl.curve(reward), "reward")),
            accuracy=Markup(svg.line_chart(rl.curve(accuracy, "version", "accuracy"), "accuracy")),
            staleness=Markup(svg.bars(rl.staleness_rows(report))),
        )

    @pages.get("/api/docs")
    def api_docs(request: Request) -> HTMLResponse:
        schema = request.app.openapi()
        return page(request, "apidocs.html", paths=schema["paths"])

    return pages
