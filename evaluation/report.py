"""`rlfh compare`: pair eval runs by question, test the differences, write report.md / report.json / PNGs.

Runs are grouped by (data, mode): models are only compared on the same items asked
the same way. Within a group every pair of runs gets

- exact McNemar tests on paired binary outcomes: *incorrect vs not-incorrect* (did the
  second model hallucinate on fewer items?) and *correct vs not* (did it lose right answers?);
- paired bootstrap CIs of the rate differences.

A pair's verdict reads "fewer hallucinations" only when incorrect answers are
significantly fewer (p < alpha) *and* correct answers are not significantly fewer.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from core.prompts import PROMPT_ONLY_SYSTEMS
from core.grader import CORRECT, INCORRECT, NOT_ATTEMPTED, grade_answer
from core.questions import QUESTION_TYPES, question_type
from core.verify_schema import GOOD_LABELS
from evaluation.knowledge import BUCKETS, per_bucket_outcomes
from evaluation.metrics_log import read_metrics
from evaluation.plots import plot_outcomes, plot_risk_coverage, plot_tradeoff, plot_training
from evaluation.runner import VERIFIER_LABELS, pct, summarise
from evaluation.selectivity import abstention_overlap, auroc, random_abstention, risk_coverage, type_rule_grades
from evaluation.stats import mcnemar_paired, outcome_metrics, paired_bootstrap_diff, paired_bootstrap_ratio_diff

ALPHA = 0.05


class CompareError(ValueError):
    """Bad input to ``rlfh compare`` (the message names the folder and the fix)."""


# ----------------------------------------------------------------------------- loading

def load_run(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_dir():
        raise CompareError(f"{p}: not a folder; pass the --out folders of `rlfh eval` runs")
    sp, ap = p / "summary.json", p / "answers.jsonl"
    for f in (sp, ap):
        if not f.exists():
            raise CompareError(f"{p}: missing {f.name}; is this the --out folder of a finished `rlfh eval`?")
    summary = json.loads(sp.read_text(encoding="utf-8"))
    records = []
    with open(ap, encoding="utf-8") as fh:
        for ln, line in enumerate(fh, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise CompareError(f"{ap}:{ln}: not valid JSON ({e.msg})") from None
    if not records:
        raise CompareError(f"{ap}: no answers")
    regrade(records)
    return {"dir": str(p), "summary": summary, "records": records, "name": summary.get("name") or p.name}


def regrade(records: list[dict]) -> None:
    """Grade every record again with the current gold grader (so a report never mixes grader versions)."""
    for r in records:
        for k in ("question", "gold", "answer"):
            if k not in r:
                raise CompareError(f"an answers.jsonl record has no {k!r} field; re-run `rlfh eval`")
        scope = r.get("grade_scope", "whole")   # what `rlfh eval --grade-scope` read (answers from before: whole)
        gr = grade_answer(r["answer"], r["gold"], r["question"], scope=scope)
        r.update(grade=gr.grade, reason=gr.reason, hedged=gr.hedged, abstained=gr.abstained, f1=round(gr.f1, 4),
                 grade_lenient=grade_answer(r["answer"], r["gold"], r["question"], strict=False, scope=scope).grade)


def _unique_names(runs: list[dict]) -> None:
    seen: dict[str, int] = {}
    for r in runs:
        key = (r["name"], r["summary"].get("mode"))
        seen[key] = seen.get(key, 0) + 1
    dup = {k for k, n in seen.items() if n > 1}
    for r in runs:
        if (r["name"], r["summary"].get("mode")) in dup:
            r["name"] = f"{r['name']} ({Path(r['dir']).name})"


def pair_records(a: dict, b: dict) -> tuple[list[dict], list[dict]]:
    """Records of runs a and b on the items both answered, in a's order (paired by question key)."""
    kb = {r["key"]: r for r in b["records"]}
    ra, rb = [], []
    for r in a["records"]:
        if r["key"] in kb:
            ra.append(r)
            rb.append(kb[r["key"]])
    return ra, rb


# ----------------------------------------------------------------------------- comparison

