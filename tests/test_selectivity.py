"""Selectivity: the statistics behind `rlfh compare`'s gate, and the gate itself on hand-built runs.

The gate must tell a model that abstains where it would be wrong from one that abstains at random: both
have fewer incorrect answers than the base model, only the first is selective.
"""
from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest
from test_eval_cli import _write_run, rlfh

from core.questions import question_type
from core.grader import CORRECT, INCORRECT, NOT_ATTEMPTED
from evaluation.selectivity import (abstention_overlap, auroc, hypergeom_pmf, random_abstention, risk_coverage,
                                    type_rule_grades)


@pytest.mark.parametrize("q,t", [
    ("Were Scott Derrickson and Ed Wood of the same nationality?", "yes_no"),
    ("Is the Oberoi Group headquartered in Delhi?", "yes_no"),
    ("Which tennis player won more Grand Slam titles, Henri Leconte or Jonathan Stark?", "choice"),
    ("Who was born first, Carl Jung or Sigmund Freud?", "choice"),
    ("What government position was held by the woman who portrayed Corliss Archer?", "open"),
    ("How many acres was the plantation Will Dockery built?", "open"),
    ("", "open"),
])
def test_question_type_from_text_only(q, t):
    assert question_type(q) == t


def test_hypergeom_pmf_matches_brute_force_counting():
    # population of 7 with 3 successes, draw 4: count subsets directly
    pop = [1, 1, 1, 0, 0, 0, 0]
    counts = np.zeros(5)
    for sub in itertools.combinations(range(7), 4):
        counts[sum(pop[i] for i in sub)] += 1
    assert np.allclose(hypergeom_pmf(7, 3, 4), counts / counts.sum())


def test_random_abstention_expectation_and_exact_tail():
    ref = [CORRECT] * 10 + [INCORRECT] * 20
    r = random_abstention(ref, n_abstain=12, observed_correct=10)
    # keeping 18 of 30 at random keeps 10 * 18 / 30 = 6 right answers on average
    assert r["correct"] * 30 == pytest.approx(6.0)
    assert r["incorrect"] * 30 == pytest.approx(12.0)
    assert r["accuracy_given_attempted"] == pytest.approx(1 / 3)
    # P(all 10 right answers among the 18 kept) = C(20, 8) / C(30, 18)
    assert r["p_value"] == pytest.approx(math.comb(20, 8) / math.comb(30, 18))
    assert r["beats"]
    assert not random_abstention(ref, 12, observed_correct=6)["beats"]
    assert random_abstention(ref, 0, observed_correct=10)["p_value"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="n_abstain"):
        random_abstention(ref, 31)


def test_random_abstention_p_value_matches_simulation():
    rng = random.Random(0)
    ref = [CORRECT] * 12 + [INCORRECT] * 38 + [NOT_ATTEMPTED] * 10
    k, obs = 25, 9
    sims = 20000
    hits = sum(sum(g == CORRECT for g in rng.sample(ref, len(ref) - k)) >= obs for _ in range(sims))
    assert random_abstention(ref, k, observed_correct=obs)["p_value"] == pytest.approx(hits / sims, abs=0.01)


def test_auroc_equals_pairwise_definition():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 5, size=40).astype(float)  # many ties
    y = rng.random(40) < 0.4
    pos, neg = s[y], s[~y]
    brute = np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg])
    assert auroc(s, y) == pytest.approx(brute)
    assert auroc([1, 2, 3], [False, False, True]) == 1.0
    assert auroc([3, 2, 1], [False, False, True]) == 0.0
    assert math.isnan(auroc([1, 2], [True, True]))
    assert auroc([float("nan"), 1.0, 2.0], [True, False, True]) == 1.0


def test_risk_coverage_curve():
    conf = [0.9, 0.1, 0.5, 0.7, float("nan")]
    grades = [CORRECT, INCORRECT, INCORRECT, CORRECT, NOT_ATTEMPTED]
    rc = risk_coverage(conf, grades)
    assert rc["coverage"] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    # most confident first: C, C, I, I
    assert rc["risk"] == pytest.approx([0.0, 0.0, 1 / 3, 0.5])
    assert rc["aurc"] == pytest.approx(np.mean([0.0, 0.0, 1 / 3, 0.5]))


