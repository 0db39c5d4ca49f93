"""Unit tests of core/core_algos.py against hand-computed numbers (no Ray, fast).

Every expected value below is written out from the formula, with the arithmetic in a comment.
"""
from __future__ import annotations

import math

import pytest
import torch

from core import core_algos as ca

NAN = float("nan")
T_ = torch.tensor


def close(a, b, atol=1e-5):
    b = torch.as_tensor(b, dtype=a.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert torch.allclose(a, b, atol=atol, rtol=0), f"\n got {a}\nwant {b}"


# --------------------------------------------------------------------------------------------------
# masked statistics
# --------------------------------------------------------------------------------------------------

def test_masked_mean_global_and_per_row_ignores_garbage():
    x = T_([[1.0, 2.0, 3.0], [4.0, NAN, 6.0]])
    m = T_([[1, 1, 0], [1, 0, 1]])
    # valid: 1, 2, 4, 6 -> 13 / 4
    close(ca.masked_mean(x, m), 3.25)
    # row 0: (1+2)/2 = 1.5 ; row 1: (4+6)/2 = 5 (the NaN is masked out)
    close(ca.masked_mean(x, m, dim=-1), [1.5, 5.0])
    # column means: (1+4)/2, 2/1, 6/1
    close(ca.masked_mean(x, m.bool(), dim=0), [2.5, 2.0, 6.0])
    # an empty row averages to 0, not NaN
    close(ca.masked_mean(x, T_([[0, 0, 0], [1, 0, 0]]), dim=-1), [0.0, 4.0])
    close(ca.masked_mean(x, torch.zeros(2, 3)), 0.0)
    with pytest.raises(ValueError, match="broadcast"):
        ca.masked_mean(x, torch.ones(3, 2))


def test_masked_whiten_global_unbiased():
    x = T_([[2.0, 4.0], [6.0, 100.0]])
    m = T_([[1, 1], [1, 0]])
    # valid 2, 4, 6: mean 4, unbiased var = (4 + 0 + 4) / 2 = 4, std 2 -> (-1, 0, 1); masked -> 0
    close(ca.masked_whiten(x, m), [[-1.0, 0.0], [1.0, 0.0]])
    # shift_mean=False keeps the mean: (x - 4)/2 + 4 -> 3, 4, 5
    close(ca.masked_whiten(x, m, shift_mean=False), [[3.0, 4.0], [5.0, 0.0]])
    with pytest.raises(ValueError, match="no entries"):
        ca.masked_whiten(x, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="shape mismatch"):
        ca.masked_whiten(x, torch.ones(2, 3))


# --------------------------------------------------------------------------------------------------
# KL and reward shaping
# --------------------------------------------------------------------------------------------------

def test_kl_estimators_by_hand():
    logp = T_([[-1.0, -2.0, -0.5]])
    ref = T_([[-2.0, -1.0, -0.5]])
    # d = logp - ref = (1, -1, 0)
    close(ca.kl_penalty(logp, ref, "k1"), [[1.0, -1.0, 0.0]])
    # k2 = 0.5 d^2 = (0.5, 0.5, 0)
    close(ca.kl_penalty(logp, ref, "k2"), [[0.5, 0.5, 0.0]])
    # k3 = exp(ref-logp) - (ref-logp) - 1: ref-logp = (-1, 1, 0)
    #   exp(-1) + 1 - 1 = 0.367879 ; exp(1) - 1 - 1 = 0.718282 ; 1 - 0 - 1 = 0
    close(ca.kl_penalty(logp, ref, "k3"), [[math.exp(-1), math.e - 2, 0.0]])
    # default is k1
    close(ca.kl_penalty(logp, ref), [[1.0, -1.0, 0.0]])


def test_kl_signs_k3_nonnegative_k1_zero_when_equal():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 16, generator=g) * 3
    b = torch.randn(8, 16, generator=g) * 3
    assert (ca.kl_penalty(a, b, "k3") >= 0).all()
    assert (ca.kl_penalty(a, b, "k2") >= 0).all()
    # k1 is negative exactly where the policy is less likely than the reference
    assert torch.equal(ca.kl_penalty(a, b, "k1") < 0, a < b)
    for est in ("k1", "k2", "k3"):
        assert torch.equal(ca.kl_penalty(a, a, est), torch.zeros_like(a))
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        ca.kl_penalty(a, b, "k4")
    with pytest.raises(ValueError, match="shape mismatch"):
        ca.kl_penalty(a, b[:, :3])


def test_kl_estimators_estimate_kl_pi_ref_on_policy_samples():
    # Tokens sampled from pi: mean k1 and mean k3 are unbiased for KL(pi || pi_ref) (not KL(ref || pi)).
    pi = T_([0.9, 0.05, 0.05])
    ref = T_([0.4, 0.3, 0.3])
    kl_pi_ref = 0.9 * math.log(0.9 / 0.4) + 2 * 0.05 * math.log(0.05 / 0.3)   # 0.72984 - 0.17918 = 0.55066
    kl_ref_pi = 0.4 * math.log(0.4 / 0.9) + 2 * 0.3 * math.log(0.3 / 0.05)    # -0.32437 + 1.07506 = 0.75069
    g = torch.Generator().manual_seed(1)
    idx = torch.multinomial(pi, 200_000, replacement=True, generator=g)[None]
    lp, lr = pi.log()[idx], ref.log()[idx]
    for est in ("k1", "k3"):
        est_val = float(ca.kl_penalty(lp, lr, est).mean())
        assert abs(est_val - kl_pi_ref) < 0.02, (est, est_val, kl_pi_ref)
        assert abs(est_val - kl_ref_pi) > 0.1


