"""The gold-answer grader and the report's statistics, on hand-written cases and hand-computed values."""
from __future__ import annotations

import math

import numpy as np
import pytest

from core.questions import choice_options
from core.grader import (CORRECT, INCORRECT, NOT_ATTEMPTED, detect_abstention, detect_hedge,
                                grade_answer, normalize_answer, polarity, token_f1)
from evaluation.stats import (binom_cdf_half, bootstrap_ci, bootstrap_mean_ci, f_score, mcnemar_exact,
                              mcnemar_paired, outcome_metrics, paired_bootstrap_diff)


def g(answer, gold, question=None):
    return grade_answer(answer, gold, question)


# ----------------------------------------------------------------------------- normalisation

@pytest.mark.parametrize("text,expected", [
    ("The Joshua Tree!", "joshua tree"),
    ("an Apple, a day", "apple day"),
    ("Fifteen", "15"),
    ("twenty-one years", "21 years"),
    ("one hundred and five", "105"),
    ("the 32nd Attorney General", "32 attorney general"),
    ("thirty-second", "32"),
    ("1,000 people", "1000 people"),
    ("Nürnberg", "nurnberg"),
    ("Nevada's capital", "nevada capital"),
    ("", ""),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_token_f1_hand_computed():
    # answer content {victor, mature}, gold content {victor, john, mature}: p = 1, r = 2/3, F1 = 0.8
    assert token_f1("Victor Mature", "Victor John Mature") == pytest.approx(0.8)
    assert token_f1("Paris", "London") == 0.0
    assert token_f1("", "London") == 0.0


# ----------------------------------------------------------------------------- grades

def test_correct_plain_and_contained():
    r = g("Nevada", "Nevada")
    assert (r.grade, r.reason, r.hedged) == (CORRECT, "gold_in_answer", False)
    r = g("She was the 32nd Attorney General of Nevada.", "Nevada")
    assert r.grade == CORRECT and r.reason == "gold_in_answer"


def test_incorrect_plain():
    r = g("She was the Attorney General of Wyoming.", "Nevada")
    assert (r.grade, r.reason) == (INCORRECT, "mismatch")


def test_answer_in_gold_for_short_answers():
    r = g("Howard Marks", "Dennis Howard Marks")
    assert (r.grade, r.reason) == (CORRECT, "answer_in_gold")
    r = g("Joshua Tree", "The Joshua Tree")
    assert r.grade == CORRECT


def test_partial_answer_is_incorrect():
    # one of three gold words: too little of the gold to count
    r = g("Dennis", "Dennis Howard Marks")
    assert (r.grade, r.reason) == (INCORRECT, "partial")
    r = g("It was released in October.", "October 2, 2012")
    assert (r.grade, r.reason) == (INCORRECT, "partial")


def test_hedged_correct_is_correct_and_hedged_wrong_is_incorrect():
    r = g("I think it was probably Nevada.", "Nevada")
    assert r.grade == CORRECT and r.hedged
    r = g("It might be Wyoming, I believe.", "Nevada")
    assert r.grade == INCORRECT and r.hedged
    # an abstention phrase followed by a guess is a hedged answer, graded on the guess
    r = g("I'm not sure, but I think it is Wyoming.", "Nevada")
    assert r.grade == INCORRECT and r.hedged and not r.abstained
    r = g("I'm not sure, but I think it is Nevada.", "Nevada")
    assert r.grade == CORRECT and r.hedged


@pytest.mark.parametrize("answer", [
    "I don't know.", "I do not know the answer to that question.", "I'm not sure.",
    "I cannot answer that question.", "There is no information about this in the text.",
    "Sorry, I don't have enough information to answer.", "Unknown", "I am unable to determine that.",
])
def test_abstentions_are_not_attempted(answer):
    r = g(answer, "Nevada")
    assert (r.grade, r.reason, r.abstained) == (NOT_ATTEMPTED, "abstain", True)
    assert detect_abstention(answer)


def test_abstention_that_repeats_the_options_is_not_attempted():
    q = "Which tennis player won more Grand Slam titles, Henri Leconte or Jonathan Stark?"
    r = g("I don't know whether Henri Leconte or Jonathan Stark won more titles.", "Jonathan Stark", q)
    assert r.grade == NOT_ATTEMPTED


def test_empty_answer_is_not_attempted():
    for ans in ("", "   ", "...", None):
        r = g(ans, "Nevada")
        assert (r.grade, r.reason) == (NOT_ATTEMPTED, "empty")


def test_numbers_words_and_mismatch():
    assert g("He won it at the age of fifteen.", "15").grade == CORRECT
    assert g("The film was released in 1938.", "1932").grade == INCORRECT
    assert g("The film was released in 1938.", "1932").reason == "number_mismatch"
    assert g("twenty one", "21").grade == CORRECT
    # a number inside a longer gold must match exactly even when the words overlap
    r = g("The accident happened on April 28, 1989.", "April 28, 1988")
    assert r.grade == INCORRECT


def test_yes_no_questions():
    assert g("No, they are not.", "no").grade == CORRECT
    assert g("Yes, both are American rock bands.", "no").grade == INCORRECT
    r = g("Fuzhou is in Fujian, while Malipo County is in Yunnan.", "no")
    assert (r.grade, r.reason) == (CORRECT, "yes_no_implicit")
    assert polarity("Both are American rock bands.") == ("yes", False)
    assert polarity("No. They differ.") == ("no", True)
    # offering both answers is no answer (a loophole a trained model found): incorrect, whatever the gold
    for both in ("Yes or no", "yes and no.", "Yes/no", "No, or yes."):
        for gold in ("yes", "no"):
            r = g(both, gold)
            assert (r.grade, r.reason) == (INCORRECT, "both_options"), (both, gold)


def test_implicit_yes_no_is_read_clause_by_clause():
    # (question, answer, the answer's reading): answers of the embedded model to training-split questions. The
    # whole-answer reading took any "but" / "while" / "different" for a no, so "both X, but ..." read as no.
    cases = [
        ("Are Archive and Young the Giant both rock groups?",
         "Archive and Young are both rock groups, but they are named after different artists.", "yes"),
        ("Are Paphiopedilum and Soleirolia both flowering plants?",
         "Paphiopedilum and Soleirolia are both flowering plants, but they belong to different families.", "yes"),
        # parallel clauses that each repeat the predicate
        ("Are Lucie Safarova and Pavel Slozil both Czech tennis players?",
         "Lucie Safarova is a Czech tennis player, while Pavel Slozil is a Czech tennis player.", "yes"),
        # a negation in the first clause, or in a later clause that repeats the predicate
        ("Are Jane and First for Women both women's magazines?",
         "Jane and First are not both women's magazines.", "no"),
        ("Are Lesquerella and Thujopsis both names of a genus of flowering plants?",
         "Lesquerella and Thujopsis are both genera of flowering plants, but they are not names of the same genus.",
         "no"),
        # a "same" question: "both European" is not "the same country"; "different" answers it
        ("Are Daniela Hantuchova and Balazs Taroczy of the same nationality?",
         "Daniela Hantuchova and Balazs Taroczy are both European, but they have different nationalities.", "no"),
        ("Are David Vincent and Troy Sanders members of the same band?",
         "David Vincent and Troy Sanders are members of the same band, but they joined in different years.", "yes"),
        # a contrast of two different things stays a no
        ("Are Fuzhou, Jiangxi and Malipo County located in the same province?",
         "Fuzhou is located in the Fujian province, while Malipo County is located in the Guangdong province.", "no"),
    ]
    for q, a, want in cases:
        assert polarity(a, q) == (want, False), (q, a)
        other = "no" if want == "yes" else "yes"
        assert (g(a, want, q).grade, g(a, other, q).grade) == (CORRECT, INCORRECT), (q, a)
    # "both" is no predicate word: "both artists" does not answer "both animators?"
    r = g("David Zennie and Norman McLaren are both artists, but one directs films.", "yes",
          "Are David Zennie and Norman McLaren both animators?")
    assert (r.grade, r.reason) == (INCORRECT, "yes_no_unanswered")


def test_choice_questions_use_the_option_named_first():
    q = "Which tennis player won more Grand Slam titles, Henri Leconte or Jonathan Stark?"
    assert choice_options(q) == ("Henri Leconte", "Jonathan Stark")
    assert g("Jonathan Stark won more titles than Henri Leconte.", "Jonathan Stark", q).grade == CORRECT
    # contains the gold, but chose the other option: incorrect
    r = g("Henri Leconte won more titles than Jonathan Stark.", "Jonathan Stark", q)
    assert (r.grade, r.reason) == (INCORRECT, "choice")
    # surname only
    assert g("Stark did.", "Jonathan Stark", q).grade == CORRECT
    q2 = "Which band was founded first, Hole, the rock band that Courtney Love was a frontwoman of, or The Wolfhounds?"
    assert choice_options(q2) == ("Hole", "The Wolfhounds")
    assert g("Hole was founded before The Wolfhounds.", "The Wolfhounds", q2).grade == INCORRECT
    assert choice_options("Does Lüliang or Fuxin have a larger population?") == ("Lüliang", "Fuxin")
    assert choice_options("What is the capital of France?") is None
    # naming both options as alternatives repeats the question: incorrect; a comparison still chooses
    for both in ("Henri Leconte or Jonathan Stark", "Either Jonathan Stark or Henri Leconte.",
                 "Both Henri Leconte and Jonathan Stark", "Leconte or Stark"):
        r = g(both, "Jonathan Stark", q)
        assert (r.grade, r.reason) == (INCORRECT, "both_options"), both
    assert g("Jonathan Stark, not Henri Leconte.", "Jonathan Stark", q).grade == CORRECT


def test_choice_gold_spelled_out_longer_than_its_option_still_picks_the_option():
    # HaluEval's gold spells out what the question shortens; the answer picks the option, not the spelling
    q = "Which author was born first, Lorraine Hansberry or Sandra Gulland?"
    r = grade_answer("Lorraine Hansberry was born in 1930.", "Lorraine Vivian Hansberry", q)
    assert (r.grade, r.reason) == (CORRECT, "choice")
    r = grade_answer("Sandra Gulland was born first.", "Lorraine Vivian Hansberry", q)
    assert (r.grade, r.reason) == (INCORRECT, "choice")
    q = "Which genus has more species, Fir or Chelone?"
    assert grade_answer("The genus Fir is larger than Chelone.", "Firs", q).grade == CORRECT
    assert grade_answer("Chelone has more species.", "Firs", q).grade == INCORRECT
    # a gold that shares no word with either option (or as many with both) picks none: the other rules decide
    q = "Which is older, Camp A or Camp B?"
    assert grade_answer("Camp A is older.", "neither", q).reason != "choice"


def test_gold_named_in_the_question_needs_a_choice():
    q = ("Which hospital is known to have more services out of Sibley Memorial Hospital and MedStar Georgetown "
         "University Hospital?")
    gold = "MedStar Georgetown University Hospital"
    # the gold is in the answer, but the answer picks the other hospital
    r = g("Sibley Memorial Hospital has more services than MedStar Georgetown University Hospital.", gold, q)
    assert (r.grade, r.reason) == (INCORRECT, "choice")
    assert g("MedStar Georgetown University Hospital has more services.", gold, q).grade == CORRECT
    assert g("Georgetown does.", gold, q).grade == CORRECT


def test_question_echoed_back_is_incorrect():
    q = "In between Michael Curtiz and Peter Segal who directed classic films from the silent era?"
    r = g("In between Michael Curtiz and Peter Segal, who directed classic films from the silent era?",
          "Michael Curtiz", q)
    assert (r.grade, r.reason) == (INCORRECT, "echo")


def test_missing_gold_is_a_clear_error():
    with pytest.raises(ValueError, match="right_answer"):
        grade_answer("Nevada", "")


def test_detect_hedge():
    assert detect_hedge("It is probably Nevada.")
    assert not detect_hedge("It is Nevada.")


# ----------------------------------------------------------------------------- metrics

def test_outcome_metrics_and_f_score_hand_computed():
    grades = [CORRECT] * 3 + [INCORRECT] * 1 + [NOT_ATTEMPTED] * 6
    m = outcome_metrics(grades)
    assert m["correct"] == pytest.approx(0.3)
    assert m["incorrect"] == pytest.approx(0.1)
    assert m["not_attempted"] == pytest.approx(0.6)
    assert m["accuracy_given_attempted"] == pytest.approx(0.75)
    # harmonic mean of 0.3 and 0.75 = 2*0.3*0.75/1.05
    assert m["f_score"] == pytest.approx(2 * 0.3 * 0.75 / 1.05)
    assert f_score(0.0, 0.0) == 0.0
    assert f_score(0.5, 0.5) == pytest.approx(0.5)
    allna = outcome_metrics([NOT_ATTEMPTED] * 4)
    assert allna["accuracy_given_attempted"] == 0.0 and allna["f_score"] == 0.0


def test_unknown_grade_label_is_rejected():
    with pytest.raises(ValueError, match="unknown grade"):
        outcome_metrics(["correct", "right"])


def test_bootstrap_ci_contains_point_estimate_and_narrows_with_more_data():
    rng = np.random.default_rng(1)
    small = list(rng.choice([CORRECT, INCORRECT, NOT_ATTEMPTED], size=60, p=[0.2, 0.5, 0.3]))
    big = list(rng.choice([CORRECT, INCORRECT, NOT_ATTEMPTED], size=2000, p=[0.2, 0.5, 0.3]))
    for grades in (small, big):
        m = outcome_metrics(grades)
        ci = bootstrap_ci(grades, n_boot=1000, seed=3)
        for k, (lo, hi) in ci.items():
            assert lo <= m[k] <= hi, k
    ci_s, ci_b = bootstrap_ci(small, n_boot=1000, seed=3), bootstrap_ci(big, n_boot=1000, seed=3)
    for k in ("correct", "incorrect", "not_attempted", "f_score"):
        assert ci_b[k][1] - ci_b[k][0] < ci_s[k][1] - ci_s[k][0], k
    # seeded: identical on repeat, different seed differs
    assert bootstrap_ci(small, n_boot=500, seed=7) == bootstrap_ci(small, n_boot=500, seed=7)
    # roughly the normal-approximation width for a proportion: 2 * 1.96 * sqrt(p(1-p)/n)
    p = ci_b["incorrect"]
    expected = 2 * 1.96 * math.sqrt(0.5 * 0.5 / 2000)
    assert abs((p[1] - p[0]) - expected) < 0.3 * expected


def test_bootstrap_mean_ci():
    lo, hi = bootstrap_mean_ci([1.0, 2.0, 3.0, 4.0] * 25, n_boot=500, seed=0)
    assert lo < 2.5 < hi
    assert all(math.isnan(x) for x in bootstrap_mean_ci([], n_boot=10))


def test_paired_bootstrap_diff_sign_and_ci():
    a = [INCORRECT] * 50 + [CORRECT] * 10
    b = [NOT_ATTEMPTED] * 30 + [INCORRECT] * 20 + [CORRECT] * 10
    d = paired_bootstrap_diff(a, b, n_boot=500, seed=0)
    v, lo, hi = d["incorrect"]
    assert v == pytest.approx(-30 / 60)
    assert lo <= v <= hi and hi < 0
    assert d["correct"][0] == 0.0
    with pytest.raises(ValueError, match="pair"):
        paired_bootstrap_diff(a, b[:-1])


# ----------------------------------------------------------------------------- McNemar

def test_mcnemar_exact_hand_computed():
    # b=10, c=2: n=12, P(X<=2) = (1 + 12 + 66) / 4096 = 79/4096; two-sided p = 2 * 79/4096
    assert mcnemar_exact(10, 2) == pytest.approx(2 * 79 / 4096, rel=1e-12)
    assert mcnemar_exact(2, 10) == mcnemar_exact(10, 2)
    # b=5, c=0: 2 * (1/32) = 0.0625 (not significant at 0.05 despite 5-0)
    assert mcnemar_exact(5, 0) == pytest.approx(0.0625)
    # b=6, c=0: 2/64 = 0.03125
    assert mcnemar_exact(6, 0) == pytest.approx(0.03125)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(7, 7) == 1.0  # capped at 1
    assert binom_cdf_half(2, 4) == pytest.approx(11 / 16)
    # large counts stay finite and symmetric: 500 vs 400 is clearly significant
    p = mcnemar_exact(500, 400)
    assert 0 < p < 0.002
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def test_mcnemar_paired_counts():
    a = [True, True, True, False, False, True]
    b = [False, False, True, False, True, False]
    r = mcnemar_paired(a, b)
    assert (r["a_only"], r["b_only"], r["both"], r["neither"]) == (3, 1, 1, 1)
    assert r["p_value"] == pytest.approx(mcnemar_exact(3, 1))
    assert r["p_value"] == pytest.approx(2 * 5 / 16)


# ----------------------------------------------------------------------------- the strict reading (issue 9)

def test_strict_reading_hyphenated_compound_is_not_the_gold():
    q = "What nationality is the director of film Meeting Evil?"
    a = "The director of film Meeting Evil is a Canadian-American actor and director."
    r = grade_answer(a, "American", q)
    assert (r.grade, r.reason) == (INCORRECT, "compound")
    assert grade_answer(a, "American", q, strict=False).grade == CORRECT  # the lenient reading, reported beside
    # a plain mention still counts, even when a compound appears too
    assert grade_answer("He is American, born to a Canadian-American family.", "American", q).grade == CORRECT
    assert grade_answer("He is an American actor.", "American", q).grade == CORRECT


def test_strict_reading_yes_no_answer_must_address_the_question():
    q = "Are the directors of films Border Bandits and Fun both from the same country?"
    off = "The film Border Bandits is a film that has both a male and female protagonist."
    r = grade_answer(off, "yes", q)
    assert (r.grade, r.reason) == (INCORRECT, "yes_no_unanswered")
    assert grade_answer(off, "yes", q, strict=False).grade == CORRECT
    # answers that do address it keep their implicit reading, and explicit yes/no is unaffected
    assert grade_answer("Both directors are from the same country.", "yes", q).grade == CORRECT
    assert grade_answer("Yes.", "yes", q).grade == CORRECT
    assert grade_answer("The directors are from different countries.", "yes", q).grade == INCORRECT


# The grader (evaluation: did the model decline?) and the verifier (training: does this response carry a checkable
# claim, or only a refusal?) decide abstention independently, on purpose. Where they differ is pinned here, so a
# change to either side is a decision: (response, grader says abstained, verifier says abstained).
ABSTENTION_JUDGES = [
    # both: a refusal and nothing else
    ("I don't know.", True, True),
    ("I'm not sure about that.", True, True),
    ("I'm sorry, I don't know.", True, True),
    ("I'm sorry, I can't help with that.", True, True),
    # neither: a guess follows the refusal
    ("I don't know, maybe Paris.", False, False),
    ("I'm sorry, but the capital is Paris.", False, False),
    # grader only: it reads the apology / "no information" / "N/A" as declining; the verifier needs a refusal
    # phrase and no content words left ("wrote Hamlet" is content), else the response is graded statement by statement
    ("I'm sorry.", True, False),
    ("No information.", True, False),
    ("N/A", True, False),
    ("Beyond my knowledge.", True, False),
    ("I don't know who wrote Hamlet.", True, False),
    # verifier only: "unclear" and "I don't remember" are refusals to the verifier, not to the gold grader
    ("It's unclear.", False, True),
    ("I don't remember.", False, True),
]


@pytest.mark.parametrize("response, grader, verifier", ABSTENTION_JUDGES)
def test_grader_and_verifier_abstention_differ_only_where_pinned(response, grader, verifier):
    from verifier_service.text import is_abstention_text
    assert (detect_abstention(response), is_abstention_text(response)) == (grader, verifier)


def test_first_sentence_scope_grades_the_answer_sentence_only():
    """GRADE_SCOPE=first-sentence (a grounded reply: the answer, then the passage's facts behind it): the
    justification can neither make a wrong answer right nor a right one wrong; abbreviations do not end the answer."""
    from core.grader import graded_part
    q = "Who directed the film Jaws?"
    wrong_then_gold = "George Lucas directed it. The passage says Steven Spielberg made the film in 1975."
    assert grade_answer(wrong_then_gold, "Steven Spielberg", q).grade == CORRECT           # whole: gold inside
    g = grade_answer(wrong_then_gold, "Steven Spielberg", q, scope="first-sentence")
    assert (g.grade, g.reason) == (INCORRECT, "mismatch")
    right_then_other = "Steven Spielberg directed it. George Lucas was his friend."
    assert grade_answer(right_then_other, "Steven Spielberg", q, scope="first-sentence").grade == CORRECT
    assert graded_part("It was born in Washington, D.C. in 1990. Then more.", "first-sentence") == \
        "It was born in Washington, D.C. in 1990."
    assert grade_answer("I don't know. The passage does not say who.", "Steven Spielberg", q,
                        scope="first-sentence").grade == NOT_ATTEMPTED
    assert graded_part("  ", "first-sentence") == "  "        # nothing to split: graded as given (empty)
    with pytest.raises(ValueError, match="GRADE_SCOPE"):
        grade_answer("Spielberg.", "Steven Spielberg", q, scope="sentence")


# ----------------------------------------------------------------------------- grader v4's named rules

@pytest.mark.parametrize("answer,gold,question,grade,reason", [
    # not an answer, though the gold's words are there
    ("J. Walter Ruben is a co-author of Open Range, a 1927 film written by Zane Grey.", "Zane Grey",
     "Which author also was a co-author for Open Range?", INCORRECT, "other_candidate"),
    ("Zane Grey is a co-author of Open Range, a 1927 film.", "Zane Grey",
     "Which author also was a co-author for Open Range?", CORRECT, "gold_in_answer"),
    ("Elizabeth Pena (September 23, 1959) was an actress.", "1959",          # a year asked: the subject is who
     "Across the Moon stars another actress born in which year?", CORRECT, "gold_in_answer"),
    ("The Old Ones are more powerful than the Vampire Intelligences.", "Vampire Intelligences",
     "Who is more powerful than the Old Ones in the Palladium Books?", INCORRECT, "inverted"),
    ("The Vampire Intelligences are more powerful than the Old Ones.", "Vampire Intelligences",
     "Who is more powerful than the Old Ones in the Palladium Books?", CORRECT, "gold_in_answer"),
    ("The offensive was an effort to surround Muammar Gaddafi's hometown of Sirte.", "Muammar Gaddafi",
     "Which leading Libyan revolutionary was killed in the offensive?", INCORRECT, "possessive"),
    ("Stephen King's 1986 novel It contains Pennywise.", "Stephen King",
     "Which author wrote a novel containing Pennywise?", CORRECT, "gold_in_answer"),
    ("This Is Elvis is a 1981 documentary film directed by Andrew Solt.", "This Is Elvis",
     "Which documentary is older, This Is Elvis or Capturing the Friedmans?", INCORRECT, "no_comparison"),
    ("This Is Elvis is older.", "This Is Elvis",
     "Which documentary is older, This Is Elvis or Capturing the Friedmans?", CORRECT, "choice"),
    ("This Is Elvis (1981) came out before Capturing the Friedmans (2003).", "This Is Elvis",
     "Which documentary is older, This Is Elvis or Capturing the Friedmans?", CORRECT, "choice"),
    # right answers said otherwise
    ("Jo Yeo-jeong is from South Korea.", "South Korean", "Jo Yeo-jeong is from what country?", CORRECT, "alias"),
    ("The folktale is Korean.", "South Korean",          # the question's own "Korean" is no answer
     "The famous Korean folktale stars Jo Yeo-jeong from what country?", INCORRECT, "partial"),
    ("David Mamet is a film director, not a writer.", "David Alan Mamet",
     "Between Augusto Roa Bastos and David Mamet, who is a film director?", CORRECT, "name_parts"),
    ("The director is David Mamet, known for his plays.", "David Alan Mamet", "Who directed Heist?",
     CORRECT, "name_parts"),
    ("His brother Virgil was the Tombstone City Marshal.", "Virgil Walter Earp",
     "Wyatt Earp was the brother of which US marshal of Tombstone?", CORRECT, "name_parts"),
    ("The head coach was born in 1958.", "January 14, 1958", "The head coach was born when?", CORRECT,
     "date_year"),
    ("The head coach was born in March 1958.", "January 14, 1958", "The head coach was born when?", INCORRECT,
     "partial"),
    ("The Navy Reserve Unit got its nickname from the first initials \"C.B.\"",
     "first initials \"C.B.\" from the words Construction Battalion",
     "Where did the Navy Reserve Unit get its nickname?", CORRECT, "f1_new"),
    ("A Very Harold & Kumar 3D Christmas is part of the Marvel Cinematic Universe series.",
     "the \"Harold & Kumar\" series.", "A Very Harold & Kumar 3D Christmas is part of what series?", INCORRECT,
     "partial"),
])
def test_grader_v4_named_rules(answer, gold, question, grade, reason):
    got = grade_answer(answer, gold, question)
    assert (got.grade, got.reason) == (grade, reason)
