"""The evidence backend on the kinds of sentences the policy really writes (issue 27, tuned on the tune part
of bench/data/real_answers.jsonl): hand-written sentences and passages, one case per decomposition or
labelling rule (quoted titles, "known for", yes/no frames, cut-off words, closing quotes, restated
questions, country names)."""
from __future__ import annotations

import pytest

from core.config import RLFHConfig
from core.verify_schema import VerifyRequest
from test_decompose_facts import _facts   # the split, with every span checked against the text
from verifier_service.core import Verifier


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    return Verifier(RLFHConfig.load(environ={}), backend="evidence")


def _labels(verifier, question, response, materials, gold=None) -> list[tuple[str, str]]:
    res = verifier.verify(VerifyRequest(question=question, response=response, materials=materials,
                                        gold_answer=gold))
    return [(s.text, s.label) for s in res.statements()]


# ----------------------------------------------------------------------------- decomposition

def test_a_quoted_title_is_never_cut():
    # "and a" inside the title used to start a new fact: 'who was on the CBS sitcom "Two' + 'a Half Men" ...'
    facts = _facts('Jennifer Taylor was on the CBS sitcom "Two and a Half Men" during the horror film '
                   '"Zombie Night".')
    assert all(f.count('"') % 2 == 0 for f in facts), facts
    assert any('"Two and a Half Men"' in f for f in facts), facts
    assert _facts('The album includes "Salt, Pepper, and Vinegar" and two other songs.') == \
        ['The album includes "Salt, Pepper, and Vinegar" and two other songs']


def test_known_for_after_a_predicate_is_its_own_fact():
    assert _facts("Elizabeth Pena was a film actress known for her work in independent films.") == \
        ["Elizabeth Pena was a film actress", "known for her work in independent films"]
    assert _facts("Jennifer Taylor is an American actress best known for her role in a CBS sitcom.") == \
        ["Jennifer Taylor is an American actress", "best known for her role in a CBS sitcom"]
    assert _facts("Jennifer Taylor is an American actress, best known for her role in a CBS sitcom.") == \
        ["Jennifer Taylor is an American actress", "best known for her role in a CBS sitcom"]
    # "is known for" is the predicate itself, not a dependent
    assert _facts("The actress is known for her role in the film.") == ["The actress is known for her role in the film"]


def test_a_yes_no_frame_keeps_its_relative_clause_apart():
    q = "Are both Hottonia and Othonna genera of plants?"
    assert _facts("Hottonia and Othonna are both plants that are both Hottonia and Othonna.", q) == \
        ["Hottonia and Othonna are both plants", "that are both Hottonia and Othonna"]
    # a wh-question keeps the question's frame with its answer (one fact)
    q2 = "Which German composer created the opera?"
    assert len(_facts("It was the German composer who created the opera Fidelio.", q2)) == 1


# ----------------------------------------------------------------------------- labels

KUGEL = ["The Peter Kugel House is a historic house in Cape Cod National Seashore. It was built in 1970 to a "
         "design by architect Charlie Zehnder."]
Q_KUGEL = "The Peter Kugel House was built in 1970 to a design by which architect?"


@pytest.mark.parametrize("gold", [None, "Charlie Zehnder"])
def test_a_word_cut_off_by_the_token_limit_is_no_claim(verifier, gold):
    # "19" is the start of "1970": not an unsupported number. The fragment claims nothing yet: Vague.
    sts = _labels(verifier, Q_KUGEL, "The Peter Kugel House was built in 19", KUGEL, gold)
    assert [lab for _, lab in sts] == ["Vague"], sts
    # a finished wrong year is still Wrong
    sts = _labels(verifier, Q_KUGEL, "The Peter Kugel House was built in 1919.", KUGEL, gold)
    assert [lab for _, lab in sts] == ["Wrong"], sts


ZOMBIE = ["Zombie Night is a 2013 American zombie horror film starring Anthony Michael Hall and Shirley Jones.",
          "Jennifer Taylor is an American actress, best known for her role in the CBS sitcom Two and a Half Men."]
Q_ZOMBIE = "Zombie Night starred the actress who was on which CBS sitcom?"


