"""The experience maker: one step's prompts -> the typed :class:`Experience` that the PPO update trains on.

The driver calls the named parts in this order; each returns a record, and none writes metrics (the step's
metrics record is made from the records, :mod:`cluster.step_metrics`)::

    generate(...)             -> Rollout        prompts rendered, n samples per prompt, abstention candidates
    score(...)                -> Scores | None  rewards from the reward function (None: the batch is skipped)
    judge_outcomes(...)       -> Outcomes | None  right / declined / wrong and the step's abstention price
    forward(...)              -> Forwards       old log-probs, reference log-probs, values (concurrent calls)
    compose(...)              -> Rewards        the reward the policy trains on, KL to the reference included
    estimate_advantages(...)  -> Experience | None  (None: every prompt filtered out)

The math is :mod:`core.core_algos`' and :mod:`core.abstention`'s; this module moves tensors between them and
the actors. Shapes: ``N`` responses (prompt-major: ``n`` samples per prompt in a row), ``P`` padded prompt length,
``R`` padded response length; ``B <= N`` rows after the outcome-variance filter.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

from actors import calls
from actors.rollout import generate_on_engines
from actors.types import Batch, RolloutSample, make_batch
from cluster.experience import (SkipCounter, fetch_rewards, gold_outcomes, graded_end_positions, inject_abstentions,
                                reward_items, rewards_to_tensors)
from cluster.phase_timer import PhaseTimer
from core import core_algos as algo
from core import metrics
from core.abstention import AbstainControl, AbstainReward, outcome_rewards, step_abstain_reward
from core.config import RLFHConfig
from core.data import QAItem
from core.prompts import prompt_mode_for, render_prompt, resolve_system

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------
# the records
# --------------------------------------------------------------------------------------

@dataclass
class Rollout:
    """One step's responses: ``n`` per prompt, prompt-major."""

    prompts: list[QAItem]          # the step's prompts
    modes: list[str]               # per prompt: "closed" (question only) or "evidence" (passage in the prompt)
    samples: list[RolloutSample]   # [N]; sample.prompt_index indexes ``prompts``
    injected: Tensor               # [N] bool: an abstention candidate put in place of a sample (ABSTAIN_SAMPLES)
    batch: Batch                   # sequences [N, P+R] long, attention_mask [N, P+R] long, action_mask [N, R] bool

    @property
    def action_mask(self) -> Tensor:
        return self.batch["action_mask"]

    @property
    def sampled(self) -> Tensor:
        """[N] bool: the policy's own samples (the rates describe the policy, not the candidates)."""
        return ~self.injected

    def in_mode(self, mode: str) -> Tensor:
        """[N] bool: the sample's prompt was asked in ``mode`` ("closed" or "evidence")."""
        return torch.tensor([self.modes[s.prompt_index] == mode for s in self.samples])


@dataclass
class Scores:
    """The reward function's answer for a rollout."""

    results: list[Any]       # [N] results with the fields of reward_service.schemas.ItemReward
    token_rewards: Tensor    # [N, R] float32, the verifier's token rewards (0 on padding)
    label_signs: Tensor      # [N, R] int64, FSPO signs: +1 correct statement, -1 wrong, 0 else
    score: Tensor            # [N] float32, each response's summed token reward
    is_correct: Tensor       # [N] bool, the verifier: every statement correct
    abstained: Tensor        # [N] bool, the verifier: the response declines


@dataclass
class Outcomes:
    """OUTCOME_REWARD=ternary: the outcome judge's verdicts and the outcome rewards they earn."""

    correct: Tensor          # [N] bool
    abstained: Tensor        # [N] bool
    price: AbstainReward      # this step's abstention price (and the controller's next values, price.carried)
    rewards: Tensor          # [N] float32, on each response's last token


@dataclass
class Forwards:
    """The forwards before the update; None where the run has no use for one."""

    old_logprobs: Optional[Tensor]   # [N, R] the policy's; None: the update's own log-probs serve
    ref_logprobs: Optional[Tensor]   # [N, R] the reference's; None without KL (KL_COEF=0)
    values: Optional[Tensor]         # [N, R] the critic's; None with a group estimator


