"""What the trainer does when an actor fails, and the logs it rewinds when steps are redone.

An actor that dies (policy, critic, reference or a rollout engine: Ray reports it at once) or hangs (no
answer within ``ACTOR_TIMEOUT_S``; every wait on an actor is bounded, :mod:`actors.calls`) does not stop
or hang the run: :class:`ActorRecovery` shuts every actor group down, starts them again and loads the last
checkpoint (step, data position, weights, optimizer, RNG); the driver goes on from there. The steps after that
checkpoint are redone, so their log lines are dropped first (:func:`rewind_jsonl`); a run resumed from a
checkpoint after the trainer itself was killed rewinds its logs the same way. ``MAX_ACTOR_RESTARTS`` bounds the
restarts between two checkpoints (:class:`RestartBudget`; ``rlfh_actor_restarts_total``, ``actor_restarts`` in
metrics.jsonl); past it the run stops with :class:`ActorGroupsFailed`, which says what failed and where a rerun
resumes.

A node that dies (its raylet gone: a machine lost, a KubeRay worker pod evicted) takes its actors with it; Ray
reports them dead once its GCS has declared the node dead. The restart then also says which node and which roles
went with it (:func:`actors.group.lost_nodes`, from where the placement groups had reserved each role's bundles),
and when a ``*_NODE_RESOURCE`` setting names a resource only that node offered, waits up to
``RLFH_PG_READY_TIMEOUT_S`` for a node offering it to (re)join before it starts the groups again; roles without
one start again on the nodes that remain. Each restart is kept in :attr:`ActorRecovery.restarts` (what failed,
the nodes lost, how long the restart took).

Which role failed is read from what Ray's exceptions carry, most reliable first (:func:`failed_role`): the
failed actor's id (an attribute of Ray's actor errors) matched against the run's actor handles; the call that
timed out (``ActorCallTimeout.what``, set by :mod:`actors.calls`); and only then the ``class_name:`` field of
the error text, the one place Ray 2.60 names a dead actor's class (:func:`role_from_ray_message`).
"""
from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from actors import calls
from actors.group import create_groups, kill_actors, live_node_ids, lost_nodes
from actors.weight_sync import sync_weights
from cluster.checkpoint import TrainerState, latest_checkpoint, load_checkpoint, read_state
from core import metrics
from core.config import ConfigError, RLFHConfig
from core.placement import NODE_RESOURCE_SETTINGS, wait_for_node_resources

log = logging.getLogger(__name__)

ROLES = ("policy", "critic", "reference", "rollout")

#: Ray actor class -> the role it plays (colocated: one process is the policy and the rollout engine).
ROLE_OF_CLASS = {"PolicyActor": "policy", "CriticActor": "critic", "ReferenceActor": "reference",
                 "HFRolloutEngine": "rollout", "VLLMRolloutEngine": "rollout", "ColocatedActor": "policy+rollout"}

# Ray 2.60's ActorDiedError text has one "\tclass_name: NAME" line (ray/exceptions.py builds it from the
# ActorDiedErrorContext); anchored to a line of its own so a traceback quoting the phrase is not read as one.
_CLASS_NAME_LINE = re.compile(r"^[ \t]*class_name:[ \t]*([A-Za-z_]\w*)[ \t]*$", re.MULTILINE)


class ActorGroupsFailed(RuntimeError):
    """An actor died or hung more often than MAX_ACTOR_RESTARTS allows between two checkpoints.

    ``resume_step``: the step a rerun of the same command resumes at (the last checkpoint's, 0 without one)."""

    def __init__(self, message: str, resume_step: int = 0):
        super().__init__(message)
        self.resume_step = resume_step


# --------------------------------------------------------------------------------------
# which actor failed, and how
# --------------------------------------------------------------------------------------

def cause_chain(err: Optional[BaseException]) -> Iterator[BaseException]:
    """``err`` and the exceptions behind it, outermost first: a Ray task error's ``cause`` (the error inside the
    actor, e.g. the ActorDiedError of another actor it read from), else ``__cause__``. No exception twice."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        inner = getattr(err, "cause", None)
        err = inner if isinstance(inner, BaseException) else err.__cause__


def failed_actor_id(err: BaseException) -> Optional[str]:
    """Hex id of the actor an error is about, as Ray's exceptions carry it (``actor_id`` of an actor error,
    ``_actor_id`` of a task error), innermost first: when an actor's task failed because another actor died, the
    dead one is the cause's actor, not the one whose task surfaced it."""
    for e in reversed(list(cause_chain(err))):
        for attr in ("actor_id", "_actor_id"):
            v = getattr(e, attr, None)
            if v:
                return v if isinstance(v, str) else getattr(v, "hex", lambda: str(v))()
    return None


