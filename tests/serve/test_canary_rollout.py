"""Canaries end to end: real router, real replica processes, a real controller loop.

The eval gate's expected answers are the current version's greedy outputs; a version with noise
added to its weights answers otherwise and is rolled back by the gate, the alias unmoved; a good
one is promoted and the alias moves; an alias moved by someone else makes the CAS fail safely.
"""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from shipyard.httpguard.apikeys import hash_key, new_key
from shipyard.serve.deploy.controller import wait_command
from shipyard.serve.deploy.state import Records
from shipyard.serve.models import put_model_dir
from shipyard.workspace import Workspace

from .deploy_support import Running, cli, complete, perturbed, router_fixture  # noqa: F401

PROMPTS = [f"Item {n}: the answer is" for n in range(20)]
KEY = new_key()


def test_canary_rolls_back_a_broken_version_and_promotes_a_good_one(
    shipyard_home: Path, workspace: Workspace, tiny_model: Any, router: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    broken = put_model_dir(
        workspace, perturbed(tiny_model.path, tmp_path / "broken", 0.5), None, source="test:noisy"
    )
    good = put_model_dir(
        workspace, perturbed(tiny_model.path, tmp_path / "good", 1e-5), None, source="test:good"
    )
    items = tmp_path / "gate.jsonl"
    spec = f"""
name: chat
model: tiny
replicas: {{min: 1, max: 2}}
autoscale: {{interval_s: 3600}}
canary: {{stages: [1, 5, 25, 100], hold_s: 0.2}}
eval_gate: {{items: {items}}}
api_keys: ["{hash_key(KEY)}"]
"""
    running = Running(spec, router, shipyard_home)
    try:
        ctrl = running.ctrl
        assert ctrl is not None
        current_pid = ctrl.replicas[ctrl.current][0].pid
        # The spec's API keys hold at the router and at the replicas the controller starts (its
        # eval gate asks them with a key of its own).
        assert complete(router, PROMPTS[0]).status_code == 401
        replica_url = ctrl.replicas[ctrl.current][0].url
        assert complete(replica_url, PROMPTS[0]).status_code == 401
        # The gate's items: what the version in production answers now, through the router
        lines = []
        for prompt in PROMPTS:
            reply = complete(router, prompt, key=KEY)
            assert reply.status_code == 200, reply.text
            lines.append({"prompt": prompt, "expected": reply.json()["choices"][0]["text"],
                          "match": "exact", "max_tokens": 4})  # fmt: skip
        items.write_text("".join(json.dumps(line) + "\n" for line in lines))

        assert cli("rollout", "chat", "--to", broken.id) == 1
        out = capsys.readouterr().out
        assert "stage 1%: fail (eval gate: " in out and "rolled_back" in out
        assert workspace.catalog.get_alias("tiny") == tiny_model.id  # the alias did not move
        assert ctrl.replicas[ctrl.current][0].pid == current_pid  # stayed warm throughout
        assert broken.id[:12] not in ctrl.replicas  # the candidate's replicas are gone
        assert (
            complete(router, PROMPTS[0], key=KEY).json()["choices"][0]["text"]
            == lines[0]["expected"]
        )

        assert cli("rollout", "chat", "--to", good.id) == 0
        out = capsys.readouterr().out
        assert [line.split(":")[0] for line in out.splitlines() if line.startswith("stage")] == [
            "stage 1%", "stage 5%", "stage 25%",
        ]  # fmt: skip
        assert workspace.catalog.get_alias("tiny") == good.id  # moved, by CAS, at 100%
        assert ctrl.current == good.id[:12] and ctrl.previous == tiny_model.id[:12]
        stats = httpx.get(f"{router}/v1/models", timeout=10)
        assert stats.status_code == 200

        assert cli("status", "chat") == 0
        out = capsys.readouterr().out
        assert f"{good.id[:16]} current" in out and f"{tiny_model.id[:16]} previous" in out

        # Back to the warm previous version: the alias moves back by CAS too
        assert cli("rollback", "chat") == 0
        assert workspace.catalog.get_alias("tiny") == tiny_model.id
        assert ctrl.current == tiny_model.id[:12]

        # Someone moves the alias meanwhile: the promotion's CAS fails, nothing is overwritten
        workspace.move_alias("tiny", broken.id)
        assert cli("rollout", "chat", "--to", good.id) == 3
        assert "moved concurrently" in capsys.readouterr().out
        assert workspace.catalog.get_alias("tiny") == broken.id
        assert ctrl.current == tiny_model.id[:12]
        assert (
            complete(router, PROMPTS[1], key=KEY).json()["choices"][0]["text"]
            == lines[1]["expected"]
        )

        # Two rollouts asked at once: the second is refused while the first runs
        records = Records(shipyard_home)
        keys = ["9000000000.000001-a", "9000000000.000002-b"]

        def ask_twice(record: dict[str, Any]) -> None:
            for key in keys:
                record["commands"][key] = {"op": "rollout", "to": good.id, "state": "pending"}

        records.update("chat", ask_twice)
        second = wait_command(records, "chat", keys[1], 60, lambda record: None)
        assert second["exit_code"] == 3 and "already running" in second["message"]
        first = wait_command(records, "chat", keys[0], 120, lambda record: None)
        assert first["exit_code"] == 3  # the alias still points elsewhere: its CAS fails again

        decisions = [
            json.loads(line)
            for line in (shipyard_home / "serve/deployments/chat.decisions.jsonl").open()
        ]
        canary = [d for d in decisions if d["kind"] == "canary"]
        assert {"begin", "fail", "pass", "promote", "rollback", "cas-failed"} <= {
            d["action"] for d in canary
        }
        failed = next(d for d in canary if d["action"] == "fail")
        assert failed["inputs"]["eval"][0]["passed"] < 20 == failed["inputs"]["eval"][1]["passed"]
    finally:
        running.close()
    assert json.loads((shipyard_home / "serve/deployments/chat.json").read_text())["status"] == (
        "stopped"
    )
