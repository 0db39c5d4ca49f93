"""The update of one PPO step: MAX_EPOCHS passes over the :class:`Experience` on the critic (always) and the
policy (after FREEZING_ACTOR_STEPS), then the policy's new weights to the rollout engines."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from actors import calls
from actors.types import group_permutation
from actors.weight_sync import sync_weights
from cluster.experience_maker import Experience
from cluster.phase_timer import PhaseTimer
from core.config import RLFHConfig


@dataclass(frozen=True)
class UpdateResult:
    """What one PPO update did. The driver reads ``policy_trained`` (whether the engines need the new weights);
    the step's metrics record shows all of it (:func:`cluster.step_metrics.update_metrics`).

    The stats are the actors' ``train_step`` answers (the policy's policy_loss, clipfrac, approx_kl, grad_norm,
    train_s, ...; the critic's own), each the mean over ranks and epochs (:func:`mean_dicts`; numbers only).
    """

    policy_trained: bool               # False while the policy is frozen (step <= FREEZING_ACTOR_STEPS)
    policy_stats: dict[str, float]     # {stat: mean}; {} when the policy was not trained
    critic_stats: dict[str, float]     # {stat: mean}; {} without a critic (a group estimator)


def update(cfg: RLFHConfig, groups, exp: Experience, step: int, timer: PhaseTimer) -> UpdateResult:
    """PPO epochs on the critic and the policy (``exp``: ``B`` rows); returns what they did."""
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
    return UpdateResult(train_policy, mean_dicts(policy_stats), mean_dicts(critic_stats))


def mean_dicts(dicts: Sequence[dict]) -> dict[str, float]:
    """Mean of the numeric values of per-rank metric dicts."""
    out: dict[str, list[float]] = {}
    for d in dicts:
        for k, v in (d or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(k, []).append(float(v))
    return {k: sum(v) / len(v) for k, v in out.items()}


def sync(groups, timer: PhaseTimer) -> int:
    """The policy's weights to every rollout engine; returns the engines' new weights version."""
    with timer("sync"):
        return int(sync_weights(groups.policy, groups.rollout))
