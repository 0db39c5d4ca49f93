"""Long answers written by hand (hedges, lists, numbers, filler, swapped facts): statement labels, span
agreement and per-token reward-sign agreement of the ``evidence`` backend, and the long-form bench's
construction and metrics (bench/longform.py). Fast: no Ray, no model."""
from __future__ import annotations

import numpy as np
import pytest

from bench import longform as LF
from core.verify_schema import Sentence, Statement, VerifyRequest, VerifyResult
from verifier_service.core import Verifier

FILM = [
    "Serendipity is a 2001 American romantic comedy film directed by Peter Chelsom, written by Marc Klein, and "
    "starring John Cusack and Kate Beckinsale. The film grossed $77 million worldwide. Lucy Gordon had a small "
    "role in the film.",
    "Peter Chelsom (born 20 April 1956) is an English film director, writer and actor. He directed Hear My Song "
    "in 1991.",
    "Simon Channing Williams was a British film producer.",
]
TOWER = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It was designed by the company of Gustave "
    "Eiffel and built from 1887 to 1889. The tower is 330 metres tall.",
    "Gustave Eiffel (15 December 1832 - 27 December 1923) was a French civil engineer. His company also built the "
    "Garabit viaduct in 1884.",
]
BAND = [
    "The Beatles were an English rock band formed in Liverpool in 1960. The group consisted of John Lennon, Paul "
    "McCartney, George Harrison and Ringo Starr.",
    "Ringo Starr (born Richard Starkey, 7 July 1940) is an English drummer. He joined the Beatles in 1962, "
    "replacing Pete Best.",
]

# (question, materials, gold, [(statement text, label)]): the response is the statements joined by ". "
CASES = [
    ("Who directed the 2001 romantic comedy in which Lucy Gordon had a small role?", FILM, "Peter Chelsom", [
        ("I hope this helps", "Vague"),
        ("Serendipity was directed by Peter Chelsom and written by Marc Klein", "Correct"),
        ("I think it grossed $77 million worldwide", "Hedged correct"),
        ("Peter Chelsom was born in 1991", "Wrong"),                      # a year from the other sentence
        ("The answer is Peter Chelsom", "Correct"),
    ]),
    ("Whose company designed the tower built in Paris from 1887 to 1889?", TOWER, "Gustave Eiffel", [
        ("The Eiffel Tower is a wrought-iron lattice tower in Paris", "Correct"),
        ("It is probably 330 metres tall", "Hedged correct"),
        ("The tower was built from 1884 to 1889", "Wrong"),               # 1884 belongs to the viaduct
        ("Let me explain", "Vague"),
        ("Gustave Eiffel was a French civil engineer", "Correct"),
        ("So the answer is Gustave Eiffel", "Correct"),
    ]),
    ("Which drummer replaced Pete Best in the Beatles?", BAND, "Ringo Starr", [
        ("The Beatles were an English rock band formed in Liverpool in 1960", "Correct"),
        ("The group consisted of John Lennon, Paul McCartney, George Harrison and Ringo Starr", "Correct"),  # list
        ("I believe Ringo Starr joined the Beatles in 1960", "Hedged wrong"),  # 1962 in the evidence
        ("The answer is Ringo Starr", "Correct"),
    ]),
    ("Which drummer replaced Pete Best in the Beatles?", BAND, "Ringo Starr", [
        ("Thanks for asking", "Vague"),
        ("Ringo Starr was born Richard Starkey in 1940", "Correct"),
        ("The answer is probably Pete Best", "Hedged wrong"),
    ]),
]


def _case(i: int) -> LF.LongResponse:
    q, mats, gold, sts = CASES[i]
    response, out = "", []
    for text, label in sts:
        if response:
            response += " "
        start = len(response)
        response += text + "."
        out.append(LF.TrueStatement(text, start, start + len(text), label, "hand"))
    return LF.LongResponse("hand%d" % i, q, mats, gold, response, out)


@pytest.fixture(scope="module")
def verifier():
    return Verifier(backend="evidence")


def _verify(verifier, r: LF.LongResponse, gold: bool) -> VerifyResult:
    return verifier.verify(VerifyRequest(question=r.question, response=r.response, materials=r.materials,
                                         gold_answer=r.gold if gold else None))


# ----------------------------------------------------------------------------- the verifier on hand-written answers