def role_from_call(what: str) -> Optional[str]:
    """The role a call description names: ``policy.train_step``, ``rollout generate``, ``critic, reference``
    (the phases still waited for: the first one). None when it names none (``actor call``)."""
    return next((r for r in ROLES if what.startswith(r)), None)


def role_from_ray_message(text: str) -> Optional[str]:
    """The role of the actor class Ray's error text names (``class_name: PolicyActor``); an unknown class is
    returned as it is. None when the text names no class. The last resort: ids and call names come first."""
    m = _CLASS_NAME_LINE.search(text)
    return ROLE_OF_CLASS.get(m.group(1), m.group(1)) if m else None


def _hex_id(handle) -> str:
    """An actor handle's id, or the id of the actor behind a colocated role's view of one (actors.group.RoleHandle)."""
    handle = getattr(handle, "_handle", handle)
    aid = getattr(handle, "_actor_id", None)
    return aid.hex() if aid is not None else ""


def role_of_actor(actor_id: str, groups) -> Optional[str]:
    """The role(s) the actor ``actor_id`` plays in ``groups`` (``policy+rollout`` when one process hosts both)."""
    if not actor_id or groups is None:
        return None
    hits = [grp.role for grp in groups.groups() if any(_hex_id(a) == actor_id for a in grp.actors)]
    if any(_hex_id(e) == actor_id for e in groups.rollout):
        hits.append("rollout")
    return "+".join(hits) or None


def failed_role(err: BaseException, groups) -> str:
    """Which role the failed actor had (policy, critic, reference, rollout), when it can be told; else
    ``unknown``. See the module's docstring for the order of the evidence."""
    role = role_of_actor(failed_actor_id(err) or "", groups)
    if role:
        return role
    for e in cause_chain(err):
        role = role_from_call(str(getattr(e, "what", "") or "")) or role_from_call(str(e))
        if role:
            return role
    for e in cause_chain(err):
        role = role_from_ray_message(str(e))
        if role:
            return role
    return "unknown"


@dataclass(frozen=True)
class ActorFailure:
    """One actor failure as the logs and metrics name it."""

    role: str       # policy, critic, reference, rollout, policy+rollout, unknown
    reason: str     # "died", or "hung" (no answer within ACTOR_TIMEOUT_S)
    error: str      # the exception's type name
    detail: str     # the first line of its text (at most 300 characters)

    @classmethod
    def of(cls, err: BaseException, groups) -> "ActorFailure":
        from ray.exceptions import GetTimeoutError
        reason = "hung" if any(isinstance(e, GetTimeoutError) for e in cause_chain(err)) else "died"
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        return cls(failed_role(err, groups), reason, type(err).__name__, detail)


# --------------------------------------------------------------------------------------
# restarts
# --------------------------------------------------------------------------------------

