"""What declining to answer earns in a step: the abstention price and the ternary outcome reward, as pure functions.

With ``OUTCOME_REWARD=ternary`` every response gets one outcome on its last token: right ``correct``, declined
the abstention price, wrong ``wrong`` (:func:`core.core_algos.ternary_outcome_rewards`). The price is set each
step by one of three rules (:func:`step_abstain_reward`):

* fixed: the configured price;
* answer-mean: the mean outcome of this step's own closed-book answers plus a margin
  (:func:`core.core_algos.answer_mean_abstain_reward`), so the batch as a whole pushes abstention neither up nor
  down;
* with a target abstention rate: a controller that moves the price (fixed), or the margin (answer-mean), after
  each step by how far the closed-book abstention rate was from the target
  (:func:`core.core_algos.adapt_abstain_reward`). The controller's value is carried from step to step in the
  trainer's state (:class:`AbstainControl`, kept in checkpoints), so a resumed run goes on with it.

An adapted price always stays inside :func:`abstain_reward_bounds`. The functions read tensors and numbers only
(no config object, no Ray), so the driver passes in the run's settings and keeps what they return.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

import torch
from torch import Tensor

from core import core_algos as algo

#: How far inside ``(wrong, correct)`` an adapted abstention price stays, as a share of ``correct - wrong``
#: (0.05 of +1 / -1: the price stays in [-0.9, 0.9]). Why a margin: at ``wrong`` declining would be worth no
#: more than a wrong answer and at ``correct`` as much as a right one, and either end stops the group
#: advantages from telling the two apart; a controller pushed by a long run of one-sided batches would get
#: there. Applies to the adapted rules only (answer-mean and the target-rate controller); a fixed price is the
#: configured value.
ABSTAIN_REWARD_BOUND_SHARE = 0.05

#: The keys of :class:`AbstainControl`'s values in a checkpoint's trainer_state.json (its ``"extra"`` object).
CARRIED_PRICE = "abstain_price"   # the keys of trainer_state.json and metrics.jsonl keep their first names
CARRIED_MARGIN = "abstain_margin"


@dataclass(frozen=True)
class AbstainControl:
    """The abstention controller's values, carried from one step to the next in the trainer state and its
    checkpoints (:class:`cluster.checkpoint.TrainerState`). None: not moved yet; the controller starts from the
    setting (ABSTAIN_OUTCOME_REWARD, ABSTAIN_OUTCOME_REWARD_MARGIN)."""

    price: Optional[float] = None    # fixed rule + ABSTAIN_TARGET_RATE: the next step's abstention price
    margin: Optional[float] = None   # answer-mean rule + ABSTAIN_TARGET_RATE: the next step's margin

    def as_dict(self) -> dict[str, float]:
        """The values that are set, by checkpoint key: ``{CARRIED_PRICE: price, CARRIED_MARGIN: margin}``."""
        return {k: v for k, v in ((CARRIED_PRICE, self.price), (CARRIED_MARGIN, self.margin)) if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AbstainControl":
        """From :meth:`as_dict`'s form (a checkpoint's ``"extra"``); a missing key is a value not moved yet."""
        return cls(**{name: float(d[key]) for name, key in (("price", CARRIED_PRICE), ("margin", CARRIED_MARGIN))
                      if d.get(key) is not None})


def abstain_reward_bounds(correct: float, wrong: float,
                         share: float = ABSTAIN_REWARD_BOUND_SHARE) -> tuple[float, float]:
    """``(low, high)``: the interval an adapted abstention price stays in, ``share * (correct - wrong)`` inside
    ``(wrong, correct)`` at each end."""
    margin = share * (correct - wrong)
    return wrong + margin, correct - margin


@dataclass(frozen=True)
class AbstainReward:
    """One step's abstention price.

    ``price``: the reward of an abstention this step. ``carried``: the controller's values for the next step, the
    trainer state's next :class:`AbstainControl` (the values it was given when no controller runs). ``logged``:
    what the step's metrics record shows (``abstain_margin`` when the controller moves the margin,
    ``abstain_price`` unless the price is fixed).
    """

    price: float
    carried: AbstainControl
    logged: dict[str, float] = field(default_factory=dict)


def step_abstain_reward(rule: str, correct: Tensor, abstained: Tensor, sampled: Tensor, closed: Tensor, *,
                       fixed_price: float, target_rate: Optional[float], step_size: float, margin: float,
                       correct_reward: float, wrong_reward: float, carried: AbstainControl) -> AbstainReward:
    """This step's abstention price, and the controller's value for the next step.

    Args:
        rule: "fixed" or "answer-mean" (the ABSTAIN_OUTCOME_REWARD_MODE setting).
        correct, abstained: ``[N]`` bool, the outcome judge's verdicts on the step's responses.
        sampled: ``[N]`` bool, the policy's own samples (not injected abstention candidates).
        closed: ``[N]`` bool, the sample's prompt carries no passage. The rates and the answer mean are over the
            closed-book samples when the step has any, else over every sampled one.
        fixed_price: the configured abstention reward (where the price controller starts).
        target_rate: the abstention rate the controller holds; None: no controller.
        step_size: how far the controller moves per unit of rate error.
        margin: answer-mean: added to the mean answer reward (where the margin controller starts).
        correct_reward, wrong_reward: the outcome rewards of a right and of a wrong answer.
        carried: the trainer state's controller values (a frozen record; the next ones are returned).
    """
    if rule == "fixed" and target_rate is None:
        return AbstainReward(fixed_price, carried)
    sel = closed & sampled if bool((closed & sampled).any()) else sampled
    low, high = abstain_reward_bounds(correct_reward, wrong_reward)
    rate = float(abstained[sel].float().mean())
    if rule == "answer-mean":
        offset, nxt, logged = margin, carried, {}
        if target_rate is not None:   # the controller moves the margin; the mean moves with the batch
            offset = float(margin if carried.margin is None else carried.margin)
            span = correct_reward - wrong_reward
            nxt = replace(carried, margin=algo.adapt_abstain_reward(offset, rate, target_rate, step_size, -span, span))
            logged[CARRIED_MARGIN] = offset
        answered = sel & ~abstained
        rewards = torch.where(correct[answered], correct_reward, wrong_reward)
        price = algo.answer_mean_abstain_reward(rewards, offset, low, high)
        return AbstainReward(price, nxt, {**logged, "abstain_price": price})
    price = float(fixed_price if carried.price is None else carried.price)
    nxt = replace(carried, price=algo.adapt_abstain_reward(price, rate, target_rate, step_size, low, high))
    return AbstainReward(price, nxt, {"abstain_price": price})


def outcome_rewards(correct: Tensor, abstained: Tensor, closed: Tensor, price: float, *, correct_reward: float,
                    wrong_reward: float, evidence_price: Optional[float] = None) -> Tensor:
    """``[N]`` ternary outcome rewards: ``correct_reward`` / the abstention price / ``wrong_reward``. Abstentions
    on prompts that carry their passage (``~closed``) earn ``evidence_price`` instead when it is set
    (ABSTAIN_OUTCOME_REWARD_EVIDENCE)."""
    abstain_value: float | Tensor = price
    if evidence_price is not None:
        abstain_value = torch.where(~closed, evidence_price, abstain_value)
    return algo.ternary_outcome_rewards(correct, abstained, correct_reward, abstain_value, wrong_reward)