def test_type_rule_and_overlap():
    qs = ["Is A in B?", "Who founded C?", "Which is older, D or E?"]
    ref = [CORRECT, INCORRECT, CORRECT]
    assert type_rule_grades(ref, qs) == [CORRECT, NOT_ATTEMPTED, CORRECT]
    ov = abstention_overlap(ref, [NOT_ATTEMPTED, NOT_ATTEMPTED, CORRECT])
    assert (ov["declined"], ov["ref_right"], ov["ref_wrong"]) == (2, 1, 1)
    with pytest.raises(ValueError, match="question type"):
        type_rule_grades(ref, qs, abstain_on=("hard",))


def _runs(tmp_path, seed=0):
    """A base model right on 24 of 120 questions; a selective model that declines 60 of its 96 wrong answers;
    a random model that declines 60 random questions."""
    rng = random.Random(seed)
    qs = [(f"What is the capital of country number {i}?", f"City{i}") for i in range(120)]
    right = set(rng.sample(range(120), 24))
    base = [(q, g, f"It is {g}." if i in right else "It is Wrongville.") for i, (q, g) in enumerate(qs)]
    wrong = [i for i in range(120) if i not in right]
    declined_sel = set(rng.sample(wrong, 60))
    declined_rnd = set(rng.sample(range(120), 60))
    sel = [(q, g, "I don't know." if i in declined_sel else a) for i, (q, g, a) in enumerate(base)]
    rnd = [(q, g, "I don't know." if i in declined_rnd else a) for i, (q, g, a) in enumerate(base)]
    return (_write_run(tmp_path / "base", "base", "closed", base),
            _write_run(tmp_path / "selective", "selective", "closed", sel),
            _write_run(tmp_path / "random", "random", "closed", rnd))


def test_gate_passes_a_selective_model_and_fails_random_abstention(tmp_path):
    base, sel, rnd = _runs(tmp_path)
    r = rlfh("compare", str(base), str(sel), "--out", str(tmp_path / "r1"), "--n-boot", "500", "--expect",
             "selective")
    assert r.returncode == 0 and "EXPECTATION MET" in r.stdout, r.stdout[-3000:]
    # the random model has significantly fewer incorrect answers too, and may keep enough right ones that
    # McNemar sees no loss: the selectivity checks are what fail it
    r = rlfh("compare", str(base), str(rnd), "--out", str(tmp_path / "r2"), "--n-boot", "500", "--expect", "random")
    assert r.returncode == 3, r.stdout[-3000:]
    assert "no better than random abstention" in r.stdout
    assert "accuracy on attempted answers is not significantly above base's" in r.stdout
    report = json.loads((tmp_path / "r2" / "report.json").read_text())
    (group,) = report["groups"].values()
    s = group["selectivity"]
    assert s["reference"] == "base"
    assert s["runs"]["random"]["random"]["n_abstain"] == 60
    assert s["type_rule"]["metrics"]["not_attempted"] == pytest.approx(1.0)  # every question here is open
    md = (tmp_path / "r2" / "report.md").read_text()
    assert "random abstention: base declining 60 random questions" in md
    assert "question-type rule" in md and "Selectivity" in md
    assert (tmp_path / "r2" / "risk_coverage.png").read_bytes()[:4] == b"\x89PNG"


