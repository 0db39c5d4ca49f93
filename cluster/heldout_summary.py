"""The end of `make train`: did the RL-trained model get better on questions it never saw?

Reads the report `rlfh compare` wrote for the base and the trained model on held-out questions (closed book and
with the passage) and prints one table per prompt mode: correct, incorrect, not attempted and accuracy on the
attempted answers for the base model, the trained model, the base model declining as many RANDOM questions as
the trained one (what abstention alone buys) and the question-type rule (the base declining every open
question: selectivity that needs no training), then the paired tests and the verdict:

- closed book, the gate (`rlfh compare --expect trained`): significantly fewer incorrect answers, correct
  answers not significantly fewer, accuracy on attempted answers significantly higher, more right answers kept
  than random abstention;
- with the passage: no significant loss of correct answers (declining where the passage does not help is
  welcome, not required).

With ``--gate grounded`` (HELDOUT_GATE=grounded, the grounded recipe) the roles swap: the gate is judged with the
passage (:func:`evaluation.report.grounded_failures`: more right answers, fewer wrong ones, higher fact precision
with no fewer supported statements), closed book must only keep its right answers, and each mode also gets the
verifier's statement table.

RL's share: where the run had a warm start, its answers are a row of their own (``warm-start``, the name
scripts/heldout_report.sh gives them). The gate is judged against the base model (and, in `make demo`, the
prompt-only baseline), never against the warm start; each mode then gets a table with every metric's verdict
against the base model and against the warm start: *improved*, *no significant change* or *worse*, with the effect
and its 95% CI (right and wrong answers: exact McNemar, with the paired counts; the rest: the paired bootstrap CI of
the difference).

The last lines say how the run ended: *finished* (it reached its end and exported SAVE_PATH/final), which step the
final model is (FINAL_MODEL=best: the best dev step; step 0: the warm start, RL's steps were not kept), and whether
the gate was met. A gate that was not met reads "not met"; only with ``--strict`` (HELDOUT_STRICT, and `make demo`)
does it read FAILED.

    python -m cluster.heldout_summary SAVE_PATH/heldout/report/report.json [--gate selective|grounded] [--strict]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Optional

from cluster.train_report import read_metrics
from evaluation.report import ALPHA, GATES


def _pct(v: Optional[float]) -> str:
    if v is None:
        return "-"
    s = f"{100 * v:.1f}"
    return "0.0" if s == "-0.0" else s   # a share computed as 1 - sum(...) can land a hair below zero


def mode_rows(group: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(row name, correct %, incorrect %, not attempted %, accuracy on attempted %) of one prompt mode."""
    rows = []
    for m in group["models"]:
        gd = m["metrics"]["gold"]
        rows.append((m["name"], _pct(gd["correct"]["value"]), _pct(gd["incorrect"]["value"]),
                     _pct(gd["not_attempted"]["value"]), _pct(gd["accuracy_given_attempted"]["value"])))
    sel = group.get("selectivity") or {}
    for name, e in (sel.get("runs") or {}).items():
        rnd = e["random"]
        if name == sel.get("reference") or rnd["n_abstain"] == 0:
            continue
        rows.append((f"random abstention ({sel['reference']} declining {rnd['n_abstain']}, as many as {name})",
                     _pct(rnd["correct"]), _pct(rnd["incorrect"]), _pct(rnd["not_attempted"]),
                     _pct(rnd["accuracy_given_attempted"])))
    if sel.get("type_rule"):
        tm = sel["type_rule"]["metrics"]
        rows.append((f"question-type rule ({sel['reference']}, open questions declined)", _pct(tm["correct"]),
                     _pct(tm["incorrect"]), _pct(tm["not_attempted"]), _pct(tm["accuracy_given_attempted"])))
    return rows


