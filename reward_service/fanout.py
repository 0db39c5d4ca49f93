"""How the reward service gets a verification for every item of a request, without Serve in the picture.

:func:`verify_through_cache` looks every item up in the cache, sends each distinct miss to the verifier once
(identical items in one request share one verification), in chunks that run in parallel, writes the fresh results
back, and reports per-item failures instead of raising. :func:`verify_chunk` is the verifier side: one chunk,
errors isolated per item. The Serve deployments (:mod:`reward_service.app`) are thin around these two: they add
the Ray handle, the counters and the HTTP error; the tests drive these functions with a real verifier and cache.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional, Sequence

from core.verify_schema import VerifyRequest, VerifyResult
from reward_service.cache import cache_key

log = logging.getLogger(__name__)

#: ``[VerifyRequest dict] -> [{"result": VerifyResult dict} | {"error": str, "kind": "input" | "internal"}]``
ChunkCall = Callable[[list[dict]], Awaitable[list[dict]]]


@dataclass
class ItemFailure:
    """Why item ``index`` of the request has no verification: ``status`` 422 (the verifier rejected the input),
    502 (it failed or timed out) or 503 (its request queue is full: retry later)."""

    index: int
    status: int
    message: str


@dataclass
class Verifications:
    """One request's verifications: ``results[i]`` (None where item i failed) and whether it came from the
    cache; how many fresh results were written back and how many verifier calls (chunks) were made.
    ``failures`` has one entry per distinct failed verification, at its first item; that item's duplicates in
    the request have no result either."""

    results: list[Optional[VerifyResult]]
    cached: list[bool]
    fresh: int = 0
    calls: int = 0
    failures: list[ItemFailure] = field(default_factory=list)


async def verify_through_cache(reqs: Sequence[VerifyRequest], identity: dict, cache: Any, call: ChunkCall, *,
                               chunk_size: int, timeout_s: float,
                               overloaded: tuple[type[BaseException], ...] = ()) -> Verifications:
    """Cache lookup, then ``call`` for the distinct misses in chunks of ``chunk_size`` (in parallel).

    Args:
        reqs: the request's items.
        identity: the verifier's cache identity (backend, model, prompt version): part of every cache key.
        cache: a :class:`reward_service.cache.MemoryCache` or ``RedisCache`` (``get_many`` / ``set_many``).
        call: sends one chunk to a verifier (a Serve handle call in the service).
        timeout_s: the wait for one chunk; past it the chunk's items fail with 502.
        overloaded: exception types that mean "the verifier's queue is full" (503 and retry later).

    A corrupt cache entry counts as a miss. Fresh results are cached even when other chunks failed.
    """
    keys = [cache_key(identity, r.question, r.response, r.materials, r.gold_answer) for r in reqs]
    raw = await asyncio.to_thread(cache.get_many, keys)
    out = Verifications(results=[None] * len(reqs), cached=[False] * len(reqs))
    for i, value in enumerate(raw):
        if value is not None:
            try:
                out.results[i] = VerifyResult.model_validate_json(value)
            except Exception:       # a corrupt or old-format entry is a miss
                continue
            out.results[i].cached = out.cached[i] = True
    miss_by_key: dict[str, list[int]] = {}
    for i, res in enumerate(out.results):
        if res is None:
            miss_by_key.setdefault(keys[i], []).append(i)
    if not miss_by_key:
        return out

    first = [idxs[0] for idxs in miss_by_key.values()]
    chunks = [first[j:j + chunk_size] for j in range(0, len(first), chunk_size)]

    async def send(chunk: list[int]) -> list[dict]:
        return await asyncio.wait_for(call([reqs[i].model_dump(mode="json") for i in chunk]), timeout_s)

    answers = await asyncio.gather(*[send(ch) for ch in chunks], return_exceptions=True)
    out.calls = len(chunks)
    fresh: dict[str, str] = {}
    for chunk, ans in zip(chunks, answers):
        if isinstance(ans, BaseException):
            if isinstance(ans, overloaded):
                out.failures += [ItemFailure(i, 503, "the verifier is overloaded (its request queue is full)")
                                 for i in chunk]
            else:
                kind = "timed out" if isinstance(ans, asyncio.TimeoutError) else f"failed ({type(ans).__name__}: {ans})"
                out.failures += [ItemFailure(i, 502, f"the verifier {kind}") for i in chunk]
            continue
        for i, a in zip(chunk, ans):
            if "result" not in a:
                out.failures.append(ItemFailure(i, 422 if a.get("kind") == "input" else 502, a.get("error", "error")))
                continue
            res = VerifyResult.model_validate(a["result"])
            res.cached = False
            for j in miss_by_key[keys[i]]:      # the request's duplicates of item i get their own copy
                out.results[j] = res if j == i else res.model_copy(deep=True)
            fresh[keys[i]] = res.model_dump_json()
    out.fresh = len(fresh)
    if fresh:
        await asyncio.to_thread(cache.set_many, fresh)
    out.failures.sort(key=lambda f: f.index)
    return out


def verify_chunk(verifier: Any, reqs: list[dict]) -> list[dict]:
    """The verifier side of :data:`ChunkCall`: validate each item, verify the valid ones in one batch, and when
    the batch fails, verify them one by one so that one bad item does not fail its neighbours."""
    parsed: list[Optional[VerifyRequest]] = []
    out: list[Optional[dict]] = [None] * len(reqs)
    for i, r in enumerate(reqs):
        try:
            parsed.append(VerifyRequest.model_validate(r))
        except Exception as e:
            parsed.append(None)
            out[i] = {"error": f"{type(e).__name__}: {e}", "kind": "input"}
    todo = [i for i, p in enumerate(parsed) if p is not None]
    try:
        results = verifier.verify_many([parsed[i] for i in todo])
        for i, res in zip(todo, results):
            out[i] = {"result": res.model_dump(mode="json")}
    except Exception:
        for i in todo:
            try:
                out[i] = {"result": verifier.verify(parsed[i]).model_dump(mode="json")}
            except Exception as e:
                log.exception("verifier failed on an item")
                out[i] = {"error": f"{type(e).__name__}: {e}", "kind": "internal"}
    return out  # type: ignore[return-value]
