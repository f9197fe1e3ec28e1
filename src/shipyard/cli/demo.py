"""`shipyard demo`: the model lifecycle loop on embedded defaults (see `demo_job`).

The job imports the data pipeline, trainer and swarm, so it is imported in the handler, not at
start-up: every other command, the peer daemon among them, stays fast to start.
"""

import argparse

from shipyard.cli.argtypes import seed


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    demo = subparsers.add_parser("demo", help="run the model lifecycle loop on embedded defaults")
    demo.add_argument(
        "--seed", type=seed, default=0, help="seed of the generated data and training (default 0)"
    )
    demo.add_argument(
        "--quick",
        action="store_true",
        help="the loop on the small GPT, not SmolLM2: no SFT data, no fine-tune (docs/demo.md)",
    )
    demo.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from shipyard.cli.demo_job import run_demo

    run_demo(args.seed, quick=args.quick)
    return 0
