"""The colocated layout (MODEL_LAYOUT=colocated, the CPU default): one actor process per rank hosts every role.

:class:`ColocatedActor` IS the policy rank (a :class:`actors.policy.PolicyActor`) and also holds, in the same
process:

* the rollout engine: an :class:`actors.rollout.HFRolloutEngine` over the policy's own module (no second copy
  of the weights, no weight sync: after a train step the engine samples from the updated weights; a "sync" only
  records the version). With ROLLOUT_DTYPE resolving to bf16 on an fp32 policy it generates under bf16
  autocast instead of from a bf16 copy;
* the reference (KL_COEF > 0 only): with LoRA the policy's module with its adapters switched off (again no
  copy), else a :class:`actors.reference.ReferenceActor` loaded next to the policy;
* the critic (ADVANTAGE_ESTIMATOR=gae only): a :class:`actors.critic.CriticActor`. With CRITIC_TRAIN_LAYERS its
  frozen embeddings and lower layers are the reference's modules (both start from MODEL_PATH).

The roles are the existing classes, not a second implementation: :meth:`ColocatedActor.call_role` forwards a
method call to one of them, and :class:`actors.group.RoleView` / :class:`actors.group.RoleHandle` give the
driver the same ``ActorGroup`` / engine-handle API as the separate layout, so the driver, checkpoints and
weight sync do not know which layout runs. Calls to one process run one at a time, so every phase gets all
CPU_THREADS (the ``share`` the driver passes for concurrent actors is ignored here).
"""
from __future__ import annotations

import logging
import time
from typing import Any

import torch

from actors.base import response_logprobs, weights_checksum
from actors.critic import CriticActor
from actors.policy import PolicyActor
from actors.reference import ReferenceActor
from actors.roles import needs_critic, needs_reference
from actors.rollout import HFRolloutEngine, resolve_rollout_dtype
from actors.types import Batch

log = logging.getLogger(__name__)


class _AdapterOffReference:
    """The reference of a LoRA policy: the policy's module with its adapters disabled (the frozen base)."""

    role = "reference"

    def __init__(self, host: "ColocatedActor"):
        self.host = host

    @torch.no_grad()
    def logprobs(self, batch: Batch, share: int = 1) -> torch.Tensor:
        h = self.host
        h._phase_threads()
        h.engine.eval()
        with h.module.disable_adapter():
            return response_logprobs(h.module, batch, h.cfg, h.device, h.autocast, h.share_prompt)

    def ping(self) -> dict:
        return dict(self.host.ping(), role="reference")

    def weights_fingerprint(self) -> dict[str, float]:
        return weights_checksum((n, p) for n, p in self.host.module.named_parameters() if "lora_" not in n)

    def shutdown(self) -> bool:
        return True


class ColocatedActor(PolicyActor):
    """Policy rank + its rollout engine + reference + critic in one process (see the module doc)."""

    role = "policy"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.roles: dict[str, Any] = {}

    def _phase_threads(self, share: int = 1) -> int:
        return super()._phase_threads(1)   # nothing else computes in this process at the same time

    def init_model(self) -> dict:
        """Load the policy, then build the other roles around it. Returns ``{role: init info}``."""
        t0 = time.time()
        out = {"policy": super().init_model()}
        args = (self.cfg, self.rank, self.world_size, self.master_addr, self.master_port)
        if needs_reference(self.cfg):
            if self.lora:
                self.roles["reference"] = _AdapterOffReference(self)
                out["reference"] = {"model_path": self.model_path, "shares_policy_weights": True}
            else:
                ref = ReferenceActor(*args)
                out["reference"] = ref.init_model()
                self.roles["reference"] = ref
        if needs_critic(self.cfg):
            critic = CriticActor(*args)
            ref = self.roles.get("reference")
            # CRITIC_TRAIN_LAYERS: the critic's frozen layers can be the reference's own (same initial weights)
            share = (self.cfg.critic_train_layers and not self.cfg.critic_pretrain and self.cfg.zero_stage < 3
                     and getattr(ref, "model", None) is not None)
            out["critic"] = critic.init_model(frozen_from=ref.model.base_model if share else None)
            self.roles["critic"] = critic
        eng = HFRolloutEngine(self.cfg, self.rank, model=self.module, tokenizer=self.tokenizer,
                              device=str(self.device), autocast=resolve_rollout_dtype(self.cfg, self.device),
                              shares_policy_weights=True)
        eng._next_version(self._weights_version)
        self.roles["rollout"] = eng
        out["rollout"] = eng.info()
        log.info("colocated rank %d: %s in one process, ready in %.1fs", self.rank,
                 "+".join(["policy", *self.roles]), time.time() - t0)
        return out

    def call_role(self, role: str, method: str, *args, **kwargs):
        """``method(*args, **kwargs)`` on the hosted ``role`` (rollout / reference / critic; policy: self)."""
        kwargs.pop("share", None)
        target = self if role == "policy" else self.roles.get(role)
        if target is None:
            raise ValueError(f"this colocated actor hosts no {role!r} (it has: policy, {', '.join(self.roles)})")
        return getattr(target, method)(*args, **kwargs)

    def shutdown(self) -> bool:
        for r in self.roles.values():
            try:
                r.shutdown()   # the process group is shared: tearing it down twice is safe
            except Exception as e:  # noqa: BLE001 - best effort at exit
                log.warning("shutting down %s failed: %s", getattr(r, "role", r), e)
        return super().shutdown()
