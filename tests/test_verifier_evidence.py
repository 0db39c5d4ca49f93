"""The `evidence` backend through the public API (Verifier): labels, informativeness, spans, bad input."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from core.config import ConfigError, RLFHConfig
from core.verify_schema import BAD_LABELS, MAX_MATERIAL_CHARS, MAX_RESPONSE_CHARS, VerifyRequest
from verifier_service.core import Verifier

STARK = ["Jonathan Stark (born April 3, 1971) is a former professional tennis player from the United States. "
         "During his career he won two Grand Slam doubles titles.",
         "Henri Leconte (born 4 July 1963) is a former tennis player from France."]
Q_TITLES = "How many Grand Slam doubles titles did Jonathan Stark win?"


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    return Verifier(RLFHConfig.load(environ={}), backend="evidence")


def _one(verifier, response, gold=None, question=Q_TITLES, materials=STARK):
    res = verifier.verify(VerifyRequest(question=question, response=response, materials=materials,
                                        gold_answer=gold))
    return res, res.statements()


@pytest.mark.parametrize("gold", [None, "two"])
@pytest.mark.parametrize("response, label", [
    ("Jonathan Stark won two Grand Slam doubles titles.", "Correct"),
    ("I think Jonathan Stark won two Grand Slam doubles titles.", "Hedged correct"),
    ("Jonathan Stark won five Grand Slam doubles titles.", "Wrong"),
    ("Jonathan Stark probably won five Grand Slam doubles titles.", "Hedged wrong"),
    ("That is a good question.", "Vague"),
])
def test_each_label_is_produced(verifier, response, label, gold):
    res, sts = _one(verifier, response, gold)
    assert [s.label for s in sts] == [label], [(s.text, s.label) for s in sts]
    assert res.num_statements == 1 and not res.abstained


def test_abstention_has_no_statements(verifier):
    for resp in ("I don't know.", "I'm not sure.", "I cannot answer that."):
        res, sts = _one(verifier, resp, gold="two")
        assert res.abstained and sts == [] and res.num_statements == 0


def test_unsupported_name_is_wrong_and_supported_facts_correct(verifier):
    res, sts = _one(verifier, "Jonathan Stark is from the United States. He was coached by Boris Becker.",
                    question="Where is Jonathan Stark from?")
    assert [s.label for s in sts] == ["Correct", "Wrong"]
    assert sts[0].evidence and "United States" in sts[0].evidence[0]


def test_gold_answer_decides_between_entities(verifier):
    q = "Which tennis player is from France, Henri Leconte or Jonathan Stark?"
    right, _ = _one(verifier, "Henri Leconte is from France.", gold="Henri Leconte", question=q)
    wrong, _ = _one(verifier, "Jonathan Stark is from France.", gold="Henri Leconte", question=q)
    assert right.statements()[0].label == "Correct"
    assert wrong.statements()[0].label == "Wrong"


def test_yes_no_with_gold(verifier):
    q = "Are Jonathan Stark and Henri Leconte both from the United States?"
    _, sts = _one(verifier, "No, they are not.", gold="no", question=q)
    assert sts[0].label == "Correct"
    _, sts = _one(verifier, "Yes, both are from the United States.", gold="no", question=q)
    assert sts[0].label == "Wrong"
    # offering both answers matches neither, with or without the gold (RL found "Yes or no" otherwise)
    for both in ("Yes or no", "No, or yes."):
        for gold in ("no", "yes", None):
            _, sts = _one(verifier, both, gold=gold, question=q)
            assert [st.label for st in sts] == ["Wrong"], (both, gold)


def test_without_gold_the_year_comparison_picks_the_option(verifier):
    q = "Who was born first, Jonathan Stark or Henri Leconte?"
    a, _ = _one(verifier, "Henri Leconte.", question=q)
    b, _ = _one(verifier, "Jonathan Stark.", question=q)
    sa, sb = a.statements()[0], b.statements()[0]
    assert sa.label == "Correct"
    signed = lambda s: s.confidence if s.label in ("Correct", "Hedged correct") else -s.confidence  # noqa: E731
    assert signed(sa) > signed(sb)


def test_informativeness_range_and_order(verifier, halueval_test_items):
    # (label / score ranges are enforced by the Statement schema; what is checked here is that the verdicts
    # carry signal: without a gold answer, hallucinated answers are flagged far more often than right ones,
    # and informativeness is not a constant)
    flagged = {"right": 0, "hallucinated": 0}
    infos, labels = set(), set()
    for it in halueval_test_items[:60]:
        for kind, resp in (("right", it.right_answer), ("hallucinated", it.hallucinated_answer)):
            res = verifier.verify(VerifyRequest(question=it.question, response=resp, materials=it.knowledge))
            flagged[kind] += any(st.label in BAD_LABELS for st in res.statements())
            infos |= {st.informativeness for st in res.statements()}
            labels |= {st.label for st in res.statements()}
    assert flagged["hallucinated"] >= 30 and flagged["right"] <= 20, flagged
    assert flagged["hallucinated"] >= 2 * flagged["right"], flagged
    assert len(infos) >= 2 and {"Correct", "Wrong"} <= labels, (infos, labels)
    # restating the question is less informative than giving the specific answer
    _, restate = _one(verifier, "Jonathan Stark won Grand Slam doubles titles.", gold="two")
    _, answer = _one(verifier, "Jonathan Stark won two Grand Slam doubles titles.", gold="two")
    assert restate[0].informativeness < answer[0].informativeness == 5


def test_spans_and_counters(verifier, halueval_test_items):
    for it in halueval_test_items[:80]:
        resp = it.hallucinated_answer + " I think it was in 1990. " + it.right_answer
        res = verifier.verify(VerifyRequest(question=it.question, response=resp, materials=it.knowledge,
                                            gold_answer=it.right_answer))
        assert res.backend == "evidence"
        assert res.num_statements == len(res.statements())
        assert res.num_unaligned == 0 and res.num_fallback == 0
        assert res.latency_ms > 0
        for sent in res.sentences:
            assert resp[sent.start:sent.end] == sent.text
            for st in sent.statements:
                assert resp[st.start:st.end] == st.text and st.aligned


def test_empty_response_and_no_materials(verifier):
    for resp in ("", "   ", "\n\n"):
        res = verifier.verify(VerifyRequest(question="Who?", response=resp))
        assert res.sentences == [] and res.num_statements == 0 and not res.abstained
    # nothing to check against (no materials, no gold): uncheckable, hence Vague - not Correct, not Wrong
    res = verifier.verify(VerifyRequest(question="Who?", response="Paris is big. I think it is Lyon.", materials=[]))
    assert res.num_statements == 2 and [s.label for s in res.statements()] == ["Vague", "Vague"]
    res = verifier.verify(VerifyRequest(question="Who?", response="Paris.", materials=[], gold_answer="Paris"))
    assert res.statements()[0].label == "Correct"


def test_bad_requests_name_the_field():
    with pytest.raises(ValidationError) as e:
        VerifyRequest(response="x")
    assert "question" in str(e.value)
    with pytest.raises(ValidationError) as e:
        VerifyRequest(question="q", response="x" * (MAX_RESPONSE_CHARS + 1))
    assert "response" in str(e.value)
    with pytest.raises(ValidationError) as e:
        VerifyRequest(question="q", response="x", materials=["y" * (MAX_MATERIAL_CHARS + 1)])
    assert "materials" in str(e.value)
    with pytest.raises(ValidationError) as e:
        VerifyRequest(question="q", response="x", materials=[3])
    assert "materials" in str(e.value)
    with pytest.raises(ValidationError) as e:
        VerifyRequest(question="q", response="x", answer="typo field")
    assert "answer" in str(e.value)
    # a single string is accepted as one passage
    assert VerifyRequest(question="q", response="x", materials="one passage").materials == ["one passage"]


def test_verify_many_accepts_dicts_and_keeps_order(verifier):
    reqs = [{"question": Q_TITLES, "response": r, "materials": STARK}
            for r in ("Two.", "I don't know.", "Five titles.")]
    out = verifier.verify_many(reqs)
    assert [o.abstained for o in out] == [False, True, False]
    assert out[0].statements()[0].label == "Correct" and out[2].statements()[0].label == "Wrong"
    assert verifier.verify_many([]) == []
    with pytest.raises(ValidationError):
        verifier.verify_many([{"question": "q"}])


def test_backend_selection_and_identity():
    cfg = RLFHConfig.load(environ={})
    v = Verifier(cfg)
    assert v.backend_name == "evidence"
    ident = v.cache_identity()
    assert json.loads(json.dumps(ident)) == ident and ident["backend"] == "evidence" and "version" in ident
    with pytest.raises(ConfigError, match="MODEL_URL"):
        Verifier(cfg, backend="llm")
    with pytest.raises(ConfigError, match="chat_fn"):
        Verifier(cfg, backend="self")
    with pytest.raises(ConfigError, match="one of"):
        Verifier(cfg, backend="oracle")
    v2 = Verifier(cfg, backend="self", chat_fn=lambda convs: ["{}"] * len(convs))
    assert v2.backend_name == "self" and v2.cache_identity() != ident
    assert "prompt_version" in v2.cache_identity()


def test_env_selects_backend(monkeypatch):
    monkeypatch.setenv("VERIFIER_BACKEND", "llm")
    monkeypatch.setenv("MODEL_URL", "http://127.0.0.1:9/v1")
    v = Verifier()
    assert v.backend_name == "llm" and v.cache_identity()["endpoint"] == "http://127.0.0.1:9/v1"
    assert "key" not in json.dumps(v.cache_identity()).lower()


# ----------------------------------------------------------------------------- evidence-1.16 rules (issue 27)
# Hand-written sentences and passages, one case per rule added after reading the tune part of
# bench/data/real_answers.jsonl.

def _labels16(verifier, question, response, materials, gold=None) -> list[tuple[str, str]]:
    res = verifier.verify(VerifyRequest(question=question, response=response, materials=materials,
                                        gold_answer=gold))
    return [(s.text, s.label) for s in res.statements()]


FERRY = ["The Island Ferry service began in 1990. It runs on a boat line operated by Harbor Marine Group, a unit "
         "of Coastline Holdings."]
Q_FERRY = "The Island Ferry service runs on a boat line operated by what company?"


def test_the_question_with_its_slot_filled_is_judged_by_its_answer(verifier):
    # the question's own name (Island Ferry) is in another evidence sentence than the answer: no slot
    # contradiction, the answer decides (without gold: the ranker; with gold: the gold)
    resp = "The Island Ferry service runs on a boat line operated by Harbor Marine Group."
    for gold in (None, "Harbor Marine Group"):
        assert _labels16(verifier, Q_FERRY, resp, FERRY, gold) == [(resp[:-1], "Correct")]
    wrong = "The Island Ferry service runs on a boat line operated by Coastline Holdings."
    assert _labels16(verifier, Q_FERRY, wrong, FERRY, "Harbor Marine Group")[0][1] == "Wrong"
    # a second new name that is not the answer keeps the slot check ("December was owned by ...")
    from verifier_service.evidence import _fills_question
    from verifier_service.question import analyze_question
    from verifier_service import text as T
    qi = analyze_question("Visy was owned by Richard Pratt until his death on which date?")
    st = "December was owned by Richard Pratt until his death on 28 April 2009"
    assert _fills_question(st, [e for e in T.entities(st) if not qi.mentions(e.text)], qi)   # (copy holds)
    qi2 = analyze_question("What president was assassinated in an explosion in August 1981?")
    st2 = "Mohammad Rajai and Supreme Leader were assassinated in an explosion"
    assert not _fills_question(st2, [e for e in T.entities(st2) if not qi2.mentions(e.text)], qi2)


def test_a_fragment_that_only_repeats_its_sentence_is_vague(verifier):
    q = "Are both Hottonia and Othonna genera of plants?"
    mats = ["Hottonia is a genus of aquatic plants.", "Othonna is a genus of flowering plants."]
    sts = _labels16(verifier, q, "Hottonia and Othonna are both plants that are both Hottonia and Othonna.", mats,
                    "yes")
    assert sts == [("Hottonia and Othonna are both plants", "Correct"),
                   ("that are both Hottonia and Othonna", "Vague")], sts
    # "A was B" with the same words on both sides
    q2 = "The cycling team was the team of which British cyclist?"
    sts = _labels16(verifier, q2, "The team of the British cyclist was the team of the British cyclist.",
                    ["Team Rapid was the team of the British cyclist Jane Smith."], "Jane Smith")
    assert [lab for _, lab in sts] == ["Vague"], sts
    # a new clause with its own subject that reuses earlier words is a claim ("The Lady is a British ...")
    from verifier_service.evidence import _tautology
    assert not _tautology("The Lady is a British-based publication",
                          "Janus is a British-based publication and ")
    assert _tautology("that is extinct", "The water dog is the extinct breed ")


def test_a_question_copied_with_a_few_words_left_out_is_a_restatement(verifier):
    q = "Sorghum bicolor is a type of grass harvested for what type of edible grain?"
    mats = ["Sorghum bicolor is a grass species cultivated for its grain, a caryopsis."]
    for gold in (None, "caryopsis"):
        sts = _labels16(verifier, q, "Sorghum is a type of grass harvested for edible grain.", mats, gold)
        assert [lab for _, lab in sts] == ["Vague"], sts
    # the question's words rearranged around a name in the asked slot are no copy
    from verifier_service.evidence import _gapped_copy
    assert _gapped_copy("a c d".split(), "a b c x d".split())
    assert not _gapped_copy("a d".split(), "a b c x d".split())


def test_a_reply_that_asks_a_question_claims_nothing(verifier):
    q = "Which actor starred in the 1995 film produced by Larry Turman?"
    mats = ["Larry Turman produced the 1995 film Tall Tale, starring Patrick Swayze."]
    sts = _labels16(verifier, q, "Larry Turman produced a 1995 film starring which actor?", mats, "Patrick Swayze")
    assert [lab for _, lab in sts] == ["Vague"], sts


def test_a_choice_frame_naming_an_option_keeps_its_relative_clause_apart():
    from test_decompose_facts import _facts
    q = "Between Jorge Luis Borges and Spike Lee, who is a film director?"
    assert _facts("Spike Lee is a film director who is a famous novelist.", q) == \
        ["Spike Lee is a film director", "who is a famous novelist"]
    # a wh-question's frame still keeps its answer (one fact)
    assert len(_facts("It was the German composer who created the opera Fidelio.",
                      "Which German composer created the opera?")) == 1


def test_a_later_clause_that_denies_the_other_option_is_right(verifier):
    q = "Which was closed by a flood, Red Hill Mine or Blue Lake Mine?"
    mats = ["Red Hill Mine was closed in 1950 after a flood.", "Blue Lake Mine shut down during a strike in 1961."]
    for gold in (None, "Red Hill Mine"):
        sts = _labels16(verifier, q, "Red Hill Mine was closed by a flood, Blue Lake Mine was not.", mats, gold)
        assert sts == [("Red Hill Mine was closed by a flood", "Correct"), ("Blue Lake Mine was not", "Correct")], sts
    # "A, not B" chooses A: the negation stands before the other option
    sts = _labels16(verifier, q, "Blue Lake Mine, not Red Hill Mine.", mats, "Red Hill Mine")
    assert [lab for _, lab in sts] == ["Wrong"], sts


def test_a_question_name_as_the_copula_complement_is_an_answer_attempt(verifier):
    q = "What is a low-cost airline headquartered at Gurgaon?"
    mats = ["IndiGo is a low-cost airline headquartered at Gurgaon, India."]
    sts = _labels16(verifier, q, "The low-cost airline headquartered at Gurgaon is Gurgaon.", mats, "IndiGo")
    assert [lab for _, lab in sts] == ["Wrong"], sts
    sts = _labels16(verifier, q, "The low-cost airline headquartered at Gurgaon is IndiGo.", mats, "IndiGo")
    assert [lab for _, lab in sts] == ["Correct"], sts


def test_a_nickname_of_the_same_person_is_no_swap(verifier):
    q = "Who is the wife of the fraudster?"
    # "Bernard Madoff" is in the passage; the sentence that says the rest of the claim spells him "Bernie"
    mats = ["The film stars Robert De Niro as Bernard Madoff.",
            "Ruth Madoff is the wife of Bernie Madoff, the convicted financial fraudster."]
    sts = _labels16(verifier, q, "Ruth Madoff is the wife of Bernard Madoff.", mats, "Ruth Madoff")
    assert [lab for _, lab in sts] == ["Correct"], sts
    from verifier_service.evidence import _name_variant
    assert _name_variant("bernard madoff", "bernie madoff")
    assert not _name_variant("ruth madoff", "bernie madoff")


# ----------------------------------------------------------------------------- evidence-1.17 rules (issue 27)
# Hand-written sentences and passages: a question does not name its own answer; examples are claims.

CUP = ["The Harbor Rovers club won the 1921 Lakeside Cup.",
       "The Lakeside League, founded in 1890, is the oldest football league of the region."]
Q_CUP = "Which club won the 1921 Lakeside Cup of the Lakeside League?"


def test_the_questions_own_name_before_the_asked_verb_is_a_wrong_answer(verifier):
    # "Which club won ... of the Lakeside League?": "The Lakeside League won ..." puts one of the question's own
    # names in the asked slot. Without gold it is Wrong (a question does not name its answer); with gold too.
    resp = "The Lakeside League won the 1921 Lakeside Cup."
    for gold in (None, "Harbor Rovers"):
        assert [lab for _, lab in _labels16(verifier, Q_CUP, resp, CUP, gold)] == ["Wrong"], gold
    # the right club, not named by the question, is unaffected
    ok = "The Harbor Rovers won the 1921 Lakeside Cup."
    for gold in (None, "Harbor Rovers"):
        assert [lab for _, lab in _labels16(verifier, Q_CUP, ok, CUP, gold)] == ["Correct"], gold
    from verifier_service.evidence import _own_name_in_subject_slot, _question_name
    from verifier_service.question import analyze_question
    qi = analyze_question(Q_CUP)
    assert _own_name_in_subject_slot(resp, qi) == "Lakeside League"
    # a question name in another role (not before the asked verb) is no answer attempt
    assert _own_name_in_subject_slot("The Lakeside League is the oldest league.", qi) is None
    # a part of a longer title is not the question's name ("Harold & Kumar" in "A Very Harold & Kumar 3D ...")
    assert not _question_name("Harold & Kumar", analyze_question("A Very Harold & Kumar 3D Christmas is part of "
                                                                 "what series?"))
    assert _question_name("Lakeside League", qi)


def test_the_questions_own_name_in_a_copied_copula_frame_is_an_answer_attempt(verifier):
    q = "Who is the writer of the radio comedy for which Tom Hale is best known?"
    mats = ["Tom Hale is best known for playing Sid in the radio comedy Night Shift.",
            "Night Shift is a radio comedy written by Ada Marsh."]
    sts = _labels16(verifier, q, "Tom Hale is the writer of the radio comedy Night Shift.", mats)
    assert [lab for _, lab in sts] == ["Wrong"], sts
    from verifier_service.evidence import _own_name_in_subject_slot
    from verifier_service.question import analyze_question
    # the copula alone is not enough: the words after it must copy the question's
    assert _own_name_in_subject_slot("Tom Hale is an actor.", analyze_question(q)) is None


def test_examples_nothing_supports_are_wrong_not_vague(verifier):
    q = "Which was closed by a natural disaster, Red Hill Mine or Blue Lake Mine?"
    mats = ["Red Hill Mine was closed in 1950 after a flood.", "Blue Lake Mine shut down during a strike in 1961."]
    sts = dict(_labels16(verifier, q, "Red Hill Mine was closed by a natural disaster, such as a volcano or an "
                         "avalanche.", mats, "Red Hill Mine"))
    assert sts["such as a volcano or an avalanche"] == "Wrong", sts
    # an example the passage states is no unsupported claim
    sts = dict(_labels16(verifier, q, "Red Hill Mine was closed by a natural disaster, such as a flood.", mats,
                         "Red Hill Mine"))
    assert sts.get("such as a flood", "Correct") != "Wrong", sts