def test_shape_token_rewards_kl_and_no_second_clip():
    tr = T_([[3.0, -7.0, 0.5, 9.0]])
    kl = T_([[0.2, -0.4, 1.0, 5.0]])
    m = T_([[1, 1, 1, 0]])
    # minus 0.5 * KL, no clipping (REWARD_CLIP was applied by the reward service, where the reward is made):
    #   3 - 0.1 = 2.9 ; -7 + 0.2 = -6.8 ; 0.5 - 0.5 = 0 ; masked -> 0
    close(ca.shape_token_rewards(tr, kl, m, kl_coef=0.5), [[2.9, -6.8, 0.0, 0.0]])
    close(ca.shape_token_rewards(tr, kl, m, 0.0), [[3.0, -7.0, 0.5, 0.0]])    # no KL with coef 0
    with pytest.raises(ValueError, match="kl_coef"):
        ca.shape_token_rewards(tr, kl, m, -1.0)
    with pytest.raises(ValueError, match=r"kl\[1, 3\]"):
        ca.shape_token_rewards(tr, kl[:, :3], m, 0.5)


# --------------------------------------------------------------------------------------------------
# GAE
# --------------------------------------------------------------------------------------------------

def test_gae_gamma_lambda_one_is_return_to_go_minus_value():
    r = T_([[1.0, 2.0, 3.0]])
    v = T_([[0.5, 1.0, 1.5]])
    adv, ret = ca.gae_advantages(r, v, torch.ones(1, 3), gamma=1.0, lambd=1.0)
    # return-to-go: 1+2+3 = 6, 2+3 = 5, 3 ; minus V: 5.5, 4, 1.5
    close(ret, [[6.0, 5.0, 3.0]])
    close(adv, [[5.5, 4.0, 1.5]])


def test_gae_gamma_09_lambda_05_by_hand():
    r = T_([[1.0, 0.0, 2.0]])
    v = T_([[0.5, 1.0, 0.2]])
    adv, ret = ca.gae_advantages(r, v, torch.ones(1, 3), gamma=0.9, lambd=0.5)
    # delta2 = 2 + 0.9*0   - 0.2 =  1.8      (value after the last token is 0)
    # delta1 = 0 + 0.9*0.2 - 1.0 = -0.82
    # delta0 = 1 + 0.9*1.0 - 0.5 =  1.4
    # gamma*lambda = 0.45
    # A2 = 1.8 ; A1 = -0.82 + 0.45*1.8 = -0.01 ; A0 = 1.4 + 0.45*(-0.01) = 1.3955
    close(adv, [[1.3955, -0.01, 1.8]])
    # R = A + V: 1.8955, 0.99, 2.0
    close(ret, [[1.8955, 0.99, 2.0]])


def test_gae_right_padded_and_left_padded_masks():
    # row 0: the 3-step hand case above, right padded with garbage rewards/values in the padding
    # row 1: 2 valid tokens, r = (1, 1), V = (0, 0), gamma = 0.9, lambda = 0.5:
    #   delta1 = 1 - 0 = 1 ; delta0 = 1 + 0.9*0 - 0 = 1 ; A1 = 1 ; A0 = 1 + 0.45*1 = 1.45
    # row 2: row 0's response left padded (mask 0 0 1 1 1): same numbers, shifted
    r = T_([[1.0, 0.0, 2.0, 7.0, NAN], [1.0, 1.0, 5.0, 5.0, 5.0], [9.0, 9.0, 1.0, 0.0, 2.0]])
    v = T_([[0.5, 1.0, 0.2, 99.0, NAN], [0.0, 0.0, 3.0, 3.0, 3.0], [9.0, 9.0, 0.5, 1.0, 0.2]])
    m = T_([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 1, 1]])
    adv, ret = ca.gae_advantages(r, v, m, gamma=0.9, lambd=0.5)
    close(adv, [[1.3955, -0.01, 1.8, 0, 0], [1.45, 1.0, 0, 0, 0], [0, 0, 1.3955, -0.01, 1.8]])
    close(ret, [[1.8955, 0.99, 2.0, 0, 0], [1.45, 1.0, 0, 0, 0], [0, 0, 1.8955, 0.99, 2.0]])


def _gae_reference(r, v, m, gamma, lambd):
    """Slow per-row, per-token GAE over the valid positions only (independent reference)."""
    adv = torch.zeros_like(r)
    for b in range(r.shape[0]):
        idx = [t for t in range(r.shape[1]) if m[b, t]]
        last = 0.0
        for j in reversed(range(len(idx))):
            t = idx[j]
            nv = v[b, idx[j + 1]] if j + 1 < len(idx) else 0.0
            delta = r[b, t] + gamma * nv - v[b, t]
            last = delta + gamma * lambd * last
            adv[b, t] = last
    return adv, torch.where(m.bool(), adv + v, torch.zeros_like(v))


def test_gae_matches_slow_reference_on_random_masks_with_gaps():
    g = torch.Generator().manual_seed(3)
    r = torch.randn(6, 9, generator=g, dtype=torch.float64)
    v = torch.randn(6, 9, generator=g, dtype=torch.float64)
    m = torch.rand(6, 9, generator=g) > 0.3
    m[0] = False                                              # an empty response
    adv, ret = ca.gae_advantages(r, v, m, gamma=0.97, lambd=0.9)
    ref_adv, ref_ret = _gae_reference(r, v, m, 0.97, 0.9)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)
    assert (adv[~m] == 0).all() and (ret[~m] == 0).all()


def test_gae_bad_arguments():
    r = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="lambd"):
        ca.gae_advantages(r, r, r, 1.0, 1.5)
    with pytest.raises(ValueError, match="gamma"):
        ca.gae_advantages(r, r, r, -0.1, 0.9)
    with pytest.raises(ValueError, match=r"values\[2, 2\]"):
        ca.gae_advantages(r, r[:, :2], r, 1.0, 0.9)


# --------------------------------------------------------------------------------------------------
# REINFORCE++
# --------------------------------------------------------------------------------------------------

