"""Statements read against the question: which one answers it, and how much each does for it.

Two named rules, applied by the ``evidence`` and ``judge`` backends after every statement has its label
(:func:`apply_question_rules`):

- **the answer follows the grader** (:func:`answer_statement`): with a gold answer in the request, the statement
  that answers the question, in the reply's first sentence (or a later one that says "the answer is"), takes the
  gold grader's verdict on that sentence (``core.grader.grade_answer``): ``Correct`` when it grades correct, a
  wrong answer stays ``Wrong`` (each hedged when the statement is); its informativeness is 5. A sentence the
  grader reads as no answer (a restated question, a yes/no question answered with neither, an option named
  without the comparison asked for) has no answer statement. So the token-level reward and the outcome reward
  agree on the answer.
- **informativeness against the question** (:func:`informativeness_level`), the RLFH paper's five levels: 5
  answers the question, 4 is crucial to the answer (it states the gold answer, or the date, number or property
  a comparison or yes/no question turns on), 3 is relevant (about the question's subject: one of its predicate
  words), 2 is supplementary (only a name of the question, or nothing of it), 1 is useless (a restated
  question, a repeated statement, filler, a cut-off fragment). A copied passage sentence that does not bear on
  the question earns 2, so the paper's formula (truth scaled by informativeness) pays it little.

Every threshold is in :data:`RULES` (one record). Written on the tune part of
``bench/data/informativeness.jsonl``; its held-out part is only reported (`rlfh bench informativeness`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from core.lexicon import country_aliases_of
from core.grader import CORRECT, NOT_ATTEMPTED, grade_answer
from verifier_service import text as T
from verifier_service.question import QuestionInfo

GOOD, BAD = ("Correct", "Hedged correct"), ("Wrong", "Hedged wrong")
#: A later sentence that says it gives the answer can hold the answer statement ("So the answer is Gustave Eiffel")
ANSWER_CUE = re.compile(r"\banswer\s+(?:is|was|would\s+be|:)", re.IGNORECASE)

#: Grader reasons that mean "no answer was given" (nothing to label Wrong): the reply restated or echoed the
#: question, named both options, or named an option without the comparison asked for.
NO_ANSWER_REASONS = frozenset({"echo", "yes_no_unanswered", "both_options", "no_comparison", "empty", "abstain"})


@dataclass(frozen=True)
class QuestionRules:
    """The thresholds of the question rules, in one record."""

    repeat_share: float = 0.8        # a statement whose content words are this share of one earlier statement's
    restate_new_words: int = 0       # at most this many content words the question lacks: a restatement
    relevant_predicate_words: int = 1  # question predicate words (outside its names) a relevant statement repeats
    crucial_predicate_share: float = 0.5  # yes/no: share of the predicate a deciding statement repeats
    frame_words: int = 2             # predicate words a statement that fills the question's frame repeats
    frame_new_words: int = 2         # ... and the content words of its own it adds, when it adds no name or number


RULES = QuestionRules()


@dataclass
class StatementView:
    """What the rules read of one statement: its text and span, the label it got, and whether the backend's own
    rules took it for an answer (a stance, a chosen option, a candidate of the asked type)."""

    text: str
    start: int
    end: int
    label: str
    hedged: bool
    flagged_answer: bool


def answer_statement(sentence_text: str, sentence_start: int, statements: Sequence[StatementView],
                     question: str, gold: str, rules: "QuestionRules | None" = None) -> tuple[Optional[int], str, str]:
    """``(index, grade, reason)``: which statement of an answer sentence answers the question, and the gold
    grader's verdict on that sentence (``grade_answer``, strict, the sentence alone).

    A correct sentence is answered by the statement that completes its shortest right prefix (the answer is
    there once the prefix grades right: "Yes" of "Yes, both are American films"). An incorrect one is answered by
    a statement the backend labelled wrong too: the first it took for an answer, else the first that repeats
    ``frame_words`` of the question's predicate (its content words outside its names) and adds a name, a number or
    ``frame_new_words`` content words of its own. A reason in :data:`NO_ANSWER_REASONS`, or ``not_attempted``,
    means no statement answers; ``index`` is None then.
    """
    rules = rules or RULES
    g = grade_answer(sentence_text, gold, question)
    if g.grade == NOT_ATTEMPTED or g.reason in NO_ANSWER_REASONS or not statements:
        return None, g.grade, g.reason
    # the sentence's subject cut off as a bare name ("Lodewijk van den Berg" of "Lodewijk van den Berg (...) is a
    # Dutch engineer who flew on ...") says nothing yet: what is said of it answers
    said = [i for i, st in enumerate(statements) if i == len(statements) - 1 or not bare_name(st.text)]
    if g.grade == CORRECT:
        for i in said:
            prefix = sentence_text[:statements[i].end - sentence_start]
            if grade_answer(prefix, gold, question).grade == CORRECT:
                return i, g.grade, g.reason
        return len(statements) - 1, g.grade, g.reason
    # a wrong answer is one the backend found wrong too: a statement it labelled right is supported background
    # ("The Eiffel Tower is a wrought-iron lattice tower in Paris", before "So the answer is Gustave Eiffel"), one
    # it labelled Vague claims nothing ("That is a good question")
    said = [i for i in said if statements[i].label in BAD]
    flagged = [i for i in said if statements[i].flagged_answer]
    if flagged:
        return flagged[0], g.grade, g.reason
    # else the statement that fills the question's frame: it repeats the question's words and adds its own
    # ("The director of the film which had "Hell" on its soundtrack was Callahan")
    q = _stems(question)
    predicate = q - {w for n in _names_in(question) for w in T.content_words(n)}
    for i in said:
        st = statements[i]
        stems = _stems(st.text)
        own = {n for n in _names_in(st.text) if n not in T.normalize(question)}
        if len(stems & predicate) >= rules.frame_words and (
                own or T.numbers(st.text) - T.numbers(question) or len(stems - q) >= rules.frame_new_words):
            return i, g.grade, g.reason
    return None, g.grade, g.reason


def _stems(text: str) -> set[str]:
    return set(T.content_words(text))


def _names_in(text: str) -> set[str]:
    return {e.norm for e in T.entities(text) if e.kind in ("name", "quoted") and e.norm}


def bare_name(text: str) -> bool:
    """The statement is one name and nothing more (no number, no word outside it)."""
    names = _names_in(text)
    return len(names) == 1 and not T.numbers(text) and \
        _stems(text) <= {w for n in names for w in T.content_words(n)}


def states_gold(text: str, gold: Optional[str]) -> bool:
    """The statement states the gold answer (its words in order, a country's other name, or all its content
    words)."""
    if not gold:
        return False
    n = " " + T.normalize(text) + " "
    g = T.normalize(gold)
    if not g:
        return False
    if f" {g} " in n or any(f" {a} " in n for a in country_aliases_of(g)):
        return True
    gs = _stems(gold)
    return bool(gs) and gs <= _stems(text)


def informativeness_level(text: str, qi: QuestionInfo, gold: Optional[str], earlier: Sequence[str],
                          rules: QuestionRules = RULES) -> int:
    """The paper's informativeness (1-4) of a statement that does not answer the question (the answer is 5).

    1: no content word, a restatement of the question (at most ``restate_new_words`` content words the question
    lacks, no number or name of its own), or a repeat (``repeat_share`` of its content words are one earlier
    statement's); 4: it states the gold answer and repeats something of the question, or it gives the date or
    number a comparison turns on for one of the question's names, or, for a yes/no question, it says of one of
    the question's names ``crucial_predicate_share`` of the predicate; 3: it repeats ``relevant_predicate_words``
    of the question's predicate (its content words outside its names); 2: anything else (background).
    """
    stems = _stems(text)
    nums = T.numbers(text)
    if not stems and not nums:
        return 1
    for prev in earlier:
        ps = _stems(prev)
        if stems and ps and len(stems & ps) >= rules.repeat_share * len(stems):
            return 1
    if bare_name(text):
        return 1    # a bare name: nothing is said of it
    q_names = {T.normalize(n) for n in list(qi.entities) + list(qi.options)} - {""}
    name_stems = {s for n in q_names for s in T.content_words(n)}
    new = stems - qi.stems
    own_names = {n for n in _names_in(text) if f" {n} " not in qi.norm}
    if len(new) <= rules.restate_new_words and not (nums - T.numbers(qi.text)) and not own_names:
        return 1
    predicate = qi.stems - name_stems
    shared_pred = stems & predicate
    mentions_name = any(f" {n} " in " " + T.normalize(text) + " " for n in q_names if n)
    if states_gold(text, gold) and (shared_pred or mentions_name):
        return 4
    if mentions_name and (qi.year_compare or qi.direction) and (nums or any(m in stems for m in T.MONTHS)):
        return 4
    if qi.qtype == "yesno" and mentions_name and predicate and \
            len(shared_pred) >= rules.crucial_predicate_share * len(predicate):
        return 4
    if len(shared_pred) >= rules.relevant_predicate_words:
        return 3
    return 2


def apply_question_rules(sentences: list, question: str, gold: Optional[str], qi: QuestionInfo,
                         flagged: Sequence[Sequence[bool]], hedged: Sequence[Sequence[bool]],
                         rules: QuestionRules = RULES) -> Optional[tuple[int, int]]:
    """Apply both rules in place to a backend's result (``sentences``: :class:`core.verify_schema.Sentence`
    with their statements; ``flagged`` / ``hedged``: per sentence, per statement). Returns the answer
    statement's ``(sentence, statement)`` index, or None.

    Informativeness is set for every statement that is not ``Vague`` by the backend's own rules (those keep
    what the backend gave them: 1 or 2). With a gold answer the answer statement gets the grader's label and 5;
    without one it keeps the backend's label and informativeness (the ranker's own levels)."""
    answer_at: Optional[tuple[int, int]] = None
    # the answer sentence: the reply's first, or a later one that says it gives the answer ("So the answer is X")
    candidates = [si for si, s in enumerate(sentences) if s.statements]
    candidates = candidates[:1] + [si for si in candidates[1:] if ANSWER_CUE.search(sentences[si].text)]
    for si in candidates if gold else []:
        sent = sentences[si]
        views = [StatementView(st.text, st.start, st.end, st.label, hedged[si][i], flagged[si][i])
                 for i, st in enumerate(sent.statements)]
        idx, grade, _ = answer_statement(sent.text, sent.start, views, question, gold, rules)
        if idx is not None:
            st = sent.statements[idx]
            good = grade == CORRECT
            st.label = (GOOD if good else BAD)[1 if hedged[si][idx] else 0]
            st.informativeness = 5
            answer_at = (si, idx)
            break
    earlier: list[str] = []
    for si, sent in enumerate(sentences):
        for i, st in enumerate(sent.statements):
            if (si, i) == answer_at:
                pass
            elif not gold and flagged[si][i] and st.label != "Vague":
                pass   # no gold: the backend's ranking of a candidate answer stands
            elif st.label != "Vague":
                st.informativeness = informativeness_level(st.text, qi, gold, earlier, rules)
            earlier.append(st.text)
    return answer_at
