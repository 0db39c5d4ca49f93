"""Statistics for the hallucination report: pure numpy / math functions (no torch, no Ray).

- :func:`outcome_metrics`: SimpleQA's rates and F-score from grade labels.
- :func:`bootstrap_ci`: seeded, vectorised percentile bootstrap of any of those metrics.
- :func:`paired_bootstrap_diff`: CI of a paired difference between two models on the same items;
  :func:`paired_bootstrap_ratio_diff`: the same for a ratio of sums (fact precision, statements per answer).
- :func:`mcnemar_exact`: exact two-sided McNemar test on paired binary outcomes.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

import numpy as np

from core.grader import CORRECT, INCORRECT, NOT_ATTEMPTED

# ----------------------------------------------------------------------------- point metrics


def f_score(correct_rate, correct_given_attempted):
    """SimpleQA's F-score: harmonic mean of overall correct and correct-given-attempted.

    Works elementwise on arrays (shape ``[...]``); 0 where both are 0.
    """
    c = np.asarray(correct_rate, dtype=float)
    cga = np.asarray(correct_given_attempted, dtype=float)
    denom = c + cga
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(denom > 0, 2 * c * cga / np.where(denom > 0, denom, 1.0), 0.0)
    return float(out) if out.ndim == 0 else out


def _rates(correct: np.ndarray, incorrect: np.ndarray) -> dict[str, np.ndarray]:
    """Rates from 0/1 indicator matrices ``correct`` / ``incorrect`` of shape ``[B, n]`` (B resamples).

    Returns arrays of shape ``[B]``.
    """
    n = correct.shape[-1]
    c = correct.sum(-1) / n
    i = incorrect.sum(-1) / n
    na = 1.0 - c - i
    attempted = c + i
    with np.errstate(invalid="ignore", divide="ignore"):
        cga = np.where(attempted > 0, c / np.where(attempted > 0, attempted, 1.0), 0.0)
    return {"correct": c, "incorrect": i, "not_attempted": na, "accuracy_given_attempted": cga,
            "f_score": f_score(c, cga) if np.ndim(c) else f_score(float(c), float(cga))}


METRICS = ("correct", "incorrect", "not_attempted", "accuracy_given_attempted", "f_score")


def indicators(grades: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """0/1 arrays (shape ``[n]``) for correct and incorrect, from grade labels."""
    g = np.asarray(list(grades))
    bad = set(np.unique(g)) - {CORRECT, INCORRECT, NOT_ATTEMPTED} if g.size else set()
    if bad:
        raise ValueError(f"unknown grade label(s) {sorted(bad)}; expected correct / incorrect / not_attempted")
    return (g == CORRECT).astype(float), (g == INCORRECT).astype(float)


def outcome_metrics(grades: Sequence[str]) -> dict[str, float]:
    """SimpleQA metrics of one model: correct, incorrect, not_attempted, accuracy_given_attempted, f_score."""
    if len(grades) == 0:
        raise ValueError("outcome_metrics: no grades (the eval produced no items)")
    c, i = indicators(grades)
    r = _rates(c[None, :], i[None, :])
    return {k: float(v[0]) for k, v in r.items()}


# ----------------------------------------------------------------------------- bootstrap

def bootstrap_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """Resampling indices, shape ``[n_boot, n]`` (seeded, so every metric of a run shares the resamples)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_boot, n))


def bootstrap_ci(grades: Sequence[str], n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
                 ) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap CIs of every SimpleQA metric.

    Resamples items with replacement ``n_boot`` times (one ``[n_boot, n]`` index matrix,
    vectorised). Returns ``{metric: (low, high)}`` at level ``1 - alpha``.
    """
    c, i = indicators(grades)
    if c.size == 0:
        raise ValueError("bootstrap_ci: no grades")
    idx = bootstrap_indices(c.size, n_boot, seed)
    r = _rates(c[idx], i[idx])
    lo, hi = 100 * alpha / 2, 100 * (1 - alpha / 2)
    return {k: (float(np.percentile(v, lo)), float(np.percentile(v, hi))) for k, v in r.items()}


def bootstrap_mean_ci(values: Sequence[float], n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
                      ) -> tuple[float, float]:
    """Percentile bootstrap CI of a mean (e.g. answer length, fact precision). NaNs are dropped."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (float("nan"), float("nan"))
    idx = bootstrap_indices(v.size, n_boot, seed)
    means = v[idx].mean(axis=1)
    return (float(np.percentile(means, 100 * alpha / 2)), float(np.percentile(means, 100 * (1 - alpha / 2))))