def test_a_closing_quote_of_a_title_does_not_dangle(verifier):
    # no final period (the reply stopped), but the quoted title is closed: a claim, checked against the gold
    sts = _labels(verifier, Q_ZOMBIE, 'Zombie Night starred the actress who was on the CBS sitcom "Zombie Night"',
                  ZOMBIE, "Two and a Half Men")
    assert [lab for _, lab in sts] == ["Wrong"], sts
    # an open quote at the cut does dangle
    sts = _labels(verifier, Q_ZOMBIE, 'Jennifer Taylor was in films such as "', ZOMBIE, "Two and a Half Men")
    assert sts[-1][1] == "Vague", sts


RICHARDSON = ["James T. Richardson is a professor of sociology. He is notably outspoken on high-profile cases "
              "such as Elizabeth Smart and Patty Hearst."]
Q_RICH = "James T. Richardson is notably outspoken on which high-profile case that was born on February 20, 1954?"


@pytest.mark.parametrize("gold", [None, "Patty Hearst"])
@pytest.mark.parametrize("response", [
    "James T. Richardson is notably outspoken on a high-profile case that was born on February 20, 1954.",
    "James T. Richardson is notably outspoken on high-profile cases.",
])
def test_the_question_with_its_wh_word_filled_by_an_article_is_a_restatement(verifier, response, gold):
    sts = _labels(verifier, Q_RICH, response, RICHARDSON, gold)
    assert [lab for _, lab in sts] == ["Vague"], sts


def test_a_name_put_before_the_copied_question_is_an_answer_attempt(verifier):
    q = ("What is a 2011 British action comedy film parodying the James Bond secret agent genre, that features "
         "a song by the band Primal Scream?")
    mats = ["Johnny English Reborn is a 2011 British action comedy film parodying the James Bond secret agent "
            "genre.", "The soundtrack features a song by the band Primal Scream."]
    sts = _labels(verifier, q, "The band Primal Scream is a 2011 British action comedy film parodying the James "
                  "Bond secret agent genre.", mats, "Johnny English Reborn")
    assert [lab for _, lab in sts] == ["Wrong"], sts
    sts = _labels(verifier, q, "Johnny English Reborn is a 2011 British action comedy film parodying the James "
                  "Bond secret agent genre.", mats, "Johnny English Reborn")
    assert [lab for _, lab in sts] == ["Correct"], sts


@pytest.mark.parametrize("response, gold", [
    ("Jo Yeo-jeong is an actress from South Korea.", "South Korean"),
    ("Both killers have a common origin in the United States.", "American"),
])
def test_a_country_states_the_gold_nationality(verifier, response, gold):
    mats = ["Jo Yeo-jeong is a South Korean actress.", "Dean Corll was an American serial killer."]
    q = "What country is the actress from?" if "Jo" in response else "What country of origin do they share?"
    sts = _labels(verifier, q, response, mats, gold)
    assert sts[-1][1] == "Correct", sts
    wrong = response.replace("South Korea", "Japan").replace("the United States", "Canada")
    assert _labels(verifier, q, wrong, mats, gold)[-1][1] == "Wrong"


def test_a_coordinated_claim_is_not_joined_from_two_sentences(verifier):
    mats = ["Hottonia is a genus of aquatic flowering plants in the family Primulaceae.",
            "Othonna is a genus of flowering plants in the family Asteraceae."]
    q = "Are both Hottonia and Othonna genera of plants?"
    reply = "Hottonia and Othonna are both aquatic flowering plants in the genus Primulaceae."
    sts = _labels(verifier, q, reply, mats, None)
    assert sts[0][1] != "Correct" or len(sts) > 1, sts
    assert any(lab == "Wrong" for _, lab in sts), sts
    # with the gold answer, the statement that answers (its "both": yes) takes the gold grader's verdict
    assert _labels(verifier, q, reply, mats, "yes")[0][1] == "Correct"


BICKLE = ["The band's name is a word derived from Robert De Niro's character in Taxi Driver, Travis Bickle.",
          "Taxi Driver is a 1976 American neo-noir psychological thriller film directed by Martin Scorsese."]
Q_BICKLE = ("Who directed this American neo-noir psychological thriller film whose character portrayed by "
            "Robert De Niro gave inspiration to the name of the band Bickley?")


def test_words_the_evidence_lacks_make_a_claim_about_its_names_wrong(verifier):
    sts = _labels(verifier, Q_BICKLE, "Robert De Niro secretly purchased the famous guitar of the band Bickley.",
                  BICKLE)
    assert [lab for _, lab in sts] == ["Wrong"], sts