def compare_pair(a: dict, b: dict, n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Paired tests of run b against run a (b - a)."""
    ra, rb = pair_records(a, b)
    if not ra:
        raise CompareError(f"{a['dir']} and {b['dir']} share no questions; evaluate both on the same --data and "
                           "--limit")
    ga, gb = [r["grade"] for r in ra], [r["grade"] for r in rb]
    inc = mcnemar_paired([g == INCORRECT for g in ga], [g == INCORRECT for g in gb])
    cor = mcnemar_paired([g == CORRECT for g in ga], [g == CORRECT for g in gb])
    diff = paired_bootstrap_diff(ga, gb, n_boot=n_boot, seed=seed)
    success, verdict = judge(inc, cor)
    transitions = {f"{x}->{y}": 0 for x in (CORRECT, INCORRECT, NOT_ATTEMPTED)
                   for y in (CORRECT, INCORRECT, NOT_ATTEMPTED)}
    for x, y in zip(ga, gb):
        transitions[f"{x}->{y}"] += 1
    return {"a": a["name"], "b": b["name"], "a_dir": a["dir"], "b_dir": b["dir"], "n_paired": len(ra),
            "mcnemar_incorrect": inc, "mcnemar_correct": cor,
            "diff": {k: {"value": v[0], "ci95": [v[1], v[2]]} for k, v in diff.items()},
            "fewer_incorrect_significant": significantly_fewer(inc, "b"),
            "fewer_correct_significant": significantly_fewer(cor, "b"),
            "success": success,
            "verdict": verdict, "transitions": transitions,
            "verifier_diff": verifier_diff(ra, rb, n_boot=n_boot, seed=seed)}


def verifier_diff(ra: list[dict], rb: list[dict], n_boot: int = 2000, seed: int = 0) -> Optional[dict[str, Any]]:
    """Paired bootstrap CIs (b - a) of the training verifier's fact precision (supported statements of all stated,
    as :func:`evaluation.runner.summarise` counts it) and supported statements per answer, on the paired items that
    both runs verified. None when no item has both verifier records."""
    both = [(x["verifier"], y["verifier"]) for x, y in zip(ra, rb) if x.get("verifier") and y.get("verifier")]
    if not both:
        return None

    def supported(v: dict) -> float:
        return float(sum(n for lab, n in v["labels"].items() if lab in GOOD_LABELS))

    sa, sb = [supported(a) for a, _ in both], [supported(b) for _, b in both]
    stated_a = [float(sum(a["labels"].values())) for a, _ in both]
    stated_b = [float(sum(b["labels"].values())) for _, b in both]
    ones = [1.0] * len(both)
    out: dict[str, Any] = {"n_paired": len(both)}
    for key, (da, db) in (("fact_precision", (stated_a, stated_b)), ("supported_statements_per_answer", (ones, ones))):
        v, lo, hi = paired_bootstrap_ratio_diff(sa, da, sb, db, n_boot=n_boot, seed=seed)
        out[key] = {"value": v, "ci95": [lo, hi]}
    return out


def significantly_fewer(test: dict, side: str) -> bool:
    """Run ``side`` ("a" or "b") has the outcome on significantly fewer items (McNemar ``test``, p < alpha)."""
    other = "a" if side == "b" else "b"
    return bool(test[f"{side}_only"] < test[f"{other}_only"] and test["p_value"] < ALPHA)


def judge(inc: dict, cor: dict, new: str = "b") -> tuple[bool, str]:
    """(success, verdict) of run ``new`` ("a" or "b") against the other, from the two McNemar tests.

    Success: incorrect answers significantly fewer (p < alpha) and correct answers not significantly fewer.
    """
    fewer_incorrect = significantly_fewer(inc, new)
    more_incorrect = significantly_fewer(inc, "a" if new == "b" else "b")
    fewer_correct = significantly_fewer(cor, new)
    if fewer_incorrect and not fewer_correct:
        verdict = "fewer hallucinations, correct answers kept"
    elif fewer_incorrect:
        verdict = "fewer hallucinations but also fewer correct answers"
    elif more_incorrect:
        verdict = "more hallucinations"
    elif fewer_correct:
        verdict = "fewer correct answers, hallucinations not significantly fewer"
    else:
        verdict = "no significant difference"
    return bool(fewer_incorrect and not fewer_correct), verdict


def expectation_failures(report: dict[str, Any], name: str, modes: Optional[list[str]] = None,
                         against: Optional[Sequence[str]] = None) -> list[str]:
    """Why run ``name`` is not *selective* in its groups (empty list: it is).

    In every group (of the ``modes`` prompt modes; None: every group) the run must have

    1. significantly fewer incorrect answers than every other run (of ``against``, when given: e.g. the base
       model only, so the held-out report's warm-start row is compared but not gated), with correct answers not
       significantly fewer (exact McNemar, p < alpha);
    2. accuracy on its attempted answers significantly above the reference's (the group's first run, e.g. the
       base model): the paired bootstrap 95% CI of the difference lies above 0, so its abstentions fall on
       questions the reference got wrong;
    3. more correct answers than the reference would keep if it declined the same number of questions at
       random (exact hypergeometric p < alpha).
    """
    failures, found = [], False
    for gname, g in report["groups"].items():
        if modes and not {m.get("mode") for m in g["models"]} & set(modes):
            continue
        sel = (g.get("selectivity") or {})
        ref = sel.get("reference")
        entry = (sel.get("runs") or {}).get(name)
        if entry is not None and ref is not None and ref != name:
            rnd = entry["random"]
            if not rnd.get("beats"):
                failures.append(f"{gname}: {name} is no better than random abstention: {rnd['observed_correct']} "
                                f"correct vs {100 * rnd['correct']:.1f}% ({rnd['correct'] * rnd['n']:.1f}) expected "
                                f"from {ref} declining the same {rnd['n_abstain']} questions at random "
                                f"(p={_p(rnd['p_value'])})")
            for pr in g["pairs"]:
                if {pr["a"], pr["b"]} == {ref, name}:
                    d = pr["diff"]["accuracy_given_attempted"]
                    lo, hi = d["ci95"]
                    sign = 1 if pr["b"] == name else -1
                    if not (sign * (lo if sign > 0 else hi) > 0):
                        failures.append(f"{gname}: {name}'s accuracy on attempted answers is not significantly "
                                        f"above {ref}'s ({100 * sign * d['value']:+.1f} pts, 95% CI "
                                        f"[{100 * sign * (lo if sign > 0 else hi):+.1f}, "
                                        f"{100 * sign * (hi if sign > 0 else lo):+.1f}])")
        for pr in g["pairs"]:
            if name not in (pr["a"], pr["b"]):
                continue
            found = True
            side = "b" if pr["b"] == name else "a"
            other = pr["a"] if side == "b" else pr["b"]
            if against is not None and other not in against:
                continue
            ok, verdict = judge(pr["mcnemar_incorrect"], pr["mcnemar_correct"], new=side)
            if not ok:
                failures.append(f"{gname}: {name} vs {other}: {verdict} (incorrect McNemar "
                                f"p={_p(pr['mcnemar_incorrect']['p_value'])}, correct "
                                f"p={_p(pr['mcnemar_correct']['p_value'])})")
    if not found:
        names = sorted({m["name"] for g in report["groups"].values() for m in g["models"]})
        where = f" in mode {', '.join(modes)}" if modes else ""
        raise CompareError(f"--expect {name!r}: no run has that name{where}; the runs are {', '.join(names)}")
    return failures


#: The grounded gate (HELDOUT_GATE=grounded, `rlfh compare --gate grounded`): what the trained model must gain over
#: the reference with the passage in the prompt, in shares of the questions (precision: of the statements).
GROUNDED_GATE = {"correct_gain": 0.10, "incorrect_drop": 0.15, "precision_gain": 0.15}


def grounded_failures(report: dict[str, Any], name: str, modes: Optional[list[str]] = None,
                      against: Optional[Sequence[str]] = None) -> list[str]:
    """Why run ``name`` does not pass the grounded gate in its groups (empty list: it does).

    In every group (of the ``modes`` prompt modes; default: evidence, the passage in the prompt), against every
    other run of the group (the base model; in `make demo` also the prompt-only baseline, so a gain a prompt alone
    gives is not credited to training), or only those named in ``against`` (the held-out report gates against the
    base model, and compares with its warm-start row without gating):

    1. correct answers up by at least ``GROUNDED_GATE["correct_gain"]`` and significantly more (exact McNemar on
       right answers, p < alpha);
    2. incorrect answers down by at least ``incorrect_drop`` and significantly fewer (McNemar, p < alpha);
    3. the verifier's fact precision up by at least ``precision_gain``, with supported statements per answer not
       lower (a reply must not buy precision by saying less).
    """
    modes = modes or ["evidence"]
    failures, found = [], False
    for gname, g in report["groups"].items():
        if not {m.get("mode") for m in g["models"]} & set(modes):
            continue
        stats = {m["name"]: m["metrics"].get("verifier") for m in g["models"]}
        for ref in [m["name"] for m in g["models"] if m["name"] != name and (against is None or m["name"] in against)]:
            pair = next((p for p in g["pairs"] if {p["a"], p["b"]} == {ref, name}), None)
            if pair is None:
                continue
            found = True
            failures += _grounded_pair_failures(gname, pair, name, ref, stats.get(ref), stats.get(name))
    if not found:
        names = sorted({m["name"] for g in report["groups"].values() for m in g["models"]})
        raise CompareError(f"--expect {name!r} --gate grounded: no {'/'.join(modes)} group pairs it with a reference; "
                           f"the runs are {', '.join(names)}")
    return failures


def _grounded_pair_failures(gname: str, pair: dict, name: str, ref: str, v_ref: Optional[dict],
                            v_new: Optional[dict]) -> list[str]:
    """The grounded gate's failures of run ``name`` against run ``ref`` (their ``pair``; ``v_*``: verifier stats)."""
    failures = []
    side, other = ("b", "a") if pair["b"] == name else ("a", "b")
    sign = 1 if side == "b" else -1
    gain, drop = sign * pair["diff"]["correct"]["value"], -sign * pair["diff"]["incorrect"]["value"]
    mc, mi = pair["mcnemar_correct"], pair["mcnemar_incorrect"]
    if gain < GROUNDED_GATE["correct_gain"] or not significantly_fewer(mc, other):
        failures.append(f"{gname}: {name}'s correct answers {100 * gain:+.1f} pts vs {ref} (needs "
                        f"+{100 * GROUNDED_GATE['correct_gain']:.0f}, significant: {mc[side + '_only']} gained / "
                        f"{mc[other + '_only']} lost, p={_p(mc['p_value'])})")
    if drop < GROUNDED_GATE["incorrect_drop"] or not significantly_fewer(mi, side):
        failures.append(f"{gname}: {name}'s incorrect answers {-100 * drop:+.1f} pts vs {ref} (needs "
                        f"-{100 * GROUNDED_GATE['incorrect_drop']:.0f}, significant: {mi[other + '_only']} fewer / "
                        f"{mi[side + '_only']} more, p={_p(mi['p_value'])})")
    if not (v_ref and v_new and v_ref.get("fact_precision") is not None and v_new.get("fact_precision") is not None):
        return failures + [f"{gname}: no statement metrics for {ref} and {name} (run `rlfh eval` with the verifier)"]
    p_gain = v_new["fact_precision"] - v_ref["fact_precision"]
    if p_gain < GROUNDED_GATE["precision_gain"]:
        failures.append(f"{gname}: {name}'s fact precision {100 * v_new['fact_precision']:.1f}% vs {ref}'s "
                        f"{100 * v_ref['fact_precision']:.1f}% ({100 * p_gain:+.1f} pts, needs "
                        f"+{100 * GROUNDED_GATE['precision_gain']:.0f})")
    s_ref, s_new = (v.get("supported_statements_per_answer") for v in (v_ref, v_new))
    if s_ref is not None and s_new is not None and s_new < s_ref:
        failures.append(f"{gname}: {name} has fewer supported statements per answer ({s_new:.2f} vs "
                        f"{ref}'s {s_ref:.2f}): precision bought by saying less")
    return failures