@pytest.mark.parametrize("gold", [False, True], ids=["no-gold", "gold"])
@pytest.mark.parametrize("i", range(len(CASES)))
def test_hand_written_labels_and_spans(verifier, i, gold):
    """Every statement gets its true label (hedges, lists, numbers, filler, swapped years); the predicted
    statements cover its span (a list's separators and a leading 'So' may stay outside)."""
    r = _case(i)
    res = _verify(verifier, r, gold)
    for st in r.statements:
        lab, preds = LF.predicted_label(st, res)
        assert lab == st.label, (st.text, [(p.text, p.label) for p in res.statements()])
        cover, iou = LF.span_scores(st, preds)
        assert cover >= 0.85 and iou >= 0.85, (st.text, cover, iou, [(p.text, p.start, p.end) for p in preds])
        # no predicted statement runs into the next true statement
        assert all(st.start - 1 <= p.start and p.end <= st.end + 1 for p in preds), st.text


@pytest.mark.parametrize("i", range(len(CASES)))
def test_hand_written_token_signs(verifier, i):
    """Per-token FSPO reward signs (the reward service's own rule) agree with the true labels on >= 90% of the
    tokens inside statements, and every token of a wrong fact's number is negative."""
    r = _case(i)
    res = _verify(verifier, r, gold=False)
    agree, total = LF.sign_agreement(r, res)
    assert total > 10 and agree / total >= 0.9, (agree, total)
    signs = LF.token_signs(res, r.response)
    toks = LF.tokens(r.response)
    for st in r.statements:
        inside = [k for k, (a, b) in enumerate(toks) if a >= st.start and b <= st.end]
        vals = {int(signs[k]) for k in inside if r.response[toks[k][0]].isdigit()}
        if st.label in LF.BAD:
            assert vals <= {-1}, (st.text, vals)
        if st.label == "Vague":
            assert {int(signs[k]) for k in inside} == {0}, st.text


def test_evidence_strength_breaks_the_tie(verifier):
    """Without a gold answer, a statement whose entity is in the evidence sentence that says the rest of it
    earns more reward than the same statement with an entity found only elsewhere in the materials."""
    from bench.verifier import reward_of
    from reward_service.token_rewards import RewardSettings
    q = "Who directed the 2001 romantic comedy in which Lucy Gordon had a small role?"
    settings = RewardSettings()
    rewards = {}
    for who in ("Peter Chelsom", "Simon Channing Williams", "Lucy Gordon"):
        text = f"Lucy Gordon had a small role in Serendipity. The film was directed by {who}."
        res = verifier.verify(VerifyRequest(question=q, response=text, materials=FILM))
        rewards[who] = reward_of(res, text, settings)
    # (a name from the SAME sentence in another role, "directed by Marc Klein", is not caught: known limit)
    assert rewards["Peter Chelsom"] > rewards["Simon Channing Williams"]
    assert rewards["Peter Chelsom"] > rewards["Lucy Gordon"]


def _answer_reward(verifier, q, mats, x, gold=None):
    from bench.verifier import reward_of
    from reward_service.token_rewards import RewardSettings
    text = f"The answer is {x}."
    res = verifier.verify(VerifyRequest(question=q, response=text, materials=mats, gold_answer=gold))
    (st,) = res.statements()
    return reward_of(res, text, RewardSettings()), st


def test_one_answer_rewards_follow_evidence_strength_without_gold(verifier):
    """Without a gold answer, "The answer is X." for the entity the best-matching evidence sentence puts in
    the question's slot earns more than any other entity of the materials, and candidates the label alone
    would leave equal get different rewards (the /get_reward ranking of the one-answer pairs)."""
    q = "Who directed the 2001 romantic comedy in which Lucy Gordon had a small role?"
    got = {x: _answer_reward(verifier, q, FILM, x) for x in
           ("Peter Chelsom", "Marc Klein", "John Cusack", "Simon Channing Williams", "Lucy Gordon")}
    best, st = got["Peter Chelsom"]
    assert st.label == "Correct" and st.informativeness == 5
    for x in ("Marc Klein", "John Cusack", "Simon Channing Williams", "Lucy Gordon"):
        assert best > got[x][0], (x, got[x][1].label, got[x][1].informativeness)
    # Simon Channing Williams is only in another passage: no reward above the same-sentence names
    assert got["Simon Channing Williams"][0] <= min(got["Marc Klein"][0], got["John Cusack"][0])
    # the runner-ups are not all equal: the rank among the evidence's entities breaks the label's tie
    assert len({round(got[x][0], 9) for x in got}) >= 3, {x: (r, s.label, s.informativeness)
                                                          for x, (r, s) in got.items()}
    # with the gold answer the gold decides, whatever the ranking says
    r_gold, st_gold = _answer_reward(verifier, q, FILM, "Marc Klein", gold="Peter Chelsom")
    assert st_gold.label == "Wrong" and r_gold < 0