@dataclass
class Rewards:
    """The reward the policy trains on."""

    rewards: Tensor   # [N, R] per-token reward, KL term included (0 on padding)
    totals: Tensor    # [N] each response's reward summed before the KL term (what the logs call the reward)
    kl: Tensor        # [N, R] per-token KL to the reference (0 without one)


@dataclass
class Experience:
    """What one PPO update trains on (OpenRLHF's Experience): ``B`` rows, the prompts the filter kept."""

    sequences: Tensor                      # [B, P+R] long, prompt (left-padded) then response (right-padded)
    attention_mask: Tensor                 # [B, P+R] long
    action_mask: Tensor                    # [B, R] bool, the response tokens
    advantages: Tensor                     # [B, R] float32
    returns: Tensor                        # [B, R] float32, the critic's targets
    old_logprobs: Optional[Tensor] = None  # [B, R]; None: the update computes its own (one update per rollout)
    old_values: Optional[Tensor] = None    # [B, R]; None without a critic

    BASE = ("sequences", "attention_mask", "action_mask")
    POLICY = BASE + ("old_logprobs", "advantages")
    CRITIC = BASE + ("old_values", "returns")

    def __len__(self) -> int:
        return int(self.sequences.shape[0])

    def as_batch(self) -> dict[str, Tensor]:
        """Every tensor that is set, by name (the actors' batch format)."""
        return {k: v for k in ("sequences", "attention_mask", "action_mask", "advantages", "returns",
                               "old_logprobs", "old_values") if (v := getattr(self, k)) is not None}

    def policy_batch(self, rows: Tensor) -> dict[str, Tensor]:
        """The policy's training batch, rows in the order ``rows``."""
        return {k: getattr(self, k)[rows] for k in self.POLICY if getattr(self, k) is not None}

    def critic_batch(self, rows: Tensor) -> dict[str, Tensor]:
        """The critic's training batch, rows in the order ``rows``."""
        return {k: getattr(self, k)[rows] for k in self.CRITIC}


# --------------------------------------------------------------------------------------
# the parts
# --------------------------------------------------------------------------------------

def generate(cfg: RLFHConfig, engines: Sequence[Any], tokenizer, prompts: list[QAItem], step: int,
             abstain_ids: Sequence[int]) -> Rollout:
    """``n`` samples per prompt from the rollout engines (seeded by SEED and the step), then ABSTAIN_SAMPLES of
    each group replaced by the abstention candidate."""
    n = cfg.n_samples_per_prompt
    system = resolve_system(cfg.system_prompt)
    modes = [prompt_mode_for(p.question, cfg.prompt_mode, cfg.evidence_share) for p in prompts]
    texts = [render_prompt(tokenizer, p.question, p.knowledge_text, m, system=system)
             for p, m in zip(prompts, modes)]
    samples = generate_on_engines(engines, texts, n, cfg.generate_max_len, cfg.temperature, cfg.top_p,
                                  seed=cfg.seed * 100_003 + step, timeout=calls.timeout_s(cfg))
    samples, injected = inject_abstentions(samples, n, cfg.abstain_samples, abstain_ids, tokenizer)
    return Rollout(prompts, modes, samples, injected, make_batch(samples, int(tokenizer.pad_token_id)))


def score(reward_fn: Callable, rollout: Rollout, skips: SkipCounter) -> Optional[Scores]:
    """Token rewards from the reward function, aligned by the engines' own character offsets; None when the
    rewards cannot be had (the batch is skipped and counted in ``skips``, never trained on as zero reward)."""
    results = fetch_rewards(reward_fn, reward_items(rollout.samples, rollout.prompts), skips)
    if results is None:
        return None
    token_rewards, label_signs = rewards_to_tensors(results, rollout.action_mask)
    return Scores(results, token_rewards, label_signs,
                  score=torch.tensor([float(r.score) for r in results]),
                  is_correct=torch.tensor([bool(r.is_correct) for r in results]),
                  abstained=torch.tensor([bool(r.abstained) for r in results]))


