"""`shipyard rl run CONFIG`: GRPO post-training with rollout workers and a reward service."""

import argparse
import json
import sys
from pathlib import Path

from shipyard.errors import InvalidInput


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    rl = subparsers.add_parser("rl", help="RL post-training (GRPO, async rollouts, rewards)")
    commands = rl.add_subparsers(dest="rl_command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="warm up, then train with GRPO; print the report")
    run.add_argument("config", metavar="CONFIG", help="a .yaml/.yml or .json RL config")
    run.add_argument(
        "--resume", action="store_true", help="continue from the run's last checkpoint if any"
    )
    run.add_argument("--report", metavar="FILE", help="also write the JSON report here")
    run.add_argument(
        "--metrics-listen", metavar="HOST:PORT", help="serve GET /metrics on loopback meanwhile"
    )
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from shipyard.home import shipyard_home
    from shipyard.rl import Controller, load_config, report
    from shipyard.rl.report import reports_dir, serve_metrics

    cfg = load_config(args.config)
    if args.report and not Path(args.report).parent.is_dir():
        raise InvalidInput(f"--report {args.report}: its directory does not exist")

    def progress(controller: Controller, event: str) -> None:
        if event == "step":
            last = controller.counters.history[-1]
            print(
                f"version {last['version']}/{cfg.trainer.steps}: reward {last['reward']:.3f}, "
                f"length {last['length']:.1f}, staleness {last['staleness']}, "
                f"importance ratio p99 {last['importance_ratio_p99']:.3f}",
                file=sys.stderr,
            )

    controller = Controller(cfg, hook=progress)
    server = None
    try:
        print(f"rl {cfg.name}: warm-up ({cfg.warmup.steps} steps) ...", file=sys.stderr)
        controller.prepare(resume=args.resume)
        if args.metrics_listen:
            server = serve_metrics(controller, args.metrics_listen, shipyard_home())
            print(f"metrics on http://{args.metrics_listen}/metrics", file=sys.stderr)
        controller.run()
    finally:
        controller.close()
        if server is not None:
            server.stop()
    text = json.dumps(report(controller), indent=2) + "\n"
    kept = reports_dir(shipyard_home()) / f"{cfg.name}.json"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(text)  # for `shipyard ui`
    if args.report:
        Path(args.report).write_text(text)
    print(text, end="")
    return 0
