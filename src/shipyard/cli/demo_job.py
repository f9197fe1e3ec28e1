"""The model lifecycle loop on embedded defaults, end to end (`shipyard demo`).

Runs the Common Crawl excerpt vendored in `data/crawl` (see `data/README.md`) through the data
pipeline into token shards; pre-trains the small GPT on them with one injected rank kill; makes
the model to serve (SmolLM2-135M-Instruct, or with `--quick` the pre-trained GPT) the alias
`demo-model`; pulls it onto local peers; deploys it behind the router; asks it one OpenAI-API
request; prints the answer's lineage and a summary of the phases with their wall times.
"""

import tempfile
from contextlib import ExitStack
from pathlib import Path

from shipyard.data.demo import crawl_to_tokens
from shipyard.distribute.local import pull_to_local_peers
from shipyard.errors import ShipyardError
from shipyard.home import shipyard_home
from shipyard.lifecycle_demo import models
from shipyard.lifecycle_demo.clock import PhaseClock
from shipyard.train.demo import train_demo
from shipyard.workspace import Workspace

DEMO_ALIAS = "demo-model"  # the model the demo's deployment serves
DEPLOYMENT = "demo"
PROMPT = "What is a shipyard?"


def run_demo(seed: int, quick: bool = False) -> None:
    """Run the loop end to end, printing each step, then the summary."""
    from shipyard.lifecycle_demo.serving import answer_lineage, ask, deployment

    ws = Workspace.open()
    clock = PhaseClock()
    with tempfile.TemporaryDirectory(prefix="shipyard-demo-") as tmp:
        work = Path(tmp)
        with clock.phase("crawl → tokens") as done:
            tokens = crawl_to_tokens(ws)  # the vendored crawl excerpt → token shards
            done.append(f"dataset {tokens[0][:16]}" if tokens else "no crawl: synthetic tokens")
        with clock.phase("pre-train") as done:
            trained = train_demo(ws, tokens, seed)  # one injected rank kill → demo-trained
            done.append(f"model {trained[:16]} (demo-trained), rank 1 killed once")
        if not tokens and quick:
            raise ShipyardError("demo --quick serves the crawl-trained model: it needs the crawl")
        with clock.phase("model") as done:
            if quick:
                served = models.trained_gpt(ws, trained, "demo-tokenizer", work)
            else:
                served = models.smollm2(ws)
            ws.move_alias(DEMO_ALIAS, served, expect=None)
            what = "the pre-trained GPT as GPT-2" if quick else "SmolLM2-135M-Instruct"
            done.append(f"{what} {served[:16]} ({DEMO_ALIAS})")
        with clock.phase("P2P pull") as done:
            pulled = pull_to_local_peers(ws.pieces.backend.uri, served, work / "peers")
            for (host, port), got in pulled:
                print(
                    f"peer      {host}:{port} pulled {got.wanted_bytes:,} bytes: "
                    f"{got.bytes_from_peers:,} from peers, {got.bytes_from_origin:,} from origin"
                )
            from_peers = sum(got.bytes_from_peers for _, got in pulled)
            total = sum(got.wanted_bytes for _, got in pulled)
            done.append(
                f"{len(pulled)} peers, {from_peers / max(total, 1):.0%} of bytes peer-to-peer"
            )
        with ExitStack() as serving:
            with clock.phase("deploy") as done:
                router, ctrl = serving.enter_context(
                    deployment(shipyard_home(), DEPLOYMENT, DEMO_ALIAS)
                )
                done.append(f"{DEPLOYMENT}: {ctrl.count()} replica of {ctrl.current} at {router}")
            with clock.phase("request") as done:
                answer = ask(router, DEPLOYMENT, PROMPT, chat=not quick)
                done.append(f"request {answer.request_id} answered by {answer.version}")
            print(f"answer    {answer.text!r}")
            print(f"          request id {answer.request_id}, version {answer.version}")
    print(f"lineage of the answer ({answer.request_id}):")
    for line in answer_lineage(ws, shipyard_home(), answer.request_id):
        print("  " + line)
    print()
    for line in clock.summary():
        print(line)
