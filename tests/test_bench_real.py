"""`rlfh bench verifier --real`: the hand-labelled real answers (bench/data/real_answers.jsonl) and the scoring
of bench/real.py, on a small fixed slice (the full set runs in the bench, not here)."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from bench import real as R
from core.verify_schema import LABELS, Sentence, Statement, VerifyResult

SLICE = 16      # the first answers of the file: a fixed slice (file order is the pool's, sorted by question)


@pytest.fixture(scope="module")
def answers():
    return R.load_real()


@pytest.fixture(scope="module")
def verifier():
    from verifier_service.core import Verifier
    return Verifier(backend="evidence")


def _result(spans_labels, text):
    """A VerifyResult with one sentence per (start, end, label)."""
    sents = [Sentence(text=text[s:e], start=s, end=e,
                      statements=[Statement(text=text[s:e], start=s, end=e, label=lab, informativeness=3)])
             for s, e, lab in spans_labels]
    return VerifyResult(sentences=sents)


@pytest.mark.parametrize("name", ["real_answers", "grounded_answers", "main_recipe_answers"])
def test_each_labelled_set_is_what_its_annotation_source_builds(name):
    """The shipped JSONL is exactly `python -m bench.real` of its records (the pool) and its annotation file: a
    label edited in one and not the other shows here."""
    data = R.DEFAULT_PATH.parent
    records = [json.loads(x) for x in (data / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
    pool = [{k: v for k, v in r.items() if k != "facts"} for r in records]
    ann = R.parse_annotations((data / f"{name}_annotations.txt").read_text(encoding="utf-8"))
    assert R.build_records(pool, ann) == records


def test_labelled_set_is_whole_and_split_by_question(answers):
    assert len(answers) >= 150
    assert {a.mode for a in answers} == {"closed", "evidence"}
    assert {a.model for a in answers} >= {"warmstart", "trained"}
    labels = Counter(f.label for a in answers for f in a.facts)
    assert set(labels) <= set(LABELS) and labels["Correct"] and labels["Wrong"] and labels["Vague"]
    parts = Counter(a.part for a in answers)
    assert 0.2 <= parts["heldout"] / len(answers) <= 0.45
    by_q: dict[str, set] = {}
    for a in answers:
        by_q.setdefault(a.question, set()).add(a.part)
        for f in a.facts:
            assert a.answer[f.start:f.end] == f.text
    assert all(len(p) == 1 for p in by_q.values())   # every answer to one question in the same part
    # the split is a function of the question alone, fixed by its salt
    assert R.split_of("Which team won the 1914 championship of the Big Ten Conference?") in R.PARTS


def test_bad_records_name_the_field(answers):
    rec = json.loads(open(R.DEFAULT_PATH, encoding="utf-8").readline())
    for field, value, needle in (("grade", "maybe", "'grade'"), ("knowledge", "text", "'knowledge'"),
                                 ("facts", [{"start": 0, "end": 9999, "text": "x", "label": "Correct"}], "facts[0]"),
                                 ("facts", [{"start": 0, "end": 3, "text": rec["answer"][:3], "label": "Okay"}],
                                  "'label'")):
        bad = dict(rec, **{field: value})
        with pytest.raises(R.RealDataError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            R.parse_record(bad, "rec")
    bad = dict(rec)
    del bad["answer"]
    with pytest.raises(R.RealDataError, match="'answer'"):
        R.parse_record(bad, "rec")


def test_annotation_format_locates_facts():
    ann = R.parse_annotations("@x1\n*C Lyell ... 1797\nW in a Scottish village called Kirkcaldmon\n")
    pool = [{"id": "x1", "model": "base", "mode": "closed", "question": "Who?", "gold": "Charles Lyell",
             "knowledge": [], "grade": "correct",
             "answer": "Sir Charles Lyell was born on 14 November 1797, in a Scottish village called Kirkcaldmon."}]
    rec = R.build_records(pool, ann)[0]
    assert [(f["text"], f["label"], f["answer"]) for f in rec["facts"]] == [
        ("Lyell was born on 14 November 1797", "Correct", True),
        ("in a Scottish village called Kirkcaldmon", "Wrong", False)]
    with pytest.raises(R.RealDataError, match="line 2"):
        R.parse_annotations("@x1\nOK some text\n")


def test_span_matching_rule():
    text = 'Peña (September 23, 1959) was "an actress".'
    facts = (R.Fact(0, 4, "Peña", "Correct", False), R.Fact(6, 24, text[6:24], "Correct", True),
             R.Fact(26, 42, text[26:42], "Correct", False))
    # the same facts with their brackets and quotes: trimmed to the alphanumeric core, IoU 1
    preds = _result([(0, 5, "Correct"), (5, 25, "Correct"), (26, 43, "Wrong")], text).statements()
    assert [(i, j) for i, j, _ in R.match_facts(text, facts, preds)] == [(0, 0), (1, 1), (2, 2)]
    # one statement for the whole sentence overlaps the long middle fact under half: no match
    whole = _result([(0, 42, "Correct")], text).statements()
    assert R.match_facts(text, facts, whole) == []
    assert R.fact_label(facts[2], preds) == "Wrong" and R.fact_label(facts[0], []) == "Vague"


def test_perfect_and_coarse_predictions_score_as_they_should(answers):
    sl = [a for a in answers[:SLICE] if a.facts]
    perfect, coarse = R.RealScore("perfect"), R.RealScore("coarse")
    for a in sl:
        perfect.add(a, R.facts_result(a))
        # one statement per answer, labelled Wrong: the old verifier's typical output
        coarse.add(a, _result([(a.facts[0].start, a.facts[-1].end, "Wrong")], a.answer))
    p, c = perfect.metrics(), coarse.metrics()
    assert p["span_f1"] == 1.0 and p["label_accuracy"] == 1.0 and p["token_sign_agreement"] == 1.0
    assert p["answer_fact_label_accuracy"] == 1.0
    assert c["span_recall"] < 0.7 and c["label_accuracy"] < 0.7 and c["token_sign_agreement"] < 0.8
    assert c["answer_fact_good_when_accepted"] == 0.0 and c["answer_fact_bad_when_rejected"] == 1.0


def test_answer_fact_columns_follow_the_current_grader_not_the_recorded_grade():
    """The recorded ``grade`` is the grader's at annotation time; the bench grades again (grader v3 reads "A and
    B are both X, but ..." as a yes, v2 read it as a no)."""
    answer = "Janus and The Lady are both published in the US, but Janus is a British-based publication."
    end = answer.index(",")
    rec = {"id": "x", "model": "trained", "mode": "closed", "question": "Are Janus and The Lady both published in "
           "the US?", "gold": "no", "knowledge": [], "answer": answer, "grade": "correct",
           "facts": [{"start": 0, "end": end, "text": answer[:end], "label": "Wrong", "answer": True}]}
    ans = R.parse_record(rec)
    assert ans.grade == "correct" and ans.current_grade == "incorrect"
    sc = R.RealScore("perfect")
    sc.add(ans, R.facts_result(ans))
    m = sc.metrics()
    assert m["accepted_with_answer_fact"] == 0 and m["rejected_with_answer_fact"] == 1
    assert m["answer_fact_bad_when_rejected"] == 1.0