def paired_bootstrap_diff(grades_a: Sequence[str], grades_b: Sequence[str], n_boot: int = 2000,
                          alpha: float = 0.05, seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """Paired bootstrap of ``metric(B) - metric(A)`` over the same items (same resample for both).

    Returns ``{metric: (point, low, high)}``.
    """
    if len(grades_a) != len(grades_b):
        raise ValueError(f"paired_bootstrap_diff: {len(grades_a)} vs {len(grades_b)} grades; pair items first")
    ca, ia = indicators(grades_a)
    cb, ib = indicators(grades_b)
    idx = bootstrap_indices(ca.size, n_boot, seed)
    ra, rb = _rates(ca[idx], ia[idx]), _rates(cb[idx], ib[idx])
    pa, pb = outcome_metrics(grades_a), outcome_metrics(grades_b)
    lo, hi = 100 * alpha / 2, 100 * (1 - alpha / 2)
    return {k: (pb[k] - pa[k], float(np.percentile(rb[k] - ra[k], lo)), float(np.percentile(rb[k] - ra[k], hi)))
            for k in METRICS}


def paired_bootstrap_ratio_diff(num_a: Sequence[float], den_a: Sequence[float], num_b: Sequence[float],
                                den_b: Sequence[float], n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
                                ) -> tuple[float, float, float]:
    """Paired bootstrap of ``sum(num_b) / sum(den_b) - sum(num_a) / sum(den_a)`` over the same items (shape ``[n]``
    each; one resample of the items for both models), e.g. fact precision (supported / stated statements per answer)
    or supported statements per answer (``den`` all 1).

    Returns ``(point, low, high)`` at level ``1 - alpha``; a resample whose denominator sums to 0 is left out (NaN
    everywhere when every one is, or with no items).
    """
    arrs = [np.asarray(x, dtype=float) for x in (num_a, den_a, num_b, den_b)]
    if len({a.shape for a in arrs}) != 1:
        raise ValueError(f"paired_bootstrap_ratio_diff: shapes {[a.shape for a in arrs]}; pair the items first")
    na, da, nb, db = arrs
    nan = float("nan")
    if na.size == 0:
        return (nan, nan, nan)

    def ratio(num, den):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)

    point = float(ratio(nb.sum(), db.sum()) - ratio(na.sum(), da.sum()))
    idx = bootstrap_indices(na.size, n_boot, seed)
    d = ratio(nb[idx].sum(-1), db[idx].sum(-1)) - ratio(na[idx].sum(-1), da[idx].sum(-1))
    d = d[~np.isnan(d)]
    if d.size == 0:
        return (point, nan, nan)
    return (point, float(np.percentile(d, 100 * alpha / 2)), float(np.percentile(d, 100 * (1 - alpha / 2))))


# ----------------------------------------------------------------------------- McNemar

def binom_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), exact (big-integer arithmetic, one rounding at the end)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return float(Fraction(sum(math.comb(n, j) for j in range(k + 1)), 2 ** n))


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts.

    ``b`` = pairs where only the first model has the outcome, ``c`` = only the second.
    Under H0 the ``b + c`` discordant pairs split Binomial(b + c, 1/2);
    p = min(1, 2 * P(X <= min(b, c))). ``b = c = 0`` gives p = 1.
    """
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar_exact: counts must be >= 0, got b={b}, c={c}")
    if b + c == 0:
        return 1.0
    return min(1.0, 2.0 * binom_cdf_half(min(b, c), b + c))


def mcnemar_paired(x_a: Sequence[bool], x_b: Sequence[bool]) -> dict:
    """McNemar on one binary outcome measured for models A and B on the same items (shape ``[n]`` each).

    Returns counts (``a_only`` = b, ``b_only`` = c, both, neither), the rates, and the exact p-value.
    """
    a = np.asarray(x_a, dtype=bool)
    bb = np.asarray(x_b, dtype=bool)
    if a.shape != bb.shape:
        raise ValueError(f"mcnemar_paired: shapes {a.shape} vs {bb.shape}; pair the items first")
    b = int((a & ~bb).sum())
    c = int((~a & bb).sum())
    return {"a_only": b, "b_only": c, "both": int((a & bb).sum()), "neither": int((~a & ~bb).sum()),
            "rate_a": float(a.mean()) if a.size else float("nan"),
            "rate_b": float(bb.mean()) if bb.size else float("nan"),
            "p_value": mcnemar_exact(b, c)}
