"""The reward service as a Ray Serve application.

Two deployments:

- ``RLFHVerifier``: wraps :class:`verifier_service.core.Verifier`; replicas and
  autoscaling from ``VERIFIER_REPLICAS`` / ``SERVE_MAX_REPLICAS``, fractional
  ``VERIFIER_NUM_CPUS``. Called only through a deployment handle, with chunks of
  items (one handle call per chunk, chunks in parallel across replicas).
- ``RLFHRewards``: the FastAPI ingress; looks verification results up in the cache
  (Redis shared by all replicas, or a per-replica LRU), sends the misses to the
  verifier, turns results into token rewards (:mod:`reward_service.token_rewards`).

Routes (OpenAPI at ``/docs``):

- ``POST /v1/rewards``: a batch of responses -> per-token rewards (see :mod:`reward_service.schemas`);
- ``POST /v1/verify``: one response -> the verifier's :class:`VerifyResult` (cached too);
- ``POST /get_reward``: OpenRLHF's remote reward protocol (scalar reward per sample);
- ``GET /healthz``: status, replicas, cache state, counters (no auth);
- ``GET /v1/stats``: counters of this replica and of one verifier replica.

With ``REWARD_API_TOKEN`` set every route but ``/healthz`` (``/docs``, ``/redoc`` and
``/openapi.json`` included) needs ``Authorization: Bearer <token>``: 401 before the body is read.
A body over ``MAX_BODY_BYTES`` answers 413 as it streams in (:mod:`reward_service.middleware`).

Every error is an ``ErrorBody`` (:mod:`reward_service.errors`).
Bad input answers 422 with ``{"error", "status", "detail": [{"field", "message", "fix"}]}``;
a verifier failure on an item answers 422 (the verifier rejected the input) or
502 (it crashed or timed out) with ``item_index``, and is counted.

Entry points: :func:`build_app` (:class:`core.config.ServiceSettings` -> Serve application),
:func:`app_builder` (``import_path: reward_service.app:app_builder`` in a
RayService / ``serve run`` config; ``args`` are setting names -> values), and
:func:`deploy` (run it on the current or an embedded Ray, return the URL).
"""
# No `from __future__ import annotations` here: FastAPI must resolve the route signatures at
# decoration time inside Serve's ingress wrapper.
import asyncio
import hmac
import json
import logging
import os
import threading
import time
from collections import Counter
from typing import Any, Optional

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
import ray
from pydantic import ValidationError
from ray import serve
from ray.serve.exceptions import BackPressureError

from core import metrics
from core.config import ConfigError, RLFHConfig, ServiceSettings, env_name
from core.model_loader import load_tokenizer
from core.placement import check_node_resources
from core.ray_bootstrap import start_ray
from core.verify_schema import GOOD_LABELS, LABELS, VerifyRequest, VerifyResult
from reward_service.cache import make_cache
from reward_service.errors import (ServiceError, error_response, fix_for, install_error_handlers, install_openapi,
                                   loc_str)
from reward_service.fanout import verify_chunk, verify_through_cache
from reward_service.middleware import OPEN_PATHS, GuardMiddleware, guard_counters
from reward_service.middleware import configure as configure_guard
from reward_service.openrlhf_adapter import GetRewardInputError, parse_get_reward
from reward_service.schemas import (MAX_BODY_BYTES, ErrorBody, GetRewardRequest, GetRewardResponse, RewardsRequest,
                                    RewardsResponse, VerifyBody)
from reward_service.serve_config import (APP_NAME, BACKPRESSURE_RETRY_AFTER_S, MAX_ONGOING_REQUESTS, REWARD_DEPLOYMENT,
                                         ROUTE_PREFIX, VERIFIER_DEPLOYMENT, backpressure_options, scaling_options,
                                         shutdown_options)
from reward_service.token_rewards import (RewardInputError, RewardSettings, compute_token_rewards,
                                          offsets_from_tokenizer, validate_offsets)
from verifier_service.core import Verifier
from verifier_service.llm_backend import judge_time_bound_s

log = logging.getLogger(__name__)

VERIFY_CHUNK = 8          # items per verifier handle call
HEALTH_PROBE_S = 3.0      # /healthz: a verifier replica that does not answer a stats call this fast is "stalled"
_BODY_ROUTES = ("/v1/rewards", "/v1/verify", "/get_reward")
_ROUTES = {*_BODY_ROUTES, "/healthz", "/v1/stats", "/docs", "/openapi.json", "/redoc"}