def statement_rows(group: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(row name, statements per answer, supported per answer, fact precision %) of one prompt mode, by the
    training verifier (not independent of training)."""
    rows = []
    for m in group["models"]:
        v = m["metrics"].get("verifier")
        if v:
            sup = v.get("supported_statements_per_answer")
            rows.append((m["name"], f"{v['statements_per_answer']:.2f}", "-" if sup is None else f"{sup:.2f}",
                         _pct(v.get("fact_precision"))))
    return rows


PASSED_LINES = {"selective": "PASSED: selective, fewer hallucinations, right answers kept. ",
                "grounded": "PASSED: more right answers, fewer wrong ones, higher fact precision. "}

#: The name scripts/heldout_report.sh gives the warm start's answers (`rlfh eval --name`): compared, never gated.
WARM_NAME = "warm-start"


def _failed(strict: bool, what: str = "gate") -> str:
    """How a check that was not met opens its line: FAILED only where it fails the job (HELDOUT_STRICT, make demo),
    "gate not met" (``what`` "gate") or "not met" (``what`` "") otherwise."""
    return "FAILED: " if strict else f"{what} not met: ".lstrip()


def gate_references(report: dict[str, Any], name: str = "trained") -> list[str]:
    """The runs the gate judges ``name`` against: every other run of the report but the warm start."""
    return sorted({m["name"] for g in report["groups"].values() for m in g["models"]} - {name, WARM_NAME})


def _pair(group: dict[str, Any], ref: str, name: str) -> Optional[tuple[dict[str, Any], str, str]]:
    """``(pair, name's side, ref's side)`` of the paired tests of ``name`` and ``ref`` in ``group``; None without."""
    pair = next((p for p in group["pairs"] if {p["a"], p["b"]} == {ref, name}), None)
    if pair is None:
        return None
    return (pair, "b", "a") if pair["b"] == name else (pair, "a", "b")


def paired_counts(group: dict[str, Any], ref: str, name: str = "trained") -> Optional[str]:
    """One line of ``name``'s paired counts against ``ref``: wrong answers fewer / more, right answers lost / gained,
    each with its exact McNemar p."""
    found = _pair(group, ref, name)
    if found is None:
        return None
    pair, me, other = found
    mc, mi = pair["mcnemar_correct"], pair["mcnemar_incorrect"]
    return (f"vs {ref}: incorrect {mi[other + '_only']} fewer / {mi[me + '_only']} more (p={mi['p_value']:.3g}); "
            f"correct {mc[other + '_only']} lost / {mc[me + '_only']} gained (p={mc['p_value']:.3g})")


def verdicts(report: dict[str, Any], name: str = "trained", gate: str = "selective",
             strict: bool = False) -> dict[str, tuple[bool, str]]:
    """Per prompt mode: (passed, one line). The gated mode (closed book for ``selective``, with the passage for
    ``grounded``): the gate, against every run but the warm start (:func:`gate_references`); the other: correct
    answers kept against the mode's first run (the base model). A line that did not pass opens with "gate not met"
    (or "not met"), and with "FAILED" only when ``strict``."""
    gated = "evidence" if gate == "grounded" else "closed"
    out = {}
    for gname, g in report["groups"].items():
        mode = "evidence" if "evidence" in gname else "closed"
        ref = g["models"][0]["name"] if g["models"] else None
        found = _pair(g, ref, name) if ref and ref != name else None
        if found is None:
            continue
        pair, me, other = found
        tests = paired_counts(g, ref, name)
        if mode == gated:
            fails = GATES[gate](report, name, [gated], gate_references(report, name))
            out[gname] = (not fails, (PASSED_LINES[gate] if not fails else _failed(strict) + "; ".join(fails) + ". ")
                          + tests)
        else:
            mc = pair["mcnemar_correct"]
            lost = mc[other + "_only"] > mc[me + "_only"] and mc["p_value"] < ALPHA
            out[gname] = (not lost, (_failed(strict, "") + "significantly fewer correct answers. " if lost
                                     else "PASSED: correct answers not significantly fewer. ") + tests)
    return out


#: The metrics a verdict is given for: (key, name, +1 where higher is better / -1 where lower is, the source:
#: "gold" (the pair's paired tests and bootstrap ``diff``) or "verifier" (its ``verifier_diff``), unit).
VERDICT_METRICS = (("correct", "right answers", +1, "gold", "pts"), ("incorrect", "wrong answers", -1, "gold", "pts"),
                   ("accuracy_given_attempted", "accuracy on attempted", +1, "gold", "pts"))
STATEMENT_METRICS = (("fact_precision", "fact precision (verifier)", +1, "verifier", "pts"),
                     ("supported_statements_per_answer", "supported statements per answer (verifier)", +1, "verifier",
                      ""))
TESTED = {"correct": "mcnemar_correct", "incorrect": "mcnemar_incorrect"}


def metric_verdict(group: dict[str, Any], ref: str, metric: tuple, name: str = "trained"
                   ) -> Optional[dict[str, Any]]:
    """One metric's verdict of ``name`` against ``ref``: ``{"verdict": "improved" | "no significant change" |
    "worse" | "not measured", "value", "ci95" (name minus ref), "counts", "p"}``; None where the pair or the metric
    is missing.

    Right and wrong answers are judged by the exact McNemar test the gate reads (p < alpha, the direction by the
    paired counts); the others by the paired bootstrap 95% CI of the difference (it excludes 0)."""
    key, _, better, source, _ = metric
    found = _pair(group, ref, name)
    if found is None:
        return None
    pair, me, other = found
    table = pair.get("diff") if source == "gold" else pair.get("verifier_diff")
    if not table or key not in table:
        return None
    d = table[key]
    value, (lo, hi) = d["value"], d["ci95"]
    if me == "a":   # the pair's difference is b - a: turned round, name minus ref
        value, lo, hi = -value, -hi, -lo
    out = {"value": value, "ci95": (lo, hi), "counts": None, "p": None}
    if key in TESTED:
        t = pair[TESTED[key]]
        mine, theirs = t[me + "_only"], t[other + "_only"]   # items where only name / only ref has the outcome
        out["p"] = t["p_value"]
        out["counts"] = f"{mine} gained / {theirs} lost" if key == "correct" else f"{theirs} fewer / {mine} more"
        direction = better * (mine - theirs)
        significant = t["p_value"] < ALPHA and mine != theirs
    else:
        if math.isnan(lo) or math.isnan(hi):
            out["verdict"] = "not measured"
            return out
        direction = better * (1 if lo > 0 else -1 if hi < 0 else 0)
        significant = direction != 0
    out["verdict"] = ("improved" if direction > 0 else "worse") if significant else "no significant change"
    return out


def _effect(v: dict[str, Any], unit: str) -> str:
    """``+12.5 pts [+4.0, +21.0]``: the effect and its 95% CI (``unit`` "pts": shares in points; "": counts)."""
    scale, digits, tail = (100, 1, " pts") if unit == "pts" else (1, 2, f" {unit}" if unit else "")

    def signed(x: float) -> str:
        return f"{scale * x:+.{digits}f}"
    lo, hi = v["ci95"]
    ci = "[CI -]" if math.isnan(lo) or math.isnan(hi) else f"[{signed(lo)}, {signed(hi)}]"
    return f"{signed(v['value'])}{tail} {ci}"


def verdict_rows(group: dict[str, Any], refs: list[str], statements: bool = False, name: str = "trained"
                 ) -> list[tuple[str, ...]]:
    """(metric, one cell per reference in ``refs``) of one prompt mode: each metric's verdict of ``name`` against
    each reference, its effect with the 95% CI, and for right and wrong answers the paired counts and McNemar p."""
    metrics = VERDICT_METRICS + (STATEMENT_METRICS if statements else ())
    rows = []
    for metric in metrics:
        cells = []
        for ref in refs:
            v = metric_verdict(group, ref, metric, name)
            if v is None:
                cells.append("-")
                continue
            cell = f"{v['verdict']}: {_effect(v, metric[4])}"
            if v["counts"]:
                cell += f"\n{v['counts']}, p={v['p']:.3g}"
            cells.append(cell)
        if any(c != "-" for c in cells):
            rows.append((metric[1], *cells))
    return rows


GATE_QUESTIONS = 300   # the size the closed-book gate is judged at (HELDOUT_LIMIT's default; docs/EVALUATION.md)


def small_sample_note(group: dict[str, Any], reference: str = "base") -> Optional[str]:
    """A line saying how little a closed-book verdict on fewer than GATE_QUESTIONS questions can show: with a base
    model that answers a handful right, the tests on right answers and on accuracy when attempted have little
    power, and their verdict can go either way by chance. None at GATE_QUESTIONS or more."""
    ref = next((m for m in group["models"] if m["name"] == reference), None)
    if ref is None:
        return None
    n = int(ref["metrics"]["n"])
    if n >= GATE_QUESTIONS:
        return None
    right = int(ref["metrics"]["counts"]["correct"])
    return (f"note: {n} questions, {right} of them answered right by {reference}: the tests on right answers and on "
            f"accuracy when attempted have little power at this size, either verdict can be chance; the gate is "
            f"judged on {GATE_QUESTIONS} (set HELDOUT_LIMIT={GATE_QUESTIONS} before the run).")


def _read_json(path: Path) -> Optional[dict[str, Any]]:
    try:
        out = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return out if isinstance(out, dict) else None


def kept_step(run_dir: str | Path) -> Optional[tuple[int, str]]:
    """``(step, why)``: the step whose policy SAVE_PATH/final is, None without a final model.

    With FINAL_MODEL=best the driver exports the snapshot of the best in-loop dev evaluation
    (SAVE_PATH/snapshots/best, its dev record in dev_eval.json): the final model is that step's when its weights
    version (rlfh_meta.json, the optimizer steps taken) is the snapshot's. A weights version of 0 is step 0: no
    update reached the final model. Otherwise the final model is the last step's (metrics.jsonl)."""
    run = Path(run_dir)
    meta = _read_json(run / "final" / "rlfh_meta.json")
    if meta is None or not (run / "final" / "config.json").is_file():
        return None
    version = meta.get("weights_version")
    best = run / "snapshots" / "best"
    best_meta, best_dev = _read_json(best / "rlfh_meta.json"), _read_json(best / "dev_eval.json")
    if best_meta and best_dev and "step" in best_dev and best_meta.get("weights_version") == version:
        return int(best_dev["step"]), "FINAL_MODEL=best: the best in-loop dev evaluation"
    if version == 0:
        return 0, "no update reached it"
    rows = read_metrics(run)
    return (int(rows[-1]["step"]) if rows else -1), "the last step"