#: The gates `rlfh compare --expect NAME --gate G` and the held-out report (HELDOUT_GATE) judge by.
GATES = {"selective": expectation_failures, "grounded": grounded_failures}


def group_runs(runs: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for r in runs:
        s = r["summary"]
        groups.setdefault(f"{s.get('data', '?')} | {s.get('mode', '?')}", []).append(r)
    return groups


def compare_runs(dirs: list[str], out: str | Path, run_dir: Optional[str] = None, n_boot: int = 2000,
                 seed: int = 0, title: str = "RLFH hallucination report") -> dict[str, Any]:
    """Load eval runs, compare them, write report.md / report.json / PNGs into ``out``. Returns report.json's dict."""
    if len(dirs) < 2:
        raise CompareError("rlfh compare needs at least two eval folders (e.g. the base model and the trained one)")
    runs = [load_run(d) for d in dirs]
    _unique_names(runs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    groups = group_runs(runs)
    report: dict[str, Any] = {"title": title, "alpha": ALPHA, "groups": {}, "run_dir": run_dir, "plots": {}}
    for gname, gruns in groups.items():
        models = []
        for r in gruns:
            m = summarise(r["records"], n_boot=n_boot, seed=seed)
            s = r["summary"]
            models.append({"name": r["name"], "dir": r["dir"], "model": s.get("model"), "system": s.get("system"),
                           "mode": s.get("mode"), "data": s.get("data"), "metrics": m,
                           "timing": s.get("timing", {})})
        pairs = [compare_pair(gruns[i], gruns[j], n_boot=n_boot, seed=seed)
                 for i in range(len(gruns)) for j in range(i + 1, len(gruns))]
        report["groups"][gname] = {"models": models, "pairs": pairs,
                                   "selectivity": selectivity(gruns),
                                   "examples": _examples(gruns) if len(gruns) >= 2 else []}
    training = _training_summary(run_dir) if run_dir else None
    report["training"] = training

    report["plots"]["outcomes"] = str(plot_outcomes(report, out / "outcomes.png"))
    report["plots"]["tradeoff"] = str(plot_tradeoff(report, out / "tradeoff.png"))
    rc_png = plot_risk_coverage(report, out / "risk_coverage.png")
    if rc_png:
        report["plots"]["risk_coverage"] = str(rc_png)
    if run_dir:
        png = plot_training(run_dir, out / "training_curves.png")
        if png:
            report["plots"]["training"] = str(png)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=_json_default), encoding="utf-8")
    (out / "report.md").write_text(render_markdown(report, out), encoding="utf-8")
    return report


