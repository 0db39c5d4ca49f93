"""cluster.recovery without a Ray cluster: which role failed (from Ray's own exception objects, built as Ray builds
them), the restart budget, the give-up message, the restart loop over stand-in groups, and the log rewind.
The end-to-end probes (real actors SIGKILLed and SIGSTOPped) are in tests/test_faults.py."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from ray import exceptions as rx
from ray.core.generated.common_pb2 import ActorDiedErrorContext

from actors import calls
from cluster import recovery
from cluster.checkpoint import TrainerState
from cluster.recovery import (ActorFailure, ActorGroupsFailed, ActorRecovery, RestartBudget, failed_actor_id,
                              failed_role, give_up_message, rewind_jsonl, role_from_call, role_from_ray_message,
                              set_aside_old_logs)
from core.config import RLFHConfig

POLICY_ID, ENGINE_ID, CRITIC_ID = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16


def died(class_name: str, actor_id: bytes) -> rx.ActorDiedError:
    """The error Ray raises for an actor whose worker died (Ray builds it from this context)."""
    return rx.ActorDiedError(ActorDiedErrorContext(
        class_name=class_name, actor_id=actor_id, pid=4242,
        error_message="The actor is dead because its worker process has died."))


def task_error(method: str, cause: BaseException, actor_id: bytes) -> BaseException:
    """A task of actor ``actor_id`` that failed with ``cause``, as Ray raises it (a dual RayTaskError)."""
    return rx.RayTaskError(method, "Traceback ...", cause, actor_id=actor_id.hex()).as_instanceof_cause()


class _Id:
    def __init__(self, raw: bytes):
        self.raw = raw

    def hex(self) -> str:
        return self.raw.hex()


def handle(raw: bytes):
    return SimpleNamespace(_actor_id=_Id(raw))


def groups(layout: str = "separate"):
    """Stand-in for actors.group.Groups: what failed_role reads (roles, actor handles)."""
    if layout == "colocated":    # one process is the policy and the engine (RoleHandle wraps the same actor)
        policy = SimpleNamespace(role="policy", actors=[handle(POLICY_ID)])
        return SimpleNamespace(groups=lambda: [policy], rollout=[SimpleNamespace(_handle=handle(POLICY_ID))])
    policy = SimpleNamespace(role="policy", actors=[handle(POLICY_ID)])
    critic = SimpleNamespace(role="critic", actors=[handle(CRITIC_ID)])
    return SimpleNamespace(groups=lambda: [policy, critic], rollout=[handle(ENGINE_ID)])


def test_rays_text_names_the_class_on_a_line_of_its_own():
    assert role_from_ray_message(str(died("PolicyActor", POLICY_ID))) == "policy"
    assert role_from_ray_message(str(died("VLLMRolloutEngine", ENGINE_ID))) == "rollout"
    assert role_from_ray_message(str(died("SomethingNew", ENGINE_ID))) == "SomethingNew"   # named as Ray says
    assert role_from_ray_message("ValueError: bad class_name: PolicyActor in the config") is None
    assert role_from_ray_message("no class here") is None


def test_the_dead_actor_is_the_innermost_one_named():
    assert failed_actor_id(died("PolicyActor", POLICY_ID)) == POLICY_ID.hex()
    # the engine's task failed because the policy it read weights from is gone: the policy is the failed one
    # (ActorUnavailableError: the cause must pickle, and an ActorDiedError built from its context does not)
    wrapped = task_error("update_weights", rx.ActorUnavailableError("connection lost", POLICY_ID), ENGINE_ID)
    assert isinstance(wrapped, rx.RayTaskError) and calls.is_actor_failure(wrapped)
    assert failed_actor_id(wrapped) == POLICY_ID.hex() and failed_role(wrapped, groups()) == "policy"
    outer = RuntimeError("weight sync failed")
    outer.__cause__ = wrapped
    assert failed_actor_id(outer) == POLICY_ID.hex()
    assert failed_actor_id(rx.GetTimeoutError("no answer")) is None


def test_failed_role_prefers_ids_then_call_names_then_rays_text():
    g = groups()
    assert failed_role(died("PolicyActor", POLICY_ID), g) == "policy"
    assert failed_role(died("HFRolloutEngine", ENGINE_ID), g) == "rollout"
    # the id wins over the text (a class Ray names differently from the role is still found)
    assert failed_role(died("PolicyActor", CRITIC_ID), g) == "critic"
    assert failed_role(died("PolicyActor", POLICY_ID), groups("colocated")) == "policy+rollout"
    # an actor not of this run (already replaced): Ray's class name
    assert failed_role(died("ReferenceActor", b"\x09" * 16), g) == "reference"
    # a hang names no actor: the call that timed out does
    hung = calls._timeout_error("critic.train_step", 20.0)
    assert failed_role(hung, g) == "critic"
    assert failed_role(calls._timeout_error("critic, policy_forward, reference", 20.0), g) == "critic"
    assert failed_role(calls._timeout_error("actor call", 20.0), g) == "unknown"
    assert failed_role(rx.GetTimeoutError("no answer"), None) == "unknown"


def test_call_names():
    assert role_from_call("policy.train_step") == "policy"
    assert role_from_call("rollout generate") == "rollout"
    assert role_from_call("policy_forward, reference") == "policy"
    assert role_from_call("colocated init_model") is None


def test_failure_reason_and_detail():
    f = ActorFailure.of(died("PolicyActor", POLICY_ID), groups())
    assert (f.role, f.reason, f.error) == ("policy", "died", "ActorDiedError")
    assert f.detail == "The actor died unexpectedly before finishing this task."
    h = ActorFailure.of(calls._timeout_error("rollout generate", 5.0), groups())
    assert (h.role, h.reason) == ("rollout", "hung") and h.detail.startswith("rollout generate: no answer within 5s")


def test_restart_budget_counts_since_the_last_checkpoint():
    b = RestartBudget(1)
    assert b.spend() and not b.spend()
    assert (b.total, b.since_save) == (2, 2)
    b.checkpoint_written()
    assert b.spend() and (b.total, b.since_save) == (3, 1)
    assert not RestartBudget(0).spend()


def test_give_up_message_says_what_failed_and_where_a_rerun_resumes():
    f = ActorFailure("policy", "died", "ActorDiedError", "The actor died unexpectedly before finishing this task.")
    msg = give_up_message(7, f, 1, 1, "the last checkpoint /c/global_step_00006 (step 6)")
    assert msg.startswith("step 7: the policy actor died (ActorDiedError: The actor died")
    assert "restarted 1 time(s)" in msg and "MAX_ACTOR_RESTARTS=1" in msg
    assert msg.endswith("Rerun the same command to resume from the last checkpoint /c/global_step_00006 (step 6).")


def _cfg(tmp_path, limit: int) -> RLFHConfig:
    return RLFHConfig.load(environ={}, save_path=str(tmp_path / "run"), ckpt_path=str(tmp_path / "ckpt"),
                           max_actor_restarts=limit)


def test_restart_without_a_checkpoint_starts_over_and_a_failed_restart_counts(tmp_path, monkeypatch):
    killed = []
    monkeypatch.setattr(recovery, "kill_groups", lambda g: killed.append(g))
    new = groups()
    attempts = iter([died("PolicyActor", b"\x05" * 16), new])   # the first restart dies while starting

    def create(cfg):
        nxt = next(attempts)
        if isinstance(nxt, BaseException):
            raise nxt
        return nxt
    seen = []
    rec = ActorRecovery(_cfg(tmp_path, 2), create_groups=create)
    old = groups()
    got, state = rec.restart(died("PolicyActor", POLICY_ID), old, step=3, on_new_groups=seen.append)
    assert got is new and seen == [new] and state == TrainerState()
    assert killed == [old]                      # the first groups killed; the half-started ones were never made
    assert (rec.budget.total, rec.budget.since_save) == (2, 2)


def test_restart_gives_up_past_the_budget_and_ends_the_groups(tmp_path, monkeypatch):
    killed = []
    monkeypatch.setattr(recovery, "kill_groups", killed.append)
    rec = ActorRecovery(_cfg(tmp_path, 0), create_groups=lambda cfg: pytest.fail("no restart past the budget"))
    old = groups()
    with pytest.raises(ActorGroupsFailed) as info:
        rec.restart(calls._timeout_error("rollout generate", 5.0), old, step=4)
    assert killed == [old] and info.value.resume_step == 0
    assert "the rollout actor hung" in str(info.value) and "MAX_ACTOR_RESTARTS=0" in str(info.value)
    assert "the start (no checkpoint yet" in str(info.value)


def test_groups_started_by_a_restart_that_then_fails_are_ended(tmp_path, monkeypatch):
    killed = []
    monkeypatch.setattr(recovery, "kill_groups", killed.append)
    old, new = groups(), groups()

    def adopt(g):   # the new groups are up, then the code handed them raises (a bug, not an actor failure)
        raise ValueError("bad shapes")
    rec = ActorRecovery(_cfg(tmp_path, 3), create_groups=lambda cfg: new)
    with pytest.raises(ValueError, match="bad shapes"):
        rec.restart(died("PolicyActor", POLICY_ID), old, 1, on_new_groups=adopt)
    assert killed == [old, new]
    # past the budget after a restart that died while starting: the half-started groups go too
    killed.clear()
    rec = ActorRecovery(_cfg(tmp_path, 1), create_groups=lambda cfg: new)
    with pytest.raises(ActorGroupsFailed, match="restarted 1 time"):
        rec.restart(died("PolicyActor", POLICY_ID), old, 1,
                    on_new_groups=lambda g: (_ for _ in ()).throw(died("PolicyActor", b"\x07" * 16)))
    assert killed == [old, new]


def test_rewind_jsonl(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert rewind_jsonl(path, 3) == [] and not path.exists()
    keep = [{"step": 1}, {"step": 3, "x": [1, 2]}, {"note": "no step: kept"}]
    text = "".join(json.dumps(r) + "\n" for r in keep)
    path.write_text(text + json.dumps({"step": 4}) + "\n[1, 2]\n" + '{"step": 5, "cut')
    assert rewind_jsonl(path, 3) == keep
    assert path.read_text() == text
    assert not list(tmp_path.glob(".*.tmp-*"))


def test_set_aside_old_logs(tmp_path):
    a, b = tmp_path / "metrics.jsonl", tmp_path / "samples.jsonl"
    a.write_text("{}\n")
    moved = set_aside_old_logs([a, b], now=1700000000)
    assert moved == [tmp_path / "metrics.jsonl.1700000000.old"] and moved[0].read_text() == "{}\n"
    assert not a.exists() and not b.exists()