def test_evidence_backend_on_a_fixed_slice(answers, verifier):
    """The evidence backend on the first answers of the set, with the gold answer: it splits them into the
    labelled facts and labels most of them right (bounds a little under what it scores, so that a
    regression fails)."""
    sl = answers[:SLICE]
    m = R.score_verifier("evidence, with gold", verifier, sl, use_gold=True).metrics()
    assert m["answers"] == SLICE and m["facts"] == sum(len(a.facts) for a in sl)
    assert m["span_f1"] >= 0.85, m["span_f1"]
    assert m["label_accuracy"] >= 0.65, m["label_accuracy"]
    assert m["token_sign_agreement"] >= 0.75, m["token_sign_agreement"]
    for k in ("span_precision", "span_recall", "answer_fact_good_when_accepted", "ms_per_answer"):
        assert m[k] is not None
    no_gold = R.score_verifier("evidence, no gold", verifier, sl, use_gold=False).metrics()
    assert no_gold["span_f1"] == m["span_f1"]           # the split does not read the gold answer


def test_cli_real_writes_rows_per_part_and_backend(tmp_path, answers, capsys):
    from rlfh.cli import main
    small = tmp_path / "real.jsonl"
    picked = [next(a for a in answers if a.part == "tune").id, next(a for a in answers if a.part == "heldout").id]
    with open(R.DEFAULT_PATH, encoding="utf-8") as src, open(small, "w", encoding="utf-8") as dst:
        for line in src:
            if json.loads(line)["id"] in picked:
                dst.write(line)
    out = tmp_path / "real.json"
    assert main(["bench", "verifier", "--real", str(small), "--no-llm", "--json", str(out)]) == 0
    all_rows = json.loads(out.read_text())["rows"]
    rows = [r for r in all_rows if r["backend"] == "evidence"]
    assert [(r["part"], r["gold"]) for r in rows] == [("tune", False), ("tune", True), ("heldout", False),
                                                      ("heldout", True)]
    assert all(r["answers"] == 1 for r in rows)
    # no judge is built in a fresh checkout: its rows say how to build one
    judge = [r for r in all_rows if r["backend"] == "judge"]
    assert len(judge) == 4 and all("rlfh judge train" in r["note"] for r in judge)
    assert "Verifier on real policy answers" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    assert main(["bench", "verifier", "--real", str(bad), "--no-llm"]) == 2
    assert "missing field" in capsys.readouterr().err


