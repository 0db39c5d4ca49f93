"""Project metrics through ``ray.util.metrics``: Ray dashboard + Prometheus, one catalogue.

Every metric the project exports is declared once in :data:`CATALOGUE`
(name, kind, help, tag keys); services and the driver call
:func:`inc`, :func:`set_gauge` or :func:`observe` by name. Ray prefixes
names with ``ray_`` on its Prometheus endpoint, so ``rlfh_reward_mean`` is
scraped as ``ray_rlfh_reward_mean``. The Grafana dashboard in ``deploy/``
reads the same names.

Outside a Ray worker/driver (plain unit tests) every call is a no-op, so the
math and service code never depend on Ray being up.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Optional

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str  # counter | gauge | histogram
    help: str
    tag_keys: tuple[str, ...] = ()
    boundaries: tuple[float, ...] = ()


_LAT_BOUNDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000)

CATALOGUE: dict[str, MetricSpec] = {m.name: m for m in [
    # --- services
    MetricSpec("rlfh_verify_requests_total", "counter", "Responses verified.", ("backend",)),
    MetricSpec("rlfh_verify_latency_ms", "histogram", "Verifier latency per response (ms).", ("backend",),
               _LAT_BOUNDS),
    MetricSpec("rlfh_statements_total", "counter", "Atomic statements labelled, by label.", ("label",)),
    MetricSpec("rlfh_statements_per_response", "histogram", "Statements per verified response.", (),
               (0.5, 1, 2, 3, 4, 6, 8, 12, 16, 32)),
    MetricSpec("rlfh_judge_fallbacks_total", "counter", "Statements labelled by the fallback after judge failures.",
               ("backend",)),
    MetricSpec("rlfh_judge_rate_limited_total", "counter", "429 answers of the llm judge's endpoint, by their "
               "Retry-After: honoured (waited out, then retried), too_long (over LLM_MAX_WAIT_S: not retried), "
               "absent (the back-off applies).", ("retry_after",)),
    MetricSpec("rlfh_unaligned_statements_total", "counter", "Statements whose span fell back to their sentence."),
    MetricSpec("rlfh_call_failures_total", "counter", "Failed attempts of judge / reward-service calls (timeouts, "
               "connection errors, 5xx, malformed replies), each retried or given up, by target.", ("target",)),
    MetricSpec("rlfh_cache_requests_total", "counter", "Verification cache lookups by result (hit|miss|error).",
               ("result",)),
    MetricSpec("rlfh_cache_hit_rate", "gauge", "Verification cache hit rate since replica start."),
    MetricSpec("rlfh_reward_requests_total", "counter", "Reward requests by route and status.", ("route", "status")),
    MetricSpec("rlfh_reward_latency_ms", "histogram", "Reward request latency (ms).", ("route",), _LAT_BOUNDS),
    MetricSpec("rlfh_reward_mean", "gauge", "Mean total reward per response (last batch).", ("source",)),
    MetricSpec("rlfh_label_share", "gauge", "Share of statements with each label (last batch).",
               ("label", "source")),
    # --- training
    MetricSpec("rlfh_train_step", "gauge", "Current PPO step."),
    MetricSpec("rlfh_dev_eval", "gauge", "In-loop dev evaluation (greedy answers, DEV_EVAL_STEP): shares of correct, "
               "incorrect and declined answers, accuracy on attempted, declined share per question type, score.",
               ("mode", "metric")),
    MetricSpec("rlfh_train_kl", "gauge", "Mean per-token KL to the reference (last step)."),
    MetricSpec("rlfh_train_policy_loss", "gauge", "Policy loss (last step)."),
    MetricSpec("rlfh_train_value_loss", "gauge", "Critic loss (last step)."),
    MetricSpec("rlfh_train_response_length", "gauge", "Mean response length in tokens (last step)."),
    MetricSpec("rlfh_step_time_seconds", "gauge", "Step time by phase (generate, reward, reference, critic, "
               "policy_forward, train, sync, total).", ("phase",)),
    MetricSpec("rlfh_rollout_tokens_per_second", "gauge", "Rollout generation throughput."),
    MetricSpec("rlfh_skipped_batches_total", "counter", "Batches skipped after reward-service failures.",
               ("reason",)),
    MetricSpec("rlfh_actor_restarts_total", "counter", "Restarts of the actor groups from the last checkpoint "
               "after an actor died (reason=died) or hung past ACTOR_TIMEOUT_S (reason=hung), by the role whose "
               "actor failed.", ("role", "reason")),
]}

_lock = threading.Lock()
_objects: dict[str, object] = {}


def _ray_ready() -> bool:
    try:
        import ray
        return ray.is_initialized()
    except Exception:
        return False


def _get(name: str):
    spec = CATALOGUE.get(name)
    if spec is None:
        raise KeyError(f"metric {name!r} is not declared in core.metrics.CATALOGUE")
    if not _ray_ready():
        return None
    with _lock:
        obj = _objects.get(name)
        if obj is None:
            from ray.util import metrics as m
            if spec.kind == "counter":
                obj = m.Counter(spec.name, description=spec.help, tag_keys=spec.tag_keys)
            elif spec.kind == "gauge":
                obj = m.Gauge(spec.name, description=spec.help, tag_keys=spec.tag_keys)
            else:
                obj = m.Histogram(spec.name, description=spec.help, boundaries=list(spec.boundaries),
                                  tag_keys=spec.tag_keys)
            _objects[name] = obj
    return obj


def _tags(tags: Optional[dict]) -> Optional[dict]:
    return {k: str(v) for k, v in tags.items()} if tags else None


def inc(name: str, value: float = 1.0, tags: Optional[dict] = None) -> None:
    obj = _get(name)
    if obj is not None and value > 0:
        obj.inc(value, tags=_tags(tags))


def set_gauge(name: str, value: float, tags: Optional[dict] = None) -> None:
    obj = _get(name)
    if obj is not None:
        obj.set(float(value), tags=_tags(tags))


def observe(name: str, value: float, tags: Optional[dict] = None) -> None:
    obj = _get(name)
    if obj is not None:
        obj.observe(float(value), tags=_tags(tags))