def judge_outcomes(cfg: RLFHConfig, rollout: Rollout, scores: Scores,
                   carried: AbstainControl) -> Optional[Outcomes]:
    """OUTCOME_REWARD=ternary: right / declined / wrong by OUTCOME_GRADER (the gold grader, or the verifier), the
    step's abstention price (ABSTAIN_OUTCOME_REWARD_MODE, ABSTAIN_TARGET_RATE; ``carried``: the trainer state's
    controller values; the next ones are ``Outcomes.price.carried``) and the outcome rewards. None for
    OUTCOME_REWARD=none."""
    if cfg.outcome_reward != "ternary":
        return None
    correct, abstained = ((scores.is_correct, scores.abstained) if cfg.outcome_grader == "verifier"
                          else gold_outcomes(rollout.samples, rollout.prompts, scores.is_correct, scores.abstained,
                                             scope=cfg.grade_scope))
    closed = rollout.in_mode("closed")
    price = step_abstain_reward(cfg.abstain_outcome_reward_mode, correct, abstained, rollout.sampled, closed,
                               fixed_price=cfg.abstain_outcome_reward, target_rate=cfg.abstain_target_rate,
                               step_size=cfg.abstain_target_rate_step, margin=cfg.abstain_outcome_reward_margin,
                               correct_reward=cfg.outcome_correct, wrong_reward=cfg.outcome_wrong, carried=carried)
    rewards = outcome_rewards(correct, abstained, closed, price.price, correct_reward=cfg.outcome_correct,
                              wrong_reward=cfg.outcome_wrong, evidence_price=cfg.abstain_outcome_reward_evidence)
    return Outcomes(correct, abstained, price, rewards)


def forward(groups, batch: Batch, timer: PhaseTimer, timeout: float, need_old_logprobs: bool = True) -> Forwards:
    """The policy's old log-probs, the reference's log-probs and the critic's values: different actors, so they
    run concurrently, and concurrent actors split the CPU threads (``share``; CPU_THREADS).

    ``need_old_logprobs`` False: one policy update per rollout and no KL term, so the old log-probs are the very
    log-probs the update computes (same weights); that forward is skipped and the update uses its own, detached.
    """
    want = [p for p, on in (("policy_forward", need_old_logprobs), ("reference", groups.reference is not None),
                            ("critic", groups.critic is not None)) if on]
    share = max(1, len(want))
    launched = {}
    if "policy_forward" in want:
        launched["policy_forward"] = groups.policy.dispatch_async("logprobs", batch, share=share)
    if "reference" in want:
        launched["reference"] = groups.reference.dispatch_async("logprobs", batch, share=share)
    if "critic" in want:
        launched["critic"] = groups.critic.dispatch_async("values", batch, share=share)
    fwd = gather_timed(launched, timer, timeout, serial=getattr(groups, "layout", "") == "colocated")
    return Forwards(fwd.get("policy_forward"), fwd.get("reference"), fwd.get("critic"))


def compose(cfg: RLFHConfig, rollout: Rollout, scores: Scores, outcomes: Optional[Outcomes],
            fwd: Forwards) -> Rewards:
    """The reward the policy trains on, composed in one pure function (:func:`core.core_algos.compose_rewards`):
    the verifier's token rewards x TOKEN_REWARD_WEIGHT (or the caution reward), + the outcome reward on the last
    token (or, OUTCOME_TOKEN=graded-end, on the graded answer's last token), - KL_COEF * KL_t. REWARD_CLIP was
    applied where the token rewards were made, by the reward service; not again here."""
    mask = rollout.action_mask
    caution = (algo.caution_rewards(scores.is_correct, scores.abstained, cfg.n_samples_per_prompt)
               if cfg.caution_reward else None)
    kl = None
    if fwd.ref_logprobs is not None:
        kl = algo.kl_penalty(fwd.old_logprobs, fwd.ref_logprobs, cfg.kl_estimator)
        kl = torch.where(mask, kl, torch.zeros(()))
    positions = (graded_end_positions(rollout.samples, cfg.grade_scope)
                 if outcomes and cfg.outcome_token == "graded-end" else None)
    rewards, totals = algo.compose_rewards(scores.token_rewards, mask, token_weight=cfg.token_reward_weight,
                                           token_cap=cfg.token_reward_cap, caution=caution,
                                           outcome=outcomes.rewards if outcomes else None,
                                           outcome_positions=positions, kl=kl, kl_coef=cfg.kl_coef)
    return Rewards(rewards, totals, kl if kl is not None else torch.zeros(mask.shape, dtype=torch.float32))