# --------------------------------------------------------------------------------------
# FastAPI app (module level: Serve wraps it around the ingress deployment)
# --------------------------------------------------------------------------------------

api = FastAPI(
    title="RLFH reward service",
    version="1",
    description="Token-level factuality rewards from an atomic-fact verifier (RLFH). "
                "Bad input answers 422 naming the field and the fix; every error has the ErrorBody shape.",
)
_bearer = HTTPBearer(auto_error=False, description="REWARD_API_TOKEN (only when the service sets one)")

# per-replica request counters (one replica per process)
_requests: Counter = Counter()
_requests_lock = threading.Lock()

# Errors: every answer but a 2xx is an ErrorBody (reward_service/errors.py); auth, the body limit and lone
# surrogates are checked before the body is parsed (reward_service/middleware.py, inner to the counter below).
install_error_handlers(api)
install_openapi(api, body_routes=_BODY_ROUTES, bearer_routes=tuple(sorted(_ROUTES - OPEN_PATHS)))
api.add_middleware(GuardMiddleware)


@api.middleware("http")
async def _count_requests(request: Request, call_next):
    t0 = time.perf_counter()
    path = request.url.path
    route = path if path in _ROUTES else "other"
    try:
        response = await call_next(request)
    except Exception as exc:  # pragma: no cover - the exception handlers answer first
        log.exception("unhandled error on %s", path)
        response = error_response(500, "server", f"internal error ({type(exc).__name__}); it is logged")
    status = response.status_code
    with _requests_lock:
        _requests[(route, status)] += 1
    metrics.inc("rlfh_reward_requests_total", 1, {"route": route, "status": status})
    metrics.observe("rlfh_reward_latency_ms", (time.perf_counter() - t0) * 1000.0, {"route": route})
    return response


def _verify_request(item, index: int) -> VerifyRequest:
    """The item's VerifyRequest; its cross-field checks (total materials size) answer 422 naming the item."""
    try:
        return item.verify_request()
    except ValidationError as e:
        err = e.errors()[0]
        raise ServiceError(422, f"items.{index}.{loc_str(err.get('loc', ())) if err.get('loc') else 'materials'}",
                           err.get("msg", "invalid").removeprefix("Value error, "), fix_for(err),
                           item_index=index) from None


def _request_counts() -> dict[str, int]:
    """This replica's request counters by "route status".

    A module-level function on purpose: Serve pickles the ingress class by value (with copies of the
    module globals its methods use), while the middleware updates the real module's counter; calling
    through a module function (pickled by reference) reads the live one.
    """
    with _requests_lock:
        return {f"{route} {status}": n for (route, status), n in sorted(_requests.items())}


def _cfg_from(cfg_dict: dict) -> ServiceSettings:
    return ServiceSettings(**cfg_dict)


# --------------------------------------------------------------------------------------
# verifier deployment
# --------------------------------------------------------------------------------------

@serve.deployment(name=VERIFIER_DEPLOYMENT)
class VerifierDeployment:
    """Holds one :class:`Verifier`; answers chunks of requests item by item (errors isolated per item)."""

    def __init__(self, cfg_dict: dict, verifier_factory=None):
        self.cfg = _cfg_from(cfg_dict)
        self.verifier = verifier_factory(self.cfg) if verifier_factory is not None else Verifier(self.cfg)
        self._lock = threading.Lock()
        self.calls = 0
        self.items = 0
        self.errors = 0
        self._warm_up()
        log.info("verifier replica up: backend %s", self.verifier.backend_name)

    def _warm_up(self) -> None:
        """One tiny verification before the replica counts as ready (first-call imports and indexes happen
        here, not in a caller's request). A failure is logged, not fatal: real requests report their own."""
        t0 = time.perf_counter()
        try:
            self.verifier.verify(VerifyRequest(question="Where is the warm-up?", response="The warm-up is here.",
                                               materials=["The warm-up is here."]))
        except Exception as e:  # pragma: no cover - e.g. an llm backend whose endpoint is not up yet
            log.warning("verifier warm-up failed (%s: %s); the first request will pay the start-up", type(e).__name__, e)
        log.info("verifier warm-up took %.2f s", time.perf_counter() - t0)

    def cache_identity(self) -> dict:
        return {"backend": self.verifier.backend_name, **self.verifier.cache_identity()}

    def _run(self, reqs: list[dict]) -> list[dict]:
        out = verify_chunk(self.verifier, reqs)
        with self._lock:
            self.calls += 1
            self.items += len(reqs)
            self.errors += sum(1 for o in out if "error" in o)
        return out

    async def verify_batch(self, reqs: list[dict]) -> list[dict]:
        """``[VerifyRequest dict] -> [{"result": VerifyResult dict} | {"error": str, "kind": "input"|"internal"}]``."""
        return await asyncio.to_thread(self._run, reqs)

    def stats(self) -> dict:
        with self._lock:
            return {"backend": self.verifier.backend_name, "calls": self.calls, "items": self.items,
                    "errors": self.errors, "pid": os.getpid()}