def selectivity(gruns: list[dict]) -> dict[str, Any]:
    """Selectivity of every run of a group against the group's first run (the reference, e.g. the base model).

    Per run: its random-abstention baseline (the reference's answers with as many random questions declined,
    and the exact p-value of keeping this many right answers by chance), what the reference answered where the
    run abstains, outcomes per question type, and the AUROC of its confidence (mean token log-prob) against
    correctness on its attempted answers. Also the question-type rule: the reference's answers with every
    open question declined (a selectivity that needs no training).
    """
    ref = gruns[0]
    out: dict[str, Any] = {"reference": ref["name"], "runs": {}}
    for run in gruns:
        ra, rb = pair_records(ref, run)
        if not ra:
            continue
        g_ref, g_run = [r["grade"] for r in ra], [r["grade"] for r in rb]
        n_na = sum(g == NOT_ATTEMPTED for g in g_run)
        n_cor = sum(g == CORRECT for g in g_run)
        per_type = {}
        for t in QUESTION_TYPES:
            sel = [g for g, r in zip(g_run, rb) if (r.get("qtype") or question_type(r["question"])) == t]
            per_type[t] = {"n": len(sel), **{k: sum(g == k for g in sel) for k in (CORRECT, INCORRECT, NOT_ATTEMPTED)}}
        conf = [r.get("confidence") for r in rb]
        entry = {"n": len(rb), "random": random_abstention(g_ref, n_na, observed_correct=n_cor),
                 "overlap": abstention_overlap(g_ref, g_run), "per_type": per_type, "auroc": None,
                 "risk_coverage": None, "per_knowledge": None, "p_abstain_auroc": None}
        p_abs = [r.get("p_abstain") for r in rb]
        if all(p is not None for p in p_abs):
            # does the model's wish to abstain rank the questions the reference gets wrong above those it gets
            # right? (all questions: declined ones included, that is where the signal is used)
            entry["p_abstain_auroc"] = auroc([-p for p in p_abs], [g == CORRECT for g in g_ref])
        known = [r.get("known_rate") for r in ra]  # the reference's own sampled accuracy per question
        if any(k is not None for k in known):
            entry["per_knowledge"] = per_bucket_outcomes(known, g_run)
        if any(c is not None for c in conf):
            att = [(c, g) for c, g in zip(conf, g_run) if g != NOT_ATTEMPTED and c is not None]
            entry["auroc"] = auroc([c for c, _ in att], [g == CORRECT for _, g in att]) if att else None
            rc = risk_coverage([float("nan") if c is None else c for c in conf], g_run)
            entry["risk_coverage"] = rc
        out["runs"][run["name"]] = entry
    rule = type_rule_grades([r["grade"] for r in ref["records"]], [r["question"] for r in ref["records"]])
    out["type_rule"] = {"name": f"{ref['name']} + abstain on open questions (question-type rule)",
                        "metrics": outcome_metrics(rule), "n": len(rule)}
    return out


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return str(o)


