"""Does a model abstain where it would be wrong? Pure functions (numpy / math; no torch, no Ray).

A model that refuses at random also hallucinates less, so fewer incorrect answers prove nothing by
themselves. These functions measure *selectivity*:

- :func:`question_type`: ``yes_no`` / ``choice`` / ``open`` from the question text alone (no gold answer),
  for per-type tables and the question-type rule baseline;
- :func:`random_abstention`: what the reference model would score if it declined a *random* set of
  questions of the same size as the model under test (hypergeometric; exact tail p-value);
- :func:`type_rule_grades`: the reference model's grades with abstention on every ``open`` question (a
  selectivity that needs no training: what training must beat to have learned more than the question type);
- :func:`abstention_overlap`: where the model under test abstains, what the reference answered there;
- :func:`auroc`: how well a confidence score ranks correct above incorrect answers (0.5 = chance);
- :func:`risk_coverage`: the risk-coverage curve of a confidence score (answer the most confident first).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from core.questions import QUESTION_TYPES, question_type
from core.grader import CORRECT, INCORRECT, NOT_ATTEMPTED

# ----------------------------------------------------------------------------- random abstention

def _log_comb(n: int, k: int) -> float:
    if k < 0 or k > n:
        return -math.inf
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def hypergeom_pmf(n: int, successes: int, draws: int) -> np.ndarray:
    """P(X = x) for x = 0..draws, X ~ Hypergeometric(population n, ``successes`` in it, ``draws`` drawn)."""
    if not (0 <= successes <= n and 0 <= draws <= n):
        raise ValueError(f"hypergeom_pmf: need 0 <= successes, draws <= n, got n={n}, successes={successes}, "
                         f"draws={draws}")
    x = np.arange(draws + 1)
    logp = np.array([_log_comb(successes, int(k)) + _log_comb(n - successes, draws - int(k)) for k in x])
    logp -= _log_comb(n, draws)
    p = np.exp(logp)
    return p / p.sum()


def random_abstention(ref_grades: Sequence[str], n_abstain: int, observed_correct: Optional[int] = None,
                      alpha: float = 0.05) -> dict:
    """The reference model's answers with ``n_abstain`` random questions declined.

    Declining a uniformly random set of ``n_abstain`` of the ``n`` items keeps ``n - n_abstain`` of the
    reference's answers; its correct count is Hypergeometric(n, C_ref, n - n_abstain), its incorrect count
    Hypergeometric(n, I_ref, n - n_abstain). ``observed_correct`` (the model under test's correct count at the
    same abstention) gets the one-sided p-value P(X >= observed): small means the model kept more right
    answers than random abstention could.

    Args:
        ref_grades: the reference model's grades, shape ``[n]`` (correct / incorrect / not_attempted).
        n_abstain: questions the model under test did not attempt (0 <= n_abstain <= n).
        observed_correct: the model under test's correct count, or None.
    Returns:
        dict with ``n``, ``n_abstain``, expected ``correct`` / ``incorrect`` / ``not_attempted`` rates,
        ``accuracy_given_attempted`` (expected), 95% intervals of the correct and incorrect rates
        (``correct_ci95``, ``incorrect_ci95``), and ``p_value`` / ``beats`` when ``observed_correct`` is given.
    """
    g = list(ref_grades)
    n = len(g)
    if n == 0:
        raise ValueError("random_abstention: no reference grades")
    if not 0 <= n_abstain <= n:
        raise ValueError(f"random_abstention: n_abstain must be in [0, {n}], got {n_abstain}")
    c_ref, i_ref = sum(x == CORRECT for x in g), sum(x == INCORRECT for x in g)
    keep = n - n_abstain
    pc, pi = hypergeom_pmf(n, c_ref, keep), hypergeom_pmf(n, i_ref, keep)

    def interval(p: np.ndarray) -> list[float]:
        cdf = np.cumsum(p)
        lo = int(np.searchsorted(cdf, alpha / 2))
        hi = int(np.searchsorted(cdf, 1 - alpha / 2))
        return [lo / n, min(hi, len(p) - 1) / n]

    exp_c, exp_i = c_ref * keep / n, i_ref * keep / n
    out = {"n": n, "n_abstain": int(n_abstain),
           "correct": exp_c / n, "incorrect": exp_i / n, "not_attempted": 1 - (exp_c + exp_i) / n,
           "accuracy_given_attempted": (exp_c / (exp_c + exp_i)) if exp_c + exp_i > 0 else 0.0,
           "correct_ci95": interval(pc), "incorrect_ci95": interval(pi)}
    if observed_correct is not None:
        if observed_correct < 0:
            raise ValueError(f"random_abstention: observed_correct must be >= 0, got {observed_correct}")
        p_value = float(pc[int(observed_correct):].sum()) if observed_correct <= keep else 0.0
        out["observed_correct"] = int(observed_correct)
        out["p_value"] = min(1.0, p_value)
        out["beats"] = bool(out["p_value"] < alpha)
    return out


def type_rule_grades(ref_grades: Sequence[str], questions: Sequence[str], abstain_on: Sequence[str] = ("open",)
                     ) -> list[str]:
    """The reference's grades with every question of a type in ``abstain_on`` declined (shape ``[n]``)."""
    if len(ref_grades) != len(questions):
        raise ValueError(f"type_rule_grades: {len(ref_grades)} grades vs {len(questions)} questions")
    bad = set(abstain_on) - set(QUESTION_TYPES)
    if bad:
        raise ValueError(f"type_rule_grades: unknown question type(s) {sorted(bad)}; use {QUESTION_TYPES}")
    return [NOT_ATTEMPTED if question_type(q) in abstain_on else g for g, q in zip(ref_grades, questions)]


