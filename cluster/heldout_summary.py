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

    python -m cluster.heldout_summary SAVE_PATH/heldout/report/report.json [--gate selective|grounded]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional


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


def verdicts(report: dict[str, Any], name: str = "trained", gate: str = "selective") -> dict[str, tuple[bool, str]]:
    """Per prompt mode: (passed, one line). The gated mode (closed book for ``selective``, with the passage for
    ``grounded``): the gate; the other: correct answers kept."""
    from evaluation.report import GATES
    gated = "evidence" if gate == "grounded" else "closed"
    out = {}
    for gname, g in report["groups"].items():
        mode = "evidence" if "evidence" in gname else "closed"
        pair = next((p for p in g["pairs"] if p["b"] == name), None)
        if pair is None:
            continue
        mc, mi = pair["mcnemar_correct"], pair["mcnemar_incorrect"]
        tests = (f"vs {pair['a']}: incorrect {mi['a_only']} fewer / {mi['b_only']} more (p={mi['p_value']:.3g}); "
                 f"correct {mc['a_only']} lost / {mc['b_only']} gained (p={mc['p_value']:.3g})")
        if mode == gated:
            fails = GATES[gate](report, name, [gated])
            out[gname] = (not fails, (PASSED_LINES[gate] if not fails else "FAILED: " + "; ".join(fails) + ". ")
                          + tests)
        else:
            lost = mc["a_only"] > mc["b_only"] and mc["p_value"] < 0.05
            out[gname] = (not lost, ("FAILED: significantly fewer correct answers. " if lost
                                     else "PASSED: correct answers not significantly fewer. ") + tests)
    return out


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


def print_summary(report: dict[str, Any], file=None, gate: str = "selective") -> bool:
    """Print the tables and verdicts; True when every mode passed."""
    from rich.console import Console
    from rich.table import Table
    con = Console(file=file or sys.stdout, width=140)
    ok = True
    v = verdicts(report, gate=gate)
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
            note = small_sample_note(g) if "evidence" not in gname and gate == "selective" else None
            if note:
                con.print(f"[yellow]{note}[/]")
    return ok


def main(argv: Optional[list[str]] = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m cluster.heldout_summary",
                                description="The held-out tables and the gate's verdict of a `rlfh compare` report.")
    p.add_argument("report", metavar="REPORT_JSON", help="SAVE_PATH/heldout/report/report.json")
    p.add_argument("--gate", choices=["selective", "grounded"], default="selective",
                   help="selective (closed book; default) or grounded (with the passage): HELDOUT_GATE.")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    path = Path(args.report)
    if not path.is_file():
        print(f"{path}: no report (run `rlfh compare` first)", file=sys.stderr)
        return 2
    return 0 if print_summary(json.loads(path.read_text()), gate=args.gate) else 3


if __name__ == "__main__":
    sys.exit(main())
