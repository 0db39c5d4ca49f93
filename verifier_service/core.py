"""The verifier's public entry point: :class:`Verifier`.

``Verifier(cfg).verify(VerifyRequest(...)) -> VerifyResult`` splits a response
into sentences and atomic statements (each with an exact character span in the
response), labels every statement in the closed set
(``Correct``, ``Hedged correct``, ``Vague``, ``Hedged wrong``, ``Wrong``) and
scores its informativeness 1-5.

Backends (``VERIFIER_BACKEND`` / ``backend=``):

- ``evidence`` (default): no LLM; BM25 retrieval over the request's materials,
  entity / number / content-word agreement, hedge and abstention detection.
- ``judge``: the evidence backend's decomposition and Vague rules; a trained claim judge
  (:mod:`verifier_service.judge_model`) labels every checkable statement against its evidence.
- ``llm``: an OpenAI-compatible chat endpoint (``MODEL_URL``, ``ANNOTATE_MODEL``)
  judges with the prompts in :mod:`verifier_service.prompts`.
- ``self``: the same prompts sent through an injected :data:`ChatFn` (the
  training cluster passes the policy's rollout engines).

The reward service keys its cache on :meth:`Verifier.cache_identity`, which
holds everything that can change a verdict.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Optional, Protocol

from core import metrics
from core.config import ConfigError, ServiceSettings
from core.verifier_backends import BACKEND_NAMES
from core.verify_schema import VerifyRequest, VerifyResult
from verifier_service.evidence import EvidenceBackend
from verifier_service.llm_backend import LLMBackend, http_chat_fn

log = logging.getLogger(__name__)

#: Batched chat completions: a list of conversations (each a list of
#: ``{"role": ..., "content": ...}`` messages) -> one reply text per conversation,
#: in order. A ChatFn may raise (the whole batch failed) or put ``None`` in the slot
#: of one conversation that failed; the llm/self backends retry the failed ones
#: (``LLM_MAX_RETRIES``, exponential backoff) and then use the counted fallback label.
#: Greedy decoding is expected (verdicts should be reproducible).
ChatFn = Callable[[list[list[dict]]], list[str]]

BACKENDS = BACKEND_NAMES   # core/verifier_backends.py lists them once


class Backend(Protocol):
    """What a backend module provides (see evidence.py, llm_backend.py)."""

    name: str

    def identity(self) -> dict: ...

    def verify_many(self, reqs: list[VerifyRequest]) -> list[VerifyResult]: ...


def _evidence(cfg, chat_fn):
    return EvidenceBackend(cfg)


def _judge(cfg, chat_fn):
    from verifier_service.judge import JudgeBackend      # the claim judge imports torch: only when asked for
    return JudgeBackend(cfg)


def _llm(cfg, chat_fn):
    if not cfg.model_url:
        raise ConfigError("VERIFIER_BACKEND=llm needs MODEL_URL (--model-url): the base URL of an "
                          "OpenAI-compatible endpoint, e.g. http://vllm:8000/v1")
    return LLMBackend(cfg, http_chat_fn(cfg), name="llm", model=cfg.annotate_model or "default",
                      endpoint=cfg.model_url)


def _self(cfg, chat_fn):
    if chat_fn is None:
        raise ConfigError("VERIFIER_BACKEND=self needs a chat_fn (the policy's rollout engine); "
                          "pass Verifier(cfg, backend='self', chat_fn=...)")
    return LLMBackend(cfg, chat_fn, name="self", model=getattr(chat_fn, "model_name", "policy"),
                      endpoint="in-process")


#: How each backend of core/verifier_backends.py is built (the import test checks the two lists are one).
BUILDERS: dict[str, Callable[..., Backend]] = {"evidence": _evidence, "judge": _judge, "llm": _llm, "self": _self}
assert tuple(BUILDERS) == BACKENDS, "core/verifier_backends.py and verifier_service.core.BUILDERS disagree"


def _build_backend(name: str, cfg: "ServiceSettings", chat_fn: Optional[ChatFn]) -> Backend:
    if name not in BUILDERS:
        raise ConfigError(f"VERIFIER_BACKEND={name!r}: must be one of {', '.join(BACKENDS)}")
    return BUILDERS[name](cfg, chat_fn)


class Verifier:
    """Atomic-fact verifier over a configurable backend.

    Args:
        cfg: the service settings (a training config works too: it extends them; default
            ``ServiceSettings.load()``: environment variables).
        backend: overrides ``cfg.verifier_backend`` (``evidence`` | ``llm`` | ``self``).
        chat_fn: the batched chat function used by the ``self`` backend (and by ``llm``
            when given, instead of HTTP: handy for tests and in-process engines).
    """

    def __init__(self, cfg: "ServiceSettings | None" = None, *, backend: str | None = None,
                 chat_fn: "ChatFn | None" = None):
        if cfg is None:
            cfg = ServiceSettings.load()
        self.cfg = cfg
        name = backend or cfg.verifier_backend
        if name == "llm" and chat_fn is not None:
            self._backend: Backend = LLMBackend(cfg, chat_fn, name="llm", model=cfg.annotate_model or "default",
                                                endpoint=cfg.model_url or "in-process")
        else:
            self._backend = _build_backend(name, cfg, chat_fn)

    @property
    def backend_name(self) -> str:
        return self._backend.name

    @property
    def backend(self) -> Backend:
        return self._backend

    def cache_identity(self) -> dict:
        """JSON-able dict of everything that changes verdicts (backend, model, prompt/algorithm version...)."""
        return dict(self._backend.identity())

    def verify(self, req: VerifyRequest) -> VerifyResult:
        return self.verify_many([req])[0]

    def verify_many(self, reqs: list[VerifyRequest]) -> list[VerifyResult]:
        reqs = [r if isinstance(r, VerifyRequest) else VerifyRequest.model_validate(r) for r in reqs]
        if not reqs:
            return []
        t0 = time.perf_counter()
        results = self._backend.verify_many(reqs)
        elapsed_ms = (time.perf_counter() - t0) * 1000.0
        per_item = elapsed_ms / len(reqs)
        for res in results:
            finalize(res, self._backend.name)
            if res.latency_ms <= 0.0:
                res.latency_ms = per_item
            _record_metrics(res)
        return results


def finalize(res: VerifyResult, backend: str) -> VerifyResult:
    """Fill the summary counters from the statements (single source of truth)."""
    sts = res.statements()
    res.backend = backend
    res.num_statements = len(sts)
    res.num_unaligned = sum(1 for s in sts if not s.aligned)
    res.num_fallback = sum(1 for s in sts if s.fallback)
    return res


def _record_metrics(res: VerifyResult) -> None:
    tags = {"backend": res.backend}
    metrics.inc("rlfh_verify_requests_total", 1, tags)
    metrics.observe("rlfh_verify_latency_ms", res.latency_ms, tags)
    metrics.observe("rlfh_statements_per_response", res.num_statements)
    for label, n in res.label_counts().items():
        if n:
            metrics.inc("rlfh_statements_total", n, {"label": label})
    if res.num_unaligned:
        metrics.inc("rlfh_unaligned_statements_total", res.num_unaligned)
    # rlfh_judge_fallbacks_total is counted where the fallback happens (llm_backend).
