"""The model lifecycle loop on embedded defaults, end to end (`shipyard demo`).

Full: the Common Crawl excerpt vendored in `data/crawl` (see `data/README.md`) → token shards →
the small GPT pre-trained on them with one rank killed → SmolLM2-135M-Instruct imported as
`demo-model` and deployed behind the router → SFT data from the crawl's text → a LoRA fine-tune
of SmolLM2 with one rank killed, every checkpoint evaluated, gated against the deployed model
and the newest that passed rolled out by canary → the served model pulled onto local peers → one
OpenAI-API chat request → the answer's lineage back to the crawl and the SFT data.

`--quick` (docs/demo.md): the untrained small GPT is deployed instead of SmolLM2, and its
pre-training run (rank killed) is the one whose checkpoints are evaluated, gated and rolled out;
no SFT data, no fine-tune, and a plain completion instead of a chat request.
"""

import dataclasses
import statistics
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from shipyard.data.demo import crawl_sft, crawl_to_tokens
from shipyard.distribute.local import pull_to_local_peers
from shipyard.errors import ShipyardError
from shipyard.home import shipyard_home
from shipyard.lifecycle_demo import models
from shipyard.lifecycle_demo.clock import PhaseClock
from shipyard.lifecycle_demo.timeline import measure
from shipyard.train.config import TrainConfig
from shipyard.train.demo import demo_config, finetune_config, train_demo
from shipyard.workspace import Workspace

if TYPE_CHECKING:
    from shipyard.lifecycle_demo.loop import Outcome

DEMO_ALIAS = "demo-model"  # the model the demo's deployment serves
DEPLOYMENT = "demo"
PROMPT = "What is a shipyard?"


def hooked(cfg: TrainConfig, task: str) -> TrainConfig:
    """`cfg` with `task` evaluated on every checkpoint and the passing ones rolled out to the
    demo's deployment (a drop of at most 5 points is tolerated: the eval is small)."""
    evals = dataclasses.replace(cfg.evals, fast=(task,))
    deploy = dataclasses.replace(cfg.deploy, deployment=DEPLOYMENT, max_drop=0.05)
    return dataclasses.replace(cfg, evals=evals, deploy=deploy)


def _loop_outcome(home: Path, outcome: "Outcome") -> str:
    """The training phase's summary: its checkpoints' way to an eval result, the promotion."""
    figures = measure(home, outcome.run_id)
    latencies = [row["commit_to_result"] for row in figures["checkpoints"]]
    said = f"{outcome.run_id}: {outcome.passed}/{len(outcome.checkpoints)} checkpoints passed"
    if latencies:
        said += f", result p50 {statistics.median(latencies):.0f} s after commit"
    said += f"; {outcome.rolled_out[:12]} live"
    promotion = figures["promotion"]
    if promotion:
        said += f" {promotion['promoted_at'] - promotion['gate_at']:.0f} s after its gate"
    return said


def _pull(ws: Workspace, artifact: str, root: Path) -> str:
    """Pull `artifact` from this workspace's store onto three fresh local peers at once."""
    pulled = pull_to_local_peers(ws.pieces.backend.uri, artifact, root)
    for (host, port), got in pulled:
        print(
            f"peer      {host}:{port} pulled {got.wanted_bytes:,} bytes: "
            f"{got.bytes_from_peers:,} from peers, {got.bytes_from_origin:,} from the origin"
        )
    from_peers = sum(got.bytes_from_peers for _, got in pulled)
    total = sum(got.wanted_bytes for _, got in pulled)
    return f"{len(pulled)} peers, {from_peers / max(total, 1):.0%} of the bytes from peers"


def run_demo(seed: int, quick: bool = False) -> None:
    """Run the loop end to end, printing each step, then the summary."""
    from shipyard.lifecycle_demo.loop import demo_task, train_and_roll_out
    from shipyard.lifecycle_demo.serving import answer_lineage, ask, deployment

    home = shipyard_home()
    ws = Workspace.open()
    clock = PhaseClock()
    try:
        with tempfile.TemporaryDirectory(prefix="shipyard-demo-") as tmp, ExitStack() as serving:
            work = Path(tmp)
            with clock.phase("crawl → tokens") as done:
                tokens = crawl_to_tokens(ws)  # the vendored crawl excerpt → token shards
                if not tokens:
                    raise ShipyardError("the demo needs the crawl excerpt (see data/README.md)")
                done.append(f"dataset {tokens[0][:16]} (demo-tokens)")
            pretrain = demo_config(ws, tokens, seed)
            if not quick:
                with clock.phase("pre-train") as done:
                    trained = train_demo(ws, tokens, seed)  # one injected rank kill → demo-trained
                    done.append(f"model {trained[:16]} (demo-trained), rank 1 killed once")
            with clock.phase("base model") as done:
                if quick:
                    base = models.untrained_gpt(ws, pretrain.model, "demo-tokenizer", seed, work)
                else:
                    base = models.smollm2(ws)
                ws.move_alias(DEMO_ALIAS, base, expect=None)
                what = "the untrained GPT" if quick else "SmolLM2-135M-Instruct"
                done.append(f"{what} {base[:16]} ({DEMO_ALIAS})")
            with clock.phase("deploy") as done:
                router, ctrl = serving.enter_context(deployment(home, DEPLOYMENT, DEMO_ALIAS))
                done.append(f"{DEPLOYMENT}: {ctrl.count()} replica of {ctrl.current} at {router}")
            task = demo_task(home)
            if quick:
                cfg = hooked(pretrain, task)  # its final model: demo-trained
            else:
                with clock.phase("SFT data") as done:
                    sft = crawl_sft(ws, base)
                    done.append(f"dataset {sft[:16]} (demo-sft) from the crawl's text")
                cfg = hooked(finetune_config(base, sft, seed), task)
            with clock.phase("train → evals → gate → canary") as done:
                outcome = train_and_roll_out(cfg, 2, print)
                if not outcome.rolled_out:
                    raise ShipyardError(f"nothing was rolled out: {outcome.rollout}")
                done.append(_loop_outcome(home, outcome))
            served = outcome.rolled_out
            with clock.phase("P2P pull") as done:
                done.append(_pull(ws, served, work / "peers"))
            with clock.phase("request") as done:
                answer = ask(router, DEPLOYMENT, PROMPT, chat=not quick)
                done.append(f"request {answer.request_id} answered by {answer.version}")
            print(f"answer    {answer.text!r}")
            print(f"          request id {answer.request_id}, version {answer.version}")
            print(f"lineage of the answer ({answer.request_id}):")
            for line in answer_lineage(ws, home, answer.request_id):
                print("  " + line)
    finally:  # the phases so far, also when one failed
        ws.close()
        print()
        for line in clock.summary():
            print(line)
