"""Shipyard's main job on embedded defaults, end to end (`shipyard demo`).

Runs the Common Crawl excerpt vendored in `data/crawl` (see `data/README.md`) through the data
pipeline into token shards, trains a small model on them with one injected rank kill, registers
it as `demo-trained`; stores a generated safetensors model with lineage to a generated dataset as
`demo-model`, materializes and verifies it; pulls the trained model onto three local peers; and
prints the trained model's lineage back to the crawl.
"""

import json
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from shipyard.cli.alias import render_lineage
from shipyard.data.demo import crawl_to_tokens
from shipyard.distribute.local import pull_to_local_peers
from shipyard.errors import IntegrityError
from shipyard.train.demo import train_demo
from shipyard.workspace import Workspace

DEMO_ALIAS = "demo-model"


def make_dataset(root: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    words = ["ship", "yard", "token", "model", "data", "weight", "shard", "piece", "train"]
    root.mkdir(parents=True)
    for shard in range(2):
        with open(root / f"shard-{shard:05d}.jsonl", "w") as out:
            for doc in range(200):
                text = " ".join(rng.choice(words, size=int(rng.integers(20, 80))))
                out.write(json.dumps({"id": f"{shard}-{doc}", "text": text}) + "\n")


def make_model(root: Path, seed: int) -> None:
    """A tiny two-file safetensors checkpoint with a config, shaped like a HF model directory."""
    rng = np.random.default_rng(seed)
    d, v = 128, 512
    config = {"model_type": "demo-gpt", "vocab_size": v, "d_model": d, "n_layers": 2}
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config, indent=2))
    for index in range(2):
        tensors = {
            f"layers.{index}.attn.qkv.weight": rng.standard_normal((3 * d, d), dtype=np.float32),
            f"layers.{index}.mlp.up.weight": rng.standard_normal((4 * d, d), dtype=np.float32),
            f"layers.{index}.mlp.down.weight": rng.standard_normal((d, 4 * d), dtype=np.float32),
        }
        if index == 0:
            tensors["embed.weight"] = rng.standard_normal((v, d), dtype=np.float32)
        save_file(tensors, str(root / f"model-{index + 1:05d}-of-00002.safetensors"))


def run_demo(seed: int) -> None:
    """Run the main job end to end, printing each step."""
    ws = Workspace.open()
    with tempfile.TemporaryDirectory(prefix="shipyard-demo-") as tmp:
        work = Path(tmp)
        make_dataset(work / "dataset", seed)
        make_model(work / "model", seed)
        dataset = ws.put(work / "dataset", "dataset", name="demo-dataset")
        print(f"dataset   {dataset.id}  ({dataset.size:,} bytes)")
        tokens = crawl_to_tokens(ws)  # the vendored crawl excerpt → token shards
        trained = train_demo(ws, tokens, seed)  # one injected failure → demo-trained
        model = ws.put(work / "model", "model", inputs=[dataset.id, *tokens], piece_size=1 << 20)
        print(f"model     {model.id}  ({model.size:,} bytes, {model.file_count} files)")
        ws.move_alias(DEMO_ALIAS, model.id)
        print(f"alias     {DEMO_ALIAS} → {model.id[:16]}")
        ws.get(DEMO_ALIAS, work / "materialized")
        problems = ws.verify(DEMO_ALIAS)
        if problems:
            raise IntegrityError("; ".join(map(str, problems)))
        print(f"verified  {model.file_count} files materialized at a fresh path, every piece ok")
        origin = ws.pieces.backend.uri
        for (host, port), got in pull_to_local_peers(origin, trained, work / "peers"):
            print(
                f"peer      {host}:{port} pulled {got.wanted_bytes:,} bytes: "
                f"{got.bytes_from_peers:,} from peers, {got.bytes_from_origin:,} from the origin"
            )
    print("lineage of the trained model:")
    for line in render_lineage(ws, trained, ws.catalog.lineage(trained, "up"), "up"):
        print("  " + line)