def abstention_overlap(ref_grades: Sequence[str], model_grades: Sequence[str]) -> dict:
    """On the questions the model did NOT attempt but the reference did: what the reference's answers were.

    A selective model declines where the reference was wrong: ``ref_wrong_share`` well above the
    reference's overall incorrect share among its attempts (``ref_wrong_share_overall``).
    """
    if len(ref_grades) != len(model_grades):
        raise ValueError(f"abstention_overlap: {len(ref_grades)} vs {len(model_grades)} grades; pair items first")
    declined = [r for r, m in zip(ref_grades, model_grades) if m == NOT_ATTEMPTED and r != NOT_ATTEMPTED]
    attempted_ref = [r for r in ref_grades if r != NOT_ATTEMPTED]
    n = len(declined)
    right = sum(r == CORRECT for r in declined)
    return {"declined": n, "ref_right": right, "ref_wrong": n - right,
            "ref_wrong_share": (n - right) / n if n else float("nan"),
            "ref_wrong_share_overall": (sum(r == INCORRECT for r in attempted_ref) / len(attempted_ref)
                                        if attempted_ref else float("nan"))}


# ----------------------------------------------------------------------------- confidence

def auroc(scores: Sequence[float], positives: Sequence[bool]) -> float:
    """Area under the ROC curve of ``scores`` for separating ``positives`` (shape ``[n]`` each).

    The Mann-Whitney statistic with average ranks for ties: P(score of a random positive > score of a random
    negative) + 0.5 P(tie). NaN scores are dropped; NaN when either class is empty.
    """
    s = np.asarray(scores, dtype=float)
    y = np.asarray(positives, dtype=bool)
    if s.shape != y.shape:
        raise ValueError(f"auroc: {s.shape} scores vs {y.shape} labels")
    ok = ~np.isnan(s)
    s, y = s[ok], y[ok]
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=float)
    sorted_s = s[order]
    # average ranks over ties (1-based)
    _, first, counts = np.unique(sorted_s, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def risk_coverage(confidence: Sequence[float], grades: Sequence[str]) -> dict:
    """Risk-coverage curve: answer the ``k`` most confident attempted questions, decline the rest.

    Coverage is ``k / n`` over all ``n`` items; risk is the incorrect share among the ``k`` answered. The
    model's own abstentions are never answered (the curve ends at its attempted share).

    Args:
        confidence: ``[n]`` scores, higher = more confident (NaN: treated as least confident).
        grades: ``[n]`` grade labels.
    Returns:
        ``{"coverage": [k/n...], "risk": [...], "aurc": area under the risk-coverage curve}``.
    """
    c = np.asarray(confidence, dtype=float)
    g = np.asarray(list(grades))
    if c.shape != g.shape:
        raise ValueError(f"risk_coverage: {c.shape} confidences vs {g.shape} grades")
    n = len(g)
    att = g != NOT_ATTEMPTED
    if n == 0 or not att.any():
        return {"coverage": [], "risk": [], "aurc": float("nan")}
    cc = np.where(np.isnan(c), -np.inf, c)[att]
    wrong = (g[att] == INCORRECT).astype(float)
    order = np.argsort(-cc, kind="mergesort")
    k = np.arange(1, len(order) + 1)
    risk = np.cumsum(wrong[order]) / k
    coverage = k / n
    return {"coverage": coverage.tolist(), "risk": risk.tolist(), "aurc": float(risk.mean())}