def test_a_number_word_answer_outranks_a_year_of_the_same_passage(verifier):
    """'six' is a candidate of a how-many question too: without gold, a year of the same sentence is Wrong
    (before, only names and digits ranked, so the years had no rival and were Correct as well)."""
    mats = ["The Aristocrats is a 2005 American documentary film about the famous joke. It is dedicated to Johnny "
            "Carson. Johnny Carson was an American comedian who hosted The Tonight Show from 1962 to 1992 and "
            "received six Emmy Awards, the first in 1980."]
    q = "The 2005 documentary The Aristocrats was dedicated to a comedian that received how many Emmy Awards?"
    r_six, st_six = _answer_reward(verifier, q, mats, "six")
    assert st_six.label == "Correct" and st_six.informativeness == 5
    for year in ("1980", "1962"):
        r_year, st_year = _answer_reward(verifier, q, mats, year)
        assert st_year.label == "Wrong" and r_six > r_year, (year, st_year.label, st_year.informativeness)


def test_rank_informativeness_orders_the_rewards():
    """The rank -> informativeness map, through the reward service's default maps: a better rank never earns
    less, a Correct label always beats a Wrong one, and the best and runner-up candidates differ."""
    from reward_service.token_rewards import RewardSettings
    from verifier_service.evidence import rank_informativeness
    s = RewardSettings()

    def reward(correct, above):
        info = s.informative_map[str(rank_informativeness(above, correct))]
        truth = s.verification_map["Correct" if correct else "Wrong"]
        return s.truth_weight * truth + s.info_weight * np.log(max(s.reward_epsilon, info) + s.reward_mu)

    for correct in (True, False):
        rs = [reward(correct, a) for a in range(12)]
        assert all(a >= b for a, b in zip(rs, rs[1:])), rs
    assert reward(True, 0) > reward(True, 1) > reward(True, 2)
    assert reward(False, 2) > reward(False, 3) and reward(False, 7) > reward(False, 8)
    assert min(reward(True, a) for a in range(12)) > max(reward(False, a) for a in range(12))


def test_a_discourse_first_is_not_a_chosen_option(verifier):
    """'There is some background to cover first.' on a 'Was A or B released first?' question chooses
    nothing: it is filler (Vague), with and without the gold answer."""
    q = "Was Winnie the Pooh or The Jungle Book released first?"
    mats = ["Winnie-the-Pooh is a book by A. A. Milne, released in 1926.",
            "The Jungle Book is a collection of stories by Rudyard Kipling, first published in 1894."]
    for gold in (None, "The Jungle Book"):
        res = verifier.verify(VerifyRequest(question=q, response="There is some background to cover first.",
                                            materials=mats, gold_answer=gold))
        assert [s.label for s in res.statements()] == ["Vague"], gold


def test_slot_check_states():
    from verifier_service.evidence import slot_check
    from verifier_service.question import analyze_question
    from verifier_service.retrieval import MaterialIndex
    idx = MaterialIndex(TOWER)
    qi = analyze_question("Whose company designed the tower built in Paris from 1887 to 1889?")
    ok = slot_check("The tower is 330 metres tall", idx, qi)
    assert ok is not None and ok.state == "supported" and "330 metres" in idx.sents[ok.sentence].text
    bad = slot_check("It was designed by the company of Gustave Eiffel and built from 1884 to 1889", idx, qi)
    assert bad is not None and bad.state == "contradicted" and bad.conflict == "1887"
    assert slot_check("Paris", idx, qi) is None  # nothing to locate it by


# ----------------------------------------------------------------------------- bench construction and metrics

