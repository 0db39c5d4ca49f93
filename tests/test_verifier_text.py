"""Sentence/statement splitting with exact spans, hedge and abstention detection, entities."""
from __future__ import annotations

import pytest

from verifier_service import text as T


def _stmt_texts(resp: str) -> list[list[str]]:
    d = T.decompose(resp)
    return [[s.text for s in sts] for sts in d.statements]


def test_sentence_split_respects_abbreviations_and_initials():
    resp = "Dr. J. K. Rowling lives in the U.S. now. She wrote 7 books! Is it 3.5 or 4? Yes."
    sents = T.split_sentences(resp)
    assert [s.text for s in sents] == ["Dr. J. K. Rowling lives in the U.S. now.", "She wrote 7 books!",
                                       "Is it 3.5 or 4?", "Yes."]
    for s in sents:
        assert resp[s.start:s.end] == s.text


def test_sentence_split_newlines_and_whitespace():
    resp = "  First line without period\nSecond one.   \n\n  Third.  "
    sents = T.split_sentences(resp)
    assert [s.text for s in sents] == ["First line without period", "Second one.", "Third."]
    assert all(resp[s.start:s.end] == s.text for s in sents)


@pytest.mark.parametrize("resp, expected", [
    ("He was born in Paris and studied in Lyon.", [["He was born in Paris", "studied in Lyon"]]),
    ("The members were Dave, Paul, and Andy.", [["The members were Dave", "Paul", "Andy"]]),
    ("Both Kings of Leon and The Shins are American bands.", [["Both Kings of Leon and The Shins are American bands"]]),
    ("She sings; he plays drums.", [["She sings", "he plays drums"]]),
    ("It was founded in 1985, but it split in 1990.", [["It was founded in 1985", "it split in 1990"]]),
    ("Nevada.", [["Nevada"]]),
])
def test_statement_split(resp, expected):
    assert _stmt_texts(resp) == expected


def test_statement_spans_index_the_response_exactly(halueval_test_items):
    for it in halueval_test_items[:150]:
        for resp in (it.right_answer, it.hallucinated_answer, " ".join(it.knowledge)[:600]):
            d = T.decompose(resp)
            for sent, sts in zip(d.sentences, d.statements):
                assert resp[sent.start:sent.end] == sent.text
                for st in sts:
                    assert resp[st.start:st.end] == st.text
                    assert sent.start <= st.start < st.end <= sent.end
                    assert st.text == st.text.strip() and st.text


@pytest.mark.parametrize("text", [
    "I think it is Paris.", "It is probably Paris.", "It might be Paris.", "Possibly Paris.",
    "I believe the answer is Paris.", "It may be Paris.", "Paris, I think.", "Perhaps Paris.",
    "It was founded in about 1900.", "I'm not sure, but it could be Paris.",
])
def test_hedges_detected(text):
    d = T.decompose(text)
    flags = [h for hs in d.hedged for h in hs]
    assert flags and all(flags), (text, d.statements)
    assert not d.abstained


@pytest.mark.parametrize("text", [
    "It is Paris.", "He was born in May 1990.", "The band has about members.", "Paris is the capital of France.",
])
def test_no_false_hedges(text):
    d = T.decompose(text)
    assert not any(h for hs in d.hedged for h in hs), text


def test_hedge_scope_is_per_statement():
    d = T.decompose("He was born in Paris and he might have studied in Lyon.")
    assert d.hedged == [[False, True]]


@pytest.mark.parametrize("text", [
    "I don't know.", "I do not know the answer.", "I'm not sure.", "I cannot answer that question.",
    "Sorry, I have no idea.", "I don't have enough information to answer this.", "Unknown.",
    "I'm not sure. I don't know.",
])
def test_abstentions(text):
    d = T.decompose(text)
    assert d.abstained, text
    assert sum(len(s) for s in d.statements) == 0


@pytest.mark.parametrize("text", [
    "I'm not sure, but I think it is Paris.", "I don't know who won, but the final was in 1994.",
    "Paris.", "The Unknown Soldier is buried in Arlington.",
])
def test_not_abstentions(text):
    d = T.decompose(text)
    assert not d.abstained, text
    assert sum(len(s) for s in d.statements) >= 1


def test_refusal_sentence_hedges_following_content():
    d = T.decompose("I'm not sure. It might be Paris. Maybe Lyon.")
    assert d.abstain_sentence == [True, False, False]
    assert not d.abstained
    assert all(h for hs in d.hedged for h in hs)


def test_entities_and_numbers():
    ents = {(e.text, e.kind) for e in T.entities(
        'Jonathan Stark (born April 3, 1971) won the 1994 French Open with "Hole" in St. Louis. He was 32nd.')}
    assert ("Jonathan Stark", "name") in ents
    assert ("April 3, 1971", "date") in ents
    assert ("French Open", "name") in ents
    assert ("Hole", "quoted") in ents
    assert ("St. Louis", "name") in ents
    assert T.numbers("It had 1,200 seats, two stages and a 32nd edition") == {"1200", "2", "32"}


def test_empty_and_symbol_only_text():
    for text in ("", "   ", "...", "?!"):
        d = T.decompose(text)
        assert d.sentences == [] and not d.abstained


def test_entities_and_sentences_stay_cheap_on_long_texts():
    """Two responses' worth of characters (40k), thousands of entities: sorted, non-overlapping, exact spans.
    How long it takes (linear work, not pairwise checks) is measured by `rlfh bench scaling`, not asserted here."""
    base = "Jonathan Stark was born on April 3, 1971 in Medford, Oregon. He won 2 titles with Henri Leconte in 1994. "
    text = base * 400
    ents = T.entities(text)
    sents = T.split_sentences(text)
    assert len(sents) == 800 and len(ents) > 2500
    assert all(a.end <= b.start for a, b in zip(ents, ents[1:]))      # sorted, non-overlapping
    assert all(text[e.start:e.end] == e.text for e in ents)
