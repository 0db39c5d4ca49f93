"""Verification cache: in-process LRU, real Redis (shared, TTL), and a real Redis outage."""
from __future__ import annotations

import logging
import time
import uuid

import pytest
import redis

from conftest import HANG_S
from core.config import RLFHConfig
from reward_service.cache import MemoryCache, RedisCache, cache_key, make_cache


def _keys(n):
    tag = uuid.uuid4().hex
    return [f"{tag}-{i}" for i in range(n)]


def test_cache_key_covers_everything_that_changes_a_verdict():
    base = dict(identity={"backend": "evidence", "version": "1"}, question="q", response="r",
                materials=["m1", "m2"], gold_answer="g")
    k = cache_key(**base)
    assert len(k) == 64 and k == cache_key(**base)
    for change in ({"identity": {"backend": "evidence", "version": "2"}}, {"question": "q2"}, {"response": "r2"},
                   {"materials": ["m2", "m1"]}, {"materials": ["m1"]}, {"gold_answer": None}):
        assert cache_key(**{**base, **change}) != k, change


def test_memory_lru_evicts_and_counts():
    c = MemoryCache(size=2)
    c.set_many({"a": "1", "b": "2"})
    assert c.get_many(["a"]) == ["1"]          # a is now most recent
    c.set_many({"c": "3"})                      # evicts b
    assert c.get_many(["a", "b", "c"]) == ["1", None, "3"]
    s = c.stats()
    assert (s["hits"], s["misses"], s["errors"], s["entries"]) == (3, 1, 0, 2)
    assert s["hit_rate"] == pytest.approx(0.75)


def test_make_cache_picks_backend(redis_url):
    assert isinstance(make_cache(RLFHConfig.load(environ={})), MemoryCache)
    c = make_cache(RLFHConfig.load(environ={}, redis_url=redis_url, cache_ttl_s=123))
    assert isinstance(c, RedisCache) and c.ttl_s == 123
    c.close()


def test_redis_round_trip_ttl_and_sharing(redis_url):
    a = RedisCache(redis_url, ttl_s=60)
    b = RedisCache(redis_url, ttl_s=60)          # a second replica
    keys = _keys(3)
    assert a.get_many(keys) == [None, None, None]
    a.set_many({keys[0]: '{"x": 1}', keys[1]: "é"})
    assert b.get_many(keys) == ['{"x": 1}', "é", None]     # shared by every replica
    ttl = redis.Redis.from_url(redis_url).ttl(a.prefix + keys[0])
    assert 0 < ttl <= 60
    sa, sb = a.stats(), b.stats()
    assert (sa["misses"], sa["sets"]) == (3, 2)
    assert (sb["hits"], sb["misses"], sb["errors"]) == (2, 1, 0) and sb["available"]
    a.close()
    b.close()


def test_redis_outage_degrades_counts_logs_once_and_recovers(private_redis, caplog):
    c = RedisCache(private_redis.url, ttl_s=60, backoff_s=0.1, max_backoff_s=0.4)
    keys = _keys(2)
    c.set_many({keys[0]: "v0"})
    assert c.get_many(keys) == ["v0", None]

    private_redis.stop()
    caplog.set_level(logging.WARNING, logger="reward_service.cache")
    probes = []                                       # the calls that went to the network
    for name in ("mget", "pipeline"):
        real = getattr(c._client, name)
        setattr(c._client, name, lambda *a, _real=real, _name=name, **k: (probes.append(_name), _real(*a, **k))[1])
    t0 = time.perf_counter()
    for _ in range(20):
        assert c.get_many(keys) == [None, None]       # never raises
        c.set_many({keys[1]: "v1"})                   # never raises
    elapsed = time.perf_counter() - t0
    # the back-off: 40 operations during the outage, only a few probes of the dead server (each a new failure
    # doubles the wait); the rest answered at once without the network
    assert 1 <= len(probes) < 20, probes
    assert elapsed < HANG_S, f"20 lookups during an outage took {elapsed:.1f}s"   # a hang guard, not a benchmark
    s = c.stats()
    assert s["errors"] == 40 and not s["available"] and s["outages"] == 1 and s["set_errors"] >= 1
    unreachable = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(unreachable) == 1                      # logged once per outage

    private_redis.start()                             # same port, empty server
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        c.set_many({keys[1]: "v1"})
        if c.get_many([keys[1]]) == ["v1"]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"cache did not recover after Redis came back: {c.stats()}")
    s = c.stats()
    assert s["available"] and s["hits"] >= 2
    assert any("is back" in r.getMessage() for r in caplog.records)
    c.close()


def test_redis_never_started_is_not_an_error():
    from conftest import free_port
    c = RedisCache(f"redis://127.0.0.1:{free_port()}/0", backoff_s=0.05)
    assert c.get_many(["k"]) == [None]
    c.set_many({"k": "v"})
    assert c.stats()["errors"] == 1 and not c.ping()