def test_statement_figures_per_model_count_as_the_eval_does():
    def ans(model, labels, answer_label):
        text = " ".join(f"f{i}." for i in range(len(labels)))
        facts = tuple(R.Fact(3 * i, 3 * i + 2, f"f{i}", lab, i == 0 and answer_label) for i, lab in enumerate(labels))
        return R.RealAnswer(id=model + text, model=model, mode="evidence", question="Q?", gold="g", knowledge=("k",),
                            answer=text, grade="correct", facts=facts)
    answers = [ans("base", ["Correct", "Wrong"], True), ans("base", ["Vague"], False),
               ans("trained", ["Correct", "Correct", "Vague", "Hedged correct"], True)]
    hand = R.statement_figures(answers)
    assert hand["base"] == {"answers": 2, "statements_per_answer": 1.5, "supported_per_answer": 0.5,
                            "fact_precision": pytest.approx(1 / 3), "answer_fact_good": 0.5}
    assert hand["trained"]["fact_precision"] == 0.75 and hand["trained"]["supported_per_answer"] == 3.0
    # another judge's labels for the same answers: its own statement count, no answer-fact column
    other = R.statement_figures(answers, [["Wrong"], [], ["Correct"]])
    assert other["base"] == {"answers": 2, "statements_per_answer": 0.5, "supported_per_answer": 0.0,
                             "fact_precision": 0.0, "answer_fact_good": None}
    assert other["trained"]["fact_precision"] == 1.0


def test_cli_by_model_prints_hand_and_verifier_figures(tmp_path, capsys):
    from rlfh.cli import main
    small = tmp_path / "grounded.jsonl"
    lines = R.GROUNDED_PATH.read_text(encoding="utf-8").splitlines()
    picked = {m: next(x for x in lines if json.loads(x)["model"] == m) for m in ("base", "trained")}
    small.write_text("\n".join(picked.values()) + "\n", encoding="utf-8")
    out = tmp_path / "real.json"
    assert main(["bench", "verifier", "--real", str(small), "--no-llm", "--by-model", "--json", str(out)]) == 0
    rows = [r for r in json.loads(out.read_text())["rows"] if r.get("table") == "by_model"]
    assert sorted((r["judge"], r["model"]) for r in rows) == [
        ("hand labels", "base"), ("hand labels", "trained"),
        ("verifier (evidence, with gold)", "base"), ("verifier (evidence, with gold)", "trained")]
    assert all(r["answers"] == 1 for r in rows)
    assert "Statement figures per model" in capsys.readouterr().out
    assert main(["bench", "verifier", "--by-model", "--no-llm"]) == 2
    assert "--by-model needs --real" in capsys.readouterr().err


def test_lm_judge_auroc_and_table_on_hand_built_facts():
    """bench.lm_judge's AUROC (ties count half; None with an empty side) and its table: per prompt mode, and only
    over the facts the verifier mislabels."""
    from bench.lm_judge import auroc, table
    assert auroc([2.0, 3.0], [1.0]) == 1.0 and auroc([1.0], [2.0, 3.0]) == 0.0
    assert auroc([1.0, 2.0], [1.0]) == 0.75 and auroc([], [1.0]) is None

    def row(mode, label, rule, passage, question=0.0):
        return {"mode": mode, "label": label, "rule": rule, "rule_gold": rule, "passage": passage,
                "passage+gold": passage, "question": question}
    rows = [row("closed", "Correct", "Correct", -1.0), row("closed", "Wrong", "Wrong", -3.0),
            row("evidence", "Correct", "Wrong", -4.0), row("evidence", "Wrong", "Correct", -2.0),
            row("evidence", "Vague", "Wrong", -9.0)]
    lines = {line["score"]: line for line in table(rows)}
    lp = lines["passage log-prob"]
    assert lp["closed"] == 1.0 and lp["evidence"] == 0.0      # evidence: the Correct fact scores below the Wrong one
    assert lp["missed by rule"] == 0.0                         # the two mislabelled facts are ranked the wrong way
