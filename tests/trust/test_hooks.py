"""The trust gate at its other doors: a replica's model, a checkpoint import, an S3 store."""

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.trust.conftest import write_policy

from shipyard.errors import Untrusted
from shipyard.serve.models import materialise
from shipyard.store import open_backend
from shipyard.trust.audit import Reader, query
from shipyard.trust.gate import audit_db
from shipyard.trust.signatures import signatures_key
from shipyard.workspace import Workspace

Cli = Callable[..., subprocess.CompletedProcess[str]]
Keys = Callable[..., tuple[Path, Path]]


def test_a_replica_serves_only_what_the_policy_trusts(
    cli: Cli,
    keys: Keys,
    policy_file: Path,
    model_files: Path,
    tmp_path: Path,
    workspace: Workspace,
) -> None:
    private, public = keys("release")
    done = cli("artifact", "put", str(model_files), "--kind", "model", "--name", "prod-llm")
    assert done.returncode == 0, done.stderr
    cache = tmp_path / "cache"
    replica = Reader(service="replica")
    got = materialise(workspace, "prod-llm", cache, reader=replica)  # no policy yet
    write_policy(policy_file, [{"public_key": str(public), "kinds": ["model"], "aliases": ["*"]}])
    # Already in the cache, yet refused: the policy is asked at every start.
    with pytest.raises(Untrusted, match="it is not signed"):
        materialise(workspace, "prod-llm", cache, reader=replica)
    assert cli("trust", "sign", "prod-llm", "--key", str(private)).returncode == 0
    assert materialise(workspace, "prod-llm", cache, reader=replica).path == got.path
    events = query(audit_db(workspace), action="serve")
    assert [(e.outcome, e.service, e.signer) for e in events] == [
        ("allowed", "replica", None),
        ("refused", "replica", None),
        ("allowed", "replica", "release"),
    ]


@pytest.mark.slow  # the import command loads transformers
def test_a_checkpoint_import_refuses_an_unsigned_checkpoint(
    cli: Cli, keys: Keys, policy_file: Path, model_files: Path, tmp_path: Path
) -> None:
    private, public = keys("release")
    write_policy(
        policy_file, [{"public_key": str(public), "kinds": ["checkpoint"], "aliases": ["ckpt"]}]
    )
    done = cli("artifact", "put", str(model_files), "--kind", "checkpoint", "--name", "ckpt")
    assert done.returncode == 0, done.stderr
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    command = ("model", "import", "checkpoint", "ckpt", "--tokenizer", str(tokenizer))
    refused = cli(*command)
    assert refused.returncode == 8, refused.stderr
    assert "checkpoint" in refused.stderr and "it is not signed" in refused.stderr
    # Signed, it passes the gate and fails further on: these files are no checkpoint.
    assert cli("trust", "sign", "ckpt", "--key", str(private)).returncode == 0
    passed = cli(*command)
    assert passed.returncode not in (0, 8), passed.stderr
    events = [json.loads(line) for line in cli("audit", "ls", "--json").stdout.splitlines()]
    assert [(e["action"], e["outcome"]) for e in events] == [
        ("load", "refused"),
        ("load", "allowed"),
    ]


def test_signatures_live_beside_manifests_in_s3(
    cli: Cli,
    keys: Keys,
    policy_file: Path,
    model_files: Path,
    tmp_path: Path,
    s3_store_uri: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHIPYARD_STORE", s3_store_uri)
    private, public = keys("release")
    write_policy(policy_file, [{"public_key": str(public), "kinds": ["*"]}])
    put = cli("artifact", "put", str(model_files), "--kind", "model")
    assert put.returncode == 0, put.stderr
    artifact = put.stdout.split()[-1]
    assert cli("artifact", "get", artifact, str(tmp_path / "a")).returncode == 8
    assert cli("trust", "sign", artifact, "--key", str(private)).returncode == 0
    assert open_backend(s3_store_uri).stat(signatures_key(artifact)) is not None
    done = cli("artifact", "get", artifact, str(tmp_path / "b"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "b" / "config.json").is_file()