def test_selectivity_with_confidence_reports_auroc(tmp_path):
    base, sel, _ = _runs(tmp_path)
    # give the selective run confidences that rank its right answers first
    recs = [json.loads(x) for x in (sel / "answers.jsonl").read_text().splitlines()]
    for r in recs:
        r["confidence"] = -0.1 if r["grade"] == CORRECT else -2.0
    (sel / "answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = rlfh("compare", str(base), str(sel), "--out", str(tmp_path / "r"), "--n-boot", "200")
    assert r.returncode == 0, r.stderr[-2000:]
    (group,) = json.loads((tmp_path / "r" / "report.json").read_text())["groups"].values()
    e = group["selectivity"]["runs"]["selective"]
    assert e["auroc"] == pytest.approx(1.0)
    assert e["risk_coverage"]["risk"][0] == 0.0
    assert group["selectivity"]["runs"]["base"]["auroc"] is None  # not recorded for base


# ----------------------------------------------------------------------------- knowledge buckets

def test_knowledge_bucket_edges_and_bad_rates():
    from evaluation.knowledge import knowledge_bucket
    assert [knowledge_bucket(p) for p in (0.0, 0.25, 0.49, 0.5, 1.0, None)] == \
        ["never", "sometimes", "sometimes", "mostly", "mostly", None]
    with pytest.raises(ValueError, match=r"known_rate must be in \[0, 1\]"):
        knowledge_bucket(1.5)


def test_known_rates_grade_every_sample_with_the_strict_gold_grader():
    from evaluation.knowledge import known_rates
    q_open, q_yes = "Who founded company X?", "Were A and B both American?"
    rates = known_rates([["It was John Smith.", "I don't know.", "Jane Doe.", "John Smith founded it."],
                         ["Yes.", "No, they were not."],
                         # "Canadian-American" does not contain the gold "American" in the strict reading
                         ["He was Canadian-American."]],
                        ["John Smith", "yes", "American"], [q_open, q_yes, "What nationality was he?"])
    assert rates == [0.5, 0.5, 0.0]
    with pytest.raises(ValueError, match="no sampled responses"):
        known_rates([[]], ["x"], ["q?"])
    with pytest.raises(ValueError, match="one of each per question"):
        known_rates([["a"]], ["x", "y"], ["q?"])


def test_report_shows_outcomes_per_knowledge_bucket(tmp_path):
    from evaluation.knowledge import per_bucket_outcomes
    base, sel, rnd = _runs(tmp_path)
    # the base's own sampled accuracy: 1.0 where its greedy answer is right, 0.0 on the first 48 wrong ones,
    # 0.25 on the other wrong ones
    recs = [json.loads(x) for x in (base / "answers.jsonl").read_text().splitlines()]
    n_wrong = 0
    for r in recs:
        if r["grade"] == CORRECT:
            r["known_rate"] = 1.0
        else:
            r["known_rate"] = 0.0 if n_wrong < 48 else 0.25
            n_wrong += 1
    (base / "answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = rlfh("compare", str(base), str(sel), str(rnd), "--out", str(tmp_path / "r"), "--n-boot", "100")
    assert r.returncode == 0, r.stderr[-2000:]
    (group,) = json.loads((tmp_path / "r" / "report.json").read_text())["groups"].values()
    runs = group["selectivity"]["runs"]
    base_pk, sel_pk = runs["base"]["per_knowledge"], runs["selective"]["per_knowledge"]
    assert {b: base_pk[b]["n"] for b in base_pk} == {"never": 48, "sometimes": 48, "mostly": 24}
    assert base_pk["mostly"]["correct"] == 24 and base_pk["never"]["incorrect"] == 48
    # the selective model declined only questions the base got wrong: nothing in 'mostly'
    assert sel_pk["mostly"]["not_attempted"] == 0
    assert sel_pk["never"]["not_attempted"] + sel_pk["sometimes"]["not_attempted"] == 60
    assert runs["random"]["per_knowledge"]["mostly"]["n"] == 24
    md = (tmp_path / "r" / "report.md").read_text()
    assert "Outcomes by what base knew" in md and "never (n=48)" in md
    # counting is independent of the report: a direct call agrees
    grades = [json.loads(x)["grade"] for x in (base / "answers.jsonl").read_text().splitlines()]
    direct = per_bucket_outcomes([r_["known_rate"] for r_ in recs], grades)
    assert direct["never"]["incorrect"] == 48 and direct["mostly"]["correct"] == 24
    with pytest.raises(ValueError, match="rates for"):
        per_bucket_outcomes([0.0], [])
