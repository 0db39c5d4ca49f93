"""`rlfh select`: pick a training run's checkpoint on a dev split by the selectivity gate (early stopping).

RL against hallucination sits on a knife edge: a few steps too few and the policy has learnt nothing, a few too
many and it declines everything (docs/DEMO.md, attempt J). Which step is right differs from run to run, so the
step is chosen by measurement, on data the run never trained on and that the final report never uses (the dev
split; the test split stays untouched):

1. every checkpoint of the run (``SAVE_PATH/checkpoints/global_step_*/policy_hf``), every weights snapshot
   (``SAVE_PATH/snapshots/step_*``, written every SNAPSHOT_STEP steps) and ``SAVE_PATH/final`` is
   evaluated with ``rlfh eval`` on the dev split, in each asked prompt mode, greedy, like the final report;
2. each is compared with the base model on the same questions by the gate of ``rlfh compare --expect``
   (:func:`evaluation.report.expectation_failures`);
3. among the checkpoints that pass, the one with the fewest incorrect answers wins (ties: more correct answers,
   then the earlier step); when none passes, the one that fails the fewest criteria, then the one that keeps the
   most right answers, then the fewest wrong ones (see :func:`rank_key`). A checkpoint that declines everything
   never "wins" a tie that way: it keeps no right answers.

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

log = logging.getLogger(__name__)

_STEP_DIR = re.compile(r"global_step_(\d+)$")
_SNAPSHOT_DIR = re.compile(r"step_(\d+)$")


class SelectError(ValueError):
    """Bad input to ``rlfh select`` (the message names the argument and the fix)."""


@dataclass(frozen=True)
class Candidate:
    name: str            # "step00012" or "final"
    step: Optional[int]  # None for a final folder whose step is unknown
    path: str            # a HF model folder


def _final_step(final: Path) -> Optional[int]:
    try:
        return int(json.loads((final / "rlfh_meta.json").read_text())["weights_version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def list_candidates(run_dir: str | Path) -> list[Candidate]:
    """The run's checkpoints (by step) and its final model; a final whose step is a checkpoint's is dropped."""
    run = Path(run_dir)
    if not run.is_dir():
        raise SelectError(f"RUN_DIR {run}: not a folder; pass the SAVE_PATH of `rlfh train`")
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
        try:
            src = json.loads((Path(c.path) / "rlfh_meta.json").read_text()).get("source")
        except (OSError, ValueError):
            continue
        if src:
            return src
    return None


def rank_key(entry: dict[str, Any]) -> tuple:
    """Sort key of one candidate (smaller is better); see the module docstring for the rule."""
    passes = not entry["failures"]
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
    return {"name": cand.name, "step": cand.step, "path": cand.path, "n": n, "correct": correct,
            "incorrect": incorrect, "not_attempted": abstained, "margin_over_random": round(margin, 3),
            "per_mode": per_mode, "failures": failures}


def select_checkpoint(run_dir: str, *, data: str = "halueval:dev", modes: tuple[str, ...] = ("closed",),
                      limit: int = 200, base: Optional[str] = None, out: Optional[str] = None, threads: int = 0,
                      batch_size: int = 16, progress: bool = True) -> dict[str, Any]:
    """Evaluate every candidate of ``run_dir`` and the base model on ``data``; return selection.json's dict."""
    from evaluation.runner import MODES, EvalConfig, run_eval

    if not modes:
        raise SelectError("--mode: give at least one prompt mode (closed and/or evidence)")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SelectError(f"--mode {bad[0]!r}: must be one of {', '.join(MODES)}")
    if data.endswith(":test"):
        log.warning("selecting a checkpoint on %s: the test split is for the final report; select on dev", data)
    cands = list_candidates(run_dir)
    base = base or base_model_of(run_dir)
    if not base:
        raise SelectError(f"--base: {run_dir} does not record the model it started from; pass --base MODEL")
    out_dir = Path(out or Path(run_dir) / "select")
    out_dir.mkdir(parents=True, exist_ok=True)

    def evaluate(model: str, name: str, mode: str) -> str:
        d = out_dir / f"eval_{name}_{mode}"
        run_eval(EvalConfig(model=model, data=data, mode=mode, out=str(d), limit=limit, name=name, verifier=False,
                            confidence="off", reuse=True, threads=threads, batch_size=batch_size,
                            progress=progress))
        return str(d)

    log.info("select: %d candidate(s) of %s on %s (%s, %s questions), base %s", len(cands), run_dir, data,
             "+".join(modes), limit or "all", base)
    base_dirs = {m: evaluate(base, "base", m) for m in modes}
    cand_dirs = {c.name: {m: evaluate(c.path, c.name, m) for m in modes} for c in cands}
    result = judge_candidates(base_dirs, cands, cand_dirs, out_dir)
    result.update({"run_dir": str(run_dir), "data": data, "limit": limit, "base": base})
    (out_dir / "selection.json").write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    link = out_dir / "selected"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(os.path.abspath(result["selected_path"]), link)
    return result


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