class RestartBudget:
    """MAX_ACTOR_RESTARTS: how many actor-group restarts may happen between two checkpoints."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.total = 0          # restarts in this process, all of them
        self.since_save = 0     # ... since the last checkpoint was written

    def spend(self) -> bool:
        """Count one restart; True while it is within the limit."""
        self.total += 1
        self.since_save += 1
        return self.since_save <= self.limit

    def checkpoint_written(self) -> None:
        self.since_save = 0


def resume_point(ckpt: Optional[Path]) -> tuple[int, str]:
    """``(step, words)``: where a restart (or a rerun) goes back to."""
    if ckpt is None:
        return 0, "the start (no checkpoint yet; SAVE_STEP sets how often one is written)"
    step = read_state(ckpt).step
    return step, f"the last checkpoint {ckpt} (step {step})"


def give_up_message(step: int, failure: ActorFailure, restarts_before: int, limit: int, where: str) -> str:
    """The text of :class:`ActorGroupsFailed`: what failed, why the run stops, how to go on."""
    return (f"step {step}: the {failure.role} actor {failure.reason} ({failure.error}: {failure.detail}). The actor "
            f"groups were already restarted {restarts_before} time(s) since the last checkpoint "
            f"(MAX_ACTOR_RESTARTS={limit}), so training stops here. Rerun the same command to resume from {where}.")


def kill_groups(groups) -> None:
    """Kill every actor of ``groups``, then shut the groups down (placement groups freed): kill first, since a
    hung rank would hold a polite shutdown call up until its timeout."""
    kill_actors([a for grp in groups.groups() for a in grp.actors] + list(groups.rollout))
    try:
        groups.shutdown()
    except Exception as e:  # noqa: BLE001 - the groups are broken; what matters is that they go
        log.warning("shutting the failed actor groups down: %s", e)


class ActorRecovery:
    """Restarts the actor groups from the last checkpoint after an actor failure, within MAX_ACTOR_RESTARTS.

    Args:
        cfg: the run's settings (CKPT_PATH, MAX_ACTOR_RESTARTS, and what :func:`actors.group.create_groups` reads).
        create_groups: ``cfg -> Groups`` (tests may pass their own).
    """

    def __init__(self, cfg: RLFHConfig, create_groups: Optional[Callable] = None):
        self.cfg = cfg
        self.budget = RestartBudget(cfg.max_actor_restarts)
        self._create_groups = create_groups
        #: one record per restart: step, role, reason, lost_nodes ([{node_id, roles, resources}]), at (the wall
        #: time the failure reached the driver), seconds (how long the restart took) and resume_step (the
        #: checkpoint's step it went back to: steps resume_step+1 .. step are redone)
        self.restarts: list[dict] = []

    def restart(self, err: BaseException, groups, step: int,
                on_new_groups: Optional[Callable] = None) -> tuple[object, TrainerState]:
        """``(new groups, the last checkpoint's state)`` after the failure ``err`` of one of ``groups`` at
        ``step``. ``on_new_groups(groups)`` runs before the checkpoint is loaded (the self-judge's verifier takes
        the new engines). A failure while restarting counts as one more restart. Raises
        :class:`ActorGroupsFailed` once the budget is spent. Whatever it raises, the groups it was given and any
        it started are gone by then (killed), so the caller holds no groups afterwards."""
        create = self._create_groups or create_groups
        cfg = self.cfg
        while True:
            t0, noticed_at = time.monotonic(), time.time()
            failure = ActorFailure.of(err, groups)
            lost = _settled_lost_nodes(err, groups, cfg.actor_timeout_s)
            within = self.budget.spend()
            metrics.inc("rlfh_actor_restarts_total", 1, {"role": failure.role, "reason": failure.reason})
            ckpt = latest_checkpoint(cfg.effective_ckpt_path)
            resume_step, where = resume_point(ckpt)
            if not within:
                if groups is not None:
                    kill_groups(groups)
                raise ActorGroupsFailed(give_up_message(step, failure, self.budget.since_save - 1, self.budget.limit,
                                                        where), resume_step) from err
            for node in lost:
                log.error("step %d: node %s (%s) is lost, and with it the %s actor(s)", step, node["node_id"],
                          ", ".join(node["resources"]) or "no custom resources", ", ".join(node["roles"]))
            log.error("step %d: the %s actor %s (%s: %s); restarting the actor groups from %s (restart %d of at "
                      "most %d before the next checkpoint)", step, failure.role, failure.reason, failure.error,
                      failure.detail, where, self.budget.since_save, self.budget.limit)
            record = {"step": step, "role": failure.role, "reason": failure.reason, "lost_nodes": lost,
                      "at": noticed_at}
            self.restarts.append(record)
            if groups is not None:
                kill_groups(groups)
            groups = None
            try:
                if lost:
                    self._wait_for_nodes(step, where, resume_step)
                groups = create(cfg)
                if on_new_groups is not None:
                    on_new_groups(groups)
                if ckpt is None:
                    record["seconds"], record["resume_step"] = round(time.monotonic() - t0, 2), 0
                    return groups, TrainerState()
                state = load_checkpoint(ckpt, groups)
                sync_weights(groups.policy, groups.rollout)
                record["seconds"] = round(time.monotonic() - t0, 2)
                record["resume_step"] = state.step
                return groups, state
            except Exception as e:
                if not calls.is_actor_failure(e):
                    if groups is not None:
                        kill_groups(groups)
                    raise
                log.error("restarting the actor groups failed: %s", e)
                err = e

    def _wait_for_nodes(self, step: int, where: str, resume_step: int) -> None:
        """After a node loss: wait (up to RLFH_PG_READY_TIMEOUT_S) for a live node offering every *_NODE_RESOURCE
        the roles name; :class:`ActorGroupsFailed` when none (re)joins in time."""
        try:
            waited = wait_for_node_resources(self.cfg, list(NODE_RESOURCE_SETTINGS), self.cfg.pg_ready_timeout_s)
        except ConfigError as e:
            raise ActorGroupsFailed(f"step {step}: a node was lost and none took its place within "
                                    f"RLFH_PG_READY_TIMEOUT_S={self.cfg.pg_ready_timeout_s:g}s: {e} Rerun the same "
                                    f"command once it is back to resume from {where}.", resume_step) from None
        if waited >= 1.0:
            log.warning("a node offering the placement's resources is back after %.0fs", waited)


def _settled_lost_nodes(err: BaseException, groups, grace_s: float, poll_s: float = 0.5) -> list[dict]:
    """The lost nodes of ``groups`` once the GCS has decided. A node's loss reaches the driver first as an
    ActorUnavailableError (the connection to an actor on it reset), seconds before the GCS's health checks declare
    the node dead (Ray's defaults: ~15 s). So after such an error, wait up to ``grace_s`` (ACTOR_TIMEOUT_S) for
    either verdict: a node of the placement dead (returned), or the failed actor dead on a live node (only the
    actor was lost: []). Any other failure is read at once."""
    lost = _lost_nodes(groups)
    if lost or not _may_be_node_loss(err):
        return lost
    actor_id = failed_actor_id(err) or ""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        lost = _lost_nodes(groups)
        if lost or _actor_dead_on_live_node(actor_id):
            return lost
    return []


def _may_be_node_loss(err: BaseException) -> bool:
    from ray.exceptions import ActorUnavailableError
    return any(isinstance(e, ActorUnavailableError) for e in cause_chain(err))


def _actor_dead_on_live_node(actor_id: str) -> bool:
    """True when the GCS lists ``actor_id`` as DEAD while the node it ran on is alive."""
    if not actor_id:
        return False
    from ray._private import state
    try:
        info = state.actors(actor_id=actor_id) or {}
        node_id = (info.get("Address") or {}).get("NodeID", "")
        alive = live_node_ids()
    except Exception:  # noqa: BLE001 - the GCS unreachable: no verdict yet
        return False
    return info.get("State") == "DEAD" and node_id in alive


def _lost_nodes(groups) -> list[dict]:
    """The nodes ``groups``' placement groups had bundles on that are dead now (see actors.group.lost_nodes)."""
    placement = getattr(groups, "placement", None)
    if placement is None or not getattr(placement, "roles", None):
        return []
    return lost_nodes(placement)


# --------------------------------------------------------------------------------------
# logs of redone steps
# --------------------------------------------------------------------------------------

def rewind_jsonl(path: Path, step: int) -> list[dict]:
    """Drop the lines of steps after ``step`` from the JSON-lines log ``path`` (those steps are redone) and return
    the records kept, in file order. Every other line stays byte for byte and new steps are appended after them;
    a line cut short by a kill is dropped too. The file is replaced atomically (a kill during the rewind loses
    nothing) and only when a line goes. A missing file is an empty log."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    kept_lines, kept = [], []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("step", 0) <= step:
            kept_lines.append(line)
            kept.append(rec)
    if len(kept_lines) != len(lines):
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text("".join(x + "\n" for x in kept_lines), encoding="utf-8")
        os.replace(tmp, path)
        log.info("%s: %d line(s) of steps after step %d dropped (they are redone)", path.name,
                 len(lines) - len(kept_lines), step)
    return kept


def set_aside_old_logs(paths: Iterable[Path], now: Optional[float] = None) -> list[Path]:
    """A fresh run in an old SAVE_PATH: rename each existing log to ``NAME.jsonl.<unix time>.old`` so the run
    starts new ones. Returns the new names."""
    stamp = int(time.time() if now is None else now)
    moved = []
    for path in map(Path, paths):
        if path.exists():
            dest = path.with_suffix(f".jsonl.{stamp}.old")
            path.rename(dest)
            moved.append(dest)
    return moved
