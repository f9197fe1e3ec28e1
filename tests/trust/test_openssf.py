"""OpenSSF model-signing interop, both ways, each side checked by the other's real tool: a model
directory Shipyard signs verifies with `model_signing verify key`, and one `model_signing sign
key` signed verifies with `shipyard trust verify-dir`. Where this runs as root, model_signing runs
without a network (its own namespace), to show key-based signing needs none."""

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from tests.trust.conftest import write_policy

Cli = Callable[..., subprocess.CompletedProcess[str]]

pytest.importorskip("model_signing", reason="pip install model-signing")
pytestmark = pytest.mark.slow  # model_signing's CLI takes seconds to start
TOOL = [str(Path(sys.executable).with_name("model_signing"))]
if os.geteuid() == 0 and shutil.which("unshare"):
    TOOL = ["unshare", "--net", *TOOL]


def model_signing(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOOL, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture
def materialized(cli: Cli, model_files: Path, tmp_path: Path) -> Path:
    """A model directory as `artifact get` writes it."""
    assert (
        cli("artifact", "put", str(model_files), "--kind", "model", "--name", "m").returncode == 0
    )
    dest = tmp_path / "model"
    done = cli("artifact", "get", "m", str(dest))
    assert done.returncode == 0, done.stderr
    return dest


def test_a_directory_shipyard_signs_verifies_with_model_signing(
    cli: Cli, materialized: Path, shipyard_home: Path, tmp_path: Path
) -> None:
    key = shipyard_home / "keys" / "release"
    assert cli("trust", "keygen", str(key), "--algorithm", "ecdsa-p256").returncode == 0
    signed = cli("trust", "sign-dir", str(materialized), "--key", str(key))
    assert signed.returncode == 0, signed.stderr
    signature = materialized / "model.sig"
    public = f"{key}.pub"
    verify = ("verify", "key", str(materialized), "--signature", str(signature))
    done = model_signing(*verify, "--public_key", public)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verification succeeded" in done.stdout
    # Their verifier refuses a changed file and another key, as it should.
    other = shipyard_home / "keys" / "other"
    assert cli("trust", "keygen", str(other), "--algorithm", "ecdsa-p256").returncode == 0
    assert model_signing(*verify, "--public_key", f"{other}.pub").returncode != 0
    (materialized / "config.json").write_text('{"architectures": ["Evil"]}')
    assert model_signing(*verify, "--public_key", public).returncode != 0


def test_a_directory_model_signing_signs_verifies_with_shipyard(
    cli: Cli, materialized: Path, tmp_path: Path, policy_file: Path
) -> None:
    keys = tmp_path / "theirs"
    keys.mkdir(mode=0o700)
    private = ec.generate_private_key(ec.SECP256R1())
    (keys / "key.pem").write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (keys / "key.pub").write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    signature = tmp_path / "model.sig"
    done = model_signing(
        "sign", "key", str(materialized), "--signature", str(signature),
        "--private_key", str(keys / "key.pem"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    check = ("trust", "verify-dir", str(materialized), "--signature", str(signature))
    ok = cli(*check, "--key", str(keys / "key.pub"))
    assert ok.returncode == 0, ok.stderr
    assert "verified" in ok.stdout
    # With no --key, the policy's ECDSA signers of models are the candidates.
    signer = {"name": "theirs", "public_key": str(keys / "key.pub")}
    write_policy(policy_file, [signer | {"kinds": ["dataset"]}])
    not_for_models = cli(*check)
    assert not_for_models.returncode == 8 and "no ECDSA P-256 signer" in not_for_models.stderr
    write_policy(policy_file, [signer | {"kinds": ["model"]}])
    by_policy = cli(*check)
    assert by_policy.returncode == 0 and "signed by theirs" in by_policy.stdout, by_policy.stderr
    stranger = tmp_path / "stranger.pub"
    stranger.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    wrong_key = cli(*check, "--key", str(stranger))
    assert wrong_key.returncode == 8 and "fails" in wrong_key.stderr
    (materialized / "model.safetensors").write_bytes(b"tampered")
    tampered = cli(*check, "--key", str(keys / "key.pub"))
    assert tampered.returncode == 8, tampered.stderr
    assert len(tampered.stderr.strip().splitlines()) == 1 and "Traceback" not in tampered.stderr
    signature.write_bytes(b"not a bundle")
    garbage = cli(*check, "--key", str(keys / "key.pub"))
    assert garbage.returncode == 8 and "Traceback" not in garbage.stderr, garbage.stderr


def test_sign_dir_and_verify_dir_want_an_ecdsa_key(
    cli: Cli, materialized: Path, shipyard_home: Path
) -> None:
    key = shipyard_home / "keys" / "ed"
    assert cli("trust", "keygen", str(key)).returncode == 0
    done = cli("trust", "sign-dir", str(materialized), "--key", str(key))
    assert done.returncode == 2 and "needs an ECDSA P-256 key" in done.stderr
    done = cli("trust", "verify-dir", str(materialized), "--key", f"{key}.pub")
    assert done.returncode == 2 and "needs an ECDSA P-256 key" in done.stderr
    no_policy = cli("trust", "verify-dir", str(materialized))
    assert no_policy.returncode == 2 and "give the signer's --key" in no_policy.stderr