def test_reinforce_plus_plus_returns_and_global_whitening():
    r = T_([[1.0, 0.0, 1.0], [0.0, 2.0, 8.0]])
    m = T_([[1, 1, 1], [1, 1, 0]])
    adv, ret = ca.reinforce_plus_plus_advantages(r, m, gamma=1.0)
    # returns-to-go: row0 (2, 1, 1) ; row1 (2, 2, -) (the 8 is padding)
    close(ret, [[2.0, 1.0, 1.0], [2.0, 2.0, 0.0]])
    # global over the 5 valid: mean 8/5 = 1.6 ; devs 0.4, -0.6, -0.6, 0.4, 0.4
    # squares 0.16 + 0.36 + 0.36 + 0.16 + 0.16 = 1.2 ; unbiased var 1.2/4 = 0.3 ; std 0.5477226
    s = math.sqrt(0.3)
    close(adv, [[0.4 / s, -0.6 / s, -0.6 / s], [0.4 / s, 0.4 / s, 0.0]])
    # discounting, gamma = 0.5: row0 G2 = 1, G1 = 0 + 0.5*1 = 0.5, G0 = 1 + 0.5*0.5 = 1.25 ;
    #                           row1 G1 = 2, G0 = 0 + 0.5*2 = 1
    _, ret_half = ca.reinforce_plus_plus_advantages(r, m, gamma=0.5)
    close(ret_half, [[1.25, 0.5, 1.0], [1.0, 2.0, 0.0]])


# --------------------------------------------------------------------------------------------------
# group estimators: 2 prompts x 2 samples, dense rewards
# --------------------------------------------------------------------------------------------------

# rows prompt-major: (p0,s0), (p0,s1), (p1,s0), (p1,s1)
GROUP_R = T_([[1.0, 0.0, 2.0],     # G = (3, 2, 2)  s = 3
              [0.0, 1.0, 4.0],     # masked last: G = (1, 1, -)  s = 1
              [0.0, 0.0, 1.0],     # G = (1, 1, 1)  s = 1   (outcome-only reward)
              [0.0, 5.0, 0.0]])    # G = (5, 5, 0)  s = 5