# --------------------------------------------------------------------------------------
# reward ingress
# --------------------------------------------------------------------------------------

@serve.deployment(name=REWARD_DEPLOYMENT)
@serve.ingress(api)
class RewardDeployment:
    def __init__(self, cfg_dict: dict, verifier):
        self.cfg = _cfg_from(cfg_dict)
        configure_guard(token=self.cfg.reward_api_token, max_body_bytes=MAX_BODY_BYTES)
        self.settings = RewardSettings.from_config(self.cfg)
        self.cache = make_cache(self.cfg)
        self.verifier = verifier
        self._identity: Optional[dict] = None
        self._tokenizer = None
        self._tokenizer_error: Optional[str] = None
        self._tok_lock = threading.Lock()
        self._lock = threading.Lock()
        self.started = time.time()
        self._replica_states: Optional[tuple] = None
        self.c: Counter = Counter()
        self.labels: Counter = Counter()
        self.reward_sum = 0.0
        # a verifier chunk may take the judge's whole retry budget (two stages, back-off included) plus the
        # evidence work; waiting less would answer 502 while the judge is still retrying as configured
        self.verify_timeout_s = judge_time_bound_s(self.cfg) + 30.0
        # warm up before Serve routes traffic here: the tokenizer (slow on first use) loads now, not in a request
        t0 = time.perf_counter()
        self._load_tokenizer()
        log.info("reward replica up in %.1f s (tokenizer %s): cache %s, settings %s", time.perf_counter() - t0,
                 "ready" if self._tokenizer is not None else "unavailable, callers must send token_offsets",
                 type(self.cache).__name__, self.settings.as_dict())

    # ---------------------------------------------------------------- helpers
    def _auth(self, creds: Optional[HTTPAuthorizationCredentials]) -> None:
        token = self.cfg.reward_api_token
        if not token:
            return
        if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
            with self._lock:
                self.c["auth_failures"] += 1
            raise ServiceError(401, "Authorization", "missing or wrong bearer token",
                               "send the header 'Authorization: Bearer <REWARD_API_TOKEN>'")

    async def _get_identity(self) -> dict:
        if self._identity is None:
            try:
                self._identity = await asyncio.wait_for(self.verifier.cache_identity.remote(), 60.0)
            except Exception as e:
                raise ServiceError(503, "verifier", f"the verifier deployment is not answering ({e})",
                                   "retry shortly; check `serve status` / the Ray dashboard") from None
        return self._identity

    def _load_tokenizer(self):
        with self._tok_lock:
            if self._tokenizer is None and self._tokenizer_error is None:
                name = self.cfg.reward_tokenizer or self.cfg.model_path
                try:
                    self._tokenizer = load_tokenizer(name)
                except Exception as e:  # no tokenizer: callers must send offsets
                    self._tokenizer_error = f"tokenizer {name!r} could not be loaded: {type(e).__name__}: {e}"
                    log.error(self._tokenizer_error)
            return self._tokenizer

    async def _offsets(self, items) -> list[Any]:
        """Validated ``(T, 2)`` offsets per item (caller's or from the tokenizer). Raises 422 naming the item."""
        need_tok = any(it.token_offsets is None for it in items)
        tok = (await asyncio.to_thread(self._load_tokenizer)) if need_tok else None

        def work() -> list[Any]:
            out: list[Any] = []
            for i, it in enumerate(items):
                n = len(it.response)
                if it.token_offsets is not None:
                    try:
                        out.append(validate_offsets(it.token_offsets, n))
                    except RewardInputError as e:
                        raise ServiceError(422, f"items.{i}.{e.field}", e.message, e.fix, item_index=i) from None
                    continue
                if tok is None:
                    raise ServiceError(422, f"items.{i}.token_offsets",
                                       f"missing, and the service cannot tokenize ({self._tokenizer_error})",
                                       "send token_offsets for every item", item_index=i)
                with self._tok_lock:      # HF fast tokenizers must not be called from two threads at once
                    off = offsets_from_tokenizer(tok, it.response)
                if off.shape[0] == 0:
                    raise ServiceError(422, f"items.{i}.token_offsets",
                                       "missing, and the response has no tokens (it is empty)",
                                       f"send token_offsets, e.g. [[{n}, {n}]] for a lone EOS token", item_index=i)
                out.append(validate_offsets(off, n))
            return out

        return await asyncio.to_thread(work)

    async def _verify(self, reqs: list[VerifyRequest]) -> list[tuple[VerifyResult, bool]]:
        """Cache lookup, then the verifier for the misses (deduplicated). ``(result, cached)`` per request."""
        identity = await self._get_identity()
        got = await verify_through_cache(reqs, identity, self.cache, self.verifier.verify_batch.remote,
                                         chunk_size=VERIFY_CHUNK, timeout_s=self.verify_timeout_s,
                                         overloaded=(BackPressureError,))
        with self._lock:
            self.c["verified_items"] += got.fresh
            self.c["verifier_calls"] += got.calls
            self.c["verifier_errors"] += len(got.failures)
            self.c["cache_hits_items"] += sum(got.cached)
        if got.failures:
            first = got.failures[0]
            more = f" ({len(got.failures) - 1} more item(s) failed too)" if len(got.failures) > 1 else ""
            log.warning("verifier failed on %d item(s); first: item %d: %s", len(got.failures), first.index,
                        first.message)
            raise ServiceError(first.status, f"items.{first.index}", f"verification failed: {first.message}{more}",
                               "check this item's text and materials" if first.status == 422 else
                               "retry; if it persists, check the verifier replicas' logs", item_index=first.index,
                               headers={"Retry-After": str(BACKPRESSURE_RETRY_AFTER_S)} if first.status == 503
                               else None)
        return list(zip(got.results, got.cached))

    def _record(self, rewards: list, source: str) -> None:
        if not rewards:
            return
        labels: Counter = Counter()
        for r in rewards:
            labels.update({k: v for k, v in r.label_counts.items() if v})
        total = sum(labels.values())
        mean = sum(r.score for r in rewards) / len(rewards)
        with self._lock:
            self.labels.update(labels)
            self.reward_sum += sum(r.score for r in rewards)
            self.c["rewarded_items"] += len(rewards)
            self.c["unaligned_statements"] += sum(r.num_unaligned for r in rewards)
            self.c["correct_items"] += sum(bool(r.is_correct) for r in rewards)
            self.c["abstained_items"] += sum(bool(r.abstained) for r in rewards)
        metrics.set_gauge("rlfh_reward_mean", mean, {"source": source})
        for lb in LABELS:
            metrics.set_gauge("rlfh_label_share", (labels[lb] / total) if total else 0.0,
                              {"label": lb, "source": source})

    def _settings(self, overrides) -> RewardSettings:
        if overrides is None:
            return self.settings
        try:
            return self.settings.with_overrides(overrides.model_dump(exclude_none=True))
        except RewardInputError as e:
            raise ServiceError(422, e.field, e.message, e.fix) from None

    # ---------------------------------------------------------------- routes
    @api.post("/v1/rewards", response_model=RewardsResponse, responses={422: {"model": ErrorBody},
                                                                          502: {"model": ErrorBody}})
    async def rewards(self, body: RewardsRequest,
                      creds: Optional[HTTPAuthorizationCredentials] = Depends(_bearer)) -> JSONResponse:
        """Per-token rewards for a batch of responses (verification cached)."""
        self._auth(creds)
        t0 = time.perf_counter()
        if len(body.items) > self.cfg.max_batch_items:
            raise ServiceError(422, "items", f"{len(body.items)} items, over the limit of {self.cfg.max_batch_items}",
                               f"split the batch into requests of at most {self.cfg.max_batch_items} items "
                               f"(MAX_BATCH_ITEMS)")
        settings = self._settings(body.overrides)
        offsets = await self._offsets(body.items)
        verified = await self._verify([_verify_request(it, i) for i, it in enumerate(body.items)])

        def compute():
            out = []
            for i, (it, off, (res, was_cached)) in enumerate(zip(body.items, offsets, verified)):
                tr = compute_token_rewards(res, off, len(it.response), settings, validated=True)
                tr.cached = was_cached
                if body.return_verification:
                    tr.verification = res
                out.append((tr, tr.model_dump(mode="json", exclude=None if body.return_verification
                                              else {"verification"})))
            return out

        computed = await asyncio.to_thread(compute)
        self._record([tr for tr, _ in computed], "service")
        items = [d for _, d in computed]
        n_cached = sum(1 for _, c in verified if c)
        # statements that fell back while placing rewards (the verifier counts its own fallbacks)
        metrics.inc("rlfh_unaligned_statements_total",
                    sum(max(0, tr.num_unaligned - res.num_unaligned) for (tr, _), (res, _) in zip(computed, verified)))
        return JSONResponse({"items": items, "settings": settings.as_dict(), "num_cached": n_cached,
                             "latency_ms": (time.perf_counter() - t0) * 1000.0})

    @api.post("/v1/verify", response_model=VerifyResult, responses={422: {"model": ErrorBody},
                                                                      502: {"model": ErrorBody}})
    async def verify(self, body: VerifyBody,
                     creds: Optional[HTTPAuthorizationCredentials] = Depends(_bearer)) -> JSONResponse:
        """The verifier's statements and labels for one response (cached)."""
        self._auth(creds)
        try:
            (res, _), = await self._verify([body])
        except ServiceError as e:
            e.field = e.field.replace("items.0", "body")
            raise
        return JSONResponse(res.model_dump(mode="json"))

    @api.post("/get_reward", response_model=GetRewardResponse, responses={422: {"model": ErrorBody}})
    async def get_reward(self, body: GetRewardRequest,
                         creds: Optional[HTTPAuthorizationCredentials] = Depends(_bearer)) -> JSONResponse:
        """OpenRLHF remote reward: ``{query, prompts, labels}`` -> ``{rewards, scores, extra_logs}``.

        ``rewards[i]`` is the response-level return (the sum of its rewards, clipped as one token);
        ``scores[i]`` the share of its statements that are Correct / Hedged correct (0 when none).
        """
        self._auth(creds)
        try:
            samples = parse_get_reward(body.query, body.prompts, body.labels, self.cfg.max_batch_items)
        except GetRewardInputError as e:
            raise ServiceError(422, e.field, e.message, e.fix, item_index=e.item_index) from None
        reqs = [s.request for s in samples]
        texts = [s.response for s in samples]
        verified = await self._verify(reqs)
        scalar = self.settings
        outs = []
        for text, (res, _) in zip(texts, verified):
            L = len(text)
            off = validate_offsets([[0, L]], L)
            outs.append(compute_token_rewards(res, off, L, scalar, validated=True))
        self._record(outs, "get_reward")
        scores = [(sum(o.label_counts[g] for g in GOOD_LABELS) / o.num_statements) if o.num_statements else 0.0
                  for o in outs]
        extra = {
            "num_statements": [float(o.num_statements) for o in outs],
            "is_correct": [float(o.is_correct) for o in outs],
            "abstained": [float(o.abstained) for o in outs],
            "cached": [float(c) for _, c in verified],
        }
        for lb in LABELS:
            extra[f"label_{lb.lower().replace(' ', '_')}"] = [float(o.label_counts[lb]) for o in outs]
        return JSONResponse({"rewards": [o.score for o in outs], "scores": scores, "extra_logs": extra})

    @api.get("/healthz", responses={503: {"description": "Stalled: the verifier did not answer in time."}})
    async def healthz(self) -> JSONResponse:
        """Readiness: ``ok`` (200), ``degraded`` (200: Redis down, the cache falls back to none), ``stalled``
        (503: a verifier replica did not answer a probe within HEALTH_PROBE_S). Replicas, cache, counters. No auth.
        """
        probe = await self._probe_verifier()
        try:
            cache = await asyncio.wait_for(asyncio.to_thread(self.cache.stats), HEALTH_PROBE_S)
        except Exception as e:
            cache = {"available": False, "error": f"{type(e).__name__}: {e}"}
        if not probe["ok"]:
            status = "stalled"
        else:
            status = "ok" if cache.get("available", True) else "degraded"
        body = {"status": status, "uptime_s": time.time() - self.started, "verifier_probe": probe,
                "tokenizer": self._tokenizer is not None, "replicas": await self._replicas(), "cache": cache,
                "counters": self._counters(), "auth": bool(self.cfg.reward_api_token)}
        return JSONResponse(body, status_code=503 if status == "stalled" else 200,
                            headers={"Retry-After": "5"} if status == "stalled" else None)

    async def _probe_verifier(self) -> dict:
        """One bounded call to a verifier replica: ``{"ok", "latency_ms", "error"?}``."""
        t0 = time.perf_counter()
        try:
            await asyncio.wait_for(self.verifier.stats.remote(), HEALTH_PROBE_S)
            ok, err = True, None
        except asyncio.TimeoutError:
            ok, err = False, f"no answer within {HEALTH_PROBE_S:g} s"
        except Exception as e:
            ok, err = False, f"{type(e).__name__}: {e}"
        with self._lock:
            self.c["health_probe_failures"] += 0 if ok else 1
        out = {"ok": ok, "latency_ms": round((time.perf_counter() - t0) * 1000.0, 1)}
        if err:
            out["error"] = err
        return out

    @api.get("/v1/stats")
    async def stats(self, creds: Optional[HTTPAuthorizationCredentials] = Depends(_bearer)) -> dict:
        """Counters of this reward replica, its cache, and one verifier replica."""
        self._auth(creds)
        try:
            vstats = await asyncio.wait_for(self.verifier.stats.remote(), 10.0)
        except Exception as e:
            vstats = {"error": f"{type(e).__name__}: {e}"}
        with self._lock:
            labels = dict(self.labels)
            n = self.c["rewarded_items"]
            mean = self.reward_sum / n if n else 0.0
        return {"counters": self._counters(), "cache": self.cache.stats(), "verifier": vstats,
                "labels": labels, "reward_mean": mean, "settings": self.settings.as_dict(),
                "replica": serve.get_replica_context().replica_id.unique_id}

    def _counters(self) -> dict:
        with self._lock:
            c = dict(self.c)
        c["requests"] = _request_counts()
        for reason, n in guard_counters().items():      # refused before the routes (auth, size, surrogates)
            c[reason] = c.get(reason, 0) + n
        return c

    async def _replicas(self) -> dict:
        configured = {VERIFIER_DEPLOYMENT: {"min": self.cfg.verifier_replicas, "max": max(self.cfg.max_replicas,
                                                                                       self.cfg.verifier_replicas)},
                      REWARD_DEPLOYMENT: {"min": self.cfg.reward_replicas, "max": max(self.cfg.max_replicas,
                                                                                   self.cfg.reward_replicas)}}

        def running():
            st = serve.status()
            out = {}
            for app in st.applications.values():
                for name, dep in app.deployments.items():
                    if name in configured:
                        out[name] = {k: int(v) for k, v in dep.replica_states.items()}
            return out
        now = time.monotonic()
        if self._replica_states is None or now - self._replica_states[0] > 5.0:   # serve.status(): a controller call
            try:
                self._replica_states = (now, await asyncio.wait_for(asyncio.to_thread(running), 3.0))
            except Exception as e:
                return {"configured": configured, "running": {"error": f"{type(e).__name__}: {e}"}}
        return {"configured": configured, "running": self._replica_states[1]}


