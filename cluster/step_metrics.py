"""A step's metrics record, made from the experience maker's records (:mod:`cluster.experience_maker`) and the
update's (:class:`cluster.ppo_update.UpdateResult`).

Each function reads records and returns the entries it adds to the step's row (metrics.jsonl, TensorBoard, the
progress bar); none of them changes what is trained on, and the driver never reads the row back to decide
anything (it reads the records). Rates of responses are over the policy's own samples: injected abstention
candidates are left out.
"""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import torch

from cluster.experience import label_mix
from core.core_algos import masked_mean
from core.questions import question_type

if TYPE_CHECKING:   # the records this module reads (annotations only)
    from cluster.experience_maker import Experience, Outcomes, Rewards, Rollout, Scores
    from cluster.ppo_update import UpdateResult

MODES = ("closed", "evidence")
QUESTION_TYPES = ("yes_no", "choice", "open")



def rollout_metrics(rollout: "Rollout", generate_s: float) -> dict[str, Any]:
    """Tokens, speed, length, truncation, and a digest of the sampled token ids (equal runs: equal digests)."""
    samples, batch = rollout.samples, rollout.batch
    n_tokens = int(batch["action_mask"].sum())
    return {"rollout_digest": hashlib.sha1(batch["sequences"].numpy().tobytes()).hexdigest()[:16],
            "rollout_tokens": n_tokens,
            "rollout_tokens_per_s": n_tokens / max(generate_s, 1e-9),
            "response_length": n_tokens / len(samples),
            "truncated_rate": sum(s.finish_reason == "length" for s in samples) / len(samples)}


def score_metrics(rollout: "Rollout", scores: "Scores", by_mode: bool) -> dict[str, Any]:
    """The verifier's view: mean score, correct and abstain rates, statement label shares; ``by_mode``
    (PROMPT_MODE=mixed: the two halves learn different things) the same per prompt mode as well."""
    sampled, results = rollout.sampled, scores.results
    mix, n_statements = label_mix(results)
    row = {"score_mean": float(scores.score[sampled].mean()),
           "correct_rate": float(scores.is_correct[sampled].float().mean()),
           "abstain_rate": float(scores.abstained[sampled].float().mean()),
           "injected_abstentions": int(rollout.injected.sum()),
           "statements_per_response": n_statements / max(1, int(sampled.sum())),
           "cached_rate": sum(bool(getattr(r, "cached", False)) for r in results) / len(results),
           **{f"label_share/{k}": v for k, v in mix.items()}}
    if by_mode:
        for m in MODES:
            sel = rollout.in_mode(m) & sampled
            if bool(sel.any()):
                row[f"score_mean/{m}"] = float(scores.score[sel].mean())
                row[f"correct_rate/{m}"] = float(scores.is_correct[sel].float().mean())
                row[f"abstain_rate/{m}"] = float(scores.abstained[sel].float().mean())
    return row


def outcome_metrics(rollout: "Rollout", outcomes: "Outcomes", by_mode: bool) -> dict[str, Any]:
    """The outcome judge's correct and abstain rates (overall, per prompt mode with ``by_mode``, per question
    type closed book), then the abstention price entries."""
    sampled, correct, abstained = rollout.sampled, outcomes.correct, outcomes.abstained
    row = {"gold_correct_rate": float(correct[sampled].float().mean()),
           "gold_abstain_rate": float(abstained[sampled].float().mean())}
    if by_mode:
        for m in MODES:
            sel = rollout.in_mode(m) & sampled
            if bool(sel.any()):
                row[f"gold_correct_rate/{m}"] = float(correct[sel].float().mean())
                row[f"gold_abstain_rate/{m}"] = float(abstained[sel].float().mean())
    closed = rollout.in_mode("closed")
    row.update(rates_by_type(rollout, correct, abstained, sampled & closed if bool(closed.any()) else sampled))
    return {**row, **outcomes.price.logged}


def rates_by_type(rollout: "Rollout", correct: torch.Tensor, abstained: torch.Tensor,
                  counted: torch.Tensor) -> dict[str, float]:
    """Correct / abstain rates of the policy's own closed-book samples per question type (yes/no, choice, open):
    the quantities an abstention recipe should move apart (``rollout/abstain/TYPE``, ``rollout/correct/TYPE``).
    Closed book only: with the passage an open question is often answerable, and mixing the two hid how rarely
    the model knows an open answer by itself. ``counted``: ``[N]`` bool, the policy's own closed-book samples
    (every own sample when no prompt is closed book)."""
    types = [question_type(rollout.prompts[s.prompt_index].question) for s in rollout.samples]
    row = {}
    for t in QUESTION_TYPES:
        sel = torch.tensor([x == t for x in types]) & counted
        if bool(sel.any()):
            row[f"rollout/abstain/{t}"] = float(abstained[sel].float().mean())
            row[f"rollout/correct/{t}"] = float(correct[sel].float().mean())
    return row


def reward_metrics(rollout: "Rollout", rewards: "Rewards") -> dict[str, Any]:
    """Mean reward (before KL), KL to the reference and mean return.

    KL over the policy's own samples only: their mean log-ratio estimates KL(policy || reference). An injected
    "I don't know." was not sampled from the policy, and once RL makes declining less likely than the reference
    does its log-ratio is negative, so it is logged apart (``kl_injected``)."""
    sampled, injected, mask = rollout.sampled, rollout.injected, rollout.action_mask
    row = {"reward_mean": float(rewards.totals[sampled].mean()),
           "kl": float(masked_mean(rewards.kl, mask & sampled[:, None]))}
    if bool(injected.any()):
        row["kl_injected"] = float(masked_mean(rewards.kl, mask & injected[:, None]))
    row["return_mean"] = float(rewards.rewards.sum(dim=1).mean())
    return row


def advantage_metrics(exp: "Experience") -> dict[str, float]:
    return {"advantage_mean": float(masked_mean(exp.advantages, exp.action_mask)),
            "advantage_abs_mean": float(masked_mean(exp.advantages.abs(), exp.action_mask))}


def update_metrics(result: "UpdateResult") -> dict[str, Any]:
    """The update's training stats (``policy/STAT``, ``critic/STAT``) and ``policy_trained``."""
    return {**{f"policy/{k}": v for k, v in result.policy_stats.items()},
            **{f"critic/{k}": v for k, v in result.critic_stats.items()},
            "policy_trained": result.policy_trained}
