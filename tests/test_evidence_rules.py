"""The evidence backend's judge as named rules: the rule table, the thresholds record, one case per rule."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import re

import pytest

import verifier_service.evidence as E
from core.verify_schema import VerifyRequest
from verifier_service import text as T

STARK = ["Jonathan Stark (born April 3, 1971) is a former professional tennis player from the United States. "
         "During his career he won two Grand Slam doubles titles.",
         "Henri Leconte (born 4 July 1963) is a former tennis player from France."]
Q_TITLES = "How many Grand Slam doubles titles did Jonathan Stark win?"
Q_WHO = "Which tennis player from the United States won two Grand Slam doubles titles?"
Q_LECONTE = "Is Henri Leconte a tennis player from the United States?"


def _decide(response: str, question: str = Q_TITLES, materials=STARK, gold=None, th=None) -> list[tuple]:
    """(statement, deciding rule, verdict) of each statement, the way EvidenceBackend.verify judges them (before
    the question rules); also checks that judge() returns the deciding rule's verdict."""
    req = VerifyRequest(question=question, response=response, materials=materials, gold_answer=gold)
    d = T.decompose(req.response, req.question)
    ctx = E._make_ctx(req, sum(len(s) for s in d.statements), th)
    if d.sentences and not re.search(r"[.!?][\"')\]\u201d\u2019]*\s*$", response):
        ctx.cut_off = (d.sentences[-1].start, d.sentences[-1].end)
    out, first = [], True
    for sent, sts in zip(d.sentences, d.statements):
        for st in sts:
            args = (st.text, sent.text, first, ctx, st.start, response[sent.start:st.start])
            f = E._read_statement(*args)
            name, v = next((r.__name__, v) for r in E.RULES if (v := r(f)) is not None)
            assert E.judge(*args) == v
            out.append((st.text, name, v))
            first = False
    return out


def test_rules_apply_in_the_order_of_the_docstring_table():
    table = [line.split()[0] for line in E.judge.__doc__.splitlines() if line.strip().startswith("rule_")]
    assert table == [r.__name__ for r in E.RULES]
    # every rule is a documented module function, and every rule_ function is in the table once
    module_rules = [n for n, obj in vars(E).items() if n.startswith("rule_") and inspect.isfunction(obj)]
    assert sorted(module_rules) == sorted(table) and len(set(table)) == len(table)
    assert all(getattr(E, r.__name__) is r and (r.__doc__ or "").strip() for r in E.RULES)
    assert E.RULES[-1] is E.rule_lexical_support  # the last rule decides whatever is left


def test_thresholds_are_one_frozen_record():
    th = E.THRESHOLDS
    assert isinstance(th, E.JudgeThresholds) and dataclasses.is_dataclass(th)
    with pytest.raises(dataclasses.FrozenInstanceError):
        th.restate_share = 0.5
    assert all(isinstance(getattr(th, f.name), (int, float)) for f in dataclasses.fields(th))
    # the calibrated values the module used to hold as ANSWER_SLOPE, ANSWER_OFFSET, RESTATE_SHARE, OPTION_*
    assert (th.answer_slope, th.answer_offset, th.restate_share, th.option_slope, th.option_offset) == \
        (0.9, 1.0, 0.75, 1.0, 1.0)


def test_judge_and_the_rules_hold_no_numbers_of_their_own():
    """Beyond the truth values (1 right, -1 wrong, 0 undecided) every number comes from the record, and no
    function of the module runs over 80 lines."""
    tree = ast.parse(inspect.getsource(E))
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    for name in ["judge", "_find_content", "_find_support", "_answer_role", "_check_answer", "_check_against_gold",
                 "_check_without_gold", "_check_negated_claim", "informativeness_of"] + [r.__name__ for r in E.RULES]:
        floats = {c.value for c in ast.walk(funcs[name]) if isinstance(c, ast.Constant) and isinstance(c.value, float)}
        assert floats <= {0.0, 1.0}, (name, floats)
    assert max(n.end_lineno - n.lineno + 1 for n in funcs.values()) <= 80


def test_the_rules_read_the_thresholds_record(monkeypatch):
    # the question's words in its order after four words of its own: an 11-word copy of the question in a
    # 15-word statement (0.73 of it; in lower case, since a name before the copy would make it an answer
    # attempt anyway) is an answer attempt that misses the gold at the default share of 0.75 ...
    resp = "titles won by a player: a tennis player from the United States won two Grand Slam doubles titles."
    [(_, rule, v)] = _decide(resp, question=Q_WHO, gold="Jonathan Stark")
    assert (rule, E.label_of(v, False)) == ("rule_answer_check", "Wrong")
    # ... and a restatement of the question when the record says 0.6
    low = dataclasses.replace(E.THRESHOLDS, restate_share=0.6)
    [(_, rule, v)] = _decide(resp, question=Q_WHO, gold="Jonathan Stark", th=low)
    assert (rule, E.label_of(v, False), v.informativeness) == ("rule_restates_question", "Vague", 1)
    # the backend reads the module's record when it builds a request's context
    req = VerifyRequest(question=Q_WHO, response=resp, materials=STARK, gold_answer="Jonathan Stark")
    assert E._make_ctx(req, 1).th is E.THRESHOLDS
    monkeypatch.setattr(E, "THRESHOLDS", low)
    assert E._make_ctx(req, 1).th is low
    # a confidence comes from the record too
    cut = dataclasses.replace(E.THRESHOLDS, cut_off_confidence=0.42)
    [(_, rule, v)] = _decide("Jonathan Stark won two Grand Slam doubles titles with", th=cut)
    assert (rule, v.confidence) == ("rule_cut_off", 0.42)


@pytest.mark.parametrize("response, question, materials, gold, expected", [
    # a name nothing supports makes the statement wrong
    ("Jonathan Stark won two Grand Slam doubles titles with Pete Sampras.", Q_TITLES, STARK, None,
     [("rule_unsupported_fact", "Wrong")]),
    # 1963 is in the materials, but the sentence about Stark's birth has 1971 in its place
    ("Jonathan Stark was born on April 3, 1963.", Q_TITLES, STARK, None, [("rule_slot_contradicted", "Wrong")]),
    # the gold answer stated where the question asks for it
    ("Jonathan Stark won two Grand Slam doubles titles.", Q_TITLES, STARK, "two", [("rule_answer_check", "Correct")]),
    # the stance is the answer; the fact after it is background the evidence states, true whatever the answer
    ("No. Henri Leconte is a former tennis player from France.", Q_LECONTE, STARK, "no",
     [("rule_answer_check", "Correct"), ("rule_background_supported", "Correct")]),
    # the token limit cut the reply off mid-phrase: no claim yet
    ("Jonathan Stark won two Grand Slam doubles titles with", Q_TITLES, STARK, None, [("rule_cut_off", "Vague")]),
    # neither materials nor a gold answer: nothing to check against
    ("Jonathan Stark won two titles.", Q_TITLES, [], None, [("rule_nothing_to_check", "Vague")]),
    # no claim at all
    ("That is a good question.", Q_TITLES, STARK, None, [("rule_no_content", "Vague")]),
    ("Who knows how many titles Jonathan Stark won?", Q_TITLES, STARK, None, [("rule_asks_back", "Vague")]),
])
def test_hand_written_statements_meet_their_rule(response, question, materials, gold, expected):
    got = _decide(response, question=question, materials=materials, gold=gold)
    assert [(rule, E.label_of(v, False)) for _, rule, v in got] == expected, got