# --------------------------------------------------------------------------------------
# building and deploying
# --------------------------------------------------------------------------------------

def build_app(cfg: ServiceSettings, verifier_factory=None, reward_options: Optional[dict] = None):
    """The Serve application (verifier deployment bound into the reward ingress) for ``cfg``.

    ``cfg``: the service settings, or a training config (the replicas get its service section only).
    ``verifier_factory``: optional picklable ``ServiceSettings -> Verifier`` used by the verifier replicas instead of
    ``Verifier(cfg)`` (e.g. a Verifier built around in-process engines, or fault injection in tests).
    ``reward_options``: Serve options overriding the reward deployment's (tests shrink the queue with it).
    Both deployments have a bounded queue (``reward_service.serve_config.backpressure_options``): 503 + Retry-After;
    a stopping replica checks for requests in flight every 0.2 s (``shutdown_options``).
    """
    RewardSettings.from_config(cfg)      # a bad reward setting fails here (ConfigError), not in a replica loop
    # (so does SERVE_MAX_REPLICAS below a deployment's replicas: scaling_options raises ConfigError)
    d = ServiceSettings.of(cfg).model_dump()
    logging_config = {"enable_access_log": cfg.serve_access_log}
    # SERVICE_NODE_RESOURCE: every replica asks for a sliver of that custom resource, so Serve places (and after a
    # node loss re-places) them only on nodes offering it (core.placement.NODE_RESOURCE_PER_ACTOR says why a sliver)
    on_node = {"resources": {cfg.service_node_resource: 0.001}} if cfg.service_node_resource else {}
    verifier = VerifierDeployment.options(
        ray_actor_options={"num_cpus": cfg.verifier_num_cpus, **on_node},
        max_ongoing_requests=MAX_ONGOING_REQUESTS[VERIFIER_DEPLOYMENT], logging_config=logging_config,
        **backpressure_options(), **shutdown_options(),
        **scaling_options(cfg.verifier_replicas, cfg.max_replicas)).bind(d, verifier_factory)
    opts = dict(ray_actor_options={"num_cpus": cfg.reward_num_cpus, **on_node},
                max_ongoing_requests=MAX_ONGOING_REQUESTS[REWARD_DEPLOYMENT], logging_config=logging_config,
                **backpressure_options(), **shutdown_options(),
                **scaling_options(cfg.reward_replicas, cfg.max_replicas))
    opts.update(reward_options or {})
    return RewardDeployment.options(**opts).bind(d, verifier)