def test_metrics_on_a_synthetic_result():
    """Pooling (a bad label wins), span cover / IoU and sign agreement, computed by hand."""
    resp = "Ann was born in 1950. I hope so."
    r = LF.LongResponse("x", "q", [], "g", resp, [LF.TrueStatement("Ann was born in 1950", 0, 20, "Wrong", "hand"),
                                                  LF.TrueStatement("I hope so", 22, 31, "Vague", "hand")])
    res = VerifyResult(sentences=[Sentence(text=resp[:21], start=0, end=21, statements=[
        Statement(text="Ann was born", start=0, end=12, label="Correct", informativeness=3),
        Statement(text="in 1950", start=13, end=20, label="Wrong", informativeness=3)])])
    lab, preds = LF.predicted_label(r.statements[0], res)
    assert lab == "Wrong" and len(preds) == 2
    cover, iou = LF.span_scores(r.statements[0], preds)
    assert cover == pytest.approx(19 / 20) and iou == pytest.approx(19 / 20)
    assert LF.predicted_label(r.statements[1], res) == ("Vague", [])
    assert LF.span_scores(r.statements[1], []) == (0.0, 0.0)
    # tokens: Ann was born in 1950 . I hope so .  -> inside statements: 5 + 3
    agree, total = LF.sign_agreement(r, res)
    assert total == 8 and agree == 5  # "in 1950" and the filler (0) agree; "Ann was born" is +1, truly -1
    sc = LF.LongformScore("t")
    sc.add(r, res)
    m = sc.metrics()
    assert m["accuracy"] == pytest.approx(1.0) and m["per_label"]["Wrong"]["recall"] == 1.0
    assert m["token_sign_agreement"] == pytest.approx(5 / 8)


def test_build_longform_is_deterministic_with_exact_spans():
    from core.data import load_halueval
    from core.verify_schema import LABELS
    from verifier_service.text import normalize
    items = load_halueval("dev")[:60]
    a, b = LF.build_longform(items), LF.build_longform(items)
    assert [x.response for x in a] == [x.response for x in b] and len(a) >= 40
    kinds = set()
    for r in a:
        mats = " ".join(r.materials)
        for st in r.statements:
            assert r.response[st.start:st.end] == st.text and st.label in LABELS
            kinds.add((st.kind, st.label))
            if st.kind == "swapped":
                orig, new = st.swap
                assert new in st.text and new in mats
                assert f" {normalize(orig)} " not in f" {normalize(st.text)} ", (orig, st.text)
            if st.kind == "supported":
                body = LF.strip_hedge_prefix(st.text)
                assert body in mats, st.text
        ends = [st.end for st in r.statements]
        assert ends == sorted(ends)
    for want in [("supported", "Correct"), ("supported", "Hedged correct"), ("swapped", "Wrong"),
                 ("swapped", "Hedged wrong"), ("filler", "Vague"), ("answer", "Correct"), ("answer", "Wrong")]:
        assert want in kinds, want


def test_llm_backend_long_form_rows_over_http():
    """The bench's llm path end to end on a real OpenAI-protocol server (replay mode): the judge rewrites
    statements ("It" -> "The Eiffel Tower"), the backend aligns them back to spans, the bench scores them."""
    import json

    from core.config import RLFHConfig
    from conftest import free_port
    from openai_server import BackgroundServer, create_app

    r = _case(1)
    truth = [st.label for st in r.statements]
    rewritten = ["The Eiffel Tower is a wrought-iron lattice tower in Paris",
                 "The Eiffel Tower is probably 330 metres tall", "The tower was built from 1884 to 1889",
                 "Let me explain", "Gustave Eiffel was a French civil engineer", "The answer is Gustave Eiffel"]
    extract = json.dumps({"sentences": [{"id": i + 1, "statements": [t]} for i, t in enumerate(rewritten)]})
    verify = json.dumps({"results": [{"id": f"S{i + 1}", "label": lab, "informativeness": 3, "confidence": 0.9}
                                     for i, lab in enumerate(truth)]})
    replay = [{"match": ["atomic statements", "Gustave Eiffel was a French civil engineer"], "reply": extract},
              {"match": ["For every statement give", "330 metres"], "reply": verify}]
    with BackgroundServer(create_app("replay", replay=replay), free_port()) as srv:
        cfg = RLFHConfig.load(environ={}, model_url=srv.url, annotate_model="judge", llm_timeout_s=10.0,
                              llm_max_retries=1)
        v = Verifier(cfg, backend="llm")
        m = LF.score_verifier("llm", v, [r], use_gold=False).metrics()
    assert m["accuracy"] == 1.0, m
    assert m["span_cover"] >= 0.8 and m["token_sign_agreement"] >= 0.9, m
    assert m["ms_per_response"] > 0
