"""Bounded waits on actor calls, and which failures mean "an actor is gone".

Every wait of the driver on an actor (``ray.get`` / ``ray.wait`` on the policy, critic, reference and rollout
engines, weight sync included) goes through :func:`get` or :func:`wait_any` with ``ACTOR_TIMEOUT_S``: an actor
that died answers at once with a :class:`ray.exceptions.RayActorError` (Ray notices the dead worker), and one
that hangs (stopped, deadlocked, stuck in a collective) answers :class:`ActorCallTimeout` after the timeout, so
the driver never waits forever. :func:`is_actor_failure` says whether an exception is one of those (the driver
then restarts the actor groups from the last checkpoint, see :mod:`cluster.driver`), as opposed to a bug in
the called code, which is raised as it is.
"""
from __future__ import annotations

import time
from typing import Any, Optional, Sequence

from core.config import RLFHConfig

#: ACTOR_TIMEOUT_S of the run: the setting's default (core/config.py) until the driver sets the run's value
#: with :func:`set_timeout_s` (``cfg.actor_timeout_s``: flag > environment > default). Not read from the
#: environment here: core/config.py is the one place that does.
_timeout_s: float = RLFHConfig.model_fields["actor_timeout_s"].default


def timeout_s(cfg: Optional[RLFHConfig] = None) -> float:
    """Seconds one wait on actors may take: ``cfg.actor_timeout_s``, or the run's (:func:`set_timeout_s`)."""
    return float(cfg.actor_timeout_s) if cfg is not None else _timeout_s


def start_timeout_s(cfg: Optional[RLFHConfig] = None) -> float:
    """Seconds starting an actor (process, imports, model load) may take: ACTOR_TIMEOUT_S, at least 300."""
    return max(timeout_s(cfg), 300.0)


def set_timeout_s(seconds: float) -> None:
    """Make ``seconds`` (the run's ACTOR_TIMEOUT_S) the default of every wait; checked like the setting."""
    global _timeout_s
    _timeout_s = RLFHConfig.load({}, actor_timeout_s=seconds).actor_timeout_s   # ConfigError when not > 0


def _timeout_error(what: str, seconds: float):
    from ray.exceptions import GetTimeoutError

    class ActorCallTimeout(GetTimeoutError):
        """No answer from an actor within ACTOR_TIMEOUT_S (it is hung, or the timeout is too short)."""
    err = ActorCallTimeout(f"{what}: no answer within {seconds:g}s (ACTOR_TIMEOUT_S): the actor is hung or the "
                           "timeout is too short for this model")
    err.what = what     # which call (role.method): the driver names the role from it
    return err


def get(refs: Any, what: str = "actor call", timeout: float | None = None) -> Any:
    """``ray.get(refs)`` bounded by ``timeout`` (default ACTOR_TIMEOUT_S); a timeout names ``what``."""
    import ray
    t = _timeout_s if timeout is None else timeout
    try:
        return ray.get(refs, timeout=t)
    except ray.exceptions.GetTimeoutError as e:
        raise _timeout_error(what, t) from e


def wait_any(pending: Sequence, deadline: float, what: str = "actor call") -> tuple[list, list]:
    """``ray.wait(pending, num_returns=1)`` until ``deadline`` (``time.monotonic()``); raises on timeout."""
    import ray
    left = deadline - time.monotonic()
    done, rest = ray.wait(list(pending), num_returns=1, timeout=max(0.0, left))
    if not done:
        raise _timeout_error(what, _timeout_s)
    return done, rest


def is_actor_failure(exc: BaseException) -> bool:
    """True for an actor (or its node / worker / objects) gone or hung; False for an error raised by its code."""
    try:
        from ray import exceptions as rx
    except ImportError:  # pragma: no cover
        return False
    kinds = tuple(k for k in (getattr(rx, n, None) for n in (
        "RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
        "ObjectLostError", "OwnerDiedError", "OutOfMemoryError", "GetTimeoutError", "LocalRayletDiedError",
        "RaySystemError")) if isinstance(k, type))
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, kinds):
            return True
        # an actor's task that failed because *another* actor died (an engine reading the policy's weights)
        exc = getattr(exc, "cause", None) if isinstance(exc, rx.RayTaskError) else exc.__cause__
    return False


def dead_actor_id(exc: BaseException) -> str | None:
    """The hex id of the actor an exception is about, when Ray says."""
    for attr in ("actor_id", "_actor_id"):
        v = getattr(exc, attr, None)
        if v:
            return v if isinstance(v, str) else getattr(v, "hex", lambda: str(v))()
    return None
