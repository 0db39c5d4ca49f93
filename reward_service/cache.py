"""Cache of verification results: Redis (shared by every replica) or an in-process LRU.

What is cached is the verifier's :class:`~core.verify_schema.VerifyResult`
as JSON, not rewards: reward settings change per request and are cheap to
apply, verification is the expensive part. The key is the SHA-256 of
``Verifier.cache_identity()`` (backend, model, algorithm version: everything
that changes a verdict), the question, the response, the materials and the gold
answer, so a new verifier version never reads an old verdict.

``REDIS_URL`` set: :class:`RedisCache`, entries expire after ``CACHE_TTL_S``.
A Redis outage degrades to "no cache" and is never an error for the caller:
every lookup that could not reach Redis is counted as
``rlfh_cache_requests_total{result="error"}`` (and in :meth:`stats`), the outage
is logged once when it starts and once when Redis is back, sockets time out
after ``socket_timeout_s`` (0.3 s), and while Redis is down it is probed again
after a short, growing back-off (0.25 s .. 2 s) instead of paying a timeout on
every request. redis-py reconnects by itself once the server answers again.

Without ``REDIS_URL``: :class:`MemoryCache`, an LRU of ``CACHE_SIZE`` entries per replica.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Optional, Sequence

from core import metrics
from core.config import redact_url

log = logging.getLogger(__name__)

KEY_PREFIX = "rlfh:verify:"


def cache_key(identity: dict, question: str, response: str, materials: Sequence[str],
              gold_answer: Optional[str]) -> str:
    """Hex SHA-256 over everything that determines a verdict."""
    blob = json.dumps({"verifier": identity, "question": question, "response": response,
                       "materials": list(materials), "gold_answer": gold_answer},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class _Counters:
    def __init__(self, backend: str):
        self.backend = backend
        self.lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.errors = 0
        self.sets = 0
        self.set_errors = 0

    def record(self, hits: int = 0, misses: int = 0, errors: int = 0) -> None:
        with self.lock:
            self.hits += hits
            self.misses += misses
            self.errors += errors
            lookups = self.hits + self.misses + self.errors
            rate = self.hits / lookups if lookups else 0.0
        for result, n in (("hit", hits), ("miss", misses), ("error", errors)):
            if n:
                metrics.inc("rlfh_cache_requests_total", n, {"result": result})
        metrics.set_gauge("rlfh_cache_hit_rate", rate)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            lookups = self.hits + self.misses + self.errors
            return {"backend": self.backend, "lookups": lookups, "hits": self.hits, "misses": self.misses,
                    "errors": self.errors, "sets": self.sets, "set_errors": self.set_errors,
                    "hit_rate": (self.hits / lookups) if lookups else 0.0}


class MemoryCache:
    """Thread-safe LRU of ``size`` entries (per process/replica)."""

    def __init__(self, size: int = 50_000):
        self.size = int(size)
        self._data: "OrderedDict[str, str]" = OrderedDict()
        self._lock = threading.Lock()
        self.counters = _Counters("memory")

    def get_many(self, keys: Sequence[str]) -> list[Optional[str]]:
        out: list[Optional[str]] = []
        with self._lock:
            for k in keys:
                v = self._data.get(k)
                if v is not None:
                    self._data.move_to_end(k)
                out.append(v)
        hits = sum(v is not None for v in out)
        self.counters.record(hits=hits, misses=len(out) - hits)
        return out

    def set_many(self, items: dict[str, str]) -> None:
        with self._lock:
            for k, v in items.items():
                self._data[k] = v
                self._data.move_to_end(k)
            while len(self._data) > self.size:
                self._data.popitem(last=False)
        with self.counters.lock:
            self.counters.sets += len(items)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def stats(self) -> dict[str, Any]:
        d = self.counters.snapshot()
        with self._lock:
            d.update(entries=len(self._data), capacity=self.size, available=True)
        return d


class RedisCache:
    """Redis-backed cache that never raises: Redis failures are counted and degrade to misses."""

    def __init__(self, url: str, ttl_s: int = 7 * 24 * 3600, *, socket_timeout_s: float = 0.3,
                 backoff_s: float = 0.25, max_backoff_s: float = 2.0, prefix: str = KEY_PREFIX):
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.url = url
        self.ttl_s = int(ttl_s)
        self.prefix = prefix
        self._backoff0 = backoff_s
        self._max_backoff = max_backoff_s
        self._backoff = backoff_s
        self._down_since: Optional[float] = None
        self._retry_at = 0.0
        self._outages = 0
        self._last_error = ""
        self._state_lock = threading.Lock()
        self.counters = _Counters("redis")
        self._errors_cls = (redis.exceptions.RedisError, OSError)
        # No client-side retries: one short timeout per call, our own back-off between probes.
        self._client = redis.Redis.from_url(
            url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s,
            retry=Retry(NoBackoff(), 0), retry_on_timeout=False, decode_responses=True,
            health_check_interval=0)

    # ---------------------------------------------------------------- outage bookkeeping
    @property
    def available(self) -> bool:
        return self._down_since is None

    def _skip(self) -> bool:
        """True while backing off after a failure (no network call at all)."""
        with self._state_lock:
            return self._down_since is not None and time.monotonic() < self._retry_at

    def _failed(self, exc: BaseException) -> None:
        with self._state_lock:
            now = time.monotonic()
            self._last_error = f"{type(exc).__name__}: {exc}"
            if self._down_since is None:
                self._down_since = now
                self._outages += 1
                self._backoff = self._backoff0
                log.warning("Redis cache at %s is unreachable (%s): serving without cache until it is back",
                            redact_url(self.url), self._last_error)
            else:
                self._backoff = min(self._backoff * 2, self._max_backoff)
            self._retry_at = now + self._backoff

    def _succeeded(self) -> None:
        if self._down_since is None:
            return
        with self._state_lock:
            if self._down_since is not None:
                log.warning("Redis cache at %s is back after %.1f s", redact_url(self.url),
                            time.monotonic() - self._down_since)
                self._down_since = None
                self._backoff = self._backoff0

    # ---------------------------------------------------------------- API
    def get_many(self, keys: Sequence[str]) -> list[Optional[str]]:
        if not keys:
            return []
        if self._skip():
            self.counters.record(errors=len(keys))
            return [None] * len(keys)
        try:
            values = self._client.mget([self.prefix + k for k in keys])
        except self._errors_cls as e:
            self._failed(e)
            self.counters.record(errors=len(keys))
            return [None] * len(keys)
        self._succeeded()
        hits = sum(v is not None for v in values)
        self.counters.record(hits=hits, misses=len(values) - hits)
        return list(values)

    def set_many(self, items: dict[str, str]) -> None:
        if not items:
            return
        if self._skip():
            with self.counters.lock:
                self.counters.set_errors += len(items)
            return
        try:
            pipe = self._client.pipeline(transaction=False)
            for k, v in items.items():
                pipe.set(self.prefix + k, v, ex=self.ttl_s)
            pipe.execute()
        except self._errors_cls as e:
            self._failed(e)
            with self.counters.lock:
                self.counters.set_errors += len(items)
            return
        self._succeeded()
        with self.counters.lock:
            self.counters.sets += len(items)

    def ping(self) -> bool:
        """One probe (ignores the back-off): True when Redis answers."""
        try:
            self._client.ping()
        except self._errors_cls as e:
            self._failed(e)
            return False
        self._succeeded()
        return True

    def stats(self) -> dict[str, Any]:
        d = self.counters.snapshot()
        with self._state_lock:
            d.update(available=self._down_since is None, outages=self._outages, last_error=self._last_error,
                     url=redact_url(self.url), ttl_s=self.ttl_s,
                     down_for_s=(time.monotonic() - self._down_since) if self._down_since else 0.0)
        return d

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:  # pragma: no cover - best effort
            pass


def make_cache(cfg: Any) -> "RedisCache | MemoryCache":
    """``RedisCache`` when ``cfg.redis_url`` is set, else ``MemoryCache(cfg.cache_size)``."""
    if getattr(cfg, "redis_url", ""):
        return RedisCache(cfg.redis_url, ttl_s=cfg.cache_ttl_s)
    return MemoryCache(cfg.cache_size)
