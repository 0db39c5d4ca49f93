"""The RL math of RLFH as small pure torch functions (no Ray, no I/O).

Everything here is vectorised over the batch. The only Python loop over time is the reverse
scan of the GAE / discounted-return recursion (one batched op per time step).

Conventions used by every function below:

* ``B`` = number of sequences (responses) in the batch, ``T`` = response length (padded),
  ``V`` = vocabulary size, ``N`` = number of samples (``N == B``), ``n`` = samples per prompt.
* A mask (``action_mask``) is any tensor whose non-zero entries mark valid response tokens. It may be
  ``bool``, integer or float; it is read as ``mask != 0``. Responses are usually left-aligned with right
  padding (``1 1 1 0 0``), but every function also handles arbitrary masks (left padding, gaps): masked
  positions are skipped by the recursions and carry no value.
* Group estimators expect the batch in prompt-major order: rows ``i*n .. i*n+n-1`` are the ``n`` samples of
  prompt ``i``.
* Values at masked positions of the outputs are exactly 0 (never NaN), even when the inputs hold garbage
  (``-inf`` log-probs, NaN) there.

Dense rewards with group estimators (GRPO / RLOO / Dr.GRPO)
-----------------------------------------------------------
RLFH's rewards are dense (one reward per token, placed on statement/sentence tokens, plus the per-token
KL penalty). The group estimators are defined on them as "REINFORCE with reward-to-go and a group
baseline"::

    G[i, t] = sum_{k >= t, k valid} gamma^(#valid steps from t to k) * r[i, k]    (return-to-go, [B, T])
    s[i]    = G[i, first valid t]          (the sequence return; with gamma = 1 simply the sum of r[i])
    mu_g, sigma_g = mean and unbiased std of s over the n samples of prompt g

    GRPO     A[i, t] = (G[i, t] - mu_g) / (sigma_g + eps)
    RLOO     A[i, t] =  G[i, t] - (sum_{j in g, j != i} s[j]) / (n - 1)
    Dr.GRPO  A[i, t] =  G[i, t] - mu_g

and ``returns = G`` for all three. Why this choice:

* With an outcome reward (only the last valid token is rewarded) ``G[i, t] == s[i]`` for every t, so the
  three formulas reduce *exactly* to the published sequence-level GRPO / RLOO / Dr.GRPO advantages.
* With dense rewards, ``A[i, t] = A_outcome[i] - (rewards sample i collected before t) / scale``: a token is
  credited only for rewards at or after it (the causal reward-to-go form of the policy gradient), while
  the group baseline (which depends only on the prompt) keeps the estimate unbiased. So a wrong statement
  late in an answer does not cancel the credit of a correct statement earlier in it.
* Dr.GRPO's "no length normalisation" is a property of how the loss is aggregated, not of the advantage:
  ``policy_loss(..., loss_agg="seq-mean-token-sum-norm")`` (setting LOSS_AGG; the default under
  ``ADVANTAGE_ESTIMATOR=dr_grpo``).

Degenerate GRPO groups: when the sequence returns of a group are all equal (``sigma_g <= eps``) the group has
no group-relative signal; its advantages are set to 0 (the outcome form gives 0 there too, while the
reward-to-go term would be divided by ~0). Near-degenerate groups amplify the reward-to-go term by
``1 / sigma_g``; drop them beforehand with :func:`filter_by_outcome_variance` (config ``FILTER_VARIANCE``).
"""
from __future__ import annotations

import inspect
import math
from typing import Callable, Optional

import torch
from torch import Tensor

__all__ = [
    "masked_mean", "masked_sum", "masked_var", "masked_whiten", "kl_penalty", "KL_ESTIMATORS",
    "shape_token_rewards", "last_token_values", "positioned_values", "cap_positive_rewards", "compose_rewards",
    "discounted_returns", "gae_advantages", "reinforce_plus_plus_advantages",
    "grpo_advantages", "rloo_advantages", "dr_grpo_advantages", "ADVANTAGE_ESTIMATORS",
    "register_advantage_estimator", "compute_advantages", "fspo_flip", "caution_rewards", "ternary_outcome_rewards",
    "adapt_abstain_reward", "answer_mean_abstain_reward",
    "filter_by_outcome_variance", "aggregate_loss", "LOSS_AGG_MODES", "policy_loss", "value_loss",
    "entropy_from_logits", "logprobs_from_logits", "dpo_loss",
]


# --------------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------------

def _check_tensor(name: str, x) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")


def _check_same_shape(**tensors: Tensor) -> None:
    """All named tensors must have the same shape; the error names every field and its shape."""
    for name, t in tensors.items():
        _check_tensor(name, t)
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        desc = ", ".join(f"{k}{list(v)}" for k, v in shapes.items())
        raise ValueError(f"shape mismatch: {desc}; these tensors must all have the same shape")