def config_from_args(args: Optional[dict]) -> ServiceSettings:
    """The service settings from the replica's environment overlaid with ``args``.

    ``args`` (a Serve config's application ``args``, see ``reward_service.serve_config``) maps env var names
    (``GRANULARITY``...) or setting names (``granularity``) to values; strings are read exactly like
    environment variables (JSON for the maps), so a bad value raises ConfigError naming the variable.
    """

    fields = ServiceSettings.model_fields
    env = dict(os.environ)
    for k, v in (args or {}).items():
        if k in fields:
            key = env_name(k)
        elif k in {env_name(f) for f in fields}:
            key = k
        elif k in RLFHConfig.model_fields or k in {env_name(f) for f in RLFHConfig.model_fields}:
            raise ConfigError(f"app_builder args: {k!r} is a trainer setting; the reward service does not read "
                              "it (remove it from the app's args)")
        else:
            raise ConfigError(f"app_builder args: unknown setting {k!r} (`rlfh config` lists them)")
        if isinstance(v, (dict, list)):
            v = json.dumps(v)
        elif isinstance(v, bool):
            v = str(v).lower()
        env[key] = "" if v is None else str(v)
    return ServiceSettings.load(env)


def app_builder(args: dict):
    """Serve ``import_path`` entry point: ``reward_service.app:app_builder`` with ``args`` = settings."""
    return build_app(config_from_args(args))