def _examples(gruns: list[dict], k: int = 4) -> list[dict]:
    """A few items where the first and last run of a group differ (what changed, in words)."""
    a, b = gruns[0], gruns[-1]
    ra, rb = pair_records(a, b)
    picks: list[dict] = []
    for want in ((INCORRECT, NOT_ATTEMPTED), (INCORRECT, CORRECT), (CORRECT, INCORRECT), (CORRECT, NOT_ATTEMPTED),
                 (NOT_ATTEMPTED, INCORRECT)):
        found = [(x, y) for x, y in zip(ra, rb) if (x["grade"], y["grade"]) == want][:k if want[0] == INCORRECT
                                                                                       and want[1] == NOT_ATTEMPTED
                                                                                       else 2]
        for x, y in found:
            picks.append({"question": x["question"], "gold": x["gold"], "a": a["name"], "a_answer": x["answer"],
                          "a_grade": x["grade"], "b": b["name"], "b_answer": y["answer"], "b_grade": y["grade"]})
    return picks


def _training_summary(run_dir: str) -> Optional[dict[str, Any]]:
    rows = read_metrics(run_dir)
    if not rows:
        return {"run_dir": run_dir, "steps": 0, "note": "no metrics.jsonl records"}
    trained = [r for r in rows if not r.get("skipped")]

    def first_last(key):
        vals = [r[key] for r in trained if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        return (vals[0], vals[-1]) if vals else (None, None)

    out = {"run_dir": run_dir, "steps": rows[-1].get("step", len(rows)), "skipped": len(rows) - len(trained)}
    for key in ("reward_mean", "kl", "correct_rate", "abstain_rate", "response_length", "statements_per_response"):
        out[key] = first_last(key)
    cfg_path = Path(run_dir) / "config.json"
    if cfg_path.exists():
        try:
            out["config"] = json.loads(cfg_path.read_text())
        except json.JSONDecodeError:
            pass
    demo_env = Path(run_dir) / "demo_env.json"
    if demo_env.exists():
        try:
            out["demo_env"] = json.loads(demo_env.read_text())
        except json.JSONDecodeError:
            pass
    return out


# ----------------------------------------------------------------------------- markdown

def _ci(entry: dict) -> str:
    lo, hi = entry["ci95"]
    return f"{pct(entry['value'])} [{pct(lo)}, {pct(hi)}]"


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def _diff(entry: dict) -> str:
    v, (lo, hi) = entry["value"], entry["ci95"]
    return f"{100 * v:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def render_markdown(report: dict[str, Any], out: Path) -> str:
    """report.md's text (``out``: the report folder, unused). Sections top to bottom: how the answers are graded,
    the verdicts, one section per group (:func:`_md_group`), the training run, the plots, how to read it."""
    L = _md_preamble(report)
    L += _md_verdicts(report["groups"])
    for gname, g in report["groups"].items():
        L += _md_group(gname, g)
    L += _md_training(report.get("training"))
    L += _md_plots(report["plots"])
    L += _md_how_to_read()
    return "\n".join(L)


def _md_preamble(report: dict[str, Any]) -> list[str]:
    """The title and what the two judges are."""
    return [f"# {report['title']}", "",
            "Two judges grade every answer:", "",
            "1. **Gold-answer grader (primary, independent of training)**: SimpleQA-style `correct` / `incorrect` / "
            "`not attempted` against the dataset's gold answer (normalised containment, token F1, yes/no and "
            "choice-question rules; explicit abstentions are *not attempted*; a hedged answer is graded on what it "
            "says, so a hedged wrong answer counts as incorrect). Any other answer that does not give the gold "
            "answer counts as *incorrect* -- stricter than SimpleQA's LLM grader, which calls a non-committal "
            "answer *not attempted*; without an LLM a vague answer cannot be told from a wrong one, so the grader "
            "errs against the model.",
            "2. **The training verifier** (the atomic-fact verifier whose labels were the training reward). It is "
            "**not independent**: a trained model can learn to please it. Shown for insight only.", "",
            f"Numbers are percentages of items with 95% bootstrap CIs. Paired tests: exact McNemar on the same "
            f"items (alpha = {report['alpha']}). *Incorrect* is the hallucination rate; a model that only learned to "
            "refuse shows up as a high abstention rate with fewer correct answers and short answers.", ""]


def _md_verdicts(groups: dict[str, Any]) -> list[str]:
    """One line per pair of every group, and a warning for a group without a prompt-only baseline."""
    L = ["## Verdicts", ""]
    for gname, g in groups.items():
        for pr in g["pairs"]:
            mi, mc = pr["mcnemar_incorrect"], pr["mcnemar_correct"]
            L.append(f"- **{gname}** — {pr['b']} vs {pr['a']}: **{pr['verdict']}** (incorrect "
                     f"{_diff(pr['diff']['incorrect'])} pts, McNemar p={_p(mi['p_value'])}; correct "
                     f"{_diff(pr['diff']['correct'])} pts, p={_p(mc['p_value'])}; n={pr['n_paired']})")
        if not any(m.get("system") in PROMPT_ONLY_SYSTEMS.values() for m in g["models"]):
            L.append(f"- **{gname}**: no prompt-only baseline (`rlfh eval --system may-abstain`) in this group: a "
                     "gain a prompt alone would give cannot be told apart from a training gain here.")
    L.append("")
    return L


def _md_group(gname: str, g: dict[str, Any]) -> list[str]:
    """A group's section: outcomes, selectivity, grader sensitivity, paired tests, verifier metrics, examples."""
    sel = g.get("selectivity") or {}
    L = [f"## {gname}", ""]
    L += _md_outcomes(g["models"], sel)
    if sel.get("runs"):
        L += _md_selectivity(sel)
        L += _md_per_type(sel)
        L += _md_per_knowledge(sel)
    L += _md_grader_sensitivity(g["models"])
    L += _md_paired_tests(g["pairs"])
    if any(m["metrics"].get("verifier") for m in g["models"]):
        L += _md_verifier(g["models"])
    if g.get("examples"):
        L += _md_examples(g)
    L.append("")
    return L


def _md_outcomes(models: list[dict], sel: dict[str, Any]) -> list[str]:
    """The gold grader's outcomes per model, then the random-abstention and question-type-rule rows."""
    L = ["| model | n | correct | incorrect | not attempted | correct given attempted | F-score | "
         "abstention | mean words |",
         "|---|---|---|---|---|---|---|---|---|"]
    for m in models:
        mm = m["metrics"]
        gd = mm["gold"]
        mw = mm["mean_answer_words"]
        L.append(f"| {m['name']} | {mm['n']} | {_ci(gd['correct'])} | {_ci(gd['incorrect'])} | "
                 f"{_ci(gd['not_attempted'])} | {_ci(gd['accuracy_given_attempted'])} | {_ci(gd['f_score'])} | "
                 f"{_ci(mm['abstain_rate'])} | {mw['value']:.1f} |")
    for mname, e in (sel.get("runs") or {}).items():
        rnd = e["random"]
        if mname == sel.get("reference") or rnd["n_abstain"] == 0:
            continue
        L.append(f"| *random abstention: {sel['reference']} declining {rnd['n_abstain']} random questions "
                 f"(as many as {mname})* | {rnd['n']} | {pct(rnd['correct'])} [{pct(rnd['correct_ci95'][0])}, "
                 f"{pct(rnd['correct_ci95'][1])}] | {pct(rnd['incorrect'])} [{pct(rnd['incorrect_ci95'][0])}, "
                 f"{pct(rnd['incorrect_ci95'][1])}] | {pct(rnd['not_attempted'])} | "
                 f"{pct(rnd['accuracy_given_attempted'])} | - | - | - |")
    if sel.get("type_rule"):
        tr = sel["type_rule"]
        tm = tr["metrics"]
        L.append(f"| *{tr['name']}* | {tr['n']} | {pct(tm['correct'])} | {pct(tm['incorrect'])} | "
                 f"{pct(tm['not_attempted'])} | {pct(tm['accuracy_given_attempted'])} | {pct(tm['f_score'])} | "
                 "- | - |")
    return L


def _md_selectivity(sel: dict[str, Any]) -> list[str]:
    """Selectivity against the reference: declined questions, random abstention's p, the AUROCs and AURC."""
    L = ["", f"**Selectivity** against {sel['reference']} (the reference). *Declined*: questions the "
             f"model did not attempt that {sel['reference']} did; a selective model declines where the "
             "reference was wrong. *Random abstention*: the reference declining as many random questions "
             "(p: exact probability of keeping at least this many right answers by chance). *AUROC*: the "
             "model's confidence (mean token log-prob) against correctness on its attempted answers "
             "(0.5 = no signal; - where not recorded). *P(abstain) AUROC*: the model's teacher-forced "
             f"probability of its abstention reply (`rlfh eval --abstain-threshold`), lower where "
             f"{sel['reference']} was right, on every question.", "",
         f"| model | declined | {sel['reference']} right / wrong there | correct (random abstention "
         "expects) | p | confidence AUROC | risk-coverage AURC | P(abstain) AUROC |",
         "|---|---|---|---|---|---|---|---|"]
    for mname, e in sel["runs"].items():
        ov, rnd = e["overlap"], e["random"]
        au = "-" if e.get("auroc") is None or math.isnan(e["auroc"]) else f"{e['auroc']:.3f}"
        rc = e.get("risk_coverage") or {}
        aurc = "-" if rc.get("aurc") is None or math.isnan(rc.get("aurc", float("nan"))) else \
            f"{rc['aurc']:.3f}"
        pa = e.get("p_abstain_auroc")
        pa = "-" if pa is None or math.isnan(pa) else f"{pa:.3f}"
        L.append(f"| {mname} | {ov['declined']} | {ov['ref_right']} / {ov['ref_wrong']} | "
                 f"{rnd['observed_correct']} ({rnd['correct'] * rnd['n']:.1f}) | {_p(rnd['p_value'])} | "
                 f"{au} | {aurc} | {pa} |")
    return L


def _md_per_type(sel: dict[str, Any]) -> list[str]:
    """Counts correct / incorrect / not attempted per question type (yes/no, choice, open), per model."""
    L = ["", "**Outcomes per question type** (from the question text: yes/no, two options \"A or B\", "
             "open), counts correct / incorrect / not attempted:", "",
         "| model | " + " | ".join(f"{t} (n={next(iter(sel['runs'].values()))['per_type'][t]['n']})"
                                  for t in ("yes_no", "choice", "open")) + " |", "|---|---|---|---|"]
    for mname, e in sel["runs"].items():
        cells = [f"{e['per_type'][t]['correct']} / {e['per_type'][t]['incorrect']} / "
                 f"{e['per_type'][t]['not_attempted']}" for t in ("yes_no", "choice", "open")]
        L.append(f"| {mname} | " + " | ".join(cells) + " |")
    return L


def _md_per_knowledge(sel: dict[str, Any]) -> list[str]:
    """Outcomes per bucket of what the reference knew (`rlfh eval --knowledge-samples`); [] where not recorded."""
    with_known = {m: e["per_knowledge"] for m, e in sel["runs"].items() if e.get("per_knowledge")}
    if not with_known:
        return []
    first = next(iter(with_known.values()))
    L = ["", f"**Outcomes by what {sel['reference']} knew** (its sampled answers per question, graded: "
             "*never* none right, *sometimes* under half, *mostly* half or more; `rlfh eval "
             "--knowledge-samples`). Counts correct / incorrect / not attempted, and the share not "
             "attempted. A selective model declines in *never* and keeps answering in *mostly*; a "
             "randomly silent one declines the same share everywhere.", "",
         "| model | " + " | ".join(f"{b} (n={first[b]['n']})" for b in BUCKETS) + " |",
         "|---|---|---|---|"]
    for mname, pk in with_known.items():
        cells = [f"{pk[b]['correct']} / {pk[b]['incorrect']} / {pk[b]['not_attempted']} "
                 f"({pct(pk[b]['not_attempted'] / pk[b]['n']) if pk[b]['n'] else '-'})" for b in BUCKETS]
        L.append(f"| {mname} | " + " | ".join(cells) + " |")
    return L


def _md_grader_sensitivity(models: list[dict]) -> list[str]:
    """The lenient reading's correct / incorrect per model, where it differs from the strict one; else []."""
    lenient = [(m["name"], m["metrics"].get("lenient")) for m in models]
    if not any(x and x["differ"] for _, x in lenient):
        return []
    L = ["", "**Grader sensitivity.** The strict reading (used everywhere above) grades an implicit yes/no "
             "answer that does not address the question, and a gold found only inside a hyphenated compound "
             "(\"Canadian-American\" for \"American\"), as incorrect. The lenient (earlier) reading:", ""]
    for mname, x in lenient:
        if x:
            L.append(f"- {mname}: correct {pct(x['correct'])}, incorrect {pct(x['incorrect'])} "
                     f"({x['differ']} grade(s) differ from the strict reading)")
    L.append("")
    return L


def _md_paired_tests(pairs: list[dict]) -> list[str]:
    """One row per pair: McNemar counts and p for incorrect and correct, the differences, the verdict."""
    L = ["", "**Paired tests** (second model minus first; McNemar counts are items where only the first / "
             "only the second has the outcome):", "",
         "| first | second | n | incorrect: first-only / second-only, p | correct: first-only / second-only, p | "
         "Δ incorrect | Δ correct | Δ not attempted | verdict |",
         "|---|---|---|---|---|---|---|---|---|"]
    for pr in pairs:
        mi, mc = pr["mcnemar_incorrect"], pr["mcnemar_correct"]
        L.append(f"| {pr['a']} | {pr['b']} | {pr['n_paired']} | {mi['a_only']} / {mi['b_only']}, "
                 f"p={_p(mi['p_value'])} | {mc['a_only']} / {mc['b_only']}, p={_p(mc['p_value'])} | "
                 f"{_diff(pr['diff']['incorrect'])} | {_diff(pr['diff']['correct'])} | "
                 f"{_diff(pr['diff']['not_attempted'])} | **{pr['verdict']}** |")
    return L


def _md_verifier(models: list[dict]) -> list[str]:
    """The training verifier's statement metrics per model (dashes for a model without them)."""
    L = ["", "**The training verifier's statement metrics** (not independent of training):", "",
         "| model | statements per answer | supported per answer | Correct | Hedged correct | Vague | "
         "Hedged wrong | Wrong | fact precision | verifier abstention |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for m in models:
        v = m["metrics"].get("verifier")
        if not v:
            L.append(f"| {m['name']} | - | - | - | - | - | - | - | - | - |")
            continue
        ls = v["label_share"]
        supported = v.get("supported_statements_per_answer")
        L.append(f"| {m['name']} | {v['statements_per_answer']:.2f} | "
                 + ("-" if supported is None else f"{supported:.2f}") + " | "
                 + " | ".join(pct(ls[lab]) for lab in VERIFIER_LABELS)
                 + f" | {pct(v['fact_precision'])} | {pct(v['abstain_rate'])} |")
    return L


def _md_examples(g: dict[str, Any]) -> list[str]:
    """The group's changed answers (first model to last), folded in a <details> block."""
    L = ["", f"<details><summary>Example answers that changed ({g['models'][0]['name']} → "
             f"{g['models'][-1]['name']})</summary>", ""]
    for ex in g["examples"]:
        L += [f"- **Q:** {ex['question']}  (gold: *{ex['gold']}*)",
              f"  - {ex['a']}: {_quote(ex['a_answer'])} → `{ex['a_grade']}`",
              f"  - {ex['b']}: {_quote(ex['b_answer'])} → `{ex['b_grade']}`"]
    L += ["", "</details>"]
    return L


def _md_training(tr: Optional[dict[str, Any]]) -> list[str]:
    """The training run: its folder and steps, first and last values of its metrics, its settings; [] without one."""
    if not tr:
        return []
    L = ["## Training run", "", f"Run folder: `{tr['run_dir']}`, {tr.get('steps', 0)} steps"
         + (f" ({tr['skipped']} skipped)" if tr.get("skipped") else "") + ".", ""]
    rows = [(k, tr.get(k)) for k in ("reward_mean", "kl", "correct_rate", "abstain_rate", "response_length",
                                     "statements_per_response")]
    if any(v and v[0] is not None for _, v in rows):
        L += ["| training metric | first step | last step |", "|---|---|---|"]
        for k, v in rows:
            if v and v[0] is not None:
                L.append(f"| {k} | {v[0]:.4g} | {v[1]:.4g} |")
        L.append("")
    if tr.get("demo_env"):
        L += ["Training settings:", "", "```", *[f"{k}={v}" for k, v in tr["demo_env"].items()], "```", ""]
    return L


def _md_plots(plots: dict[str, str]) -> list[str]:
    """The plots that were drawn, each by its file name."""
    L = ["## Plots", ""]
    for key, cap in (("outcomes", "Outcomes per model with 95% CIs"),
                     ("tradeoff", "Correct vs abstain trade-off"),
                     ("risk_coverage", "Risk-coverage: incorrect share of the answers given vs share answered"),
                     ("training", "Training curves")):
        if plots.get(key):
            L += [f"![{cap}]({Path(plots[key]).name})", ""]
    return L


def _md_how_to_read() -> list[str]:
    """The closing notes on reading the report."""
    return ["## How to read this", "",
            "- Rows include a *prompt-only baseline*: the base model told it may answer \"I don't know\". A gain the "
            "prompt alone gives is not credited to training.",
            "- The verdict \"fewer hallucinations, correct answers kept\" needs incorrect answers significantly fewer "
            "(McNemar p < 0.05) while correct answers are not significantly fewer.",
            "- Fewer incorrect answers alone prove nothing: a model that refuses at random has them too. The "
            "*random abstention* rows show what the reference would score declining as many questions at random; "
            "a selective model beats them, and its accuracy on the answers it still gives rises. The "
            "*question-type rule* row shows the selectivity that needs no training (decline every open question).",
            "- The verifier's metrics use the judge the model was trained against; trust the gold grader first.", ""]


def _quote(text: str, n: int = 160) -> str:
    t = " ".join((text or "").split())
    t = t if len(t) <= n else t[:n - 1] + "…"
    return "*(empty)*" if not t else f"\"{t.replace('|', '/')}\""


# ----------------------------------------------------------------------------- console

def print_report(report: dict[str, Any], console=None) -> None:
    from rich.console import Console
    from rich.table import Table
    con = console or Console(width=160)
    for gname, g in report["groups"].items():
        t = Table(title=f"{gname}: gold-answer grader, % with 95% CI", show_lines=False)
        for col in ("model", "n", "correct", "incorrect", "not attempted", "F-score", "abstain", "words",
                    "verifier prec."):
            t.add_column(col, justify="left" if col == "model" else "right")
        for m in g["models"]:
            mm = m["metrics"]
            gd = mm["gold"]
            v = mm.get("verifier") or {}
            t.add_row(m["name"], str(mm["n"]), _ci(gd["correct"]), _ci(gd["incorrect"]), _ci(gd["not_attempted"]),
                      pct(gd["f_score"]["value"]), pct(mm["abstain_rate"]["value"]),
                      f"{mm['mean_answer_words']['value']:.1f}", pct(v.get("fact_precision")))
        con.print(t)
        pt = Table(title=f"{gname}: paired tests (second vs first)")
        for col in ("first", "second", "incorrect b/c, p", "correct b/c, p", "Δ incorrect", "Δ correct", "verdict"):
            pt.add_column(col)
        for pr in g["pairs"]:
            mi, mc = pr["mcnemar_incorrect"], pr["mcnemar_correct"]
            style = "green" if pr["success"] else ("red" if "more" in pr["verdict"] else "")
            pt.add_row(pr["a"], pr["b"], f"{mi['a_only']}/{mi['b_only']}, p={_p(mi['p_value'])}",
                       f"{mc['a_only']}/{mc['b_only']}, p={_p(mc['p_value'])}", _diff(pr["diff"]["incorrect"]),
                       _diff(pr["diff"]["correct"]), f"[{style}]{pr['verdict']}[/{style}]" if style else pr["verdict"])
        con.print(pt)
