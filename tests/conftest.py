"""Fixtures shared by every subsystem's tests."""

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from shipyard.workspace import Workspace

if TYPE_CHECKING:
    from shipyard.db.cluster import Cluster

# Property-based tests: a bounded number of examples in the suite; `benchmarks/fuzz.py` runs the
# `fuzz`-marked ones long under the `fuzz` profile (`--hypothesis-profile=fuzz`), with fresh seeds.
settings.register_profile("suite", max_examples=100, deadline=None)
settings.register_profile("fuzz", max_examples=10_000, deadline=None)
settings.load_profile("suite")  # `--hypothesis-profile` chooses another, after this file loads


@pytest.fixture
def shipyard_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh `$SHIPYARD_HOME` for this test (also seen by CLI subprocesses it starts)."""
    home = tmp_path / "home"
    monkeypatch.setenv("SHIPYARD_HOME", str(home))
    monkeypatch.delenv("SHIPYARD_STORE", raising=False)
    monkeypatch.delenv("SHIPYARD_CATALOG", raising=False)
    return home


@pytest.fixture
def workspace(shipyard_home: Path) -> Iterator[Workspace]:
    ws = Workspace.open(shipyard_home)
    yield ws
    ws.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3-compatible server (moto's standalone server) on loopback, for the whole session."""
    if (
        shutil.which("moto_server") is None
        and not Path(sys.executable).with_name("moto_server").exists()
    ):
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    port = free_port()
    server = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("moto_server did not start within 30 s")
    yield endpoint
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def s3_store_uri(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the loopback S3 server, as a store URI."""
    import boto3

    for key, value in S3_TEST_CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/store?endpoint={s3_endpoint}"


S3_TEST_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def run_cli(
    *args: str, check: bool = False, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the real `shipyard` command in a subprocess with this test's environment."""
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
        env=os.environ.copy(),
    )


@pytest.fixture
def cli(shipyard_home: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`cli("artifact", "ls")` runs the real command against this test's `$SHIPYARD_HOME`."""
    return run_cli


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator["Cluster"]:
    """A throwaway PostgreSQL cluster (Debian's `postgresql` package) for the whole session.

    Skipped only where it cannot be had: the server is not installed and this is not root (as
    root, `scripts/setup.sh` installs it, so its absence is a failure, not a skip)."""
    from shipyard.db.cluster import Cluster, find_bindir

    if find_bindir() is None:
        if os.geteuid() != 0:
            pytest.skip("PostgreSQL is not installed (apt-get install postgresql) and not root")
        pytest.fail("PostgreSQL is not installed: run scripts/setup.sh as root")
    pytest.importorskip("psycopg", reason="psycopg is missing: pip install shipyard[postgres]")
    cluster = Cluster(durable=False)  # tests check correctness, not crash safety: no fsync
    yield cluster
    cluster.remove()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each backend: every test that takes it runs on both."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'shipyard.db'}"
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    return cluster.create_database()


# Tiny language models for the serving, evals and RL tests: SmolLM2's real tokenizer over a
# random 2-layer Llama, so tokenisation and chat templates are real and a forward pass is cheap.

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture(scope="session")
def smol_tokenizer_dir(request: pytest.FixtureRequest) -> Path:
    """SmolLM2's tokenizer as an HF directory (6 s to read from the GGUF, once per machine)."""
    cache = Path(request.config.cache.mkdir("serve-smollm2-tokenizer"))
    if not (cache / "complete").is_file():
        from transformers import AutoTokenizer

        from shipyard.serve.model_import import smollm2_source

        package, gguf = smollm2_source()
        AutoTokenizer.from_pretrained(package, gguf_file=gguf).save_pretrained(cache)
        (cache / "complete").write_text("ok\n")
    return cache


def build_tiny_llama(dest: Path, tokenizer_dir: Path, seed: int = 0, layers: int = 2) -> Path:
    """A random Llama (hidden 32) over SmolLM2's vocabulary, saved with its tokenizer.

    A wide initialiser spreads the logits, so greedy choices are far from ties and batched and
    unbatched arithmetic agree on them.
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id
    )
    model.save_pretrained(dest)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, dest / name)
    return dest


@pytest.fixture(scope="session")
def tiny_llama_dirs(
    smol_tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[int], Path]:
    """`tiny_llama_dirs(seed)`: the HF directory of the tiny model with that seed (built once)."""
    made: dict[int, Path] = {}

    def get(seed: int) -> Path:
        if seed not in made:
            dest = tmp_path_factory.mktemp(f"tiny-llama-{seed}")
            made[seed] = build_tiny_llama(dest, smol_tokenizer_dir, seed)
        return made[seed]

    return get
