"""Keys, trust policies and artifacts for the trust tests."""

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.trust.keys import Algorithm, generate, write_key_pair


def make_key(directory: Path, name: str, algorithm: Algorithm = "ed25519") -> tuple[Path, Path]:
    """A fresh key pair: (private key file, public key file)."""
    private = directory / name
    return private, write_key_pair(generate(algorithm), private)


def write_policy(path: Path, signers: list[dict[str, object]], signatures: str = "require") -> Path:
    """A policy file; each signer's `public_key` is written as given (a path)."""
    lines = [f'signatures = "{signatures}"']
    for signer in signers:
        lines.append("[[signer]]")
        for key, value in signer.items():
            shown = (
                "[" + ", ".join(f'"{v}"' for v in value) + "]"
                if isinstance(value, list)
                else f'"{value}"'
            )
            lines.append(f"{key} = {shown}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def keys(shipyard_home: Path) -> Callable[..., tuple[Path, Path]]:
    """`keys("release")`: a key pair under $SHIPYARD_HOME/keys."""
    directory = shipyard_home / "keys"

    def make(name: str, algorithm: Algorithm = "ed25519") -> tuple[Path, Path]:
        return make_key(directory, name, algorithm)

    return make


@pytest.fixture
def policy_file(shipyard_home: Path) -> Path:
    """Where the default trust policy lives (not yet written)."""
    return shipyard_home / "trust" / "policy.toml"


@pytest.fixture
def model_files(tmp_path: Path) -> Path:
    root = tmp_path / "model-src"
    root.mkdir()
    (root / "model.safetensors").write_bytes(os.urandom(200_000))
    (root / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"]}')
    return root