def _check_2d(name: str, x: Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D [B, T], got shape {list(x.shape)}")


def _check_unit_interval(name: str, v: float) -> None:
    if not (isinstance(v, (int, float)) and 0.0 <= float(v) <= 1.0):
        raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")


def _as_bool(mask: Tensor) -> Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def _zero_outside(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` where ``mask`` (bool) is True, exactly 0 elsewhere (even where ``x`` is NaN / inf). Same shape as ``x``."""
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _check_groups(name: str, batch: int, n_samples_per_prompt, min_n: int = 1) -> int:
    if isinstance(n_samples_per_prompt, bool) or not isinstance(n_samples_per_prompt, int):
        raise TypeError(f"n_samples_per_prompt must be an int, got {n_samples_per_prompt!r}")
    if n_samples_per_prompt < min_n:
        raise ValueError(
            f"{name}: n_samples_per_prompt={n_samples_per_prompt}, but it needs >= {min_n} samples per prompt "
            f"(set N_SAMPLES_PER_PROMPT >= {min_n})")
    if batch % n_samples_per_prompt != 0:
        raise ValueError(
            f"{name}: batch size {batch} is not a multiple of n_samples_per_prompt={n_samples_per_prompt}; "
            f"rows must be prompt-major groups of n samples")
    return batch // n_samples_per_prompt


# --------------------------------------------------------------------------------------------------
# masked statistics
# --------------------------------------------------------------------------------------------------

def _full_mask(x: Tensor, mask: Tensor) -> Tensor:
    """``mask != 0`` broadcast to the common shape of ``x`` and ``mask``; ValueError naming both shapes if none."""
    _check_tensor("x", x)
    _check_tensor("mask", mask)
    try:
        shape = torch.broadcast_shapes(x.shape, mask.shape)
    except RuntimeError:
        raise ValueError(f"mask shape {list(mask.shape)} does not broadcast to x shape {list(x.shape)}") from None
    return _as_bool(mask).expand(shape)


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over the entries where ``mask != 0``.

    Args:
        x: any shape ``S``.
        mask: shape broadcastable to ``S``.
        dim: reduce over this dim only; ``None`` reduces over everything.
    Returns:
        scalar ``[]`` if ``dim is None`` else ``S`` with ``dim`` removed.
    """
    _check_tensor("x", x)
    _check_tensor("mask", mask)
    m = _as_bool(mask)
    vals = _zero_outside(x, m)
    return vals.sum() if dim is None else vals.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over the entries where ``mask != 0``.

    Entries outside the mask are ignored even if they are NaN/inf. An empty mask (or an empty row when
    ``dim`` is given) averages to 0, so a batch without valid tokens contributes no loss instead of NaN.

    Args:
        x: any shape ``S`` (e.g. ``[B, T]``).
        mask: shape broadcastable to ``S`` (e.g. ``[B, T]``), bool/int/float, non-zero = valid.
        dim: reduce over this dim only (e.g. ``-1`` -> per-sequence mean ``[B]``); ``None`` -> scalar.
    Returns:
        scalar ``[]`` if ``dim is None`` else ``S`` with ``dim`` removed.
    """
    m_full = _full_mask(x, mask)
    total = masked_sum(x, m_full, dim)
    count = m_full.sum() if dim is None else m_full.sum(dim=dim)
    return total / count.clamp(min=1).to(total.dtype)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of the entries of ``x`` where ``mask != 0`` (over all dims: one scalar).

    Args:
        x: any shape ``S``; mask: broadcastable to ``S``.
        unbiased: divide by ``count - 1`` (Bessel) instead of ``count``. With a single valid entry the
            variance is 0.
    Returns:
        scalar ``[]``.
    Raises:
        ValueError: the mask selects no entry.
    """
    m = _full_mask(x, mask)
    count = int(m.sum().item())
    if count == 0:
        raise ValueError("masked_var: mask selects no entries (every action_mask entry is 0)")
    mean = masked_mean(x, m)
    sq = masked_sum((x - mean) ** 2, m)
    denom = count - 1 if (unbiased and count > 1) else count
    return sq / denom


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, *, eps: float = 1e-8) -> Tensor:
    """Whiten ``x`` with the global mean and (unbiased) variance of its masked entries.

    ``y = (x - mean) / sqrt(var + eps)`` where mean/var are taken over ALL masked entries of the whole
    tensor (not per row). With ``shift_mean=False`` the mean is added back: ``y = (x - mean)/sqrt(var+eps) + mean``
    (only the scale is normalised). Entries outside the mask are 0.

    Args:
        x: ``[B, T]`` (any shape works).
        mask: same shape as ``x``, non-zero = valid.
        shift_mean: subtract the mean (True) or keep it (False).
        eps: added to the variance.
    Returns:
        ``[B, T]``, same dtype as ``x``.
    Raises:
        ValueError: shapes differ, or the mask selects no entry.
    """
    _check_same_shape(x=x, mask=mask)
    m = _as_bool(mask)
    mean = masked_mean(x, m)
    var = masked_var(x, m, unbiased=True)
    y = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        y = y + mean
    return _zero_outside(y, m)


# --------------------------------------------------------------------------------------------------
# KL and reward shaping
# --------------------------------------------------------------------------------------------------

_K3_LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: keeps k3 finite for absurd log-ratios (fp16/bf16 blow-ups)


def _kl_k1(log_ratio: Tensor) -> Tensor:
    return log_ratio


def _kl_k2(log_ratio: Tensor) -> Tensor:
    return 0.5 * log_ratio.square()


def _kl_k3(log_ratio: Tensor) -> Tensor:
    # ref/pi ratio: exp(-log_ratio); k3 = r - log r - 1 >= 0 with equality at r = 1.
    neg = (-log_ratio).clamp(-_K3_LOG_RATIO_CLAMP, _K3_LOG_RATIO_CLAMP)
    return torch.expm1(neg) - neg


KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {"k1": _kl_k1, "k2": _kl_k2, "k3": _kl_k3}


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k1") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from the policy pi.

    With ``d = logprobs - ref_logprobs`` (= log pi(a) - log pi_ref(a)):

    * ``k1 = d``                              unbiased, can be negative per token;
    * ``k2 = 0.5 * d^2``                       biased, >= 0, low variance;
    * ``k3 = exp(-d) - (-d) - 1``              unbiased, >= 0 (Schulman's estimator).

    For k3 the log-ratio is clamped to +-20 before ``exp`` so that bad fp16/bf16 values cannot produce inf.
    Gradients flow to both inputs (detach ``ref_logprobs`` yourself if it is not already constant).

    Args:
        logprobs: ``[B, T]`` log-probs of the sampled tokens under the policy.
        ref_logprobs: ``[B, T]`` log-probs of the same tokens under the reference.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"``.
    Returns:
        ``[B, T]`` (no masking: mask it where you use it).
    Raises:
        ValueError: unknown estimator or shape mismatch.
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r} (KL_ESTIMATOR); choose one of {sorted(KL_ESTIMATORS)}")
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    return KL_ESTIMATORS[estimator](logprobs - ref_logprobs)


def shape_token_rewards(token_rewards: Tensor, kl: Tensor, action_mask: Tensor, kl_coef: float) -> Tensor:
    """RLFH's per-token reward: ``r_t = token_reward_t - kl_coef * KL_t``, 0 outside the mask.

    The token rewards arrive clipped from where they are made (REWARD_CLIP is applied once, by the reward
    service: ``reward_service.token_rewards``); they are not clipped again here.

    Args:
        token_rewards: ``[B, T]`` verifier rewards aligned to response tokens (0 on unrewarded tokens).
        kl: ``[B, T]`` per-token KL estimate (see :func:`kl_penalty`).
        action_mask: ``[B, T]`` non-zero = valid response token.
        kl_coef: ``>= 0``.
    Returns:
        ``[B, T]`` shaped rewards.
    """
    _check_same_shape(token_rewards=token_rewards, kl=kl, action_mask=action_mask)
    if not (isinstance(kl_coef, (int, float)) and kl_coef >= 0 and math.isfinite(kl_coef)):
        raise ValueError(f"kl_coef must be a finite number >= 0, got {kl_coef!r}")
    r = token_rewards - kl_coef * kl
    return _zero_outside(r, _as_bool(action_mask))


def last_token_values(values: Tensor, action_mask: Tensor) -> Tensor:
    """One scalar per response placed on its last valid token.

    Args:
        values: ``[B]``; action_mask: ``[B, T]`` (non-zero = valid response token).
    Returns:
        ``[B, T]`` float32, 0 everywhere but each row's last valid token (rows without one stay 0).
    """
    _check_2d("action_mask", action_mask)
    if values.shape != action_mask.shape[:1]:
        raise ValueError(f"values must be [B] = [{action_mask.shape[0]}], got shape {list(values.shape)}")
    return positioned_values(values, torch.full_like(values, -1, dtype=torch.long), action_mask)


def positioned_values(values: Tensor, positions: Tensor, action_mask: Tensor) -> Tensor:
    """One scalar per response placed on a given token of it (the token where it was earned).

    Args:
        values: ``[B]``; positions: ``[B]`` integer column of each row's token, which must be a valid token of
            that row, or ``-1`` for the row's last valid token; action_mask: ``[B, T]``.
    Returns:
        ``[B, T]`` float32, 0 everywhere but each row's position (rows without a valid token stay 0).
    """
    _check_2d("action_mask", action_mask)
    B, T = action_mask.shape
    if values.shape != (B,) or positions.shape != (B,):
        raise ValueError(f"values and positions must be [B] = [{B}], got shapes {list(values.shape)} and "
                         f"{list(positions.shape)}")
    m = _as_bool(action_mask)
    idx = torch.arange(T, device=m.device).expand(B, T)
    last = torch.where(m, idx, torch.full_like(idx, -1)).max(dim=1).values
    pos = torch.where(positions.to(torch.long) < 0, last, positions.to(torch.long))
    rows = torch.nonzero(last >= 0).squeeze(1)
    if bool(((pos[rows] >= T) | ~m[rows, pos[rows].clamp(0, max(T - 1, 0))]).any()):
        raise ValueError("positions must name a valid (unmasked) token of their row, or be -1 for its last token")
    out = torch.zeros((B, T), dtype=torch.float32, device=m.device)
    out[rows, pos[rows]] = values[rows].to(torch.float32)
    return out


def cap_positive_rewards(rewards: Tensor, action_mask: Tensor, cap: float) -> Tensor:
    """Each response's positive rewards, in token order, count until their running sum reaches ``cap``; the rest
    of them are cut (the token that crosses it keeps what is left). Negative rewards are kept whole.

    Why (TOKEN_REWARD_CAP): a reply earns about +1 for every supported statement, so copying passage sentences
    outscores answering the question; capped, statements past the first few earn nothing more, while a wrong one
    still costs.

    Args:
        rewards: ``[B, T]``; action_mask: ``[B, T]``; cap: finite and ``>= 0``.
    Returns:
        ``[B, T]``, 0 outside the mask.
    """
    _check_same_shape(rewards=rewards, action_mask=action_mask)
    if not (isinstance(cap, (int, float)) and math.isfinite(cap) and cap >= 0):
        raise ValueError(f"cap must be a finite number >= 0, got {cap!r}")
    m = _as_bool(action_mask)
    r = _zero_outside(rewards.to(torch.float32), m)
    pos = r.clamp(min=0)
    before = pos.cumsum(dim=1) - pos                      # positive reward earned before each token
    kept = torch.minimum(pos, (float(cap) - before).clamp(min=0))
    return torch.where(r > 0, kept, r)


def compose_rewards(verifier_rewards: Tensor, action_mask: Tensor, *, token_weight: float = 1.0,
                    token_cap: Optional[float] = None,
                    caution: Optional[Tensor] = None, outcome: Optional[Tensor] = None,
                    outcome_positions: Optional[Tensor] = None,
                    kl: Optional[Tensor] = None, kl_coef: float = 0.0) -> tuple[Tensor, Tensor]:
    """The reward the policy trains on, from its parts (the last hop of the reward path).

    ``r_t = base_t + outcome * [t = p] - kl_coef * KL_t`` where ``base_t`` is
    ``token_weight * verifier_t`` (the verifier's token-level rewards, already clipped by the reward service;
    with ``token_cap`` a reply's positive ones stop counting at that sum, :func:`cap_positive_rewards`), or, when
    ``caution`` is given, the caution reward on the last token instead of the verifier's rewards (CAUTION_REWARD
    replaces them; TOKEN_REWARD_WEIGHT does not apply to it). The outcome reward (TruthRL's ternary right /
    abstain / wrong) is added unclipped on token ``p``: the last token, or ``outcome_positions``
    (OUTCOME_TOKEN=graded-end: the answer sentence's last token, so the tokens after it do not share its credit,
    and under GAMMA < 1 the answer's return is mostly its own).

    Args:
        verifier_rewards: ``[B, T]`` token rewards from the reward service (0 on unrewarded tokens).
        action_mask: ``[B, T]`` non-zero = valid response token.
        token_weight: weight of ``verifier_rewards`` (TOKEN_REWARD_WEIGHT), finite and >= 0.
        token_cap: the most a reply's positive weighted verifier rewards add up to (TOKEN_REWARD_CAP), or None.
        caution: ``[B]`` caution rewards (:func:`caution_rewards`) or None.
        outcome: ``[B]`` outcome rewards (:func:`ternary_outcome_rewards`) or None.
        outcome_positions: ``[B]`` the column each outcome lands on (-1: the last token), or None (last token).
        kl: ``[B, T]`` per-token KL to the reference (:func:`kl_penalty`) or None (no KL term).
        kl_coef: ``>= 0``.
    Returns:
        ``(rewards, totals_before_kl)``: ``[B, T]`` shaped per-token rewards (0 outside the mask) and ``[B]``
        each response's reward summed over its tokens before the KL term (what the logs call the reward).
    """
    _check_same_shape(verifier_rewards=verifier_rewards, action_mask=action_mask)
    if not (isinstance(token_weight, (int, float)) and math.isfinite(token_weight) and token_weight >= 0):
        raise ValueError(f"token_weight must be a finite number >= 0, got {token_weight!r}")
    m = _as_bool(action_mask)
    if caution is not None:
        base = last_token_values(caution, m)
    else:
        base = float(token_weight) * verifier_rewards.to(torch.float32)
        if token_cap is not None:
            base = cap_positive_rewards(base, m, token_cap)
    if outcome is not None:
        base = base + (last_token_values(outcome, m) if outcome_positions is None
                       else positioned_values(outcome, outcome_positions, m))
    base = _zero_outside(base, m)
    totals = base.sum(dim=1)
    if kl is None:
        kl = torch.zeros_like(base)
    return shape_token_rewards(base, kl, m, kl_coef), totals


# --------------------------------------------------------------------------------------------------
# returns and advantages
# --------------------------------------------------------------------------------------------------

def _reverse_scan(x: Tensor, mask: Tensor, decay: float) -> Tensor:
    """``y_t = x_t + decay * y_{next valid t' > t}`` over valid positions; 0 at masked ones.

    Masked positions are skipped (the carry passes through them), so right padding, left padding and
    gaps are all handled. One batched op per time step.

    Args: x ``[B, T]``; mask ``[B, T]`` bool; decay scalar. Returns ``[B, T]``.
    """
    B, T = x.shape
    carry = x.new_zeros(B)
    zero = x.new_zeros(B)
    out = [zero] * T
    for t in range(T - 1, -1, -1):
        m_t = mask[:, t]
        carry = torch.where(m_t, x[:, t] + decay * carry, carry)
        out[t] = torch.where(m_t, carry, zero)
    return torch.stack(out, dim=1) if T > 0 else x.new_zeros(B, 0)


def _next_valid(values: Tensor, mask: Tensor) -> Tensor:
    """Value at the next valid position strictly after t (0 when there is none). Vectorised.

    Args: values ``[B, T]``; mask ``[B, T]`` bool. Returns ``[B, T]``.
    """
    B, T = values.shape
    pos = torch.arange(T, device=values.device).expand(B, T)
    valid_pos = torch.where(mask, pos, torch.full_like(pos, T))            # T marks "none"
    # min over k >= t of valid_pos[k]  = reverse cumulative min
    nxt_incl = torch.flip(torch.cummin(torch.flip(valid_pos, [1]), dim=1).values, [1])
    nxt = torch.cat([nxt_incl[:, 1:], torch.full_like(pos[:, :1], T)], dim=1)  # strictly after t
    padded = torch.cat([values, values.new_zeros(B, 1)], dim=1)             # index T -> 0
    return torch.gather(padded, 1, nxt)


def discounted_returns(rewards: Tensor, action_mask: Tensor, gamma: float = 1.0) -> Tensor:
    """Return-to-go ``G_t = r_t + gamma * G_{t'}`` (t' = next valid position), 0 outside the mask.

    Args:
        rewards: ``[B, T]``; action_mask: ``[B, T]``; gamma: in [0, 1].
    Returns:
        ``[B, T]``.
    """
    _check_same_shape(rewards=rewards, action_mask=action_mask)
    _check_2d("rewards", rewards)
    _check_unit_interval("gamma", gamma)
    m = _as_bool(action_mask)
    return _reverse_scan(_zero_outside(rewards, m), m, float(gamma))


def gae_advantages(rewards: Tensor, values: Tensor, action_mask: Tensor, gamma: float,
                   lambd: float) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation over the valid tokens of each response.

    ``delta_t = r_t + gamma * V_{t'} - V_t`` with ``t'`` the next valid position (``V = 0`` after the last
    valid token: the episode ends with the response), ``A_t = delta_t + gamma * lambd * A_{t'}``,
    ``R_t = A_t + V_t``. Masked positions are skipped by the recursion and are 0 in both outputs.

    Args:
        rewards: ``[B, T]`` shaped per-token rewards (see :func:`shape_token_rewards`).
        values: ``[B, T]`` critic values V(s_t) of the states before each response token.
        action_mask: ``[B, T]`` non-zero = valid (right padding ``1..1 0..0`` or any pattern).
        gamma: discount in [0, 1]; lambd: GAE lambda in [0, 1].
    Returns:
        ``(advantages [B, T], returns [B, T])``, 0 outside the mask. Plain differentiable functions of the
        inputs: pass detached rewards/values (the usual case) to get constants.
    """
    _check_same_shape(rewards=rewards, values=values, action_mask=action_mask)
    _check_2d("rewards", rewards)
    _check_unit_interval("gamma", gamma)
    _check_unit_interval("lambd", lambd)
    m = _as_bool(action_mask)
    r = _zero_outside(rewards, m)
    v = _zero_outside(values.to(rewards.dtype), m)
    deltas = r + gamma * _next_valid(v, m) - v
    adv = _reverse_scan(deltas, m, float(gamma) * float(lambd))
    returns = _zero_outside(adv + v, m)
    return adv, returns


def reinforce_plus_plus_advantages(rewards: Tensor, action_mask: Tensor,
                                   gamma: float = 1.0) -> tuple[Tensor, Tensor]:
    """REINFORCE++: discounted token returns, whitened globally over all valid tokens of the batch.

    ``G = discounted_returns(rewards, mask, gamma)``; ``A = (G - mean) / std`` with mean/std over every
    masked entry of the batch (:func:`masked_whiten`).

    Args:
        rewards: ``[B, T]``; action_mask: ``[B, T]``; gamma: in [0, 1].
    Returns:
        ``(advantages [B, T], returns [B, T])`` where ``returns = G``; both 0 outside the mask.
    """
    returns = discounted_returns(rewards, action_mask, gamma)
    adv = masked_whiten(returns, action_mask, shift_mean=True)
    return adv, returns


def _group_returns(name: str, rewards: Tensor, action_mask: Tensor, n_samples_per_prompt: int,
                   gamma: float) -> tuple[Tensor, Tensor, Tensor, int]:
    """Shared part of the group estimators.

    Returns ``(G [B, T] return-to-go, s [G, n] sequence returns, mask [B, T] bool, n)``.
    """
    _check_same_shape(rewards=rewards, action_mask=action_mask)
    _check_2d("rewards", rewards)
    _check_unit_interval("gamma", gamma)
    n_groups = _check_groups(name, rewards.shape[0], n_samples_per_prompt, min_n=2)
    m = _as_bool(action_mask)
    G = discounted_returns(rewards, m, gamma)
    # sequence return = G at the first valid position (0 for an empty response)
    has_any = m.any(dim=1)
    first = m.to(torch.int8).argmax(dim=1)
    s = torch.where(has_any, G.gather(1, first[:, None]).squeeze(1), torch.zeros_like(G[:, 0]))
    return G, s.view(n_groups, n_samples_per_prompt), m, n_samples_per_prompt


def _per_row(group_stat: Tensor, n: int) -> Tensor:
    """``[G]`` or ``[G, n]`` group statistic -> ``[B, 1]`` per row (prompt-major)."""
    if group_stat.dim() == 1:
        group_stat = group_stat[:, None].expand(-1, n)
    return group_stat.reshape(-1, 1)


def grpo_advantages(rewards: Tensor, action_mask: Tensor, n_samples_per_prompt: int, *, eps: float = 1e-6,
                    gamma: float = 1.0) -> tuple[Tensor, Tensor]:
    """GRPO on dense rewards: ``A[i,t] = (G[i,t] - mean_g(s)) / (std_g(s) + eps)``.

    ``G`` is the return-to-go, ``s`` the sequence return (``G`` at the first valid token; the plain sum of
    the rewards when ``gamma = 1``), ``mean_g``/``std_g`` (unbiased) over the n samples of the prompt. A group
    whose ``std_g(s) <= eps`` (all returns equal) gets advantage 0. See the module docstring for why.

    Args:
        rewards: ``[B, T]`` dense per-token rewards, rows prompt-major (``B = n_prompts * n``).
        action_mask: ``[B, T]``.
        n_samples_per_prompt: ``n >= 2``.
        eps: added to the std; also the degenerate-group threshold.
        gamma: discount of the return-to-go (default 1: undiscounted).
    Returns:
        ``(advantages [B, T], returns [B, T] = G)``, 0 outside the mask.
    """
    G, s, m, n = _group_returns("grpo_advantages", rewards, action_mask, n_samples_per_prompt, gamma)
    mean = s.mean(dim=1)
    std = s.std(dim=1, unbiased=True)
    degenerate = std <= eps
    adv = (G - _per_row(mean, n)) / (_per_row(std, n) + eps)
    keep = m & ~_per_row(degenerate, n)
    return _zero_outside(adv, keep), G


def rloo_advantages(rewards: Tensor, action_mask: Tensor, n_samples_per_prompt: int, *,
                    gamma: float = 1.0) -> tuple[Tensor, Tensor]:
    """RLOO on dense rewards: ``A[i,t] = G[i,t] - mean_{j in group, j != i} s[j]`` (leave-one-out baseline).

    Args:
        rewards: ``[B, T]`` dense rewards, rows prompt-major; action_mask: ``[B, T]``;
        n_samples_per_prompt: ``n >= 2``; gamma: discount of the return-to-go (default 1).
    Returns:
        ``(advantages [B, T], returns [B, T] = G)``, 0 outside the mask.
    """
    G, s, m, n = _group_returns("rloo_advantages", rewards, action_mask, n_samples_per_prompt, gamma)
    loo = (s.sum(dim=1, keepdim=True) - s) / (n - 1)          # [G, n]
    adv = G - _per_row(loo, n)
    return _zero_outside(adv, m), G


def dr_grpo_advantages(rewards: Tensor, action_mask: Tensor, n_samples_per_prompt: int, *,
                       gamma: float = 1.0) -> tuple[Tensor, Tensor]:
    """Dr.GRPO on dense rewards: ``A[i,t] = G[i,t] - mean_g(s)`` (no std division).

    Dr.GRPO's other change, no per-response length normalisation, lives in the loss aggregation:
    ``policy_loss(..., loss_agg="seq-mean-token-sum-norm")`` (LOSS_AGG; the default under dr_grpo).

    Args:
        rewards: ``[B, T]`` dense rewards, rows prompt-major; action_mask: ``[B, T]``;
        n_samples_per_prompt: ``n >= 2``; gamma: discount of the return-to-go (default 1).
    Returns:
        ``(advantages [B, T], returns [B, T] = G)``, 0 outside the mask.
    """
    G, s, m, n = _group_returns("dr_grpo_advantages", rewards, action_mask, n_samples_per_prompt, gamma)
    adv = G - _per_row(s.mean(dim=1), n)
    return _zero_outside(adv, m), G


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {}

# Parameter names compute_advantages knows how to fill; an estimator takes any subset of them.
_ESTIMATOR_PARAMS = ("rewards", "action_mask", "values", "n_samples_per_prompt", "gamma", "lambd")


def register_advantage_estimator(name: str):
    """Decorator: register ``fn`` under ``name`` in :data:`ADVANTAGE_ESTIMATORS`.

    ``fn`` must take ``rewards`` and ``action_mask`` and may take any of ``values``,
    ``n_samples_per_prompt``, ``gamma``, ``lambd`` (by those names) and must return
    ``(advantages [B, T], returns [B, T])``.
    """
    def deco(fn):
        params = inspect.signature(fn).parameters
        missing = [p for p in ("rewards", "action_mask") if p not in params]
        if missing:
            raise TypeError(f"advantage estimator {name!r} must accept parameters {missing}")
        if name in ADVANTAGE_ESTIMATORS and ADVANTAGE_ESTIMATORS[name] is not fn:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn
    return deco


for _name, _fn in (("gae", gae_advantages), ("reinforce_plus_plus", reinforce_plus_plus_advantages),
                   ("grpo", grpo_advantages), ("rloo", rloo_advantages), ("dr_grpo", dr_grpo_advantages)):
    register_advantage_estimator(_name)(_fn)


def compute_advantages(name: str, rewards: Tensor, action_mask: Tensor, *, values: Tensor | None = None,
                       n_samples_per_prompt: int = 1, gamma: float = 1.0, lambd: float = 0.95,
                       estimator_kwargs: dict | None = None) -> tuple[Tensor, Tensor]:
    """Dispatch to the advantage estimator registered as ``name``.

    Each estimator gets the arguments it declares (``values`` only goes to ``gae``; ``values`` passed to
    an estimator that does not use it is ignored). ``estimator_kwargs`` are passed through (e.g.
    ``{"eps": 1e-4}`` for grpo).

    Args:
        name: one of :data:`ADVANTAGE_ESTIMATORS` (``gae``, ``reinforce_plus_plus``, ``grpo``, ``rloo``,
            ``dr_grpo``).
        rewards: ``[B, T]`` shaped per-token rewards; action_mask: ``[B, T]``.
        values: ``[B, T]`` critic values (required by ``gae``).
        n_samples_per_prompt: group size for the group estimators (rows prompt-major).
        gamma, lambd: discount and GAE lambda.
    Returns:
        ``(advantages [B, T], returns [B, T])``.
    Raises:
        ValueError: unknown name, or ``values`` missing for an estimator that needs it.
    """
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r} (ADVANTAGE_ESTIMATOR); "
                         f"choose one of {sorted(ADVANTAGE_ESTIMATORS)}")
    fn = ADVANTAGE_ESTIMATORS[name]
    params = inspect.signature(fn).parameters
    available = {"rewards": rewards, "action_mask": action_mask, "values": values,
                 "n_samples_per_prompt": n_samples_per_prompt, "gamma": gamma, "lambd": lambd}
    if "values" in params and params["values"].default is inspect.Parameter.empty and values is None:
        raise ValueError(f"advantage estimator {name!r} needs critic values: pass values=[B, T] "
                         f"(or choose a critic-free estimator such as 'grpo' or 'reinforce_plus_plus')")
    kwargs = {k: v for k, v in available.items() if k in params}
    extra = dict(estimator_kwargs or {})
    unknown = [k for k in extra if k not in params or k in _ESTIMATOR_PARAMS]
    if unknown:
        raise ValueError(f"estimator_kwargs {unknown} are not extra parameters of advantage estimator {name!r}")
    return fn(**kwargs, **extra)


# --------------------------------------------------------------------------------------------------
# FSPO, caution reward, outcome-variance filter
# --------------------------------------------------------------------------------------------------

def fspo_flip(advantages: Tensor, token_label_signs: Tensor) -> Tensor:
    """FSPO (arXiv 2505.24630): make each token's advantage agree with its statement's factuality.

    ``A'_t = sign_t * |A_t|`` where ``sign_t != 0``, else ``A_t``: tokens of wrong statements (-1) never get
    a positive advantage and tokens of correct statements (+1) never a negative one; tokens outside any
    judged statement (0) keep their advantage.

    Args:
        advantages: ``[B, T]``.
        token_label_signs: ``[B, T]`` integer or float tensor with values in {-1, 0, +1} (not bool).
    Returns:
        ``[B, T]``.
    """
    _check_same_shape(advantages=advantages, token_label_signs=token_label_signs)
    if token_label_signs.dtype == torch.bool:
        raise TypeError("token_label_signs must hold -1/0/+1 (int or float), not bool")
    s = token_label_signs
    if not bool(((s == -1) | (s == 0) | (s == 1)).all()):
        bad = s[~((s == -1) | (s == 0) | (s == 1))].unique()[:5].tolist()
        raise ValueError(f"token_label_signs must be in {{-1, 0, +1}}, found {bad}")
    sign = s.to(advantages.dtype)
    return torch.where(sign != 0, sign * advantages.abs(), advantages)


def caution_rewards(is_correct: Tensor, abstained: Tensor, n_samples_per_prompt: int) -> Tensor:
    """Caution reward: 1 for a correct answer; 1 for an abstention when NO sample of its prompt is correct;
    0 otherwise (wrong answers, and abstentions when a sibling sample got it right).

    A sample flagged both correct and abstained counts as correct (1).

    Args:
        is_correct: ``[N]`` bool (or 0/1), rows prompt-major in groups of ``n_samples_per_prompt``.
        abstained: ``[N]`` bool (or 0/1).
        n_samples_per_prompt: ``n >= 1``.
    Returns:
        ``[N]`` float32 in {0, 1}.
    """
    _check_same_shape(is_correct=is_correct, abstained=abstained)
    if is_correct.dim() != 1:
        raise ValueError(f"is_correct must be 1-D [N], got shape {list(is_correct.shape)}")
    n_groups = _check_groups("caution_rewards", is_correct.shape[0], n_samples_per_prompt, min_n=1)
    c = _as_bool(is_correct)
    a = _as_bool(abstained)
    any_correct = c.view(n_groups, n_samples_per_prompt).any(dim=1, keepdim=True)
    any_correct = any_correct.expand(-1, n_samples_per_prompt).reshape(-1)
    return (c | (a & ~any_correct)).to(torch.float32)


def ternary_outcome_rewards(is_correct: Tensor, abstained: Tensor, correct: float = 1.0,
                            abstain: float | Tensor = 0.0, wrong: float = -1.0) -> Tensor:
    """Outcome-level reward of TruthRL (arXiv 2509.25760): ``correct`` for a right answer, ``abstain`` for an
    abstention, ``wrong`` for anything else.

    The three-way split is what makes abstaining worth learning: with ``wrong < abstain < correct`` a sample
    group prefers answering exactly when the model's answers to that prompt are right often enough
    (answer iff ``p * correct + (1 - p) * wrong > abstain``; with the defaults iff ``p > 1/2``). A sample
    flagged both correct and abstained counts as correct.

    Args:
        is_correct: ``[N]`` bool (or 0/1).
        abstained: ``[N]`` bool (or 0/1).
        correct, wrong: rewards of a right and of a wrong answer.
        abstain: reward of an abstention: one number, or ``[N]`` per sample (e.g. a different price for prompts
            that carry their evidence passage). Every value needs ``wrong <= abstain <= correct``.
    Returns:
        ``[N]`` float32.
    """
    _check_same_shape(is_correct=is_correct, abstained=abstained)
    if is_correct.dim() != 1:
        raise ValueError(f"is_correct must be 1-D [N], got shape {list(is_correct.shape)}")
    for k, v in {"correct": correct, "wrong": wrong}.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v)):
            raise ValueError(f"ternary_outcome_rewards: {k} must be a finite number, got {v!r}")
    if isinstance(abstain, Tensor):
        if abstain.shape != is_correct.shape:
            raise ValueError(f"ternary_outcome_rewards: abstain must be a number or [N] like is_correct "
                             f"{list(is_correct.shape)}, got shape {list(abstain.shape)}")
        abstain_t = abstain.to(torch.float32)
        if not bool(torch.isfinite(abstain_t).all()):
            raise ValueError("ternary_outcome_rewards: abstain has non-finite values")
    elif isinstance(abstain, (int, float)) and math.isfinite(abstain):
        abstain_t = torch.full(is_correct.shape, float(abstain), dtype=torch.float32)
    else:
        raise ValueError(f"ternary_outcome_rewards: abstain must be a finite number or [N] tensor, got {abstain!r}")
    lo, hi = (float(abstain_t.min()), float(abstain_t.max())) if abstain_t.numel() else (wrong, correct)
    if not wrong <= lo <= hi <= correct:
        raise ValueError(f"ternary_outcome_rewards needs wrong <= abstain <= correct (OUTCOME_WRONG <= "
                         f"ABSTAIN_OUTCOME_REWARD[_EVIDENCE] <= OUTCOME_CORRECT), got {wrong} / {lo}..{hi} / {correct}")
    c = _as_bool(is_correct)
    a = _as_bool(abstained) & ~c
    out = torch.full(c.shape, float(wrong), dtype=torch.float32, device=c.device)
    out = torch.where(a, abstain_t.to(c.device), out)
    return torch.where(c, torch.full_like(out, float(correct)), out)


def adapt_abstain_reward(price: float, abstain_rate: float, target_rate: float, step_size: float,
                        low: float, high: float) -> float:
    """One dual-ascent step on the constraint "the policy declines ``target_rate`` of its samples".

    The price of an abstention (the ternary outcome's ``abstain`` reward) falls when the policy declines more
    than the target and rises when it declines less: ``price - step_size * (abstain_rate - target_rate)``,
    clamped to ``[low, high]``. Why: with a fixed price the whole batch's pull on "I don't know" has one sign, so
    abstention drifts up or down on every question alike (until the policy declines everywhere, or nowhere);
    holding the overall rate steady leaves the part of the gradient that differs between questions -- decline
    where the model's answers are wrong, answer where they are right. The rule reads the abstention rate only,
    never what the questions are.

    Args:
        price: the current abstention reward; abstain_rate: share of this step's sampled responses that
            declined, in [0, 1]; target_rate in [0, 1]; step_size >= 0; low <= high: bounds of the price.
    Returns:
        The next price (float).
    """
    for k, v in {"abstain_rate": abstain_rate, "target_rate": target_rate}.items():
        _check_unit_interval(k, v)
    if not (math.isfinite(step_size) and step_size >= 0):
        raise ValueError(f"step_size must be a finite number >= 0, got {step_size!r}")
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f"need finite low <= high, got {low!r}, {high!r}")
    return float(min(high, max(low, price - step_size * (abstain_rate - target_rate))))


def answer_mean_abstain_reward(answer_rewards: Tensor, margin: float, low: float, high: float) -> float:
    """The abstention reward that leaves a batch's net pull on "I don't know" near zero: the mean outcome reward
    of the policy's own answers in the batch (abstentions excluded) plus ``margin``, clamped to ``[low, high]``.

    Why: the pull of a group's advantages on abstaining is (abstain reward - the group's mean answer reward); with
    the batch mean as the price these pulls sum to about zero over the batch, so abstention is not raised or
    lowered on every question alike (the drift a fixed price gives), and what is left is the part that differs
    between questions: decline where this question's answers are worse than the policy's answers in general,
    answer where they are better. No lag (unlike :func:`adapt_abstain_reward`): it is this batch's own mean. It
    reads rewards only, never what the questions are. ``margin`` > 0 leans toward declining.

    Args:
        answer_rewards: [k] outcome rewards of the batch's answered (not declined) samples; when empty (every
            sample declined) the midpoint of ``[low, high]`` is returned.
        margin: added to the mean; low <= high: bounds.
    Returns:
        The price (float).
    """
    _check_tensor("answer_rewards", answer_rewards)
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f"need finite low <= high, got {low!r}, {high!r}")
    if not math.isfinite(margin):
        raise ValueError(f"margin must be a finite number, got {margin!r}")
    if answer_rewards.numel() == 0:
        return float((low + high) / 2)
    return float(min(high, max(low, float(answer_rewards.float().mean()) + margin)))


def filter_by_outcome_variance(scores: Tensor, n_samples_per_prompt: int, min_std: float) -> Tensor:
    """Keep mask of the samples whose prompt's scores vary: ``std_g(scores) >= min_std`` (unbiased std).

    ``min_std = 0`` keeps everything. All samples of a prompt are kept or dropped together.

    Args:
        scores: ``[N]`` per-sample scores (e.g. sequence total rewards), rows prompt-major.
        n_samples_per_prompt: ``n`` (``n >= 2`` when ``min_std > 0``: a single sample has no spread).
        min_std: ``>= 0``.
    Returns:
        ``[N]`` bool keep mask.
    """
    _check_tensor("scores", scores)
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D [N], got shape {list(scores.shape)}")
    if not (isinstance(min_std, (int, float)) and min_std >= 0 and not math.isnan(min_std)):
        raise ValueError(f"min_std must be >= 0 (FILTER_VARIANCE; 0 keeps all), got {min_std!r}")
    if min_std == 0:
        _check_groups("filter_by_outcome_variance", scores.shape[0], n_samples_per_prompt, min_n=1)
        return torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
    n_groups = _check_groups("filter_by_outcome_variance", scores.shape[0], n_samples_per_prompt, min_n=2)
    std = scores.to(torch.float64).view(n_groups, n_samples_per_prompt).std(dim=1, unbiased=True)
    keep = std >= min_std
    return keep[:, None].expand(-1, n_samples_per_prompt).reshape(-1)


# --------------------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------------------

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def aggregate_loss(loss_mat: Tensor, mask: Tensor, mode: str = "token-mean",
                   norm_length: int | None = None) -> Tensor:
    """Reduce a per-token loss to a scalar.

    Over one tensor; the policy actor weights its micro batches by their share of the step's tokens (or
    sequences) so an optimizer step's loss is this reduction over the whole step (``actors.policy``).

    * ``token-mean``: sum over all valid tokens / number of valid tokens (every token weighs the same).
    * ``seq-mean-token-mean``: mean over sequences of each sequence's token mean (original GRPO; short
      responses weigh more per token). Sequences without valid tokens are left out.
    * ``seq-mean-token-sum-norm``: mean over sequences of (token sum / ``norm_length``) (Dr.GRPO: a constant
      normaliser, no length bias). ``norm_length`` defaults to ``T``.

    Args:
        loss_mat: ``[B, T]``; mask: ``[B, T]``; mode: one of :data:`LOSS_AGG_MODES`;
        norm_length: the constant of ``seq-mean-token-sum-norm`` (> 0).
    Returns:
        scalar ``[]``.
    """
    _check_same_shape(loss_mat=loss_mat, mask=mask)
    m = _as_bool(mask)
    if mode == "token-mean":
        return masked_mean(loss_mat, m)
    if mode == "seq-mean-token-mean":
        per_seq = masked_mean(loss_mat, m, dim=-1)
        return masked_mean(per_seq, m.any(dim=-1))
    if mode == "seq-mean-token-sum-norm":
        L = loss_mat.shape[-1] if norm_length is None else norm_length
        if not (isinstance(L, int) and L > 0):
            raise ValueError(f"norm_length must be a positive int, got {norm_length!r}")
        return (masked_sum(loss_mat, m, dim=-1) / L).mean() if loss_mat.shape[0] else loss_mat.sum() * 0
    raise ValueError(f"unknown loss_agg {mode!r}; choose one of {list(LOSS_AGG_MODES)}")


def policy_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, action_mask: Tensor,
                eps_clip: float, *, eps_clip_high: float | None = None, loss_agg: str = "token-mean",
                norm_length: int | None = None) -> tuple[Tensor, dict]:
    """PPO clipped surrogate loss.

    ``ratio = exp(logprobs - old_logprobs)``; per token
    ``loss_t = -min(ratio * A, clip(ratio, 1 - eps_clip, 1 + eps_clip_high) * A)``, aggregated over the
    mask (default: token mean over the batch). ``old_logprobs`` and ``advantages`` are treated as constants
    (detached). Where the clipped branch is the minimum, the gradient w.r.t. ``logprobs`` is 0.

    Args:
        logprobs: ``[B, T]`` current policy log-probs (requires grad).
        old_logprobs: ``[B, T]`` log-probs of the policy that sampled the tokens.
        advantages: ``[B, T]``.
        action_mask: ``[B, T]``.
        eps_clip: lower (and, by default, upper) clip range, > 0.
        eps_clip_high: upper clip range (DAPO "clip-higher"); defaults to ``eps_clip``.
        loss_agg, norm_length: see :func:`aggregate_loss`.
    Returns:
        ``(loss [], metrics)`` with float metrics ``clipfrac`` (fraction of valid tokens where the clipped
        branch is strictly smaller, i.e. the gradient is cut), ``approx_kl`` (mean k3 estimate of
        KL(old || new) on the tokens sampled from old: ``ratio - log(ratio) - 1``), ``ratio_mean``,
        ``ratio_max``.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages,
                      action_mask=action_mask)
    hi = eps_clip if eps_clip_high is None else eps_clip_high
    for nm, v in (("eps_clip", eps_clip), ("eps_clip_high", hi)):
        if not (isinstance(v, (int, float)) and v > 0):
            raise ValueError(f"{nm} must be > 0, got {v!r}")
    m = _as_bool(action_mask)
    adv = _zero_outside(advantages.detach().to(logprobs.dtype), m)
    log_ratio = _zero_outside(logprobs - old_logprobs.detach().to(logprobs.dtype), m)
    ratio = torch.exp(log_ratio)
    surr = ratio * adv
    surr_clipped = ratio.clamp(1.0 - eps_clip, 1.0 + hi) * adv
    loss_mat = -torch.minimum(surr, surr_clipped)
    loss = aggregate_loss(loss_mat, m, loss_agg, norm_length)
    with torch.no_grad():
        clipped = (surr_clipped < surr) & m
        approx_kl = ratio - log_ratio - 1.0         # k3 of KL(old || new): samples come from old
        metrics = {
            "clipfrac": float(masked_mean(clipped.to(torch.float32), m)),
            "approx_kl": float(masked_mean(approx_kl, m)),
            "ratio_mean": float(masked_mean(ratio, m)),
            "ratio_max": float(ratio[m].max()) if bool(m.any()) else 1.0,
        }
    return loss, metrics


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, action_mask: Tensor,
               value_clip: float) -> tuple[Tensor, dict]:
    """Clipped value loss: ``0.5 * max((v - R)^2, (old + clip(v - old, -c, c) - R)^2)``, masked token mean.

    Args:
        values: ``[B, T]`` current critic values (requires grad).
        old_values: ``[B, T]`` values at rollout time (constant).
        returns: ``[B, T]`` targets (constant).
        action_mask: ``[B, T]``.
        value_clip: ``c > 0`` (``math.inf`` disables clipping).
    Returns:
        ``(loss [], metrics)`` with float metrics ``vf_clipfrac`` (fraction of valid tokens where the clipped
        branch is strictly larger and therefore used) and ``value_mean`` (masked mean of ``values``).
    """
    _check_same_shape(values=values, old_values=old_values, returns=returns, action_mask=action_mask)
    if not (isinstance(value_clip, (int, float)) and value_clip > 0):
        raise ValueError(f"value_clip must be > 0 (math.inf disables clipping), got {value_clip!r}")
    m = _as_bool(action_mask)
    old = _zero_outside(old_values.detach().to(values.dtype), m)
    ret = _zero_outside(returns.detach().to(values.dtype), m)
    v = _zero_outside(values, m)
    v_clipped = old + (v - old).clamp(-value_clip, value_clip)
    l1 = (v - ret).square()
    l2 = (v_clipped - ret).square()
    loss = 0.5 * masked_mean(torch.maximum(l1, l2), m)
    with torch.no_grad():
        metrics = {
            "vf_clipfrac": float(masked_mean(((l2 > l1) & m).to(torch.float32), m)),
            "value_mean": float(masked_mean(v, m)),
        }
    return loss, metrics


# --------------------------------------------------------------------------------------------------
# logits -> log-probs / entropy
# --------------------------------------------------------------------------------------------------

def _row_chunks(n_rows: int, chunk_rows: int):
    chunk_rows = max(1, int(chunk_rows))
    return [(i, min(i + chunk_rows, n_rows)) for i in range(0, n_rows, chunk_rows)]


def entropy_from_logits(logits: Tensor, *, chunk_rows: int = 4096) -> Tensor:
    """Entropy of the categorical distribution ``softmax(logits)`` along the last dim.

    ``H = logsumexp(z) - sum(softmax(z) * z)``, computed in fp32 over chunks of rows so that half-precision
    logits are upcast one chunk at a time.

    Args:
        logits: ``[..., V]`` (e.g. ``[B, T, V]``).
        chunk_rows: rows (positions) per chunk.
    Returns:
        ``[...]`` float32 (e.g. ``[B, T]``).
    """
    _check_tensor("logits", logits)
    if logits.dim() < 1:
        raise ValueError("logits must have a vocabulary dim [..., V]")
    lead, V = logits.shape[:-1], logits.shape[-1]
    flat = logits.reshape(-1, V)
    outs = []
    for a, b in _row_chunks(flat.shape[0], chunk_rows):
        z = flat[a:b].float()
        p = torch.softmax(z, dim=-1)
        outs.append(torch.logsumexp(z, dim=-1) - (p * z).sum(dim=-1))
    out = torch.cat(outs) if outs else flat.new_zeros(0, dtype=torch.float32)
    return out.view(lead)


def logprobs_from_logits(logits: Tensor, labels: Tensor, *, chunk_rows: int = 4096) -> Tensor:
    """Log-probability of ``labels`` under ``softmax(logits)``: ``log_softmax(logits).gather(labels)``.

    Memory-aware: computed as ``z[label] - logsumexp(z)`` so the ``[B, T, V]`` log-softmax is never
    materialised, in fp32, over chunks of ``chunk_rows`` positions (half-precision logits are upcast one
    chunk at a time). Differentiable w.r.t. ``logits``.

    Args:
        logits: ``[B, T, V]`` (any ``[..., V]``).
        labels: ``[B, T]`` (``[...]``) integer token ids in ``[0, V)``. Padded positions must hold a valid
            id (e.g. the pad token), not an ignore index like -100; mask them afterwards.
    Returns:
        ``[B, T]`` float32.
    """
    _check_tensor("logits", logits)
    _check_tensor("labels", labels)
    if tuple(logits.shape[:-1]) != tuple(labels.shape):
        raise ValueError(f"logits {list(logits.shape)} must be labels {list(labels.shape)} plus a vocab dim")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"labels must be integer token ids, got dtype {labels.dtype}")
    V = logits.shape[-1]
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= V):
        raise ValueError(f"labels must be token ids in [0, {V}); found min {int(labels.min())}, max "
                         f"{int(labels.max())} (replace ignore indices with a valid id and mask instead)")
    flat = logits.reshape(-1, V)
    lab = labels.reshape(-1, 1).long()
    outs = []
    for a, b in _row_chunks(flat.shape[0], chunk_rows):
        z = flat[a:b].float()
        outs.append(z.gather(1, lab[a:b]).squeeze(1) - torch.logsumexp(z, dim=-1))
    out = torch.cat(outs) if outs else flat.new_zeros(0, dtype=torch.float32)
    return out.view(labels.shape)


def dpo_loss(policy_chosen_logps: Tensor, policy_rejected_logps: Tensor, ref_chosen_logps: Tensor,
             ref_rejected_logps: Tensor, beta: float = 0.1, *, label_smoothing: float = 0.0) -> tuple[Tensor, dict]:
    """Direct Preference Optimization loss (Rafailov et al. 2023) on sequence log-probs.

    With the implicit rewards ``r_c = beta * (policy_chosen_logps - ref_chosen_logps)`` and
    ``r_r = beta * (policy_rejected_logps - ref_rejected_logps)`` and the margin ``z = r_c - r_r``::

        loss = mean_i[ -(1 - ls) * log sigmoid(z_i) - ls * log sigmoid(-z_i) ]       (ls = label_smoothing)

    ``ls = 0`` is plain DPO; ``ls > 0`` is the conservative DPO reading (the preference label is flipped with
    probability ``ls``). The gradient raises the chosen response's log-prob and lowers the rejected one's,
    weighted by ``sigmoid(-z)`` (pairs the policy already orders correctly weigh less).

    Args:
        policy_chosen_logps: ``[B]`` float, sum of the policy's response-token log-probs of the chosen response
            (differentiable).
        policy_rejected_logps: ``[B]`` float, the same for the rejected response.
        ref_chosen_logps: ``[B]`` float, the frozen reference model's sum for the chosen response (no gradient
            needed; detached here).
        ref_rejected_logps: ``[B]`` float, the reference's sum for the rejected response.
        beta: ``> 0``, the KL-regularisation strength (inverse temperature of the implicit reward).
        label_smoothing: in ``[0, 0.5)``.
    Returns:
        ``(loss [], metrics)``; metrics (python floats): ``reward_chosen`` / ``reward_rejected`` (means of
        ``r_c`` / ``r_r``), ``margin`` (mean ``z``), ``accuracy`` (share of pairs with ``z > 0``).
        An empty batch (``B = 0``) gives a zero loss that still has a graph.
    """
    _check_same_shape(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                      ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)
    if policy_chosen_logps.dim() != 1:
        raise ValueError(f"dpo_loss takes per-pair sequence log-probs of shape [B], got "
                         f"{list(policy_chosen_logps.shape)} (sum the token log-probs over the response first)")
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"dpo_loss: beta must be a finite number > 0 (--beta), got {beta!r}")
    if not (isinstance(label_smoothing, (int, float)) and 0.0 <= label_smoothing < 0.5):
        raise ValueError(f"dpo_loss: label_smoothing must be in [0, 0.5), got {label_smoothing!r}")
    r_c = beta * (policy_chosen_logps.float() - ref_chosen_logps.detach().float())
    r_r = beta * (policy_rejected_logps.float() - ref_rejected_logps.detach().float())
    z = r_c - r_r
    if z.numel() == 0:
        return policy_chosen_logps.sum() * 0.0, {"reward_chosen": 0.0, "reward_rejected": 0.0, "margin": 0.0,
                                                  "accuracy": 0.0}
    per_pair = -(1.0 - label_smoothing) * torch.nn.functional.logsigmoid(z) \
        - label_smoothing * torch.nn.functional.logsigmoid(-z)
    with torch.no_grad():
        metrics = {"reward_chosen": float(r_c.mean()), "reward_rejected": float(r_r.mean()),
                   "margin": float(z.mean()), "accuracy": float((z > 0).float().mean())}
    return per_pair.mean(), metrics
