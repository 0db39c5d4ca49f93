"""The evidence backend's fact split (verifier_service.text.split_facts via decompose) on hand-written
sentences of the kinds the policy writes: clauses, appositives, "born on DATE in PLACE", lists, relative
clauses, brackets; and the reward landing on the tokens of the fact that states it."""
from __future__ import annotations

import pytest

from verifier_service import text as T


def _facts(resp: str, question: str = "") -> list[str]:
    d = T.decompose(resp, question)
    out = [s.text for sts in d.statements for s in sts]
    for sts in d.statements:
        for s in sts:
            assert resp[s.start:s.end] == s.text
    return out


@pytest.mark.parametrize("resp, expected", [
    # born on DATE in PLACE: the place is its own fact (the subject stays with the first fact)
    ("The British geologist Sir Charles Lyell was born on November 14, 1797, in a Scottish village called "
     "Kirkcaldmon.",
     ["The British geologist Sir Charles Lyell was born on November 14, 1797",
      "in a Scottish village called Kirkcaldmon"]),
    # appositive
    ("Ruth Madoff is the wife of Bernie Madoff, the convicted American financial fraudster.",
     ["Ruth Madoff is the wife of Bernie Madoff", "the convicted American financial fraudster"]),
    ("Chad Kroeger and Lee Gi-kwang are both from the same country, North Korea.",
     ["Chad Kroeger and Lee Gi-kwang are both from the same country", "North Korea"]),
    # brackets: the entity, each date, the predicate
    ("Elizabeth Peña (September 23, 1959 – October 14, 2014) was an American actress.",
     ["Elizabeth Peña", "September 23, 1959", "October 14, 2014", "was an American actress"]),
    ('The Bärenhäuter was influenced by the composer of "Hansel and Gretel" (1922).',
     ['The Bärenhäuter was influenced by the composer of "Hansel and Gretel"', "1922"]),
    # relative clauses, with and without a comma; "including"
    ("David Mamet is a film director who is a film noir.", ["David Mamet is a film director", "who is a film noir"]),
    ("The Las Vegas Hilton has 3056 hotel rooms, including 305 suites, which is a hotel in Winchester, Nevada.",
     ["The Las Vegas Hilton has 3056 hotel rooms", "including 305 suites", "which is a hotel in Winchester, Nevada"]),
    # lists
    ("Yook Sung-jae is a South Korean singer, actor, and host.",
     ["Yook Sung-jae is a South Korean singer", "actor", "host"]),
    # "and" that starts a new clause with its own subject
    ("Alissa White-Gluz is a death metal vocalist and Shifty Shellshock is a rapper.",
     ["Alissa White-Gluz is a death metal vocalist", "Shifty Shellshock is a rapper"]),
    ("Christina Applegate is a star of the film Nightingale and the actress is known for her role in Lone Star.",
     ["Christina Applegate is a star of the film Nightingale", "the actress is known for her role in Lone Star"]),
    # whole: compound subjects, a noun phrase with its relative clause, places, acronyms
    ("Onew and Judith Durham are both singers.", ["Onew and Judith Durham are both singers"]),
    ("The person who defeated the Agalassoi was Alexander the Great.",
     ["The person who defeated the Agalassoi was Alexander the Great"]),
    ("It is located in Winchester, Nevada.", ["It is located in Winchester, Nevada"]),
    ("The Alabama Army Ammunition Plant (ALAAP) was a munitions plant.",
     ["The Alabama Army Ammunition Plant (ALAAP) was a munitions plant"]),
    ("It was broken up in stages between 1987 and 2001.", ["It was broken up in stages between 1987 and 2001"]),
])
def test_fact_split(resp, expected):
    assert _facts(resp) == expected


def test_the_questions_frame_stays_with_its_answer():
    """A relative clause that only repeats the question's description of the subject is not a fact of its
    own; without the question it is cut."""
    q = "In what year was the playwright, who wrote, The Assignation, made England's first Poet Laureate?"
    resp = "The playwright, who wrote, The Assignation, was made England's first Poet Laureate in 1668."
    assert _facts(resp, q) == [resp[:-1]]
    q2 = "Der Bärenhäuter was influenced by the German composer who created which opera?"
    resp2 = 'The Bärenhäuter was influenced by the German composer who created "Hansel and Gretel".'
    assert _facts(resp2, q2) == [resp2[:-1]]
    assert len(_facts(resp2)) == 2


def test_reward_lands_on_the_tokens_of_each_fact():
    """One sentence, a right date and an invented place: the date's tokens get a positive label sign, the
    place's a negative one (a clause-level verifier gave the whole sentence one sign)."""
    import numpy as np

    from bench.longform import token_signs, tokens
    from core.verify_schema import VerifyRequest
    from verifier_service.core import Verifier
    resp = "Charles Lyell was born on 14 November 1797 in a Scottish village called Kirkcaldmon."
    req = VerifyRequest(question="Which geologist wrote Principles of Geology?", response=resp,
                        materials=["Sir Charles Lyell (born 14 November 1797 in Kinnordy, Scotland) was a "
                                   "geologist.", "Principles of Geology was written by Charles Lyell."],
                        gold_answer="Charles Lyell")
    res = Verifier(backend="evidence").verify(req)
    labels = {s.text: s.label for s in res.statements()}
    assert labels == {"Charles Lyell was born on 14 November 1797": "Correct",
                      "in a Scottish village called Kirkcaldmon": "Wrong"}
    signs = token_signs(res, resp)
    toks = tokens(resp)
    sign_of = {resp[a:b]: int(s) for (a, b), s in zip(toks, np.asarray(signs))}
    assert sign_of["1797"] == 1 and sign_of["Lyell"] == 1
    assert sign_of["Kirkcaldmon"] == -1 and sign_of["village"] == -1


def test_comma_clause_with_its_own_subject_and_country_names():
    assert _facts("Barton Mine was halted by a fire, Camlaren Mine was not.") == [
        "Barton Mine was halted by a fire", "Camlaren Mine was not"]
    from verifier_service.evidence import country_aliases
    assert "britain" in country_aliases("UK-based") and "united states" in country_aliases("American")
    assert country_aliases("Paris") == []
