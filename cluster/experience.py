"""Rewards for rollouts: the reward functions, the reward items, and the rewards as ``[B, R]`` tensors.

The experience maker (:mod:`cluster.experience_maker`) calls these; none of them talk to
Ray, so every piece is unit-testable with plain tensors:

* :func:`reward_items` builds the reward service's request items from the
  rollout samples (question, response, materials, gold answer and the engines'
  own token character offsets: alignment by offsets, never by re-decoding);
* a **reward function** turns items into per-token rewards. :class:`ServiceReward`
  (the default) calls the reward service over HTTP. Any callable ``items -> list[result]`` works, where a
  result has the fields the driver reads of the reward service's ``ItemReward`` (the one record of a reward);
  tests plug in ``tests/doubles.py``'s ``KeywordReward`` (``rlfh bench peer``'s reward, defined in
  ``bench/peer.py``);
* :func:`fetch_rewards` calls it and turns "the service is down after its bounded
  retries" into a skipped, counted batch (never a zero reward);
* :func:`rewards_to_tensors` places per-token rewards into ``[B, R]`` tensors
  aligned with the batch's ``action_mask``;
* :func:`label_mix` summarises the statement labels of a batch;
* :func:`inject_abstentions` puts abstention candidates among a rollout's samples, and :func:`gold_outcomes`
  grades responses against the gold answers (the outcome grader of OUTCOME_GRADER=gold).

Shapes: ``B`` responses (prompt-major: ``n`` samples per prompt in a row),
``R`` padded response length.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence

import torch

from actors.types import RolloutSample, token_offsets
from core import metrics
from core.verify_schema import LABELS
from core.grader import CORRECT, grade_answer, graded_span
from reward_service.client import RewardClient, RewardServiceUnavailable
from reward_service.schemas import ItemReward
from verifier_service.core import Verifier

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------
# reward results and reward functions
# --------------------------------------------------------------------------------------

class RewardFn(Protocol):
    """``items -> one result per item`` (same order). Raise :class:`RewardUnavailable` (or the service
    client's ``RewardServiceUnavailable``) when no rewards can be had: the driver then skips the batch."""

    def __call__(self, items: list[dict[str, Any]]) -> Sequence[Any]: ...


class RewardUnavailable(RuntimeError):
    """Rewards could not be obtained for a batch (after the reward function's own bounded retries)."""


def unavailable_errors() -> tuple[type[BaseException], ...]:
    """Exception types that mean "skip this batch": ours and the service client's."""
    return RewardUnavailable, RewardServiceUnavailable


class ServiceReward:
    """The reward service over HTTP (``POST /v1/rewards``) through :class:`reward_service.client.RewardClient`.

    The client has the timeout and the bounded retries (``REWARD_TIMEOUT_S``, ``REWARD_MAX_RETRIES``) and
    raises ``RewardServiceUnavailable`` when they are spent. The run's reward settings
    (``VERIFICATION_MAP``, ``GRANULARITY``...) are sent as per-request overrides, so an external service
    (``REWARD_URL``) rewards exactly as this run is configured.
    """

    def __init__(self, url: str, cfg, send_overrides: bool = True):
        self.url = url
        self.client = RewardClient.from_config(cfg, url=url)
        self.overrides = cfg.reward_settings() if send_overrides else None
        # the statements behind the rewards, for the rollouts samples.jsonl logs (LOG_SAMPLES; `rlfh show`)
        self.return_verification = getattr(cfg, "log_samples", 0) > 0

    def __call__(self, items: list[dict[str, Any]]) -> Sequence[Any]:
        return self.client.rewards(items, overrides=self.overrides, return_verification=self.return_verification)

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if close:
            close()


class EngineChat:
    """A ``verifier_service`` ChatFn over the policy's rollout engines (Ray handles with ``chat``): VERIFIER_BACKEND
    =self, the policy judging its own statements. Picklable, so a verifier replica can hold it; calls go to the
    engines in turn."""

    model_name = "policy"

    def __init__(self, engines: Sequence[Any]):
        if not engines:
            raise ValueError("EngineChat needs at least one rollout engine")
        self.engines = list(engines)
        self._next = 0

    def __call__(self, conversations: list[list[dict]]) -> list[str]:
        import ray   # slow to import, and only this call (in a verifier replica) needs it
        engine = self.engines[self._next % len(self.engines)]
        self._next += 1
        return ray.get(engine.chat.remote(conversations))


class SelfJudge:
    """``reward_service.app.deploy(verifier_factory=...)`` for VERIFIER_BACKEND=self: each verifier replica builds
    ``Verifier(cfg, backend="self", chat_fn=EngineChat(engines))``."""

    def __init__(self, engines: Sequence[Any]):
        self.engines = list(engines)

    def __call__(self, cfg):
        return Verifier(cfg, backend="self", chat_fn=EngineChat(self.engines))


# --------------------------------------------------------------------------------------
# items, skipping, tensors
# --------------------------------------------------------------------------------------

def inject_abstentions(samples: Sequence[Any], n_samples_per_prompt: int, k: int,
                       abstain_ids: Sequence[int], tokenizer) -> tuple[list[Any], torch.Tensor]:
    """Replace the last ``k`` samples of every prompt group by the same abstention response.

    Small models almost never sample "I don't know", so a group estimator never sees abstaining beside
    answering. With one abstention candidate per group, its advantage says, per prompt, whether
    abstaining beats the model's own answers: positive where they are mostly wrong, negative where they
    are mostly right.

    Args:
        samples: rollout samples, prompt-major in groups of ``n_samples_per_prompt``.
        k: candidates per group, ``0 <= k < n_samples_per_prompt``.
        abstain_ids: the abstention's response token ids, ending with the end-of-turn token.
    Returns:
        (samples with the replacements, ``[N]`` bool: which samples are injected).
    """
    n = n_samples_per_prompt
    if not 0 <= k < n:
        raise ValueError(f"abstention candidates per prompt must be in [0, {n}), got {k}")
    if len(samples) % n:
        raise ValueError(f"{len(samples)} samples are not whole groups of {n}")
    injected = torch.zeros(len(samples), dtype=torch.bool)
    if k == 0:
        return list(samples), injected
    text, offsets = token_offsets(tokenizer, list(abstain_ids))
    out = list(samples)
    for i, s in enumerate(samples):
        if i % n >= n - k:
            out[i] = RolloutSample(prompt_index=s.prompt_index, prompt_token_ids=list(s.prompt_token_ids),
                                   response_token_ids=list(abstain_ids), response_text=text,
                                   token_offsets=list(offsets), finish_reason="stop",
                                   extra={"injected": "abstention"})
            injected[i] = True
    return out, injected


def reward_items(samples: Sequence[Any], prompts: Sequence[Any]) -> list[dict[str, Any]]:
    """Reward-service items for rollout samples.

    Args:
        samples: ``RolloutSample``s; ``sample.prompt_index`` indexes ``prompts``.
        prompts: the step's ``QAItem``s (question, knowledge, right_answer).
    Returns:
        one dict ``{question, response, materials, gold_answer, token_offsets}`` per sample; ``token_offsets``
        are the engine's ``[start, end)`` character spans, one per response token.
    """
    items = []
    for s in samples:
        p = prompts[s.prompt_index]
        items.append({"question": p.question, "response": s.response_text, "materials": list(p.knowledge),
                      "gold_answer": p.right_answer,
                      "token_offsets": [[int(a), int(b)] for a, b in s.token_offsets]})
    return items


def gold_outcomes(samples: Sequence[Any], prompts: Sequence[Any], is_correct: torch.Tensor,
                  abstained: torch.Tensor, scope: str = "whole") -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, abstained) per sample by the gold-answer grader, for the outcome reward (OUTCOME_GRADER=gold).

    The grader compares the response with the item's ``right_answer`` (containment, yes/no and choice rules);
    samples whose prompt has no gold answer keep the verifier's verdicts ``is_correct`` / ``abstained``
    (``[N]`` bool each). ``scope``: what the grader reads (GRADE_SCOPE). Returns two ``[N]`` bool tensors.
    """
    correct, abst = is_correct.clone(), abstained.clone()
    for i, s in enumerate(samples):
        p = prompts[s.prompt_index]
        if (p.right_answer or "").strip():
            g = grade_answer(s.response_text, p.right_answer, p.question, scope=scope)
            correct[i], abst[i] = g.grade == CORRECT, g.abstained or g.reason == "empty"
    return correct, abst


def graded_end_positions(samples: Sequence[Any], scope: str = "whole") -> torch.Tensor:
    """``[N]`` the response token each sample's outcome reward lands on under OUTCOME_TOKEN=graded-end: the last
    token of the part the gold grader reads (:func:`core.grader.graded_span`), found by the engine's own
    character offsets. ``-1`` (the last token) for GRADE_SCOPE=whole, and where no token starts inside it."""
    pos = torch.full((len(samples),), -1, dtype=torch.long)
    if scope == "whole":
        return pos
    for i, s in enumerate(samples):
        _, end = graded_span(s.response_text, scope)
        inside = [t for t, (a, b) in enumerate(s.token_offsets) if a < end and b > a]
        if inside:
            pos[i] = inside[-1]
    return pos


@dataclass
class SkipCounter:
    """Batches skipped because rewards were unavailable (the run's total, and the last reason)."""

    total: int = 0
    consecutive: int = 0
    last_error: str = ""
    reasons: Counter = field(default_factory=Counter)

    def record(self, reason: str, error: str) -> None:
        self.total += 1
        self.consecutive += 1
        self.reasons[reason] += 1
        self.last_error = error

    def ok(self) -> None:
        self.consecutive = 0


def fetch_rewards(reward_fn: Callable[[list[dict]], Sequence[Any]], items: list[dict[str, Any]],
                  skips: SkipCounter) -> Optional[list[Any]]:
    """Rewards for ``items``, or ``None`` when the reward function reports it is unavailable.

    A ``None`` means: skip this batch (it is counted in ``skips`` and in the metric
    ``rlfh_skipped_batches_total{reason="reward_unavailable"}``); it is never trained on as zero reward.
    Any other exception (a bug, a 422 for bad input) propagates.
    """
    try:
        results = list(reward_fn(items))
    except unavailable_errors() as e:
        msg = f"{type(e).__name__}: {e}"
        skips.record("reward_unavailable", msg)
        metrics.inc("rlfh_skipped_batches_total", 1, {"reason": "reward_unavailable"})
        log.warning("reward service unavailable, skipping this batch (%d skipped so far): %s", skips.total, msg)
        return None
    if len(results) != len(items):
        raise RuntimeError(f"reward function returned {len(results)} results for {len(items)} items")
    skips.ok()
    return results


def rewards_to_tensors(results: Sequence[Any], action_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Place per-token rewards into the batch's response grid.

    Response token ``j`` of row ``i`` is column ``j`` (responses are right-padded), so row ``i``'s
    ``len(token_rewards)`` must equal its number of response tokens (``action_mask[i].sum()``): the rewards
    were computed on the engine's own token offsets. A mismatch is a contract violation and raises.

    Args:
        results: ``B`` results with ``token_rewards`` and ``token_label_signs`` (one entry per token).
        action_mask: ``[B, R]`` bool.
    Returns:
        ``(token_rewards [B, R] float32, token_label_signs [B, R] int64)``, 0 on padding.
    """
    B, R = action_mask.shape
    if len(results) != B:
        raise ValueError(f"{len(results)} reward results for a batch of {B} responses")
    lengths = action_mask.sum(dim=1).tolist()
    rewards = torch.zeros((B, R), dtype=torch.float32)
    signs = torch.zeros((B, R), dtype=torch.int64)
    for i, (res, n) in enumerate(zip(results, lengths)):
        tr = res.token_rewards
        ts = res.token_label_signs if res.token_label_signs is not None else [0] * len(tr)
        if len(tr) != n or len(ts) != n:
            raise ValueError(
                f"response {i}: {len(tr)} token rewards / {len(ts)} label signs for {int(n)} response tokens; "
                "the reward service must answer one entry per token offset it was sent")
        if n:
            rewards[i, :n] = torch.tensor(tr, dtype=torch.float32)
            signs[i, :n] = torch.tensor(ts, dtype=torch.int64)
    if not torch.isfinite(rewards).all():
        raise ValueError("reward service returned non-finite token rewards")
    return rewards, signs


def label_mix(results: Sequence[Any]) -> tuple[dict[str, float], int]:
    """``({label: share of all statements}, number of statements)`` over a batch's results."""
    counts: Counter = Counter()
    for r in results:
        counts.update({k: int(v) for k, v in (r.label_counts or {}).items() if k in LABELS})
    total = sum(counts.values())
    return {lab: (counts[lab] / total if total else 0.0) for lab in LABELS}, total
