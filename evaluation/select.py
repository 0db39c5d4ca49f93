"""`rlfh select`: pick a training run's checkpoint on a dev split by the selectivity gate (early stopping).

RL against hallucination sits on a knife edge: a few steps too few and the policy has learnt nothing, a few too
many and it declines everything. An early abstention recipe (2026-11-23: GRPO with one injected "I don't know."
per group, ABSTAIN_SAMPLES=1), run for 20 steps, declined 74.5% of 200 dev questions at step 12, 98.5% at step 16
and 99.0% at step 20, every right answer lost; a run with the same settings had declined 36.5% at step 12. This
command, run on a training run's folder, prints those figures for every step it kept (``rlfh select RUN_DIR``).
Which step is right differs from run to run, so the step is chosen by measurement, on data the run never trained
on and that the final report never uses (the dev split; the test split stays untouched):

1. every checkpoint of the run (``SAVE_PATH/checkpoints/global_step_*/policy_hf``), every weights snapshot
   (``SAVE_PATH/snapshots/step_*``, written every SNAPSHOT_STEP steps) and ``SAVE_PATH/final`` is
   evaluated with ``rlfh eval`` on the dev split, in each asked prompt mode, greedy, like the final report;
2. each is compared with the base model on the same questions by the gate of ``rlfh compare --expect``
   (:func:`evaluation.report.expectation_failures`);
3. among the checkpoints that pass, the one with the fewest incorrect answers wins (ties: more correct answers,
   then the earlier step; among thresholds of ``--abstain-sweep``, the one keeping the most correct answers, then
   the fewest incorrect); when none passes, the one that fails the fewest criteria, then the one that keeps the
   most right answers, then the fewest wrong ones (see :func:`rank_key`). A checkpoint that declines everything
   never "wins" a tie that way: it keeps no right answers.

With ``--abstain-sweep`` the abstention threshold is chosen the same way: each candidate's P(abstain text | prompt)
is scored once on the dev questions (``rlfh eval --abstain-threshold 1``: every question answered with the
abstention blocked), and each threshold that declines 10%, 15%, ..., 90% of them is a candidate of its own
(:func:`apply_threshold` derives its eval folder exactly). ``--abstain-gate`` lets the candidate only decide while
the base model answers. With several ``--mode``s each mode gets its own threshold (``OUT/<mode>/``).

Writes ``OUT/selection.json`` (every candidate's outcomes and failures, and the choice) and ``OUT/selected``
(a symlink to the chosen model folder), and prints a table. Evaluations are re-used when their weights and
settings have not changed, so re-running after more training evaluates only the new checkpoints.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from core.grader import grade_answer
from evaluation.generate import EVAL_BATCH_SIZE

log = logging.getLogger(__name__)

_STEP_DIR = re.compile(r"global_step_(\d+)$")
_SNAPSHOT_DIR = re.compile(r"step_(\d+)$")


class SelectError(ValueError):
    """Bad input to ``rlfh select`` (the message names the argument and the fix)."""


@dataclass(frozen=True)
class Candidate:
    name: str            # "step00012" or "final" (with a threshold: "step00012@0.803")
    step: Optional[int]  # None for a final folder whose step is unknown
    path: str            # a HF model folder
    abstain_threshold: Optional[float] = None   # --abstain-sweep: decline where P(abstain) > this
    gate: bool = False   # --abstain-gate: this model decides, the base model answers

    def with_threshold(self, tau: float, gate: bool) -> "Candidate":
        return Candidate(f"{self.name}@{tau:.4g}", self.step, self.path, tau, gate)


#: Shares of the dev questions an --abstain-sweep threshold declines (each a candidate threshold).
SWEEP_DECLINE_SHARES = tuple(round(0.1 + 0.05 * i, 2) for i in range(17))   # 10%, 15%, ..., 90%


def sweep_thresholds(p_abstain: list[float], shares=SWEEP_DECLINE_SHARES) -> list[float]:
    """Thresholds declining about each share of the questions (``p > tau`` declines): the k-th largest P(abstain)
    for k = share x N, distinct and ascending. Ties decline fewer; a threshold that declines nothing is dropped."""
    ps = sorted(p_abstain, reverse=True)
    if not ps:
        return []
    taus = {ps[min(len(ps) - 1, max(1, round(len(ps) * s)))] for s in shares}
    return sorted(t for t in taus if t < ps[0])


def apply_threshold(scored_dir: str | Path, tau: float, out_dir: str | Path, name: str) -> str:
    """An eval folder as `rlfh eval --abstain-threshold tau` would write it, from one scored at threshold 1.

    Exact, not a simulation: at any threshold the answered questions get the same greedy reply (the abstention's
    first token blocked), so declining the questions whose recorded P(abstain) exceeds ``tau`` is all that
    changes.
    """
    from evaluation.runner import summarise   # numpy: this module is on `rlfh --help`'s import path
    src = Path(scored_dir)
    summary = json.loads((src / "summary.json").read_text(encoding="utf-8"))
    if summary.get("abstain_threshold") != 1.0:
        raise SelectError(f"{src}: not scored with --abstain-threshold 1 (got {summary.get('abstain_threshold')})")
    text = summary["abstain_text"]
    records = [json.loads(x) for x in (src / "answers.jsonl").read_text(encoding="utf-8").splitlines() if x]
    for r in records:
        if r["p_abstain"] > tau:
            g = grade_answer(text, r["gold"], r["question"])
            r.update(answer=text, grade=g.grade, reason=g.reason, hedged=g.hedged, abstained=g.abstained,
                     f1=round(g.f1, 4), answer_words=len(text.split()), confidence=None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "answers.jsonl", "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    summary.update(name=name, abstain_threshold=tau, metrics=summarise(records, 200), derived_from=str(src))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
    return str(out)


def _final_step(final: Path) -> Optional[int]:
    try:
        return int(json.loads((final / "rlfh_meta.json").read_text())["weights_version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def list_candidates(run_dir: str | Path) -> list[Candidate]:
    """The run's checkpoints (by step) and its final model; a final whose step is a checkpoint's is dropped.
    A model folder itself (e.g. a baseline's ``--out``; or a folder holding one in ``model/``) is the one
    candidate."""
    run = Path(run_dir)
    if not run.is_dir():
        raise SelectError(f"RUN_DIR {run}: not a folder; pass the SAVE_PATH of `rlfh train`")
    for d in (run, run / "model"):
        if (d / "config.json").is_file():
            return [Candidate("model", None, str(d))]
    cands: list[Candidate] = []
    for d in sorted((run / "checkpoints").glob("global_step_*")):
        m = _STEP_DIR.search(d.name)
        if m and (d / "policy_hf" / "config.json").is_file():
            step = int(m.group(1))
            cands.append(Candidate(f"step{step:05d}", step, str(d / "policy_hf")))
    for d in sorted((run / "snapshots").glob("step_*")):
        m = _SNAPSHOT_DIR.search(d.name)
        if m and (d / "config.json").is_file():
            step = int(m.group(1))
            if step not in {c.step for c in cands}:
                cands.append(Candidate(f"step{step:05d}", step, str(d)))
    final = run / "final"
    if (final / "config.json").is_file():
        step = _final_step(final)
        if step is None or step not in {c.step for c in cands}:
            cands.append(Candidate("final" if step is None else f"step{step:05d}", step, str(final)))
    if not cands:
        raise SelectError(f"RUN_DIR {run}: no checkpoints/global_step_*/policy_hf, snapshots/step_* or final/ "
                          "model; train with SNAPSHOT_STEP=N (weights every N steps, all kept) so the run has "
                          "steps to choose from")
    return sorted(cands, key=lambda c: (c.step is None, c.step or 0))


def base_model_of(run_dir: str | Path) -> Optional[str]:
    """The model the run started from (recorded by the trainer in every exported folder's rlfh_meta.json)."""
    for c in list_candidates(run_dir):
        for meta, key in (("rlfh_meta.json", "source"), ("baseline.json", "base_model")):
            for d in (Path(c.path), Path(c.path).parent):
                try:
                    src = json.loads((d / meta).read_text()).get(key)
                except (OSError, ValueError, AttributeError):
                    continue
                if src:
                    return src
    return None


def rank_key(entry: dict[str, Any]) -> tuple:
    """Sort key of one candidate (smaller is better); see the module docstring for the rule."""
    passes = not entry["failures"]
    if passes and entry.get("abstain_threshold") is not None:
        # thresholds: the one keeping the most right answers (a lower threshold that drops a few more right ones
        # can still pass a McNemar test on dev and then fail it on test), then the fewest wrong ones
        return (0, -entry["correct"], entry["incorrect"], entry["abstain_threshold"])
    if passes:
        return (0, entry["incorrect"], -entry["correct"], entry["step"] if entry["step"] is not None else 1 << 30)
    return (1, len(entry["failures"]), -entry["correct"], entry["incorrect"])


def summarise_candidate(report: dict[str, Any], cand: Candidate, failures: list[str]) -> dict[str, Any]:
    """Outcome counts of ``cand`` summed over the report's modes, and its margin over random abstention."""
    correct = incorrect = abstained = n = 0
    margin = 0.0
    per_mode = {}
    for gname, g in report["groups"].items():
        sel = (g.get("selectivity") or {}).get("runs", {}).get(cand.name)
        model = next((m for m in g["models"] if m["name"] == cand.name), None)
        if sel is None or model is None:
            continue
        pt = sel["per_type"]
        c = sum(v["correct"] for v in pt.values())
        i = sum(v["incorrect"] for v in pt.values())
        a = sum(v["not_attempted"] for v in pt.values())
        rnd = sel["random"]
        m = rnd["observed_correct"] - rnd["correct"] * rnd["n"]
        per_mode[model["mode"]] = {"n": sel["n"], "correct": c, "incorrect": i, "not_attempted": a,
                                   "random_expected_correct": rnd["correct"] * rnd["n"],
                                   "random_p": rnd["p_value"]}
        correct, incorrect, abstained, n, margin = correct + c, incorrect + i, abstained + a, n + sel["n"], margin + m
    return {"name": cand.name, "step": cand.step, "path": cand.path, "abstain_threshold": cand.abstain_threshold,
            "gate": cand.gate, "n": n, "correct": correct,
            "incorrect": incorrect, "not_attempted": abstained, "margin_over_random": round(margin, 3),
            "per_mode": per_mode, "failures": failures}


def select_checkpoint(run_dir: str, *, data: str = "halueval:dev", modes: tuple[str, ...] = ("closed",),
                      limit: int = 200, base: Optional[str] = None, out: Optional[str] = None, threads: int = 0,
                      batch_size: int = EVAL_BATCH_SIZE, progress: bool = True, abstain_sweep: bool = False,
                      abstain_gate: bool = False) -> dict[str, Any]:
    """Evaluate every candidate of ``run_dir`` and the base model on ``data``; return selection.json's dict.

    With ``abstain_sweep`` each candidate is evaluated once with its P(abstain) scored (``--abstain-threshold 1``)
    and judged at every threshold of :func:`sweep_thresholds`; with ``abstain_gate`` too, the candidate only
    scores and the base model answers (``rlfh eval --abstain-model``).
    """
    from evaluation.runner import MODES, EvalConfig, run_eval

    if not modes:
        raise SelectError("--mode: give at least one prompt mode (closed and/or evidence)")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SelectError(f"--mode {bad[0]!r}: must be one of {', '.join(MODES)}")
    if abstain_gate and not abstain_sweep:
        raise SelectError("--abstain-gate needs --abstain-sweep (the gate's threshold is what is chosen)")
    if data.endswith(":test"):
        log.warning("selecting a checkpoint on %s: the test split is for the final report; select on dev", data)
    cands = list_candidates(run_dir)
    base = base or base_model_of(run_dir)
    if not base:
        raise SelectError(f"--base: {run_dir} does not record the model it started from; pass --base MODEL")
    out_dir = Path(out or Path(run_dir) / "select")
    out_dir.mkdir(parents=True, exist_ok=True)
    if abstain_sweep and len(modes) > 1:
        # one threshold per prompt mode: P(abstain) with the passage in the prompt lives on another scale than
        # closed book, and `rlfh eval` runs one mode at a time anyway
        per_mode = {m: select_checkpoint(run_dir, data=data, modes=(m,), limit=limit, base=base,
                                         out=str(out_dir / m), threads=threads, batch_size=batch_size,
                                         progress=progress, abstain_sweep=True, abstain_gate=abstain_gate)
                    for m in modes}
        result = {"modes": list(modes), "per_mode": per_mode, "run_dir": str(run_dir), "data": data,
                  "limit": limit, "base": base,
                  "selected_passes": all(r["selected_passes"] for r in per_mode.values()),
                  "eval_command": {m: r["eval_command"] for m, r in per_mode.items()}}
        (out_dir / "selection.json").write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
        return result

    def evaluate(model: str, name: str, mode: str, **kw) -> str:
        d = out_dir / f"eval_{name}_{mode}"
        run_eval(EvalConfig(model=model, data=data, mode=mode, out=str(d), limit=limit, name=name, verifier=False,
                            confidence="off", reuse=True, threads=threads, batch_size=batch_size,
                            progress=progress, **kw))
        return str(d)

    log.info("select: %d candidate(s) of %s on %s (%s, %s questions), base %s%s", len(cands), run_dir, data,
             "+".join(modes), limit or "all", base,
             ", abstain threshold swept" + (" (candidates gate the base's answers)" if abstain_gate else "")
             if abstain_sweep else "")
    base_dirs = {m: evaluate(base, "base", m) for m in modes}
    if not abstain_sweep:
        cand_dirs = {c.name: {m: evaluate(c.path, c.name, m) for m in modes} for c in cands}
    else:
        swept, cand_dirs = [], {}
        for c in cands:
            scored = {m: evaluate(base if abstain_gate else c.path, f"{c.name}-scored", m, abstain_threshold=1.0,
                                  abstain_model=c.path if abstain_gate else "") for m in modes}
            p = [r["p_abstain"] for m in modes
                 for r in map(json.loads, (Path(scored[m]) / "answers.jsonl").read_text().splitlines())]
            for tau in sweep_thresholds(p):
                t = c.with_threshold(tau, abstain_gate)
                swept.append(t)
                cand_dirs[t.name] = {m: apply_threshold(scored[m], tau, out_dir / f"eval_{t.name}_{m}", t.name)
                                     for m in modes}
        cands = swept
    result = judge_candidates(base_dirs, cands, cand_dirs, out_dir)
    result.update({"run_dir": str(run_dir), "data": data, "limit": limit, "base": base})
    best = next(c for c in cands if c.name == result["selected"])
    result.update(selected_abstain_threshold=best.abstain_threshold, selected_is_gate=best.gate,
                  eval_command=_eval_command(best, base))
    (out_dir / "selection.json").write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    link = out_dir / "selected"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(os.path.abspath(result["selected_path"]), link)
    return result


def _eval_command(c: Candidate, base: str) -> str:
    """The `rlfh eval` options that reproduce the selected candidate on other data (the test split)."""
    if c.abstain_threshold is None:
        return f"--model {c.path}"
    if c.gate:
        return f"--model {base} --abstain-model {c.path} --abstain-threshold {c.abstain_threshold:.6g}"
    return f"--model {c.path} --abstain-threshold {c.abstain_threshold:.6g}"


def judge_candidates(base_dirs: dict[str, str], cands: list[Candidate], cand_dirs: dict[str, dict[str, str]],
                     out_dir: str | Path) -> dict[str, Any]:
    """Judge finished ``rlfh eval`` folders: each candidate's against the base's, per mode; choose one.

    Args:
        base_dirs: mode -> the base model's eval folder.
        cands: the candidates, in step order.
        cand_dirs: candidate name -> mode -> its eval folder (same data and questions as the base's).
        out_dir: where each candidate's comparison report goes (``report_<name>/``).
    Returns:
        dict with ``modes``, ``base_outcomes`` (mode -> counts), ``candidates`` (see
        :func:`summarise_candidate`), ``selected`` / ``selected_path`` and ``selected_passes``.
    """
    from evaluation.report import compare_runs, expectation_failures, load_run
    modes = list(base_dirs)
    entries = []
    for c in cands:
        dirs = [d for m in modes for d in (base_dirs[m], cand_dirs[c.name][m])]
        report = compare_runs(dirs, Path(out_dir) / f"report_{c.name}", n_boot=1000)
        failures = expectation_failures(report, c.name, modes)
        entries.append(summarise_candidate(report, c, failures))
        log.info("select: %s -> correct %d, incorrect %d, declined %d, %s", c.name, entries[-1]["correct"],
                 entries[-1]["incorrect"], entries[-1]["not_attempted"],
                 "passes the gate" if not failures else f"{len(failures)} gate criteria failed")
    best = min(entries, key=rank_key)
    base_counts = {}
    for m, d in base_dirs.items():
        grades = [r["grade"] for r in load_run(d)["records"]]
        base_counts[m] = {k: grades.count(k) for k in ("correct", "incorrect", "not_attempted")}
    return {"modes": modes, "base_outcomes": base_counts, "candidates": entries, "selected": best["name"],
            "selected_path": best["path"], "selected_passes": not best["failures"]}


def print_selection(result: dict[str, Any], console=None) -> None:
    from rich.console import Console
    from rich.table import Table
    con = console or Console(width=160)
    if "per_mode" in result:   # --abstain-sweep over several modes: one threshold each
        for m, r in result["per_mode"].items():
            con.print(f"[bold]{m} prompts[/bold]")
            print_selection(r, con)
        return
    modes = result["modes"]
    t = Table(title=f"Checkpoints of {result['run_dir']} on {result['data']} ({'+'.join(modes)}), "
                    "outcomes summed over modes")
    for col in ("checkpoint", "correct", "incorrect", "declined", "kept vs random", "gate"):
        t.add_column(col, justify="left" if col in ("checkpoint", "gate") else "right")
    b = {k: sum(v[k] for v in result["base_outcomes"].values()) for k in ("correct", "incorrect", "not_attempted")}
    t.add_row("base", str(b["correct"]), str(b["incorrect"]), str(b["not_attempted"]), "", "(reference)")
    for e in result["candidates"]:
        exp = sum(v["random_expected_correct"] for v in e["per_mode"].values())
        mark = " <- selected" if e["name"] == result["selected"] else ""
        gate = "passes" if not e["failures"] else f"fails {len(e['failures'])}"
        t.add_row(e["name"] + mark, str(e["correct"]), str(e["incorrect"]), str(e["not_attempted"]),
                  f"{e['correct']} vs {exp:.1f}", gate)
    con.print(t)
    best = next(e for e in result["candidates"] if e["name"] == result["selected"])
    if best["failures"]:
        con.print(f"No checkpoint passes the gate; the closest is {best['name']}:")
        for f in best["failures"]:
            con.print(f"  - {f}")
    con.print(f"selected: {result['selected_path']}")
    con.print(f"evaluate it on held-out data with: rlfh eval {result.get('eval_command') or ''}")