def keep_mask(cfg: RLFHConfig, rewards: Rewards) -> Tensor:
    """[N] bool: the samples of the prompts whose total rewards vary (FILTER_VARIANCE; all when it is 0)."""
    return algo.filter_by_outcome_variance(rewards.totals, cfg.n_samples_per_prompt, cfg.filter_variance)


def estimate_advantages(cfg: RLFHConfig, rollout: Rollout, scores: Scores, fwd: Forwards, rewards: Rewards,
                        keep: Tensor, step: int) -> Optional[Experience]:
    """Advantages (GAE with the critic, or a group estimator; ADVANTAGE_WHITEN; the FSPO sign flip) of the kept
    prompts (``keep``, :func:`keep_mask`). None when every prompt was filtered out: nothing to train on."""
    if not bool(keep.any()):
        log.info("step %d: every prompt filtered out by FILTER_VARIANCE=%g; nothing to train on",
                 step, cfg.filter_variance)
        metrics.inc("rlfh_skipped_batches_total", 1, {"reason": "filtered"})
        return None
    batch, r, mask, signs = rollout.batch, rewards.rewards, rollout.action_mask, scores.label_signs
    old_logprobs, values = fwd.old_logprobs, fwd.values
    if not bool(keep.all()):
        batch = {k: v[keep] for k, v in batch.items()}
        r, mask, signs = r[keep], mask[keep], signs[keep]
        old_logprobs = old_logprobs[keep] if old_logprobs is not None else None
        values = values[keep] if values is not None else None
    advantages, returns = algo.compute_advantages(
        cfg.advantage_estimator, r, mask, values=values, n_samples_per_prompt=cfg.n_samples_per_prompt,
        gamma=cfg.gamma, lambd=cfg.lambd)
    if cfg.advantage_whiten and cfg.advantage_estimator == "gae":   # the peers' default; off unless asked
        advantages = algo.masked_whiten(advantages, mask)
    if cfg.fspo:
        advantages = algo.fspo_flip(advantages, signs)
    return Experience(batch["sequences"], batch["attention_mask"], batch["action_mask"], advantages, returns,
                      old_logprobs=old_logprobs, old_values=values)


def gather_timed(launched: dict[str, list], timer: PhaseTimer, timeout: float,
                 serial: bool = False) -> dict[str, Tensor]:
    """Wait for concurrently launched per-rank calls; each phase's time runs from launch to its last rank's
    answer (phases overlap, so their times add up to more than the wall time). ``serial``: the phases run one
    after another in one process (the colocated layout), so each one's time runs from the previous phase's end.
    Returns ``{phase: [B, ...]}``."""
    t0 = start = time.perf_counter()
    deadline = time.monotonic() + timeout
    owner = {ref: phase for phase, refs in launched.items() for ref in refs}
    left = {phase: len(refs) for phase, refs in launched.items()}
    pending = list(owner)
    while pending:
        # on a timeout the error names the phases still waited for (policy_forward, reference, critic)
        done, pending = calls.wait_any(pending, deadline, ", ".join(sorted({owner[r] for r in pending})), timeout)
        for ref in done:
            phase = owner[ref]
            left[phase] -= 1
            if left[phase] == 0:
                now = time.perf_counter()
                timer.times[phase] = timer.times.get(phase, 0.0) + now - start
                start = now if serial else t0
    return {phase: torch.cat(calls.get(refs, phase, timeout), 0) for phase, refs in launched.items()}
