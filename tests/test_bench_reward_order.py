"""The reward-order, informativeness and grader benches: shipped hand labels are what their annotation files build,
the agreement arithmetic by hand, bad input named, and the question rules on hand-built statements."""
from __future__ import annotations

import json
import math

import pytest

from bench import grader as G
from bench import informativeness as I
from bench import reward_order as RO
from bench.real import RealDataError
from verifier_service.question import analyze_question
from verifier_service.question_rules import informativeness_level


# ----------------------------------------------------------------------------- shipped sets

def test_reward_pairs_are_what_the_hand_rankings_build():
    groups = [json.loads(x) for x in RO.GROUPS_PATH.read_text(encoding="utf-8").splitlines() if x.strip()]
    pairs = RO.build_pairs(groups, RO.parse_rankings(RO.ANNOTATIONS.read_text(encoding="utf-8")))
    shipped = [json.loads(x) for x in RO.DEFAULT_PATH.read_text(encoding="utf-8").splitlines() if x.strip()]
    assert pairs == shipped
    assert len(shipped) >= 300 and {p["source"] for p in shipped} == {"base", "warmstart", "lr1x", "lr4x"}
    loaded = RO.load_pairs()
    assert sum(p.preference != "tie" for p in loaded if p.part == "heldout") >= 60
    # every pair of one group falls in one part
    by_group: dict[str, set] = {}
    for p in shipped:
        by_group.setdefault(p["group"], set()).add(p["part"])
    assert all(len(v) == 1 for v in by_group.values())


def test_informativeness_set_is_what_its_annotations_build():
    ann = I.parse_annotations(I.ANNOTATIONS.read_text(encoding="utf-8"))
    records = I.build_records(I.source_answers(), ann)
    assert records == I.load_records()
    assert len(records) >= 300 and {r["level"] for r in records} == set(I.LEVELS)
    assert {r["part"] for r in records} == {"tune", "heldout"}


# ----------------------------------------------------------------------------- arithmetic by hand

def test_pairwise_agreement_by_hand():
    # 4 preferred pairs: one ordered right, one wrong, one tied by the reward (half); the reader's tie is left out
    scored = [("a", 2.0, 1.0), ("b", 2.0, 1.0), ("a", 0.5, 0.5), ("b", -1.0, 3.0), ("tie", 1.0, 0.0)]
    agree, n, ties = RO.agreement(scored)
    assert (n, ties) == (4, 1) and agree == pytest.approx((2 + 0.5) / 4)
    assert math.isnan(RO.agreement([("tie", 1.0, 2.0)])[0])


def test_rankings_become_pairs_with_ties():
    groups = [{"group": "g1", "source": "base", "step": 1, "question": "Q?", "passage": ["P."], "gold": "x",
               "replies": ["r0", "r1", "r2"]}]
    pairs = RO.build_pairs(groups, RO.parse_rankings("@g1\nB > A = C\n"))
    assert [(p["id"], p["preference"]) for p in pairs] == [("g1:AB", "b"), ("g1:AC", "tie"), ("g1:BC", "a")]
    with pytest.raises(RealDataError, match="the ranking names"):
        RO.build_pairs(groups, RO.parse_rankings("@g1\nB > A\n"))
    with pytest.raises(RealDataError, match="rankings line 2"):
        RO.parse_rankings("@g1\nB >> A\n")


def test_informativeness_agreement_by_hand():
    # hand / verifier: exact 2 of 5, within one 4 of 5; hand 1-2 scored <= 2: 2 of 3; hand 5 scored 5: 1 of 1
    m = I.agreement([(1, 1), (2, 4), (2, 2), (5, 5), (3, 4)])
    assert m["exact"] == pytest.approx(3 / 5) and m["within_one"] == pytest.approx(4 / 5)
    assert m["low_kept_low"] == pytest.approx(2 / 3) and m["answer_found"] == 1.0


def test_bad_pairs_name_the_line_and_field(tmp_path):
    good = {"question": "Q?", "passage": "P.", "gold": "x", "reply_a": "a", "reply_b": "b", "preference": "a"}
    for patch, field in (({"preference": "A"}, "preference"), ({"gold": ""}, "gold"), ({"passage": 3}, "passage"),
                         ({"part": "test"}, "part")):
        f = tmp_path / "p.jsonl"
        f.write_text(json.dumps(good) + "\n" + json.dumps({**good, **patch}) + "\n")
        with pytest.raises(RealDataError, match=rf"p.jsonl:2: field '{field}'"):
            RO.load_pairs(f)
    f.write_text("{not json\n")
    with pytest.raises(RealDataError, match="p.jsonl:1: not JSON"):
        RO.load_pairs(f)


def test_cli_variant_is_checked():
    import argparse
    assert RO._variant('paper={"REWARD_FORMULA": "paper"}') == ("paper", {"REWARD_FORMULA": "paper"})
    for bad in ("paper", 'x=[1]', "x={bad"):
        with pytest.raises(argparse.ArgumentTypeError, match="--variant"):
            RO._variant(bad)


