"""The reward service's cache / dedup / fan-out logic (reward_service.fanout) without Serve: a real evidence
verifier in-process, the in-process LRU and a real redis-server as caches."""
from __future__ import annotations

import asyncio

import pytest

from core.config import RLFHConfig
from core.verify_schema import VerifyRequest
from reward_service.cache import MemoryCache, RedisCache
from reward_service.fanout import verify_chunk, verify_through_cache
from verifier_service.core import Verifier

PASSAGE = "Paris is the capital of France. The Seine flows through Paris."


class CountingVerifier:
    """The real evidence verifier behind a chunk call that records what it was sent."""

    def __init__(self):
        self.verifier = Verifier(RLFHConfig.load(environ={}))
        self.chunks: list[list[str]] = []

    async def __call__(self, payload: list[dict]) -> list[dict]:
        self.chunks.append([p["response"] for p in payload])
        return verify_chunk(self.verifier, payload)

    @property
    def identity(self) -> dict:
        return {"backend": self.verifier.backend_name, **self.verifier.cache_identity()}


def req(response: str, question: str = "What is the capital of France?") -> VerifyRequest:
    return VerifyRequest(question=question, response=response, materials=[PASSAGE])


def run(reqs, cache, call, **kw):
    kw.setdefault("chunk_size", 2)
    kw.setdefault("timeout_s", 30.0)
    return asyncio.run(verify_through_cache(reqs, call.identity if hasattr(call, "identity") else {"b": 1}, cache,
                                            call, **kw))


def test_duplicates_are_verified_once_and_misses_go_out_in_chunks():
    call = CountingVerifier()
    reqs = [req("Paris is the capital of France."), req("Lyon is the capital of France."),
            req("Paris is the capital of France."), req("I don't know."), req("The Seine flows through Paris.")]
    got = run(reqs, MemoryCache(100), call)
    assert got.failures == [] and got.cached == [False] * 5
    assert sorted(r for ch in call.chunks for r in ch) == sorted({r.response for r in reqs})  # each text once
    assert [len(ch) for ch in call.chunks] == [2, 2] and got.calls == 2 and got.fresh == 4
    labels = [[st.label for sent in r.sentences for st in sent.statements] for r in got.results]
    assert labels[0] == labels[2] == ["Correct"] and labels[1] == ["Wrong"] and labels[3] == []   # [3] abstains
    assert got.results[2] is not got.results[0]          # duplicates get their own copy (callers mutate them)


@pytest.mark.parametrize("cache_kind", ["memory", "redis"])
def test_a_second_request_is_served_from_the_cache(cache_kind, private_redis):
    cache = MemoryCache(100) if cache_kind == "memory" else RedisCache(private_redis.url, ttl_s=60)
    call = CountingVerifier()
    first = run([req("Paris is the capital of France."), req("Lyon is the capital of France.")], cache, call)
    n_chunks = len(call.chunks)
    again = run([req("Lyon is the capital of France."), req("Paris is the capital of France."),
                 req("Marseille is the capital of France.")], cache, call)
    assert again.cached == [True, True, False] and again.fresh == 1 and again.calls == 1
    assert call.chunks[n_chunks:] == [["Marseille is the capital of France."]]
    assert [r.cached for r in again.results] == [True, True, False]
    assert again.results[0].model_dump(exclude={"cached"}) == first.results[1].model_dump(exclude={"cached"})
    all_hits = run([req("Paris is the capital of France.")], cache, call)     # nothing to send at all
    assert all_hits.calls == 0 and all_hits.cached == [True] and all_hits.results[0].cached is True


def test_a_corrupt_cache_entry_is_a_miss():
    cache, call = MemoryCache(100), CountingVerifier()
    run([req("Paris is the capital of France.")], cache, call)
    (key,) = list(cache._data)
    cache.set_many({key: "{not json"})
    got = run([req("Paris is the capital of France.")], cache, call)
    assert got.cached == [False] and got.fresh == 1 and got.results[0].sentences


def test_failures_are_reported_per_item_with_their_status():
    cache = MemoryCache(100)
    ok = CountingVerifier()

    async def half_broken(payload):
        if any("Lyon" in p["response"] for p in payload):
            raise RuntimeError("replica died")
        return await ok(payload)

    class Overloaded(Exception):
        pass

    async def full(payload):
        raise Overloaded()

    async def slow(payload):
        await asyncio.sleep(5)

    reqs = [req("Paris is the capital of France."), req("The Seine flows through Paris."),
            req("Lyon is the capital of France.")]
    got = run(reqs, cache, half_broken)
    assert [(f.index, f.status) for f in got.failures] == [(2, 502)] and "replica died" in got.failures[0].message
    assert got.results[2] is None and got.results[0] is not None and got.fresh == 2   # the good chunk is cached
    got = run([req("Lyon is the capital of France.")], cache, full, overloaded=(Overloaded,))
    assert [(f.index, f.status) for f in got.failures] == [(0, 503)]
    got = run([req("Lyon is the capital of France.")], cache, slow, timeout_s=0.2)
    assert [(f.index, f.status) for f in got.failures] == [(0, 502)] and "timed out" in got.failures[0].message
    # the verifier rejecting an item's input is a 422 for that item only
    bad = req("Paris.").model_dump(mode="json")
    bad["materials"] = ["x" * 300_000]                                   # over MAX_MATERIAL_CHARS
    answers = verify_chunk(ok.verifier, [bad, req("Paris is the capital of France.").model_dump(mode="json")])
    assert answers[0]["kind"] == "input" and "result" in answers[1]


def test_verify_chunk_isolates_an_item_that_breaks_the_batch():
    class Fragile:
        """verify_many fails on the whole batch; verify fails only on the poisoned item."""

        def __init__(self):
            self.real = Verifier(RLFHConfig.load(environ={}))

        def verify_many(self, reqs):
            raise RuntimeError("batch failed")

        def verify(self, r):
            if "poison" in r.response:
                raise ValueError("cannot verify this one")
            return self.real.verify(r)

    out = verify_chunk(Fragile(), [req("Paris is the capital of France.").model_dump(mode="json"),
                                   req("poison").model_dump(mode="json")])
    assert "result" in out[0] and out[1] == {"error": "ValueError: cannot verify this one", "kind": "internal"}
