"""Bounded waits on actor calls, and which failures mean "an actor is gone".

Every wait of the driver on an actor (``ray.get`` / ``ray.wait`` on the policy, critic, reference and rollout
engines, weight sync included) goes through :func:`get` or :func:`wait_any` with the run's ``ACTOR_TIMEOUT_S`` (passed by the caller): an actor
that died answers at once with a :class:`ray.exceptions.RayActorError` (Ray notices the dead worker), and one
that hangs (stopped, deadlocked, stuck in a collective) answers :class:`ActorCallTimeout` after the timeout, so
the driver never waits forever. :func:`is_actor_failure` says whether an exception is one of those (the driver
then restarts the actor groups from the last checkpoint, see :mod:`cluster.driver`), as opposed to a bug in
the called code, which is raised as it is.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from core.config import RLFHConfig

def timeout_s(cfg: RLFHConfig) -> float:
    """Seconds one wait on actors may take: the run's ACTOR_TIMEOUT_S (``cfg.actor_timeout_s``). There is no
    module-wide default: each caller passes the timeout of the run it belongs to."""
    return float(cfg.actor_timeout_s)


def start_timeout_s(cfg: RLFHConfig) -> float:
    """Seconds starting an actor (process, imports, model load) may take: ACTOR_TIMEOUT_S, at least 300."""
    return max(timeout_s(cfg), 300.0)


def _timeout_error(what: str, seconds: float):
    from ray.exceptions import GetTimeoutError

    class ActorCallTimeout(GetTimeoutError):
        """No answer from an actor within ACTOR_TIMEOUT_S (it is hung, or the timeout is too short)."""
    err = ActorCallTimeout(f"{what}: no answer within {seconds:g}s (ACTOR_TIMEOUT_S): the actor is hung or the "
                           "timeout is too short for this model")
    err.what = what     # which call (role.method): the driver names the role from it
    return err


def get(refs: Any, what: str, timeout: float) -> Any:
    """``ray.get(refs)`` bounded by ``timeout`` seconds (the run's ACTOR_TIMEOUT_S, :func:`timeout_s`); a timeout
    raises ``ActorCallTimeout`` naming ``what`` (``role.method``: the driver restarts that role's group)."""
    import ray
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError as e:
        raise _timeout_error(what, timeout) from e


def wait_any(pending: Sequence, deadline: float, what: str, timeout: float) -> tuple[list, list]:
    """``ray.wait(pending, num_returns=1)`` until ``deadline`` (``time.monotonic()``, set ``timeout`` seconds
    after the calls were launched); raises ``ActorCallTimeout`` naming ``what`` when nothing answered by then."""
    import ray
    left = deadline - time.monotonic()
    done, rest = ray.wait(list(pending), num_returns=1, timeout=max(0.0, left))
    if not done:
        raise _timeout_error(what, timeout)
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
