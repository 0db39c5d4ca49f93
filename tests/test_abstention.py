"""core.abstention: the step's abstention price under each rule, its bounds, and the ternary outcome rewards with
an evidence price. Numbers worked by hand."""
from __future__ import annotations

import pytest
import torch

from core.abstention import (ABSTAIN_REWARD_BOUND_SHARE, CARRIED_MARGIN, CARRIED_PRICE, AbstainControl,
                             abstain_reward_bounds, outcome_rewards, step_abstain_reward)

CLOSED = torch.tensor([True, True, True, False])
CORRECT = torch.tensor([True, False, False, True])
ABSTAINED = torch.tensor([False, False, True, False])
SAMPLED = torch.ones(4, dtype=torch.bool)


def _price(rule, carried=None, **kw):
    args = dict(fixed_price=-0.5, target_rate=None, step_size=1.0, margin=0.0, correct_reward=1.0,
                wrong_reward=-1.0)
    args.update(kw)
    return step_abstain_reward(rule, CORRECT, ABSTAINED, SAMPLED, CLOSED, carried=carried or AbstainControl(), **args)


def test_bounds_keep_an_adapted_price_a_share_inside_wrong_and_correct():
    assert ABSTAIN_REWARD_BOUND_SHARE == 0.05
    assert abstain_reward_bounds(1.0, -1.0) == pytest.approx((-0.9, 0.9))
    assert abstain_reward_bounds(2.0, 0.0, share=0.25) == pytest.approx((0.5, 1.5))


def test_a_fixed_price_without_a_target_is_the_setting_and_carries_and_logs_nothing():
    p = _price("fixed", fixed_price=-0.3)
    assert (p.price, p.carried, p.logged) == (-0.3, AbstainControl(), {})
    # what was carried before (a resumed run whose settings changed) is carried on untouched
    assert _price("fixed", carried=AbstainControl(price=0.4)).carried == AbstainControl(price=0.4)


def test_the_price_controller_starts_at_the_fixed_price_moves_against_the_rate_error_and_stays_in_bounds():
    # closed-book abstention rate 1/3 (the evidence sample is left out), target 0.5: the price rises by 0.5 x 1/6
    p = _price("fixed", target_rate=0.5, step_size=0.5)
    assert p.price == -0.5 and p.logged == {"abstain_price": -0.5}
    assert p.carried.price == pytest.approx(-0.5 + 0.5 * (0.5 - 1 / 3)) and p.carried.margin is None
    # the carried price is this step's price; a big step is clamped at the upper bound (0.9, not 1.0)
    p2 = _price("fixed", carried=p.carried, target_rate=0.5, step_size=100.0)
    assert p2.price == pytest.approx(p.carried.price)
    assert p2.carried.price == pytest.approx(0.9)


def test_answer_mean_price_is_the_closed_book_answers_mean_plus_the_margin():
    # closed-book answers: +1 and -1 (the decline and the evidence sample are left out): mean 0, + margin 0.2
    p = _price("answer-mean", margin=0.2)
    assert p.price == pytest.approx(0.2) and p.carried == AbstainControl()
    assert p.logged == {"abstain_price": pytest.approx(0.2)}


def test_answer_mean_price_with_a_target_rate_adapts_the_margin_not_the_mean():
    """ABSTAIN_OUTCOME_REWARD_MODE=answer-mean + ABSTAIN_TARGET_RATE: this step's price is the closed-book answers' mean reward
    plus the carried margin; the margin then moves against the rate error."""
    kw = dict(target_rate=0.5, step_size=0.5, margin=0.1)
    p = _price("answer-mean", **kw)
    assert p.price == pytest.approx(0.1) and p.logged[CARRIED_MARGIN] == pytest.approx(0.1)
    # closed-book rate 1/3 < 0.5: the margin rises by 0.5 x (0.5 - 1/3)
    assert p.carried.margin == pytest.approx(0.1 + 0.5 * (0.5 - 1 / 3)) and p.carried.price is None
    p2 = _price("answer-mean", carried=p.carried, **kw)
    assert p2.price == pytest.approx(0.1 + 0.5 * (0.5 - 1 / 3))


def test_rates_are_over_every_sample_when_no_prompt_is_closed_book():
    none_closed = torch.zeros(4, dtype=torch.bool)
    p = step_abstain_reward("fixed", CORRECT, ABSTAINED, SAMPLED, none_closed, fixed_price=0.0, target_rate=0.0,
                           step_size=1.0, margin=0.0, correct_reward=1.0, wrong_reward=-1.0,
                           carried=AbstainControl())
    assert p.carried.price == pytest.approx(-0.25)   # rate 1/4 over all four samples


def test_outcome_rewards_give_evidence_prompts_their_own_abstention_price():
    abstained = torch.tensor([True, True, False, False])
    correct = torch.tensor([False, False, True, False])
    closed = torch.tensor([True, False, True, False])
    out = outcome_rewards(correct, abstained, closed, -0.5, correct_reward=1.0, wrong_reward=-1.0)
    assert out.tolist() == [-0.5, -0.5, 1.0, -1.0]
    out = outcome_rewards(correct, abstained, closed, -0.5, correct_reward=1.0, wrong_reward=-1.0,
                          evidence_price=0.25)
    assert out.tolist() == [-0.5, 0.25, 1.0, -1.0]


def test_the_controller_values_keep_their_checkpoint_keys_and_come_back_from_them():
    """trainer_state.json's "extra" object has held these keys since the controller was added: the typed values
    write the same object and read it back (a missing or null key: not moved yet)."""
    assert AbstainControl().as_dict() == {}
    assert AbstainControl(price=-0.2).as_dict() == {CARRIED_PRICE: -0.2}
    both = AbstainControl(price=-0.2, margin=0.15)
    assert both.as_dict() == {"abstain_price": -0.2, "abstain_margin": 0.15}
    assert AbstainControl.from_dict(both.as_dict()) == both
    assert AbstainControl.from_dict({CARRIED_MARGIN: 1}) == AbstainControl(margin=1.0)
    assert AbstainControl.from_dict({}) == AbstainControl.from_dict({CARRIED_PRICE: None}) == AbstainControl()