GROUP_M = T_([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]])
GROUP_G = [[3.0, 2.0, 2.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [5.0, 5.0, 0.0]]


def test_grpo_dense_by_hand():
    adv, ret = ca.grpo_advantages(GROUP_R, GROUP_M, 2)
    close(ret, GROUP_G)
    # p0: s = (3, 1): mean 2, unbiased std |3-1|/sqrt2 = sqrt2
    # p1: s = (1, 5): mean 3, unbiased std 4/sqrt2 = 2 sqrt2
    r2, r8 = math.sqrt(2), math.sqrt(8)
    close(adv, [[(3 - 2) / r2, (2 - 2) / r2, (2 - 2) / r2],        # 0.7071, 0, 0
                [(1 - 2) / r2, (1 - 2) / r2, 0.0],                 # -0.7071, -0.7071, masked
                [(1 - 3) / r8] * 3,                                # -0.7071 x3
                [(5 - 3) / r8, (5 - 3) / r8, (0 - 3) / r8]])       # 0.7071, 0.7071, -1.0607


def test_rloo_dense_by_hand():
    adv, ret = ca.rloo_advantages(GROUP_R, GROUP_M, 2)
    close(ret, GROUP_G)
    # leave-one-out baseline with n = 2 is the sibling's sequence return:
    # row0: G - 1 ; row1: G - 3 ; row2: G - 5 ; row3: G - 1
    close(adv, [[2.0, 1.0, 1.0], [-2.0, -2.0, 0.0], [-4.0, -4.0, -4.0], [4.0, 4.0, -1.0]])


def test_dr_grpo_dense_by_hand():
    adv, ret = ca.dr_grpo_advantages(GROUP_R, GROUP_M, 2)
    close(ret, GROUP_G)
    # G - group mean (no std): p0 mean 2, p1 mean 3
    close(adv, [[1.0, 0.0, 0.0], [-1.0, -1.0, 0.0], [-2.0, -2.0, -2.0], [2.0, 2.0, -3.0]])


def test_rloo_three_samples_by_hand():
    # one prompt, n = 3, outcome rewards s = (3, 0, 6):
    # baselines (0+6)/2 = 3, (3+6)/2 = 4.5, (3+0)/2 = 1.5 -> A = 0, -4.5, 4.5
    r = T_([[0.0, 3.0], [0.0, 0.0], [6.0, 0.0]])
    m = T_([[1, 1], [1, 1], [1, 0]])
    adv, _ = ca.rloo_advantages(r, m, 3)
    close(adv, [[0.0, 0.0], [-4.5, -4.5], [4.5, 0.0]])


def test_group_estimators_reduce_to_outcome_form_on_last_token_rewards():
    # only the last valid token carries a reward: every valid token gets the textbook sequence advantage
    g = torch.Generator().manual_seed(5)
    lengths = T_([3, 5, 2, 4, 5, 1])
    T = 5
    m = torch.arange(T)[None] < lengths[:, None]
    s = torch.randn(6, generator=g, dtype=torch.float64)
    r = torch.zeros(6, T, dtype=torch.float64)
    r[torch.arange(6), lengths - 1] = s
    sg = s.view(3, 2)
    want = {
        "grpo": ((sg - sg.mean(1, keepdim=True)) / (sg.std(1, keepdim=True) + 1e-6)).reshape(-1),
        "rloo": (sg - sg.flip(1)).reshape(-1),               # n = 2: baseline = the sibling
        "dr_grpo": (sg - sg.mean(1, keepdim=True)).reshape(-1),
    }
    for name, w in want.items():
        adv, _ = ca.compute_advantages(name, r, m, n_samples_per_prompt=2)
        torch.testing.assert_close(adv, torch.where(m, w[:, None].expand(-1, T), torch.zeros(())))


def test_grpo_degenerate_group_gets_zero_and_group_errors():
    # p0: equal sequence returns (2, 2) with different timing -> std 0 -> advantages 0 (not -C/eps)
    # p1: s = (0, 2): mean 1, std sqrt2 -> (-1/sqrt2, ...)
    r = T_([[2.0, 0.0], [0.0, 2.0], [0.0, 0.0], [2.0, 0.0]])
    m = torch.ones(4, 2)
    adv, _ = ca.grpo_advantages(r, m, 2)
    r2 = math.sqrt(2)
    # row3: G = (2, 0): (2-1)/sqrt2, (0-1)/sqrt2
    close(adv, [[0.0, 0.0], [0.0, 0.0], [-1 / r2, -1 / r2], [1 / r2, -1 / r2]])
    for fn in (ca.grpo_advantages, ca.rloo_advantages, ca.dr_grpo_advantages):
        with pytest.raises(ValueError, match="n_samples_per_prompt=1"):
            fn(r, m, 1)
        with pytest.raises(ValueError, match="not a multiple"):
            fn(r[:3], m[:3], 2)


# --------------------------------------------------------------------------------------------------
# dispatch
# --------------------------------------------------------------------------------------------------

def test_compute_advantages_dispatch_and_errors():
    assert set(ca.ADVANTAGE_ESTIMATORS) >= {"gae", "reinforce_plus_plus", "grpo", "rloo", "dr_grpo"}
    r, m = GROUP_R, GROUP_M
    v = torch.full_like(r, 0.5)
    got = ca.compute_advantages("gae", r, m, values=v, gamma=0.9, lambd=0.5)
    want = ca.gae_advantages(r, v, m, 0.9, 0.5)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    got = ca.compute_advantages("rloo", r, m, values=v, n_samples_per_prompt=2)   # values ignored
    torch.testing.assert_close(got[0], ca.rloo_advantages(r, m, 2)[0])
    got = ca.compute_advantages("reinforce_plus_plus", r, m, gamma=0.5)
    torch.testing.assert_close(got[1], ca.reinforce_plus_plus_advantages(r, m, 0.5)[1])
    got = ca.compute_advantages("grpo", r, m, n_samples_per_prompt=2, estimator_kwargs={"eps": 0.5})
    torch.testing.assert_close(got[0], ca.grpo_advantages(r, m, 2, eps=0.5)[0])

    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'.*dr_grpo"):
        ca.compute_advantages("ppo", r, m)
    with pytest.raises(ValueError, match="needs critic values"):
        ca.compute_advantages("gae", r, m)
    with pytest.raises(ValueError, match="needs >= 2 samples"):
        ca.compute_advantages("grpo", r, m)                           # default n = 1
    with pytest.raises(ValueError, match="estimator_kwargs"):
        ca.compute_advantages("rloo", r, m, n_samples_per_prompt=2, estimator_kwargs={"eps": 1.0})


def test_register_custom_estimator():
    @ca.register_advantage_estimator("_test_const")
    def const(rewards, action_mask, gamma):
        return torch.full_like(rewards, gamma), rewards

    try:
        adv, _ = ca.compute_advantages("_test_const", GROUP_R, GROUP_M, gamma=0.25)
        assert torch.equal(adv, torch.full_like(GROUP_R, 0.25))
        with pytest.raises(ValueError, match="already registered"):
            ca.register_advantage_estimator("_test_const")(lambda rewards, action_mask: None)
        with pytest.raises(TypeError, match="action_mask"):
            ca.register_advantage_estimator("_test_bad")(lambda rewards: None)
    finally:
        ca.ADVANTAGE_ESTIMATORS.pop("_test_const", None)


# --------------------------------------------------------------------------------------------------
# FSPO, caution reward, variance filter
# --------------------------------------------------------------------------------------------------

def test_fspo_flip():
    a = T_([[0.5, -0.5, 0.3, -0.2, 0.7, -0.7]])
    s = T_([[1, 1, -1, -1, 0, 0]])
    # +1: |A| ; -1: -|A| ; 0: unchanged
    close(ca.fspo_flip(a, s), [[0.5, 0.5, -0.3, -0.2, 0.7, -0.7]])
    close(ca.fspo_flip(a, s.float()), [[0.5, 0.5, -0.3, -0.2, 0.7, -0.7]])
    with pytest.raises(ValueError, match=r"\{-1, 0, \+1\}.*2"):
        ca.fspo_flip(a, T_([[1, 2, 0, 0, 0, 0]]))
    with pytest.raises(TypeError, match="bool"):
        ca.fspo_flip(a, s.bool())


def test_caution_rewards_with_and_without_a_correct_sample():
    # n = 3. prompt 0 has a correct sample: its abstention earns 0. prompt 1 has none: abstentions earn 1.
    correct = T_([False, True, False, False, False, False])
    abst = T_([True, False, False, True, False, True])
    close(ca.caution_rewards(correct, abst, 3), [0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    # 0/1 ints accepted; correct-and-abstained counts as correct
    close(ca.caution_rewards(T_([1, 0]), T_([1, 0]), 2), [1.0, 0.0])
    assert ca.caution_rewards(correct, abst, 3).dtype == torch.float32
    with pytest.raises(ValueError, match="not a multiple"):
        ca.caution_rewards(correct, abst, 4)


def test_ternary_outcome_rewards_and_the_group_preference_it_makes():
    correct = T_([True, False, False, False])
    abst = T_([False, False, True, False])
    close(ca.ternary_outcome_rewards(correct, abst), [1.0, -1.0, 0.0, -1.0])
    close(ca.ternary_outcome_rewards(correct, abst, abstain=-0.5), [1.0, -1.0, -0.5, -1.0])
    close(ca.ternary_outcome_rewards(T_([1]), T_([1])), [1.0])  # correct and abstained counts as correct
    # with GRPO, an abstention candidate beside three wrong answers gets the positive advantage, beside two
    # right answers the negative one: abstaining is learnt exactly where the model's answers are wrong
    n = 4
    r = ca.ternary_outcome_rewards(T_([False, False, False, False, True, True, False, False]),
                                   T_([False, False, False, True, False, False, False, True]), abstain=-0.5)
    mask = torch.ones(8, 1, dtype=torch.bool)
    adv, _ = ca.compute_advantages("grpo", r[:, None], mask, n_samples_per_prompt=n)
    assert adv[3, 0] > 0 and (adv[:3, 0] < 0).all()
    assert adv[7, 0] < 0 and (adv[4:6, 0] > 0).all()
    with pytest.raises(ValueError, match="wrong <= abstain <= correct"):
        ca.ternary_outcome_rewards(correct, abst, abstain=2.0)
    with pytest.raises(ValueError, match="finite"):
        ca.ternary_outcome_rewards(correct, abst, wrong=float("nan"))


def test_ternary_outcome_rewards_per_sample_abstention_price():
    # evidence prompts (rows 2, 3) price an abstention at -0.2, closed-book ones (rows 0, 1) at -0.7
    correct = T_([False, True, False, False])
    abst = T_([True, True, True, False])
    price = T_([-0.7, -0.7, -0.2, -0.2])
    close(ca.ternary_outcome_rewards(correct, abst, abstain=price), [-0.7, 1.0, -0.2, -1.0])
    with pytest.raises(ValueError, match=r"number or \[N\]"):
        ca.ternary_outcome_rewards(correct, abst, abstain=T_([0.0, 0.0]))
    with pytest.raises(ValueError, match="wrong <= abstain <= correct"):
        ca.ternary_outcome_rewards(correct, abst, abstain=T_([0.0, 0.0, 1.5, 0.0]))
    with pytest.raises(ValueError, match="non-finite"):
        ca.ternary_outcome_rewards(correct, abst, abstain=T_([0.0, float("nan"), 0.0, 0.0]))


def test_filter_by_outcome_variance():
    scores = T_([1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    # p0 std 0 ; p1: mean 1/3, squared devs 1/9 + 4/9 + 1/9 = 6/9, unbiased var 1/3, std 0.57735
    assert ca.filter_by_outcome_variance(scores, 3, 0.5).tolist() == [False] * 3 + [True] * 3
    assert ca.filter_by_outcome_variance(scores, 3, 0.6).tolist() == [False] * 6
    assert ca.filter_by_outcome_variance(scores, 3, 0.0).tolist() == [True] * 6
    assert ca.filter_by_outcome_variance(scores, 1, 0.0).tolist() == [True] * 6
    with pytest.raises(ValueError, match="min_std"):
        ca.filter_by_outcome_variance(scores, 3, -0.1)
    with pytest.raises(ValueError, match="needs >= 2"):
        ca.filter_by_outcome_variance(scores, 1, 0.1)


# --------------------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------------------

def test_policy_loss_clip_by_hand_and_gradients():
    ratios = T_([[1.5, 1.0, 0.5, 1.5, 2.0]])
    old = T_([[-1.0, -2.0, -0.5, -1.5, -3.0]])
    logp = (old + ratios.log()).requires_grad_(True)
    adv = T_([[1.0, 1.0, -1.0, -1.0, 5.0]])
    m = T_([[1, 1, 1, 1, 0]])
    loss, met = ca.policy_loss(logp, old, adv, m, eps_clip=0.2)
    # t0: ratio 1.5 > 1.2, A=+1: min(1.5, 1.2) = 1.2 -> -1.2 (clipped: no gradient)
    # t1: ratio 1.0:                                   -1.0
    # t2: ratio 0.5 < 0.8, A=-1: min(-0.5, -0.8) = -0.8 -> +0.8 (clipped: no gradient)
    # t3: ratio 1.5, A=-1: min(-1.5, -1.2) = -1.5     -> +1.5 (unclipped: pessimistic branch)
    # token mean over 4 valid: (-1.2 - 1 + 0.8 + 1.5) / 4 = 0.025
    close(loss, 0.025)
    loss.backward()
    # d(-ratio*A)/dlogp = -ratio*A, / 4 : t1 -> -1/4 ; t3 -> 1.5/4 ; clipped and masked -> 0
    close(logp.grad, [[0.0, -0.25, 0.0, 0.375, 0.0]])
    assert met["clipfrac"] == pytest.approx(0.5)                        # t0, t2 of 4
    assert met["ratio_mean"] == pytest.approx((1.5 + 1 + 0.5 + 1.5) / 4)
    # k3(old||new) = ratio - ln ratio - 1: 0.0945349, 0, 0.1931472, 0.0945349 -> mean 0.0955543
    assert met["approx_kl"] == pytest.approx((2 * (0.5 - math.log(1.5)) + (math.log(2) - 0.5)) / 4, abs=1e-6)
    assert all(isinstance(v, float) for v in met.values())


def test_policy_loss_clip_higher_and_errors():
    old = torch.zeros(1, 1)
    logp = torch.full((1, 1), math.log(1.5), requires_grad=True)
    # eps_clip_high 0.6: 1.5 < 1.6 is inside the range -> loss -1.5, gradient -1.5
    loss, met = ca.policy_loss(logp, old, torch.ones(1, 1), torch.ones(1, 1), 0.2, eps_clip_high=0.6)
    close(loss, -1.5)
    loss.backward()
    close(logp.grad, [[-1.5]])
    assert met["clipfrac"] == 0.0
    with pytest.raises(ValueError, match="eps_clip"):
        ca.policy_loss(logp, old, old, old, 0.0)
    with pytest.raises(ValueError, match="loss_agg"):
        ca.policy_loss(logp, old, old, torch.ones(1, 1), 0.2, loss_agg="sum")


def test_aggregate_loss_modes():
    lm = T_([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0], [9.0, 9.0, 9.0]])
    m = T_([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    close(ca.aggregate_loss(lm, m, "token-mean"), (1 + 2 + 3) / 3)                 # 2
    close(ca.aggregate_loss(lm, m, "seq-mean-token-mean"), (1.5 + 3) / 2)          # empty row left out
    # Dr.GRPO: token sums / constant 3, averaged over all 3 rows: (3/3 + 3/3 + 0) / 3
    close(ca.aggregate_loss(lm, m, "seq-mean-token-sum-norm"), 2 / 3)
    close(ca.aggregate_loss(lm, m, "seq-mean-token-sum-norm", norm_length=6), 1 / 3)


def test_value_loss_clip_by_hand():
    old = T_([[1.0, 1.0, 1.0, 1.0]])
    v = T_([[1.5, 1.1, 0.5, 7.0]], requires_grad=True)
    ret = T_([[2.0, 0.0, 1.0, 0.0]])
    m = T_([[1, 1, 1, 0]])
    loss, met = ca.value_loss(v, old, ret, m, value_clip=0.2)
    # t0: v 1.5 -> clipped 1.2: (1.5-2)^2 = 0.25, (1.2-2)^2 = 0.64 -> 0.64 (clipped branch wins)
    # t1: v 1.1 within 1 +- 0.2: (1.1-0)^2 = 1.21 both
    # t2: v 0.5 -> clipped 0.8: (0.5-1)^2 = 0.25, (0.8-1)^2 = 0.04 -> 0.25
    # 0.5 * (0.64 + 1.21 + 0.25) / 3 = 0.35
    close(loss, 0.35)
    assert met["vf_clipfrac"] == pytest.approx(1 / 3)
    loss.backward()
    # grad = (v - R)/3 on unclipped tokens: t1 1.1/3, t2 -0.5/3; t0 clipped branch is flat; t3 masked
    close(v.grad, [[0.0, 1.1 / 3, -0.5 / 3, 0.0]])
    with pytest.raises(ValueError, match="value_clip"):
        ca.value_loss(v, old, ret, m, 0)


# --------------------------------------------------------------------------------------------------
# logits
# --------------------------------------------------------------------------------------------------

def test_entropy_and_logprobs_from_logits_by_hand():
    probs = T_([0.5, 0.25, 0.25])
    logits = (probs.log() + 3.0).expand(2, 2, 3).clone()       # shift by 3: softmax is shift invariant
    # H = 0.5 ln2 + 2 * 0.25 ln4 = 0.5 ln2 + ln2 = 1.5 ln2 = 1.0397208
    close(ca.entropy_from_logits(logits), torch.full((2, 2), 1.5 * math.log(2)))
    close(ca.entropy_from_logits(torch.zeros(1, 4)), [math.log(4)])                # uniform: ln 4
    labels = T_([[0, 1], [2, 0]])
    # ln 0.5 = -0.693147 ; ln 0.25 = -1.386294
    close(ca.logprobs_from_logits(logits, labels), [[math.log(0.5), math.log(0.25)],
                                                    [math.log(0.25), math.log(0.5)]])
    with pytest.raises(ValueError, match=r"\[0, 3\).*-100"):
        ca.logprobs_from_logits(logits, T_([[0, -100], [0, 0]]))
    with pytest.raises(ValueError, match="vocab"):
        ca.logprobs_from_logits(logits, T_([[0, 1, 2]]))


def test_logprobs_chunking_half_precision_and_gradient():
    g = torch.Generator().manual_seed(7)
    logits = (torch.randn(3, 5, 11, generator=g) * 4).requires_grad_(True)
    labels = torch.randint(0, 11, (3, 5), generator=g)
    want = torch.log_softmax(logits, -1).gather(-1, labels[..., None]).squeeze(-1)
    got = ca.logprobs_from_logits(logits, labels, chunk_rows=4)       # 15 rows in 4 chunks
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(ca.entropy_from_logits(logits, chunk_rows=4),
                               -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1))
    # gradient of log p(label) w.r.t. logits is onehot(label) - softmax
    got.sum().backward()
    onehot = torch.nn.functional.one_hot(labels, 11).float()
    torch.testing.assert_close(logits.grad, onehot - torch.softmax(logits.detach(), -1))
    # bf16 logits are upcast: result fp32 and close to the fp32 computation on the same (rounded) values
    lb = logits.detach().to(torch.bfloat16)
    out = ca.logprobs_from_logits(lb, labels, chunk_rows=2)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.log_softmax(lb.float(), -1).gather(-1, labels[..., None]).squeeze(-1))


# --------------------------------------------------------------------------------------------------
# gradients flow where expected (property-style)
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradients_flow_only_through_valid_unclipped_tokens(seed):
    g = torch.Generator().manual_seed(seed)
    B, T, V = 4, 6, 13
    logits = torch.randn(B, T, V, generator=g, requires_grad=True)
    labels = torch.randint(0, V, (B, T), generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    m = torch.arange(T)[None] < lengths[:, None]
    old = (ca.logprobs_from_logits(logits, labels) + 0.3 * torch.randn(B, T, generator=g)).detach()
    old_req = old.clone().requires_grad_(True)
    adv = torch.randn(B, T, generator=g).requires_grad_(True)

    logp = ca.logprobs_from_logits(logits, labels)
    logp.retain_grad()
    loss, _ = ca.policy_loss(logp, old_req, adv, m, eps_clip=0.2)
    loss.backward()
    # no gradient into the constants
    assert old_req.grad is None and adv.grad is None
    # padded tokens get exactly zero gradient, down to the logits
    assert (logp.grad[~m] == 0).all()
    assert (logits.grad[~m] == 0).all()
    # valid tokens: gradient is zero exactly where the clipped branch is active
    ratio = (logp.detach() - old).exp()
    a = adv.detach()
    clipped = ((ratio > 1.2) & (a > 0)) | ((ratio < 0.8) & (a < 0))
    assert (logp.grad[m & clipped] == 0).all()
    nz = m & ~clipped & (a != 0)
    assert nz.any()
    assert (logp.grad[nz] != 0).all()
    torch.testing.assert_close(logp.grad[nz], (-ratio * a / m.sum())[nz])

    # value loss: gradient only on valid tokens, not into old values / returns
    vals = torch.randn(B, T, generator=g, requires_grad=True)
    oldv = torch.randn(B, T, generator=g, requires_grad=True)
    rets = torch.randn(B, T, generator=g, requires_grad=True)
    vl, _ = ca.value_loss(vals, oldv, rets, m, value_clip=10.0)
    vl.backward()
    assert oldv.grad is None and rets.grad is None
    assert (vals.grad[~m] == 0).all() and (vals.grad[m] != 0).all()

    # k3 KL penalty: d/dlogp [exp(ref - logp) - (ref - logp) - 1] = 1 - exp(ref - logp)
    lp = torch.randn(B, T, generator=g, requires_grad=True)
    ref = torch.randn(B, T, generator=g)
    ca.kl_penalty(lp, ref, "k3").sum().backward()
    torch.testing.assert_close(lp.grad, 1 - (ref - lp.detach()).exp())

    # advantages from detached rewards are constants
    adv2, _ = ca.gae_advantages(torch.randn(B, T, generator=g), vals.detach(), m, 1.0, 0.95)
    assert not adv2.requires_grad


# ------------------------------------------------------------------------------------------------ compose_rewards

def test_compose_rewards_by_hand():
    from core.core_algos import compose_rewards
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    verifier = torch.tensor([[0.0, 0.5, -1.0, 9.0], [1.0, 0.0, 7.0, 7.0]])   # junk outside the mask
    kl = torch.tensor([[0.1, 0.2, 0.3, 5.0], [0.0, 0.4, 5.0, 5.0]])
    # token weight 0.5, outcome on the last valid token, KL 0.1 per nat
    r, totals = compose_rewards(verifier, mask, token_weight=0.5, outcome=torch.tensor([-1.0, 1.0]), kl=kl,
                                kl_coef=0.1)
    want = torch.tensor([[0.0 - 0.01, 0.25 - 0.02, -0.5 - 1.0 - 0.03, 0.0],
                         [0.5 - 0.0, 0.0 + 1.0 - 0.04, 0.0, 0.0]])
    assert torch.allclose(r, want, atol=1e-6)
    assert torch.allclose(totals, torch.tensor([0.25 - 0.5 - 1.0, 0.5 + 1.0]))
    # the caution reward replaces the verifier's rewards (weight does not apply); no KL term without kl
    r2, t2 = compose_rewards(verifier, mask, token_weight=3.0, caution=torch.tensor([1.0, 0.0]),
                             outcome=torch.tensor([0.5, -0.5]))
    assert r2.tolist() == [[0, 0, 1.5, 0], [0, -0.5, 0, 0]] and t2.tolist() == [1.5, -0.5]
    # weight 0: the outcome alone (TruthRL)
    r3, _ = compose_rewards(verifier, mask, token_weight=0.0, outcome=torch.tensor([-0.6, 1.0]))
    assert torch.allclose(r3, torch.tensor([[0, 0, -0.6, 0], [0, 1.0, 0, 0]]))
    with pytest.raises(ValueError, match="token_weight"):
        compose_rewards(verifier, mask, token_weight=-1.0)
    with pytest.raises(ValueError, match=r"values must be \[B\]"):
        compose_rewards(verifier, mask, outcome=torch.tensor([1.0]))


def test_outcome_positions_put_the_outcome_on_the_named_token():
    from core.core_algos import compose_rewards, positioned_values
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    out = positioned_values(torch.tensor([2.0, -1.0, 5.0]), torch.tensor([1, -1, -1]), mask)
    assert out.tolist() == [[0, 2.0, 0, 0], [0, -1.0, 0, 0], [0, 0, 0, 0]]     # -1: the last valid token
    r, totals = compose_rewards(torch.tensor([[0, 0, 0, 1.0], [0.5, 0, 0, 0], [0, 0, 0, 0]]), mask,
                                outcome=torch.tensor([-1.0, 1.0, 1.0]), outcome_positions=torch.tensor([1, 0, -1]))
    assert r.tolist() == [[0, -1.0, 0, 1.0], [1.5, 0, 0, 0], [0, 0, 0, 0]]
    assert totals.tolist() == [0.0, 1.5, 0.0]
    with pytest.raises(ValueError, match="valid .unmasked. token"):
        positioned_values(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0, 3, -1]), mask)   # row 1 has 2 tokens
    with pytest.raises(ValueError, match=r"values and positions must be \[B\] = \[3\]"):
        positioned_values(torch.tensor([1.0]), torch.tensor([0, 0, 0]), mask)


def test_cap_positive_rewards_stops_counting_support_at_the_cap_and_keeps_every_cost():
    from core.core_algos import cap_positive_rewards, compose_rewards
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    r = torch.tensor([[1.0, -1.0, 1.0, 0.5, 1.0, -0.5], [0.4, 0.4, 9.0, 9.0, 9.0, 9.0]])
    out = cap_positive_rewards(r, mask, 2.0)
    # row 0: +1, +1 reach the cap; the 0.5 and the next +1 are cut; the -1 and -0.5 stay
    # row 1: the third token crosses the cap and keeps what is left; junk outside the mask is zeroed
    assert torch.allclose(out, torch.tensor([[1.0, -1.0, 1.0, 0.0, 0.0, -0.5], [0.4, 0.4, 1.2, 0.0, 0.0, 0.0]]))
    assert cap_positive_rewards(torch.tensor([[0.75, 0.75]]), torch.ones(1, 2), 1.0).tolist() == [[0.75, 0.25]]
    assert cap_positive_rewards(r, mask, 0.0).clamp(min=0).sum() == 0
    with pytest.raises(ValueError, match="cap must be a finite number >= 0"):
        cap_positive_rewards(r, mask, -1.0)
    # in compose_rewards the cap applies to the weighted verifier rewards, never to the outcome
    c, totals = compose_rewards(r, mask, token_weight=2.0, token_cap=3.0, outcome=torch.tensor([1.0, -1.0]))
    assert c[0].tolist() == [2.0, -2.0, 1.0, 0.0, 0.0, -1.0 + 1.0]
    assert torch.allclose(totals, torch.tensor([1.0, 0.8 + 0.8 + 1.4 - 1.0]))


def test_answer_credit_follows_the_answer_not_the_support_count_with_the_outcome_on_the_answer():
    """Why OUTCOME_TOKEN=graded-end with GAMMA < 1 (the grounded reply: answer sentence, then support).

    Two replies to one prompt: A answers wrong and copies five supported sentences (the samples log's "No, ... are
    not both members of bands. <7 copied Correct sentences>"); B answers right and stops. With the outcome on the
    last token and no discount, RLOO gives A's answer tokens the larger advantage (the sum over the reply is
    dominated by the support count), so RL learns to copy, not to answer right. With the outcome on the answer's
    last token and a discount, B's answer tokens win, and A's support tokens are judged by their own statements,
    above A's answer."""
    from core.core_algos import compose_rewards, rloo_advantages
    T, ans_end = 60, 9                              # answer sentence: tokens 0..9, support: 10 tokens a statement
    mask = torch.ones(2, T, dtype=torch.bool)
    verifier = torch.zeros(2, T)
    verifier[0, ans_end] = -1.0                     # A's answer statement: Wrong
    verifier[0, [19, 29, 39, 49, 59]] = 1.0         # five Correct support statements
    verifier[1, ans_end] = 1.0                      # B's answer statement: Correct
    outcome = torch.tensor([-1.0, 1.0])

    def answer_and_support_advantage(positions, gamma):
        r, _ = compose_rewards(verifier, mask, outcome=outcome, outcome_positions=positions)
        adv, _ = rloo_advantages(r, mask, 2, gamma=gamma)
        return adv[:, 0], adv[0, 10]

    first, _ = answer_and_support_advantage(None, 1.0)
    assert first[0] > first[1]                      # the wrong answer is reinforced
    first, a_support = answer_and_support_advantage(torch.tensor([ans_end, ans_end]), 0.9)
    assert first[1] > 0 > first[0]                  # the right answer is reinforced, the wrong one pushed down
    assert a_support > first[0]                     # A's copied support is judged above its wrong answer


def test_adapt_abstain_price_moves_against_the_rate_error_and_stays_in_bounds():
    from core.core_algos import adapt_abstain_reward
    # declining too little (0.1 < 0.5): abstaining becomes cheaper to choose (its reward rises by 0.4)
    assert adapt_abstain_reward(-0.7, 0.1, 0.5, 1.0, -0.9, 0.9) == pytest.approx(-0.3)
    # declining too much: its reward falls, down to the lower bound
    assert adapt_abstain_reward(-0.7, 0.9, 0.5, 1.0, -0.9, 0.9) == pytest.approx(-0.9)
    assert adapt_abstain_reward(0.8, 0.0, 0.5, 1.0, -0.9, 0.9) == pytest.approx(0.9)
    assert adapt_abstain_reward(-0.2, 0.5, 0.5, 3.0, -0.9, 0.9) == pytest.approx(-0.2)   # on target: unchanged
    assert adapt_abstain_reward(-0.2, 0.0, 0.5, 0.0, -0.9, 0.9) == pytest.approx(-0.2)   # step 0: fixed price
    with pytest.raises(ValueError, match="abstain_rate"):
        adapt_abstain_reward(0.0, 1.5, 0.5, 1.0, -0.9, 0.9)
    with pytest.raises(ValueError, match="low <= high"):
        adapt_abstain_reward(0.0, 0.5, 0.5, 1.0, 0.9, -0.9)


def test_answer_mean_abstain_price_cancels_the_batch_pull_on_abstaining():
    """The price is the mean reward of the answers (+ margin): with an abstention candidate in every group, the
    candidates' RLOO-style pulls (price - the group's mean answer reward) then sum to zero over the batch."""
    from core.core_algos import answer_mean_abstain_reward
    answers = torch.tensor([[1.0, -1.0, 1.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, 1.0]])   # 3 groups x 3 answers
    price = answer_mean_abstain_reward(answers.flatten(), 0.0, -0.9, 0.9)
    assert price == pytest.approx(-1 / 3)                                        # (3 right - 6 wrong) / 9
    pulls = price - answers.mean(-1)                                             # +: decline this question
    assert float(pulls.sum()) == pytest.approx(0.0, abs=1e-6)
    assert pulls[1] > 0 > pulls[0]                                              # decline the all-wrong one only
    assert answer_mean_abstain_reward(answers.flatten(), 0.2, -0.9, 0.9) == pytest.approx(-1 / 3 + 0.2)
    assert answer_mean_abstain_reward(-torch.ones(4), 0.0, -0.9, 0.9) == pytest.approx(-0.9)   # clamped
    assert answer_mean_abstain_reward(torch.ones(0), 0.0, -0.9, 0.9) == pytest.approx(0.0)     # no answers
    with pytest.raises(ValueError, match="low <= high"):
        answer_mean_abstain_reward(answers.flatten(), 0.0, 0.9, -0.9)


def test_micro_batch_weights_make_the_token_mean_batch_wide():
    """Weighting each micro batch's token mean by its share of the step's tokens gives the token mean over the
    whole batch (the policy actor's _ppo_pass), not the mean of the micro batches' means."""
    from actors.policy import micro_batch_units
    from core.core_algos import aggregate_loss
    torch.manual_seed(0)
    loss = torch.randn(6, 5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0],
                         [0, 0, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    units = micro_batch_units(mask, 2, by_tokens=True)
    assert units == [9.0, 3.0, 3.0]
    weighted = sum(u / sum(units) * aggregate_loss(loss[i:i + 2], mask[i:i + 2], "token-mean")
                   for u, i in zip(units, range(0, 6, 2)))
    assert weighted == pytest.approx(float(aggregate_loss(loss, mask, "token-mean")), abs=1e-6)
    seq_units = micro_batch_units(mask, 2, by_tokens=False)
    assert seq_units == [2.0, 2.0, 1.0]
    weighted = sum(u / sum(seq_units) * aggregate_loss(loss[i:i + 2], mask[i:i + 2], "seq-mean-token-mean")
                   for u, i in zip(seq_units, range(0, 6, 2)))
    assert weighted == pytest.approx(float(aggregate_loss(loss, mask, "seq-mean-token-mean")), abs=1e-6)