def _started_from_warm_start(report: dict[str, Any], run: Path) -> bool:
    """The run trained from a warm start: the report has its row, or the final model's source (rlfh_meta.json) is a
    `rlfh baseline warmstart` folder (its baseline.json)."""
    if any(m["name"] == WARM_NAME for g in report["groups"].values() for m in g["models"]):
        return True
    source = (_read_json(run / "final" / "rlfh_meta.json") or {}).get("source")
    return bool(source) and (Path(source) / "baseline.json").is_file()


def run_lines(report: dict[str, Any]) -> list[str]:
    """How the run ended, from the report's training folder (`rlfh compare --run SAVE_PATH`): "finished" with its
    steps and the final model's step, and where that step is 0, that RL's steps were not kept. [] without one."""
    tr = report.get("training") or {}
    run_dir = tr.get("run_dir") or report.get("run_dir")
    if not run_dir:
        return []
    run = Path(run_dir)
    kept = kept_step(run)
    if kept is None:
        return [f"not finished: no final model in {run / 'final'}"]
    step, why = kept
    lines = [f"finished: the run reached its end after {tr.get('steps', '?')} RL steps; final model {run / 'final'}"]
    if step == 0:
        start = "the warm start" if _started_from_warm_start(report, run) else "the model RL started from"
        lines.append(f"the final model is {start} (RL's steps were not kept): step 0, {why}")
    elif step > 0:
        lines.append(f"the final model is the policy of step {step} ({why})")
    return lines


