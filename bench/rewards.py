"""`rlfh bench rewards`: throughput and latency of the reward service, alignment cost, cache speed-up.

Starts the real Serve app (verifier + reward deployments, embedded Ray) on a free loopback port and
measures, with HaluEval-QA answers (right and hallucinated) as responses and SmolLM2 token offsets
sent by the client (as the trainer does):

1. ``POST /v1/rewards`` at concurrency 1 and 16: responses/s and p50/p99 request latency. Every
   request carries ``--batch`` responses under a fresh question tag, so each is a cache miss and the
   verifier really runs (a bounded number of requests: ``--requests`` per level).
2. The alignment + reward math alone (:func:`reward_service.token_rewards.compute_token_rewards`, no HTTP)
   on responses of 64, 256 and 1,024 tokens: time per call and per token. A constant time per token
   means the cost is linear in the response length.
3. The cache: the same batch twice, first (verifier) vs repeat (cache hit) latency and the speed-up.

Nothing leaves the machine: the service binds 127.0.0.1; Redis is used when ``REDIS_URL`` is set,
the in-process LRU otherwise.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time
import uuid
from typing import Any, Optional

from core.config import RLFHConfig, positive_int
from core.data import load_halueval
from core.help_text import plain_doc
from core.model_loader import load_tokenizer
from core.ports import free_port
from core.ray_bootstrap import start_ray
from core.verify_schema import LABELS, Sentence, Statement, VerifyResult


def add_parser(bsub: argparse._SubParsersAction) -> None:
    p = bsub.add_parser(
        "rewards", help="Reward service: responses/s, p50/p99 latency, alignment cost, cache speed-up.",
        description=plain_doc(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=positive_int, default=32,
                   help="HTTP requests per concurrency level (bounded load; default 32).")
    p.add_argument("--batch", type=positive_int, default=4, help="Responses per /v1/rewards request (default 4).")
    p.add_argument("--concurrency", type=positive_int, nargs="+", default=[1, 16],
                   help="Concurrency levels: requests in flight at once (default: 1 16).")
    p.add_argument("--cache-batch", type=positive_int, default=16,
                   help="Responses per request in the cache speed-up test (default 16).")
    p.add_argument("--align-repeats", type=positive_int, default=200,
                   help="Calls per response length when timing the pure alignment (default 200).")
    p.add_argument("--split", default="test", choices=["train", "dev", "test"],
                   help="HaluEval-QA split the responses come from (default test).")
    p.add_argument("--redis-url", default=None,
                   help="Cache in this Redis (default: REDIS_URL, else the in-process LRU).")
    p.add_argument("--json", default=None, metavar="PATH", help="Also write the results as JSON to PATH.")
    p.set_defaults(func=_cmd)


# ----------------------------------------------------------------------------- data

def _responses(split: str, tokenizer, n: int) -> list[dict[str, Any]]:
    """``n`` reward items from HaluEval: right and hallucinated answers, with token offsets (+ EOS)."""
    qa = load_halueval(split)
    out = []
    for item in qa:
        for ans in (item.right_answer, item.hallucinated_answer):
            if not ans:
                continue
            offs = tokenizer(ans, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            out.append({"question": item.question, "response": ans, "materials": list(item.knowledge),
                        "gold_answer": item.right_answer,
                        "token_offsets": [list(o) for o in offs] + [[len(ans), len(ans)]]})
            if len(out) >= n:
                return out
    return out


def _tagged(items: list[dict], tag: str) -> list[dict]:
    """Copies with a tag in the question: a fresh cache key, same verification work."""
    return [{**it, "question": f"{it['question']} [{tag}]"} for it in items]


# ----------------------------------------------------------------------------- measurements

def _percentile(xs: list[float], q: float) -> float:
    import numpy as np
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def _load(url: str, token: Optional[str], pool: list[dict], concurrency: int, n_requests: int, batch: int,
          progress) -> dict[str, Any]:
    import httpx

    async def run() -> dict[str, Any]:
        lat: list[float] = []
        errors = 0
        sem = asyncio.Semaphore(concurrency)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        task = progress.add_task(f"/v1/rewards  concurrency {concurrency}", total=n_requests)
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300, limits=limits) as client:
            async def one(i: int):
                nonlocal errors
                start = (i * batch) % max(1, len(pool) - batch)
                body = {"items": _tagged(pool[start:start + batch], f"c{concurrency}-{i}-{uuid.uuid4().hex[:8]}")}
                async with sem:
                    t0 = time.perf_counter()
                    r = await client.post("/v1/rewards", json=body)
                    dt = time.perf_counter() - t0
                if r.status_code == 200:
                    lat.append(dt)
                else:
                    errors += 1
                progress.advance(task)

            t0 = time.perf_counter()
            await asyncio.gather(*[one(i) for i in range(n_requests)])
            wall = time.perf_counter() - t0
        return {"concurrency": concurrency, "requests": n_requests, "errors": errors, "wall_s": wall,
                "responses_per_s": len(lat) * batch / wall if wall else 0.0,
                "requests_per_s": len(lat) / wall if wall else 0.0,
                "p50_ms": _percentile(lat, 50) * 1000, "p99_ms": _percentile(lat, 99) * 1000}

    return asyncio.run(run())


def _alignment(repeats: int, lengths=(64, 256, 1024)) -> list[dict[str, Any]]:
    """Time compute_token_rewards on synthetic responses of ``lengths`` tokens (a statement per 8 tokens)."""
    import numpy as np

    from reward_service.token_rewards import RewardSettings, compute_token_rewards, validate_offsets

    settings = RewardSettings.from_config(RLFHConfig.load(environ={}))
    rows = []
    for n_tok in lengths:
        words = [f"word{i % 50}" for i in range(n_tok - 1)]
        text = " ".join(words)
        offs, pos = [], 0
        for w in words:
            offs.append((pos, pos + len(w)))
            pos += len(w) + 1
        offs.append((len(text), len(text)))                        # EOS
        sents = []
        for s0 in range(0, len(words), 16):                        # 16 tokens per sentence, 2 statements each
            a, b = offs[s0][0], offs[min(s0 + 15, len(words) - 1)][1]
            mid = offs[min(s0 + 7, len(words) - 1)][1]
            sts = [Statement(text="s", start=a, end=mid, label=LABELS[(s0 // 16) % 5], informativeness=4),
                   Statement(text="t", start=min(mid + 1, b), end=b, label="Correct", informativeness=3)]
            sents.append(Sentence(text=text[a:b], start=a, end=b, statements=sts))
        res = VerifyResult(sentences=sents)
        off = validate_offsets(offs, len(text))
        compute_token_rewards(res, off, len(text), settings, validated=True)      # warm-up
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            compute_token_rewards(res, off, len(text), settings, validated=True)
            times.append(time.perf_counter() - t0)
        med = float(np.median(times))
        n_st = sum(len(s.statements) for s in sents)
        rows.append({"tokens": n_tok, "statements": n_st, "us_per_call": med * 1e6,
                     "ns_per_token": med * 1e9 / n_tok})
    return rows


def _cache_speedup(url: str, token: Optional[str], pool: list[dict], batch: int, rounds: int = 5) -> dict[str, Any]:
    import httpx
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    first, repeat = [], []
    with httpx.Client(base_url=url, headers=headers, timeout=300) as c:
        for r in range(rounds):
            body = {"items": _tagged(pool[r * batch:(r + 1) * batch], f"cache-{uuid.uuid4().hex[:8]}")}
            t0 = time.perf_counter()
            a = c.post("/v1/rewards", json=body)
            first.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = c.post("/v1/rewards", json=body)
            repeat.append(time.perf_counter() - t0)
            assert a.status_code == 200 and b.status_code == 200, (a.text[:300], b.text[:300])
            assert b.json()["num_cached"] == len(body["items"]), "repeat request was not served from the cache"
    f, rp = _percentile(first, 50) * 1000, _percentile(repeat, 50) * 1000
    return {"batch": batch, "rounds": rounds, "first_ms": f, "repeat_ms": rp, "speedup": f / rp if rp else 0.0}


# ----------------------------------------------------------------------------- command

def _cmd(args: argparse.Namespace) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")   # (start_ray sets the local Ray defaults)
    from rich.console import Console

    console = Console()
    redis_url = args.redis_url if args.redis_url is not None else os.environ.get("REDIS_URL", "")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    cfg = RLFHConfig.load(redis_url=redis_url, max_batch_items=max(args.batch, args.cache_batch, 8), ray_address="")
    tokenizer = load_tokenizer(cfg.reward_tokenizer or cfg.model_path)
    need = max(args.batch * (args.requests + 8), args.cache_batch * 6)
    pool = _responses(args.split, tokenizer, min(need, 2000))
    console.print(f"[bold]rlfh bench rewards[/]: {len(pool)} HaluEval-{args.split} responses, "
                  f"batch {args.batch}, {args.requests} requests per level, cache "
                  f"{'Redis' if redis_url else 'in-process LRU'}, verifier {cfg.verifier_backend}")

    align = _alignment(args.align_repeats)
    results: dict[str, Any] = {"alignment": align}
    results.update(_measure_service(cfg, args, pool, console))
    _print_load(console, args.batch, results["load"])
    _print_alignment(console, align, args.align_repeats)
    _print_cache(console, results["cache"], results["deploy_s"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
        console.print(f"results written to {args.json}")
    return 0


def _measure_service(cfg, args: argparse.Namespace, pool: list[dict], console) -> dict[str, Any]:
    """Deploy the reward service on a local Ray, warm it up, then measure ``/v1/rewards`` under each of
    ``args.concurrency`` (:func:`_load`) and the cache's speed-up (:func:`_cache_speedup`); Serve shut down after
    (and Ray, when this started it). Returns ``{"deploy_s", "load": [row per level], "cache"}``."""
    import httpx
    import ray
    from ray import serve
    from rich.progress import Progress

    from reward_service.app import deploy   # imports Ray Serve and FastAPI

    started_ray = not ray.is_initialized()
    handle = start_ray(cfg, num_cpus=max(2.0, float(os.cpu_count() or 2)), include_dashboard=False)
    results: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        url = deploy(cfg, "127.0.0.1", free_port())
        results["deploy_s"] = time.perf_counter() - t0
        # warm-up: replicas up, tokenizer/verifier loaded, connection pools open
        for _ in range(2):
            httpx.post(f"{url}/v1/rewards", json={"items": _tagged(pool[:args.batch], uuid.uuid4().hex)},
                       timeout=300).raise_for_status()
        load_rows = []
        with Progress(console=console, transient=True) as progress:
            for c in args.concurrency:
                load_rows.append(_load(url, None, pool, c, args.requests, args.batch, progress))
        results["load"] = load_rows
        results["cache"] = _cache_speedup(url, None, pool, args.cache_batch)
    finally:
        serve.shutdown()
        if started_ray:
            handle.shutdown()
    return results


def _print_load(console, batch: int, load_rows: list[dict[str, Any]]) -> None:
    """The throughput and latency table, one row per concurrency level."""
    from rich.table import Table

    t = Table(title=f"POST /v1/rewards (batch {batch}, cache misses, loopback, {os.cpu_count()} CPUs)")
    for col in ("concurrency", "requests", "errors", "responses/s", "requests/s", "p50 ms", "p99 ms"):
        t.add_column(col, justify="right")
    for r in load_rows:
        t.add_row(str(r["concurrency"]), str(r["requests"]), str(r["errors"]), f"{r['responses_per_s']:.1f}",
                  f"{r['requests_per_s']:.1f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}")
    console.print(t)


def _print_alignment(console, align: list[dict[str, Any]], repeats: int) -> None:
    """The alignment + reward math table, with the marginal cost per added token between rows."""
    from rich.table import Table

    t = Table(title="Alignment + reward math (pure function, median of "
                    f"{repeats} calls)")
    for col in ("tokens", "statements", "µs / response", "ns / token", "marginal ns / token"):
        t.add_column(col, justify="right")
    prev = None
    for r in align:
        marginal = "" if prev is None else \
            f"{(r['us_per_call'] - prev['us_per_call']) * 1000 / (r['tokens'] - prev['tokens']):.1f}"
        t.add_row(str(r["tokens"]), str(r["statements"]), f"{r['us_per_call']:.1f}", f"{r['ns_per_token']:.1f}",
                  marginal)
        prev = r
    console.print(t)
    console.print("Linear cost: the marginal time per added token (slope between rows) stays flat; the falling "
                  "ns/token is the fixed per-call overhead spread over more tokens.")


def _print_cache(console, c: dict[str, Any], deploy_s: float) -> None:
    """The verification cache's table: first request, repeat (cached), speed-up; then the deploy time."""
    from rich.table import Table

    t = Table(title=f"Verification cache (batch {c['batch']}, median of {c['rounds']})")
    for col in ("first request ms", "repeat (cached) ms", "speed-up"):
        t.add_column(col, justify="right")
    t.add_row(f"{c['first_ms']:.1f}", f"{c['repeat_ms']:.1f}", f"{c['speedup']:.1f}x")
    console.print(t)
    console.print(f"(deploy took {deploy_s:.1f}s)")
