"""`artifact get` through the trust policy, and the audit events each read leaves, end to end
through the real `shipyard` command."""

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.trust.conftest import write_policy

from shipyard.store import open_backend
from shipyard.trust.signatures import read_signatures, signatures_key

Cli = Callable[..., subprocess.CompletedProcess[str]]
Keys = Callable[..., tuple[Path, Path]]


def put(cli: Cli, source: Path, *args: str) -> str:
    done = cli("artifact", "put", str(source), "--kind", "model", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def audit(cli: Cli, *args: str) -> list[dict[str, object]]:
    done = cli("audit", "ls", "--json", *args)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def refused(done: subprocess.CompletedProcess[str], words: str) -> None:
    assert done.returncode == 8, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: ") and words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_without_a_policy_reads_are_as_before_and_audited(
    cli: Cli, model_files: Path, tmp_path: Path
) -> None:
    artifact = put(cli, model_files, "--name", "prod-llm")
    done = cli("artifact", "get", "prod-llm", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    [event] = audit(cli)
    assert event["artifact_id"] == artifact and event["action"] == "get"
    assert event["outcome"] == "allowed" and event["ref"] == "prod-llm"
    assert event["kind"] == "model" and event["detail"] == "no trust policy"
    assert event["host"] and event["pid"] and event["user_name"]


def test_require_refuses_unsigned_and_leaves_dest_alone(
    cli: Cli, keys: Keys, policy_file: Path, model_files: Path, tmp_path: Path
) -> None:
    _, public = keys("release")
    write_policy(policy_file, [{"name": "release", "public_key": str(public), "kinds": ["*"]}])
    artifact = put(cli, model_files, "--name", "prod-llm")
    dest = tmp_path / "out"
    refused(cli("artifact", "get", "prod-llm", str(dest)), "it is not signed")
    assert not dest.exists()
    [event] = audit(cli, "--outcome", "refused")
    assert event["artifact_id"] == artifact and event["outcome"] == "refused"


def test_a_signed_artifact_is_read_by_id_and_by_its_signed_alias(
    cli: Cli, keys: Keys, policy_file: Path, model_files: Path, tmp_path: Path
) -> None:
    private, public = keys("release")
    write_policy(
        policy_file,
        [{"name": "release", "public_key": str(public), "kinds": ["model"], "aliases": ["prod-*"]}],
    )
    artifact = put(cli, model_files, "--name", "prod-llm")
    signed = cli("trust", "sign", "prod-llm", "--key", str(private))
    assert signed.returncode == 0, signed.stderr
    for n, ref in enumerate(["prod-llm", artifact]):
        done = cli("artifact", "get", ref, str(tmp_path / f"out{n}"))
        assert done.returncode == 0, done.stderr
        assert (tmp_path / f"out{n}" / "config.json").is_file()
    events = audit(cli, "--artifact", "prod-llm")
    assert [e["signer"] for e in events] == ["release", "release"]
    verdict = cli("trust", "verify", "prod-llm")
    assert verdict.returncode == 0 and "trusted, signed by 'release'" in verdict.stdout


def test_an_alias_the_signer_did_not_vouch_for_is_refused(
    cli: Cli, keys: Keys, policy_file: Path, model_files: Path, tmp_path: Path
) -> None:
    private, public = keys("release")
    write_policy(
        policy_file,
        [{"name": "release", "public_key": str(public), "kinds": ["model"], "aliases": ["prod-*"]}],
    )
    artifact = put(cli, model_files, "--name", "prod-llm")
    assert cli("trust", "sign", artifact, "--key", str(private)).returncode == 0
    # Signed by id only: the alias is not vouched for, though the id reads.
    refused(cli("artifact", "get", "prod-llm", str(tmp_path / "a")), "did not sign alias")
    assert cli("artifact", "get", artifact, str(tmp_path / "b")).returncode == 0
    # An alias outside the key's patterns is refused even when the signer names it.
    assert cli("alias", "set", "dev-llm", artifact).returncode == 0
    signed = cli("trust", "sign", "dev-llm", "--key", str(private))
    assert signed.returncode == 0, signed.stderr
    refused(cli("artifact", "get", "dev-llm", str(tmp_path / "c")), "may not sign alias")


def test_a_key_not_allowed_for_the_kind_or_not_listed_is_refused(
    cli: Cli, keys: Keys, policy_file: Path, model_files: Path, tmp_path: Path
) -> None:
    private, public = keys("data")
    stranger, _ = keys("stranger")
    write_policy(policy_file, [{"name": "data", "public_key": str(public), "kinds": ["dataset"]}])
    artifact = put(cli, model_files)
    assert cli("trust", "sign", artifact, "--key", str(private)).returncode == 0
    refused(cli("artifact", "get", artifact, str(tmp_path / "a")), "may not sign kind 'model'")
    other = put(cli, model_files, "--metadata", '{"v": 2}')
    assert cli("trust", "sign", other, "--key", str(stranger)).returncode == 0
    refused(cli("artifact", "get", other, str(tmp_path / "b")), "no key the policy lists")


def test_a_copied_or_altered_signature_is_refused_even_under_warn(
    cli: Cli, keys: Keys, policy_file: Path, model_files: Path, tmp_path: Path, shipyard_home: Path
) -> None:
    private, public = keys("release")
    write_policy(policy_file, [{"public_key": str(public), "kinds": ["*"]}], "warn")
    good = put(cli, model_files)
    assert cli("trust", "sign", good, "--key", str(private)).returncode == 0
    # A tampered artifact (other bytes, so another id) wearing the good one's signature.
    (model_files / "config.json").write_text('{"architectures": ["Evil"]}')
    evil = put(cli, model_files)
    backend = open_backend(str(shipyard_home / "store"))
    stolen = read_signatures(backend, good)
    assert stolen is not None
    backend.put(signatures_key(evil), stolen)
    refused(cli("artifact", "get", evil, str(tmp_path / "a")), f"is for model {good}")
    # The good artifact's own signature with one byte of the signature changed.
    data = json.loads(stolen)
    raw = data[0]["signature"]
    data[0]["signature"] = ("B" if raw[0] != "B" else "C") + raw[1:]
    altered = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    backend.put(signatures_key(good), altered)
    refused(cli("artifact", "get", good, str(tmp_path / "b")), "does not verify")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_warn_reads_unsigned_with_a_warning_and_audits_it(
    cli: Cli, keys: Keys, policy_file: Path, model_files: Path, tmp_path: Path
) -> None:
    _, public = keys("release")
    write_policy(policy_file, [{"public_key": str(public), "kinds": ["*"]}], "warn")
    put(cli, model_files, "--name", "prod-llm")
    done = cli("artifact", "get", "prod-llm", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "warning: model" in done.stderr and "it is not signed" in done.stderr
    [event] = audit(cli)
    assert event["outcome"] == "warned"


def test_audit_filters_and_show(cli: Cli, model_files: Path, tmp_path: Path) -> None:
    first = put(cli, model_files, "--name", "one")
    (model_files / "extra.txt").write_text("2")
    second = put(cli, model_files, "--name", "two")
    for n, ref in enumerate(["one", "two", "one"]):
        assert cli("artifact", "get", ref, str(tmp_path / f"o{n}")).returncode == 0
    assert [e["artifact_id"] for e in audit(cli, "--artifact", first)] == [first, first]
    assert [e["artifact_id"] for e in audit(cli, "--artifact", "two")] == [second]
    assert len(audit(cli, "--since", "1h")) == 3
    assert audit(cli, "--since", "2999-01-01") == []
    assert audit(cli, "--user", "nobody-at-all") == []
    assert len(audit(cli, "--limit", "2")) == 2
    event = audit(cli)[0]
    shown = cli("audit", "show", str(event["id"]))
    assert shown.returncode == 0 and f"artifact_id: {first}" in shown.stdout
    missing = cli("audit", "show", "999999")
    assert missing.returncode == 4 and "no audit event 999999" in missing.stderr
    bad = cli("audit", "ls", "--since", "yesterday-ish")
    assert bad.returncode == 2 and "--since 'yesterday-ish'" in bad.stderr


@pytest.mark.parametrize("algorithm", ["ed25519", "ecdsa-p256"])
def test_keygen_writes_a_private_key_only_its_owner_reads(
    cli: Cli, shipyard_home: Path, algorithm: str
) -> None:
    key = shipyard_home / "keys" / "k"
    done = cli("trust", "keygen", str(key), "--algorithm", algorithm)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sha256:")
    assert key.stat().st_mode & 0o777 == 0o600 and (key.parent / "k.pub").is_file()
    again = cli("trust", "keygen", str(key))
    assert again.returncode == 2 and "exists" in again.stderr
    key.chmod(0o644)
    signed = cli("trust", "sign", "whatever", "--key", str(key))
    assert signed.returncode == 6 and "signing key" in signed.stderr
