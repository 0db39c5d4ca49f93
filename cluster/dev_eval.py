"""In-loop dev evaluation: every DEV_EVAL_STEP steps the policy answers a fixed set of dev questions greedily.

Why: a run's sampled rewards do not show what users get (greedy answers), and the two ways an abstention run
fails (it learns nothing, or it declines everywhere at random) both look like a slowly moving reward curve.
Greedy answers on held-out dev questions, graded against the gold answer and split by question type, show
either failure within a few steps.

The set is fixed for the whole run (the same ``DEV_EVAL_SIZE`` dev questions by question hash, so runs pair item by
item) and asked in each of ``DEV_EVAL_MODES``. The score that early stopping and the best-step choice read is the
ternary outcome (right ``OUTCOME_CORRECT``, declined ``ABSTAIN_OUTCOME_REWARD``, wrong ``OUTCOME_WRONG``) averaged
over the modes: the reward the recipe trains on, measured on questions it never trains on. With the passage in
the prompt the model is right about half the time, so a policy that declines everywhere loses there what it
gains closed book.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from actors import calls
from actors.rollout import generate_on_engines
from cluster.model_export import save_policy
from core.data import DataError, load_items, question_hash, stratify_question_types
from core.grader import CORRECT, grade_answer
from core.prompts import render_prompt, resolve_system
from core.questions import question_type

log = logging.getLogger("rlfh.dev_eval")

TYPES = ("yes_no", "choice", "open")


@dataclass
class DevAnswer:
    """One greedy dev answer and its gold grade."""
    question: str
    qtype: str       # yes_no | choice | open (core.questions.question_type: question text only)
    mode: str        # closed | evidence
    answer: str
    correct: bool
    abstained: bool


def dev_items(spec: str, size: int, type_share: float = 0.0) -> tuple[list, dict[str, float]]:
    """``size`` items of ``spec`` with a gold answer, chosen by question hash (the same for every run), and the
    share of each question type in all of ``spec`` (``{type: share}``, the natural mix).

    ``type_share > 0``: yes/no and two-option questions make up at least that share each
    (:func:`core.data.stratify_question_types`), so a 64-question set holds more than the ~8 the natural mix
    gives; :func:`dev_metrics` then weighs the types back to the natural mix for the score.
    """
    if spec.startswith("halueval") and spec.partition(":")[2] == "test":
        raise ValueError("DEV_EVAL_DATA=halueval:test is the held-out split: evaluate during training on "
                         "halueval:dev (report on test only at the end)")
    try:
        items = [it for it in load_items(spec) if (it.right_answer or "").strip()]
    except (DataError, FileNotFoundError, ValueError) as e:
        raise ValueError(f"DEV_EVAL_DATA={spec}: {e} (use 'halueval:dev' or a JSONL file with question, "
                         "knowledge and right_answer)") from None
    if not items:
        raise ValueError(f"DEV_EVAL_DATA={spec}: no items with a gold answer (right_answer)")
    types = [question_type(it.question) for it in items]
    natural = {t: types.count(t) / len(types) for t in TYPES}
    ranked = sorted(items, key=lambda it: question_hash(it.question))
    return stratify_question_types(ranked, size, type_share), natural


def grade_dev(items: Sequence, modes: Sequence[str], answers: Sequence[str], scope: str = "whole") -> list[DevAnswer]:
    """Gold grades of ``answers[i]`` to ``items[i]`` asked in ``modes[i]`` (strict grader; ``scope``: GRADE_SCOPE)."""
    out = []
    for it, m, a in zip(items, modes, answers):
        g = grade_answer(a, it.right_answer, it.question, scope=scope)
        out.append(DevAnswer(it.question, question_type(it.question), m, a, g.grade == CORRECT,
                             bool(g.abstained or g.reason == "empty")))
    return out


def dev_metrics(graded: Sequence[DevAnswer], outcome_correct: float = 1.0, abstain_outcome_reward: float = -0.5,
                outcome_wrong: float = -1.0, type_weights: Optional[dict[str, float]] = None) -> dict[str, float]:
    """Flat ``dev/...`` metrics of graded answers, per mode and per question type.

    Keys (MODE in closed / evidence, TYPE in yes_no / choice / open):
      ``dev/MODE/correct``, ``dev/MODE/incorrect``, ``dev/MODE/abstain`` (shares of the mode's questions),
      ``dev/MODE/acc_attempted`` (correct among the answered; absent when none answered),
      ``dev/MODE/abstain/TYPE``, ``dev/MODE/correct/TYPE`` (shares within the type),
      ``dev/MODE/score`` (mean ternary outcome), ``dev/score`` (the mean of the modes' scores).

    ``type_weights`` (``{type: weight}``, e.g. the natural mix of a type-stratified set): the mode's score is the
    weighted mean of its per-type mean outcomes (weights renormalised over the types present) instead of the
    plain mean over questions; the shares stay plain.
    """
    out: dict[str, float] = {}
    modes = list(dict.fromkeys(a.mode for a in graded))
    for m in modes:
        rows = [a for a in graded if a.mode == m]
        n = len(rows)
        c = sum(a.correct for a in rows)
        ab = sum(a.abstained and not a.correct for a in rows)
        w = n - c - ab
        out[f"dev/{m}/correct"] = c / n
        out[f"dev/{m}/incorrect"] = w / n
        out[f"dev/{m}/abstain"] = ab / n
        if c + w:
            out[f"dev/{m}/acc_attempted"] = c / (c + w)
        out[f"dev/{m}/score"] = (outcome_correct * c + abstain_outcome_reward * ab + outcome_wrong * w) / n
        by_type, shares = {}, {}   # per type: mean outcome; (correct share, incorrect share)
        for t in TYPES:
            sub = [a for a in rows if a.qtype == t]
            if sub:
                out[f"dev/{m}/abstain/{t}"] = sum(a.abstained and not a.correct for a in sub) / len(sub)
                out[f"dev/{m}/correct/{t}"] = sum(a.correct for a in sub) / len(sub)
                by_type[t] = sum(outcome_correct if a.correct else abstain_outcome_reward if a.abstained
                                 else outcome_wrong for a in sub) / len(sub)
                shares[t] = (sum(a.correct for a in sub) / len(sub),
                             sum(not a.correct and not a.abstained for a in sub) / len(sub))
        # the shares at the natural type mix (= the plain shares without type_weights): what the selection reads
        out[f"dev/{m}/natural/correct"], out[f"dev/{m}/natural/incorrect"] = c / n, w / n
        if type_weights:
            total = sum(type_weights.get(t, 0.0) for t in by_type)
            if total > 0:
                out[f"dev/{m}/score"] = sum(type_weights.get(t, 0.0) * v for t, v in by_type.items()) / total
                for i, key in enumerate(("correct", "incorrect")):
                    out[f"dev/{m}/natural/{key}"] = sum(type_weights.get(t, 0.0) * v[i]
                                                        for t, v in shares.items()) / total
    if modes:   # every mode weighs the same: declining everywhere costs the evidence half its right answers
        out["dev/score"] = sum(out[f"dev/{m}/score"] for m in modes) / len(modes)
    return out


def selection_value(dev: dict[str, float], max_incorrect: Optional[float]) -> tuple[float, float, float]:
    """How a dev evaluation ranks for FINAL_MODEL=best and early stopping (a higher tuple is better).

    ``max_incorrect`` None: ``(dev/score, 0, 0)``, the ternary outcome. A number (DEV_SELECT_MAX_INCORRECT): the
    held-out gate's own terms. Among the evaluations whose closed-book incorrect share
    (``dev/closed/natural/incorrect``) is at most ``max_incorrect``, the one with the most closed-book right
    answers (``dev/closed/natural/correct``), ties to the most right answers with the passage
    (``dev/evidence/natural/correct``, 0 without that mode): ``(1, closed correct, evidence correct)``. An
    evaluation over the bound ranks below every one within it, fewer incorrect answers first:
    ``(0, -incorrect, evidence correct)``. Why not the ternary score: its price for declining decides how many
    right answers it trades for fewer wrong ones, and on a small dev set the passage half's noise outweighs the
    closed-book differences the gate is about.
    """
    if max_incorrect is None:
        return (dev["dev/score"], 0.0, 0.0)
    if "dev/closed/natural/correct" not in dev:
        raise ValueError("DEV_SELECT_MAX_INCORRECT ranks closed-book dev answers, and the dev metrics carry no "
                         "dev/closed/natural/correct: add 'closed' to DEV_EVAL_MODES")
    incorrect = dev["dev/closed/natural/incorrect"]
    evidence = dev.get("dev/evidence/natural/correct", 0.0)
    if incorrect > max_incorrect + 1e-9:
        return (0.0, -incorrect, evidence)
    return (1.0, dev["dev/closed/natural/correct"], evidence)


def _better(a: Sequence[float], b: Sequence[float], tol: float = 1e-9) -> bool:
    """``a`` ranks above ``b``: lexicographic, where values within ``tol`` tie (a full tie is not better: the
    earlier step stays)."""
    for x, y in zip(a, b):
        if abs(x - y) > tol:
            return x > y
    return False


def track_best(best: Optional[Sequence[float]], value: Sequence[float], below: int) -> tuple[bool, int]:
    """One evaluation's effect on early stopping: ``(value is the new best, evaluations in a row below the best)``.

    ``below`` counts the evaluations since the best that rank under it; one that ties the best (the same dev
    answers, e.g. while RL has not changed a greedy answer yet) neither resets nor advances it, so a patience of 1
    stops at the first evaluation that is worse, not at the first that is merely no better.
    """
    if best is None or _better(value, best):
        return True, 0
    return False, below + 1 if _better(best, value) else below


class DevEvaluator:
    """Greedy answers of the rollout engines to the fixed dev set, graded; one call per evaluation."""

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.items, natural = dev_items(cfg.dev_eval_data, cfg.dev_eval_size, cfg.dev_eval_type_share)
        self.type_weights = natural if cfg.dev_eval_type_share else None
        self.modes = cfg.dev_eval_modes.split("+")
        system = resolve_system(cfg.system_prompt)
        self.asked = [(it, m) for m in self.modes for it in self.items]
        self.prompts = [render_prompt(tokenizer, it.question, it.knowledge_text, m, system=system)
                        for it, m in self.asked]
        self.best_score: Optional[float] = None   # dev/score of the best step (for the logs)
        self.best_value: Optional[tuple[float, float, float]] = None   # selection_value of the best step
        self.best_step: Optional[int] = None
        self.evals_since_best = 0
        log.info("in-loop dev evaluation every %d steps: %d questions of %s (%s), greedy", cfg.dev_eval_step,
                 len(self.items), cfg.dev_eval_data, cfg.dev_eval_modes)

    def run(self, engines: Sequence[Any], step: int) -> tuple[dict[str, float], list[DevAnswer]]:
        """Evaluate the engines' current weights; returns (``dev/...`` metrics, the graded answers)."""
        cfg = self.cfg
        t0 = time.perf_counter()
        samples = generate_on_engines(engines, self.prompts, 1, cfg.dev_eval_max_len, 0.0, 1.0, seed=0,
                                      timeout=calls.timeout_s(cfg))
        texts = [""] * len(self.prompts)
        for s in samples:
            texts[s.prompt_index] = s.response_text
        graded = grade_dev([it for it, _ in self.asked], [m for _, m in self.asked], texts, cfg.grade_scope)
        out = dev_metrics(graded, cfg.outcome_correct, cfg.abstain_outcome_reward, cfg.outcome_wrong, self.type_weights)
        out["time/dev_eval"] = round(time.perf_counter() - t0, 3)
        score = out["dev/score"]
        value = selection_value(out, cfg.dev_select_max_incorrect)
        new_best, self.evals_since_best = track_best(self.best_value, value, self.evals_since_best)
        if new_best:
            self.best_value, self.best_score, self.best_step = value, score, step
        out["dev/best_score"] = self.best_score
        out["dev/best_step"] = float(self.best_step)
        closed = "closed" if "closed" in self.modes else self.modes[0]
        log.info("dev eval at step %d (%d questions x %s, %.0fs): score %.3f (best %.3f at step %d); %s: correct "
                 "%.1f%%, incorrect %.1f%%, declined %.1f%% (yes/no %.0f%%, choice %.0f%%, open %.0f%%)",
                 step, len(self.items), "+".join(self.modes), out["time/dev_eval"], score, self.best_score,
                 self.best_step, closed, 100 * out[f"dev/{closed}/correct"], 100 * out[f"dev/{closed}/incorrect"],
                 100 * out[f"dev/{closed}/abstain"], 100 * out.get(f"dev/{closed}/abstain/yes_no", 0.0),
                 100 * out.get(f"dev/{closed}/abstain/choice", 0.0), 100 * out.get(f"dev/{closed}/abstain/open", 0.0))
        return out, graded

    def evaluate(self, groups, step: int, save_path: Path) -> dict[str, float]:
        """:meth:`run` on the policy's rollout engines, and what the run keeps of it: with FINAL_MODEL=best a new
        best step's policy goes to SAVE_PATH/snapshots/best (with its dev record), and every graded answer to
        SAVE_PATH/dev_answers.jsonl. Returns the ``dev/...`` metrics."""
        dev, graded = self.run(groups.rollout, step)
        if self.cfg.final_model == "best" and self.best_step == step:
            out = save_path / "snapshots" / "best"
            save_policy(groups, out, out.with_name("best.tmp"))
            (out / "dev_eval.json").write_text(json.dumps({"step": step, **dev}, indent=1))
        with open(save_path / "dev_answers.jsonl", "a", encoding="utf-8") as fh:
            for a in graded:
                fh.write(json.dumps({"step": step, **a.__dict__}, ensure_ascii=False) + "\n")
        return dev

    def should_stop(self) -> bool:
        """Early stopping: EARLY_STOP_PATIENCE evaluations in a row below the best (:func:`track_best`)."""
        p = self.cfg.early_stop_patience
        return bool(p) and self.evals_since_best >= p

    def stop_message(self, step: int) -> str:
        return (f"early stop at step {step}: {self.evals_since_best} dev evaluation(s) in a row below the best, dev "
                f"score {self.best_score:.3f} at step {self.best_step} "
                f"(EARLY_STOP_PATIENCE={self.cfg.early_stop_patience})")
