"""`shipyard data run CONFIG`, `shipyard data report RUN` and `shipyard data sft`."""

import argparse
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from shipyard.cli.argtypes import count, fraction, integer
from shipyard.cli.progress import stderr
from shipyard.errors import InvalidInput
from shipyard.workspace import Workspace, shipyard_home


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    data = subparsers.add_parser("data", help="crawl-to-tokens data pipeline")
    commands = data.add_subparsers(dest="data_command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a pipeline config (TOML); prints artifact ids")
    run.add_argument("config", type=Path, help="pipeline config, TOML (docs/data.md)")
    run.add_argument("--executor", choices=["local", "ray"], help="override executor.kind")
    run.add_argument("--workers", type=count, help="override executor.workers")
    run.set_defaults(func=_run)

    report = commands.add_parser("report", help="per-stage survival of a run, with drift flags")
    report.add_argument("run", help="run id, unique prefix, or 'latest'")
    report.add_argument("--threshold", type=fraction, default=0.05, help="drift flag threshold")
    report.add_argument("--by", choices=["language", "domain", "crawl"], help="break down by")
    report.add_argument("--json", action="store_true", help="print the raw statistics")
    report.set_defaults(func=_report)

    sft = commands.add_parser(
        "sft", help="SFT data: prompt/response token dataset with a loss mask; prints its id"
    )
    sft.add_argument("--model", required=True, help="model artifact or HF directory (tokenizer)")
    sft.add_argument(
        "--out", required=True, help="alias of the dataset artifact, or a ./ or / directory"
    )
    source = sft.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", type=Path, help='JSONL: {"prompt","response"} or {"messages"}')
    source.add_argument("--reasoning-gym", metavar="TASK", help="reasoning-gym generator")
    source.add_argument("--text", metavar="TABLE", help="data-pipeline table artifact")
    sft.add_argument("--count", type=count, help="examples (reasoning-gym: required)")
    sft.add_argument("--seed", type=integer(0, 1 << 20), default=0, help="reasoning-gym seed")
    sft.add_argument("--where", help="--text: SQL row filter (default: the pipeline's select)")
    sft.add_argument("--max-len", type=integer(2), default=1024, help="longest example, tokens")
    sft.add_argument("--plain", action="store_true", help="prompts as text, no chat template")
    sft.set_defaults(func=_sft)


def _run(args: argparse.Namespace) -> int:
    from shipyard.data import load_config, run_pipeline

    config = load_config(args.config)
    overrides: dict[str, Any] = {}
    if args.executor:
        overrides["kind"] = args.executor
    if args.workers:
        overrides["workers"] = args.workers
    if overrides:
        config = dataclasses.replace(
            config, executor=dataclasses.replace(config.executor, **overrides)
        )
    ws = Workspace.open()
    try:
        result = run_pipeline(config, ws, shipyard_home(), _progress)
    finally:
        ws.close()
    print(f"run        {result.run_id}")
    print(f"table      {result.table_id}")
    if result.tokens_id:
        print(f"tokenizer  {result.tokenizer_id}")
        print(f"tokens     {result.tokens_id}")
    if result.failed_tasks:
        stderr().print(
            f"{len(result.failed_tasks)} task(s) failed: {', '.join(result.failed_tasks)}"
        )
    return 0


def _report(args: argparse.Namespace) -> int:
    from shipyard.data import stats

    home = shipyard_home()
    current = stats.load(home, args.run)
    if args.json:
        print(json.dumps(current, indent=1, sort_keys=True))
        return 0
    before = stats.previous(home, current)
    survival = current["survival"]
    print(f"run {current['run']}  ({current['name']}, {survival['documents']} documents)")
    _print_funnel("all", survival["stages"])
    if args.by:
        for value, rows in survival["by"][args.by].items():
            _print_funnel(f"{args.by}={value or '-'}", rows)
    _print_report_tables(current)
    if before is None:
        print("drift: no earlier run of this pipeline to compare with")
        return 0
    flags = stats.drift(current, before, args.threshold)
    print(f"drift against {before['run']} (threshold {args.threshold}):")
    for flag in flags:
        print(f"  FLAG {flag}")
    if not flags:
        print("  none")
    return 0


def _sft(args: argparse.Namespace) -> int:
    from shipyard.data import sft

    source: sft.Source
    if args.where and not args.text:
        raise InvalidInput("--where filters --text rows; there is no --text")
    if args.reasoning_gym:
        if not args.count:
            raise InvalidInput("--reasoning-gym needs --count")
        source = sft.GymSource(args.reasoning_gym, args.count, args.seed)
    elif args.input:
        source = sft.JsonlSource(args.input)
    else:
        from shipyard.data.config import SelectConfig

        source = sft.TableSource(args.text, args.where or SelectConfig().where, args.count)
    ws = Workspace.open()
    try:
        built = sft.build(
            ws, args.model, source, args.out, max_len=args.max_len, plain=args.plain, say=_progress
        )
    finally:
        ws.close()
    print(built.artifact.id if built.artifact else built.path)
    return 0


def _print_report_tables(report: dict[str, Any]) -> None:
    """Per-file counts, every quarantined record with its file and offset or number, policy
    drops and timeouts, as tables (reports of older runs lack some of these: skipped)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # file names and reasons come from outside: never markup

    console = Console(width=max(shutil.get_terminal_size().columns, 120), highlight=False)
    memory = report.get("memory", {})
    files = Table(
        "file",
        "seen",
        "kept",
        "filtered",
        "quarantined",
        "unreadable",
        "peak memory",
        title="files",
        box=box.SIMPLE,
        title_justify="left",
    )
    for name, counts in report.get("files", {}).items():
        peak = memory.get(name)
        files.add_row(
            Text(name),
            *(str(counts[k]) for k in ("seen", "kept", "filtered", "quarantined", "unreadable")),
            f"{max(peak.values()) / (1 << 20):.0f} MiB" if peak else "-",
        )
    for name in report.get("failed_tasks", []):
        files.add_row(Text(name), "FAILED", "", "", "", "", "")
    console.print(files)
    rows = report.get("quarantined")
    counts = report["quarantine"]
    by_stage = ", ".join(f"{stage} {n}" for stage, n in sorted(counts.items()))
    print(f"quarantined: {sum(counts.values())}" + (f" ({by_stage})" if counts else ""))
    if rows:
        table = Table("stage", "file", "record", "reason", box=box.SIMPLE)
        for row in rows:
            record = row["doc_id"].removeprefix(row["source"])
            record = f"byte {record[1:]}" if record.startswith("@") else f"#{record[1:]}"
            table.add_row(row["stage"], Text(row["source"]), Text(record), Text(row["reason"]))
        console.print(table)
    policy = report.get("policy", {})
    print(f"dropped by rule: {sum(policy.values())}")
    for rule, dropped in sorted(policy.items()):
        print(f"  {rule:<24} {dropped:>8}")
    timeouts = report.get("timeouts", [])
    print(f"timed out: {len(timeouts)}")
    for row in timeouts:
        print(f"  {row['stage']:<10} {row['doc_id']}")


def _print_funnel(scope: str, rows: list[dict[str, Any]]) -> None:
    print(f"  {scope}")
    for row in rows:
        print(f"    {row['stage']:<18} {row['in']:>8} → {row['out']:>8}  {row['rate']:7.1%}")


def _progress(line: str) -> None:
    stderr().print(line, soft_wrap=True, highlight=False, markup=False)