def print_summary(report: dict[str, Any], file=None, gate: str = "selective", strict: bool = False) -> bool:
    """Print the tables, the verdicts and how the run ended; True when every mode passed. ``strict``
    (HELDOUT_STRICT, make demo): a gate that was not met reads FAILED."""
    from rich.console import Console
    from rich.table import Table
    con = Console(file=file or sys.stdout, width=140)
    ok = True
    v = verdicts(report, gate=gate, strict=strict)
    for gname, g in report["groups"].items():
        n = g["models"][0]["metrics"]["n"] if g["models"] else 0
        t = Table(title=f"held-out, {gname} ({n} questions, greedy, gold-answer grader, %)")
        for col in ("model", "correct", "incorrect", "not attempted", "accuracy on attempted"):
            t.add_column(col, justify="left" if col == "model" else "right")
        for r in mode_rows(g):
            t.add_row(*r)
        con.print(t)
        st = statement_rows(g) if gate == "grounded" else []
        if st:
            s = Table(title=f"held-out, {gname}: the verifier's statements (the training reward's judge)")
            for col in ("model", "statements per answer", "supported per answer", "fact precision"):
                s.add_column(col, justify="left" if col == "model" else "right")
            for r in st:
                s.add_row(*r)
            con.print(s)
        if gname in v:
            passed, line = v[gname]
            ok &= passed
            con.print(f"[{'green' if passed else 'red'}]{line}[/]")
            warm = paired_counts(g, WARM_NAME)
            if warm:
                con.print(f"RL's share (trained {warm})")
            note = small_sample_note(g) if "evidence" not in gname and gate == "selective" else None
            if note:
                con.print(f"[yellow]{note}[/]")
        first = g["models"][0]["name"] if g["models"] else None   # the base model
        refs = [r for r in dict.fromkeys((first, WARM_NAME)) if r and r != "trained" and _pair(g, r, "trained")]
        rows = verdict_rows(g, refs, statements=gate == "grounded")
        if rows:
            vt = Table(title=f"held-out, {gname}: trained vs " + " and vs ".join(refs)
                       + " (paired; 95% CI; right / wrong answers: exact McNemar)")
            vt.add_column("metric")
            for r in refs:
                vt.add_column(f"vs {r}")
            colours = {"improved": "green", "worse": "red"}
            for metric, *cells in rows:
                vt.add_row(metric, *(f"[{colours[c.split(':')[0]]}]{c}[/]" if c.split(":")[0] in colours else c
                                     for c in cells))
            con.print(vt)
    for line in run_lines(report):
        con.print(line)
    if v:
        if ok:
            con.print(f"[green]the held-out {gate} gate was met[/]")
        else:
            con.print(f"[red]FAILED: the held-out {gate} gate was not met (the verdicts above)[/]" if strict else
                      f"[yellow]the held-out {gate} gate was not met (the verdicts above)[/]")
    return ok


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.heldout_summary",
                                description="The held-out tables and the gate's verdict of a `rlfh compare` report.")
    p.add_argument("report", metavar="REPORT_JSON", help="SAVE_PATH/heldout/report/report.json")
    p.add_argument("--gate", choices=["selective", "grounded"], default="selective",
                   help="selective (closed book; default) or grounded (with the passage): HELDOUT_GATE.")
    p.add_argument("--strict", action="store_true",
                   help="A gate that was not met reads FAILED (HELDOUT_STRICT, make demo: the job fails on it); "
                        "without it, 'not met'. The exit status is 3 either way.")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    path = Path(args.report)
    if not path.is_file():
        print(f"{path}: no report (run `rlfh compare` first)", file=sys.stderr)
        return 2
    return 0 if print_summary(json.loads(path.read_text()), gate=args.gate, strict=args.strict) else 3


if __name__ == "__main__":
    sys.exit(main())