def deploy(cfg: RLFHConfig, host: Optional[str] = None, port: Optional[int] = None, blocking: bool = False,
           include_dashboard: Optional[bool] = None, num_cpus: Optional[float] = None,
           verifier_factory=None, reward_options: Optional[dict] = None) -> str:
    """Run the app on the current Ray (or start an embedded one / join RAY_ADDRESS: the full config, since Ray's
    start-up reads trainer settings); return the base URL. The replicas get ``cfg``'s service section.

    ``blocking``: serve until Ctrl-C, then shut Serve down.
    """
    host = host or cfg.serve_host
    port = int(port or cfg.serve_port)
    if not ray.is_initialized():
        start_ray(cfg, num_cpus=num_cpus, include_dashboard=include_dashboard)
    check_node_resources(cfg, ["service"])    # SERVICE_NODE_RESOURCE no node offers: say so, not a pending deploy
    serve.start(http_options={"host": host, "port": port})
    serve.run(build_app(cfg, verifier_factory, reward_options), name=APP_NAME, route_prefix=ROUTE_PREFIX,
              blocking=False)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"http://{shown}:{port}"
    log.info("reward service at %s (docs %s/docs)", url, url)
    if blocking:
        try:
            while True:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
        finally:
            serve.shutdown()
    return url


def shutdown() -> None:
    """Delete the app (and Serve) from the current Ray."""
    try:
        serve.shutdown()
    except Exception:  # pragma: no cover
        pass