# ----------------------------------------------------------------------------- rewards of a user's pairs

def test_user_pairs_scored_by_every_variant(tmp_path):
    """Two pairs written as a user would: a right answer vs a wrong one, and an answer vs a reply that copies an
    off-topic passage sentence. The paper's formula ranks both as a reader does."""
    passage = ("Lonestar is an American country music group founded in 1992. Chris Waters wrote songs for "
               "Lonestar. Nashville is the capital of Tennessee and home to many record labels.")
    q, gold = "Chris Waters has written music for which country music group founded in 1992?", "Lonestar"
    rows = [{"question": q, "passage": passage, "gold": gold, "reply_a": "Chris Waters has written music for "
             "Lonestar.", "reply_b": "Chris Waters has written music for Canyon.", "preference": "a",
             "part": "heldout"},
            {"question": q, "passage": passage, "gold": gold, "reply_a": "Chris Waters has written music for "
             "Lonestar.", "reply_b": "Nashville is the capital of Tennessee and home to many record labels.",
             "preference": "a", "part": "heldout"}]
    f = tmp_path / "pairs.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = {(r["variant"], r["part"]): r for r in RO.run(f, {"paper": {**RO.AUTHORS, "REWARD_FORMULA": "paper",
                                                                       "OUTCOME_REWARD": "none"},
                                                             "outcome": {"TOKEN_REWARD_WEIGHT": "0"}})}
    assert out[("paper", "heldout")]["agreement"] == 1.0 and out[("paper", "heldout")]["pairs"] == 2
    assert out[("outcome", "heldout")]["agreement"] == 1.0
    assert math.isnan(out[("paper", "tune")]["agreement"])


# ----------------------------------------------------------------------------- the question rules

@pytest.mark.parametrize("text,earlier,level", [
    ("Lonestar was founded in 1992", [], 4),                       # states the gold, about the question
    ("Chris Waters has written music for a group", [], 1),         # the question's own words
    ("Lonestar is from Texas", [], 2),                             # a name of the answer, nothing of the question
    ("The group released music in Nashville", [], 3),              # the question's predicate ("music", "group")
    ("Lonestar was founded in 1992", ["Lonestar was founded in 1992"], 1),   # a repeat
])
def test_informativeness_levels_by_hand(text, earlier, level):
    qi = analyze_question("Chris Waters has written music for which country music group that was founded in 1992?")
    assert informativeness_level(text, qi, "Lonestar", earlier) == level


def test_grader_bench_rows_pool_the_sets():
    rows = G.agreement_rows()
    pooled = {(r["part"], r["reading"]): r for r in rows if r["set"] == "all three"}
    for part in ("tune", "heldout"):
        per_set = [r for r in rows if r["set"] != "all three" and r["part"] == part and r["reading"] == "scoped"]
        assert pooled[(part, "scoped")]["replies"] == sum(r["replies"] for r in per_set)
        assert pooled[(part, "scoped")]["agree"] == sum(r["agree"] for r in per_set)


# ----------------------------------------------------------------------------- answering or copying

def test_copying_table_from_a_samples_log(tmp_path):
    from bench import copying as C
    passage = ["Lonestar is an American country music group founded in 1992. Nashville is the capital of "
               "Tennessee and home to many record labels."]
    q, gold = "Chris Waters has written music for which country music group founded in 1992?", "Lonestar"
    recs = [  # step 1: a right answer that then copies an off-question passage sentence; a restated question
        {"step": 1, "question": q, "gold": gold, "materials": passage, "score": 2.0,
         "response": "Chris Waters has written music for Lonestar. Nashville is the capital of Tennessee and home to "
                     "many record labels."},
        {"step": 1, "question": q, "gold": gold, "materials": passage, "score": -1.0,
         "response": "Chris Waters has written music for which country music group founded in 1992?"},
        # step 2: a wrong answer followed by a copied sentence that bears on the question (it states the gold)
        {"step": 2, "question": q, "gold": gold, "materials": passage, "score": 0.5,
         "response": "Chris Waters has written music for Canyon. Lonestar is an American country music group "
                     "founded in 1992."}]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp_path / "dev_eval.jsonl").write_text(json.dumps({"step": 0, "dev/evidence/correct": 0.5}) + "\n")
    rows = C.run(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[0]["dev_correct"] == 0.5
    one, two = rows[1], rows[2]
    assert (one["first_right"], one["no_answer"], one["copied_off"]) == (0.5, 0.5, 1.0)
    assert (two["first_right"], two["no_answer"], two["copied_off"]) == (0.0, 0.0, 0.0)
    assert one["reward"] == pytest.approx(0.5)
    assert not C.copied("Chris Waters wrote it.", [["chris", "waters", "wrote"]])   # under 4 words: never
