"""The update of one PPO step: MAX_EPOCHS passes over the :class:`Experience` on the critic (always) and the
policy (after FREEZING_ACTOR_STEPS), then the policy's new weights to the rollout engines."""
from __future__ import annotations

from typing import Any

import torch

from actors import calls
from actors.types import group_permutation
from actors.weight_sync import sync_weights
from cluster.experience_maker import Experience
from cluster.phase_timer import PhaseTimer
from cluster.step_metrics import mean_dicts
from core.config import RLFHConfig


def update(cfg: RLFHConfig, groups, exp: Experience, step: int, timer: PhaseTimer) -> dict[str, Any]:
    """PPO epochs on the critic and the policy; returns the actors' mean training stats (``policy/...``,
    ``critic/...``) and ``policy_trained``."""
    train_policy = step > cfg.freezing_actor_steps
    gen = torch.Generator().manual_seed(cfg.seed * 7_919 + step)
    policy_stats, critic_stats = [], []
    # the critic and the policy are different actors: trained concurrently, they split the CPU threads
    share = int(groups.critic is not None) + int(train_policy)
    with timer("train"):
        for epoch in range(cfg.max_epochs):
            # later epochs shuffle whole prompt groups: micro batches keep running each prompt once
            rows = group_permutation(exp.as_batch(), gen) if epoch > 0 else torch.arange(len(exp))
            crefs = (groups.critic.dispatch_async("train_step", exp.critic_batch(rows), share=share)
                     if groups.critic is not None else [])
            prefs = (groups.policy.dispatch_async("train_step", exp.policy_batch(rows), share=share)
                     if train_policy else [])
            critic_stats += calls.get(crefs, "critic.train_step", calls.timeout_s(cfg))
            policy_stats += calls.get(prefs, "policy.train_step", calls.timeout_s(cfg))
    return {**{f"policy/{k}": v for k, v in mean_dicts(policy_stats).items()},
            **{f"critic/{k}": v for k, v in mean_dicts(critic_stats).items()},
            "policy_trained": train_policy}


def sync(groups, timer: PhaseTimer) -> int:
    """The policy's weights to every rollout engine; returns the engines' new weights version."""
    with timer("sync"):
        return int(sync_weights(groups.policy, groups.rollout))
