"""Gold-answer grader: SimpleQA-style ``correct`` / ``incorrect`` / ``not_attempted``.

This is the evaluation's *primary* judge. It only compares the model's answer
with the dataset's gold answer (HaluEval ``right_answer``), so it is
independent of the training verifier that produced the rewards.

Rules, in order (each grade carries a ``reason`` code so a report can show why):

1. ``empty``: an answer with no words is ``not_attempted``.
2. ``abstain``: an explicit abstention ("I don't know", "I'm not sure", "cannot
   answer", "no information", "not mentioned"...) with no guess after it is
   ``not_attempted`` -- even when it repeats names from the question
   ("I don't know whether Leconte or Stark won more").  An abstention followed
   by a guess ("I'm not sure, but I think it is Nevada") is a *hedged answer*
   and is graded on the guess.
3. Hedged answers ("probably", "I think", "might be"...) are graded like plain
   ones: a hedged correct answer is ``correct``, a hedged wrong one is
   ``incorrect`` (SimpleQA's convention); ``Grade.hedged`` records the hedge.
4. Yes/no gold: the first explicit "yes"/"no" in the answer decides (``yes_no``);
   with neither, the answer is read clause by clause (:func:`polarity`: "A and B are
   both directors, but their styles differ" is a yes; "A is in Fujian, while B is in
   Yunnan" a no) (``yes_no_implicit``) -- in the
   strict reading (the default) only when the answer repeats at least half of the
   question's predicate words ("same", "nationality"), else ``incorrect``
   (``yes_no_unanswered``): an answer about something else says neither yes nor no.
5. Choice questions ("..., A or B?"): the option the answer names first is its
   choice; naming the gold option first is ``correct``, the other ``incorrect``.
6. Containment after normalisation (lowercase, punctuation and articles
   stripped, number words and ordinals to digits): gold inside the answer is
   ``correct`` (``gold_in_answer``) -- in the strict reading not when every
   mention is glued into a hyphenated compound ("Canadian-American" for
   "American": ``compound``, incorrect); a short answer inside the gold that covers
   at least half of the gold's words is ``correct`` (``answer_in_gold``:
   "Howard Marks" for "Dennis Howard Marks").
7. Token F1 between answer and gold >= ``F1_THRESHOLD`` is ``correct``
   (``f1``). Numbers must match exactly: a gold with a number is never
   correct by F1 when the answer's numbers differ.
8. Otherwise ``incorrect``: ``partial`` when the answer has some of the gold's
   words (too few), ``mismatch`` when it has none.

The scope (``GRADE_SCOPE``): ``whole`` grades the whole reply; ``first-sentence`` grades its first sentence only
(the answer of a grounded reply, "answer, then the facts from the passage that support it"), so a reply cannot
be right by naming more entities in its justification.
"""
from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass
from typing import Optional

from core.lexicon import country_aliases_of
from core.questions import choice_options
from core.sentences import split_sentences

#: Bumped whenever a rule changes some answer's grade; caches of grades (baselines/probe.py) key on it.
GRADER_VERSION = "4"   # 2: a choice gold spelled out longer than its option still names the option;
                      # 3: an implicit yes/no answer is read clause by clause (a "but" after "both" is no "no");
                      # 4: named rules for what is not an answer (a listed gold, another candidate first, an
                      #    inverted comparison, an option named without the comparison) and for right answers
                      #    said otherwise (a country's other name, a name without its middle names, a date's
                      #    year, the answer's own words against a long gold)

CORRECT, INCORRECT, NOT_ATTEMPTED = "correct", "incorrect", "not_attempted"
GRADES: tuple[str, ...] = (CORRECT, INCORRECT, NOT_ATTEMPTED)

F1_THRESHOLD = 0.6
SHORT_ANSWER_WORDS = 6          # "answer in gold" only applies to answers at most this long
ANSWER_IN_GOLD_COVERAGE = 0.5   # ...that cover at least this share of the gold's words
PREDICATE_SHARE = 0.5           # strict yes/no: an implicit answer repeats this share of the question's predicate

# ----------------------------------------------------------------------------- normalisation

_ARTICLES = {"a", "an", "the"}
# Words too common to count as evidence of an answer (for F1 and overlap; never for containment).
_STOPWORDS = _ARTICLES | {
    "of", "in", "on", "at", "to", "for", "by", "with", "from", "and", "or", "is", "was", "are", "were", "be",
    "been", "it", "its", "this", "that", "he", "she", "they", "his", "her", "their", "as", "which", "who",
    "what", "i", "s"}

_UNITS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
          "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
             "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13,
             "fourteenth": 14, "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18,
             "nineteenth": 19, "twentieth": 20, "thirtieth": 30, "fortieth": 40, "fiftieth": 50,
             "sixtieth": 60, "seventieth": 70, "eightieth": 80, "ninetieth": 90, "hundredth": 100,
             "thousandth": 1000}
_NUMBER_WORDS = set(_UNITS) | set(_TENS) | set(_SCALES)
_ORDINAL_SUFFIX = re.compile(r"^(\d+)(st|nd|rd|th)$")


def _words_to_numbers(tokens: list[str]) -> list[str]:
    """Replace runs of number words by digits: ['twenty', 'one'] -> ['21']; ordinals -> '21st'-style '21'."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in _NUMBER_WORDS or tok in _ORDINALS:
            total, current, j, used = 0, 0, i, False
            while j < len(tokens):
                t = tokens[j]
                if t in _UNITS:
                    current += _UNITS[t]
                elif t in _TENS:
                    current += _TENS[t]
                elif t in _SCALES:
                    current = max(current, 1) * _SCALES[t]
                    if _SCALES[t] >= 1000:
                        total, current = total + current, 0
                elif t in _ORDINALS:
                    val = _ORDINALS[t]
                    current = current * val if val in (100, 1000) and current else current + val
                    j += 1
                    used = True
                    break
                elif t == "and" and used and j + 1 < len(tokens) and tokens[j + 1] in _NUMBER_WORDS:
                    pass
                else:
                    break
                used = True
                j += 1
            out.append(str(total + current))
            i = j
            continue
        m = _ORDINAL_SUFFIX.match(tok)
        out.append(m.group(1) if m else tok)
        i += 1
    return out


def normalize_tokens(text: Optional[str]) -> list[str]:
    """Lowercase, strip accents/punctuation/articles, number words -> digits. Returns word tokens."""
    if not text:
        return []
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    # digits with thousands separators: 1,000 -> 1000 (before punctuation is dropped)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(r"'s\b", "", text)  # possessive
    # hyphens join number words ("twenty-one") and split compounds alike: turn into spaces
    text = "".join(" " if ch in string.punctuation else ch for ch in text)
    tokens = [t for t in text.split() if t not in _ARTICLES]
    return _words_to_numbers(tokens)


def normalize_answer(text: Optional[str]) -> str:
    """The normalised answer as one string (see :func:`normalize_tokens`)."""
    return " ".join(normalize_tokens(text))


def _content(tokens: list[str]) -> list[str]:
    return [t for t in tokens if t not in _STOPWORDS]


def _find(hay: list[str], needle: list[str]) -> int:
    """First index of ``needle`` as a contiguous run inside ``hay`` (-1 if absent or empty)."""
    n = len(needle)
    if n == 0 or n > len(hay):
        return -1
    first = needle[0]
    for i in range(len(hay) - n + 1):
        if hay[i] == first and hay[i:i + n] == needle:
            return i
    return -1


def token_f1(answer: str, gold: str) -> float:
    """SQuAD-style token F1 over normalised content words (stopwords dropped; falls back to all words)."""
    a = _content(normalize_tokens(answer)) or normalize_tokens(answer)
    g = _content(normalize_tokens(gold)) or normalize_tokens(gold)
    if not a or not g:
        return 0.0
    common: dict[str, int] = {}
    gc: dict[str, int] = {}
    for t in g:
        gc[t] = gc.get(t, 0) + 1
    for t in a:
        if gc.get(t, 0) > common.get(t, 0):
            common[t] = common.get(t, 0) + 1
    same = sum(common.values())
    if same == 0:
        return 0.0
    p, r = same / len(a), same / len(g)
    return 2 * p * r / (p + r)


# ----------------------------------------------------------------------------- abstention & hedging

_ABSTAIN_PATTERNS = [
    r"\bi (?:do not|don'?t|dont) know\b",
    r"\b(?:i'?m|i am|im) (?:not (?:sure|certain)|unsure|uncertain)\b",
    r"\bnot (?:sure|certain) (?:about|of|who|what|which|when|where|whether|if|how)\b",
    r"^\s*(?:not sure|unsure|unknown|no idea|n/?a)\b",
    r"\b(?:i )?(?:can ?not|can'?t|cannot|could not|couldn'?t|am unable to|'m unable to|unable to|"
    r"am not able to|'m not able to) (?:answer|determine|tell|say|find|provide|know|confirm|verify|identify|"
    r"be sure|recall|give)\b",
    r"\bno (?:idea|information|info|data|record|way to know|answer)\b",
    r"\b(?:do not|don'?t|does not|doesn'?t) (?:have|contain|provide|mention|say|specify|include|state) "
    r"(?:any |enough |the |this |that |sufficient |specific )?(?:information|info|data|details|answer|mention)\b",
    r"\b(?:not enough|insufficient|no (?:relevant|specific|such)) (?:information|info|data|context|evidence)\b",
    r"\b(?:is|are|was|were) not (?:mentioned|provided|specified|stated|given|known|available)\b",
    r"\bthere (?:is|are) no (?:information|mention|record|data|details)\b",
    r"\bi (?:have|had) no (?:information|knowledge|idea)\b",
    r"\bbeyond my knowledge\b",
    r"\bi'?m sorry\b",
]
_ABSTAIN_RE = re.compile("|".join(f"(?:{p})" for p in _ABSTAIN_PATTERNS), re.IGNORECASE)

_HEDGE_PATTERNS = [
    r"\bi (?:think|believe|guess|suspect|assume|recall)\b", r"\bprobably\b", r"\bpossibly\b", r"\bmaybe\b",
    r"\bperhaps\b", r"\blikely\b", r"\bmight\b", r"\bmay (?:be|have)\b", r"\bcould (?:be|have)\b",
    r"\b(?:it )?seems?\b", r"\bappears? to\b", r"\bif i recall\b", r"\bmy (?:best )?guess\b",
    r"\bnot (?:entirely |completely |100% )?(?:sure|certain)\b", r"\bi'?m not (?:sure|certain)\b",
    r"\bapproximately\b", r"\baround\b", r"\broughly\b", r"\bunsure\b", r"\bpresumably\b",
]
_HEDGE_RE = re.compile("|".join(f"(?:{p})" for p in _HEDGE_PATTERNS), re.IGNORECASE)
# After an abstention, these introduce a guess ("I'm not sure, but I think it's X").
_GUESS_AFTER_ABSTAIN_RE = re.compile(
    r"\b(?:but|however|though|although)\b|\b(?:i (?:think|believe|guess)|probably|possibly|maybe|perhaps|"
    r"likely|my (?:best )?guess)\b", re.IGNORECASE)


def detect_abstention(answer: str) -> bool:
    """True when the answer declines to answer and offers no guess after declining."""
    m = _ABSTAIN_RE.search(answer or "")
    if not m:
        return False
    return not _GUESS_AFTER_ABSTAIN_RE.search(answer[m.end():])


def detect_hedge(answer: str) -> bool:
    """True when the answer expresses uncertainty (a hedge or an abstention phrase)."""
    return bool(_HEDGE_RE.search(answer or "") or _ABSTAIN_RE.search(answer or ""))


# ----------------------------------------------------------------------------- special question types

_EXPLICIT = {"yes": "yes", "no": "no"}
# Without an explicit yes/no, a negation or a contrast ("X is in A, while Y is in B") reads as "no".
_NO_CUES = re.compile(r"n't\b|\bnot\b|\bneither\b|\bnor\b|\bnever\b|\bdifferent\b|\bdiffer\b|\bwhile\b|"
                      r"\bwhereas\b|\bunlike\b|\bhowever\b|\bbut\b|\bonly\b", re.IGNORECASE)


# Implicit answers are read clause by clause: the answer's sentences cut at each contrast ("A and B are both
# directors, but their styles differ" says yes; the old whole-answer reading took the "but" for a no).
_CLAUSE_SPLIT = re.compile(r"[.!?;]\s+|,?\s*\b(?:but|while|whereas|however|although|though|unlike|yet)\b",
                           re.IGNORECASE)
_NEGATION = re.compile(r"n't\b|\bnot\b|\bneither\b|\bnor\b|\bnever\b|\bno longer\b", re.IGNORECASE)
# "A and B are both / all / each ...", "... the same ...", "B is also ...": the head clause affirms
_AFFIRM = re.compile(r"\b(?:both|all|each|same|also)\b", re.IGNORECASE)
_SAME = re.compile(r"\bsame\b", re.IGNORECASE)
_DIFFERENT = re.compile(r"\b(?:different|differ|differs|distinct|separate)\b", re.IGNORECASE)


def polarity(answer: str, question: Optional[str] = None) -> tuple[str, bool]:
    """('yes' | 'no', explicit) for an answer to a yes/no question.

    The first explicit "yes"/"no" word decides (``explicit`` True). Otherwise (``explicit`` False) the answer
    is cut into clauses at sentence ends and contrasts ("but", "while", "whereas", "however"...):

    1. a negation in the first clause ("A and B are not both ...") is a no, and so is a negation in any clause
       that repeats the question's predicate ("..., but they are not both names of a genus"; for a "same"
       question "different" counts as a negation: "..., but from different countries");
    2. a first clause that affirms ("both", "all", "each", "same", "also": "A and B are both film directors,
       but their styles differ") is a yes; for a "same" question only "same" affirms ("A and B are both
       European" does not say "the same country");
    3. two parallel clauses that each repeat the predicate ("A is a Czech tennis player, while B is a Czech
       tennis player", for "Are A and B both Czech tennis players?") are a yes, except for a "same" question
       ("A is in the Fujian province, while B is in the Guangdong province");
    4. else a contrast anywhere ("A is in Fujian, while B is in Yunnan") is a no, and anything else a yes.
    """
    for t in normalize_tokens(answer):
        if t in _EXPLICIT:
            return _EXPLICIT[t], True
    clauses = [c for c in _CLAUSE_SPLIT.split(answer or "") if c and c.strip()]
    if not clauses:
        return "yes", False
    head = clauses[0]
    if _NEGATION.search(head):
        return "no", False
    same_q = bool(question and _SAME.search(question))
    if question and any((_NEGATION.search(c) or (same_q and _DIFFERENT.search(c))) and addresses_question(c, question)
                        for c in clauses[1:]):
        return "no", False
    if (_SAME if same_q else _AFFIRM).search(head):
        return "yes", False
    if question and not same_q and len(clauses) >= 2 and predicate_words(question) and \
            all(addresses_question(c, question) for c in clauses[:2]):
        return "yes", False
    return ("no" if _NO_CUES.search(answer or "") else "yes"), False


_GENERIC = {"new", "old", "first", "second", "city", "county", "state", "states", "river", "university", "college",
            "hospital", "band", "film", "team", "club", "school", "national", "american", "united", "north", "south",
            "east", "west", "great", "little", "saint", "st", "san", "los", "las", "mount", "lake", "island",
            "memorial", "park", "company", "group", "records", "series", "show", "album", "song", "game"}


_BOTH_POLARITIES = re.compile(r"\b(?:yes\s*(?:,\s*)?(?:or|and|/)\s*no|no\s*(?:,\s*)?(?:or|and|/)\s*yes)\b",
                              re.IGNORECASE)
_JOINERS = frozenset({"or", "and", "either", "both", "nor", "neither"})


def _offers_both(ans: list[str], first_pos: int, first_option: list[str], second_pos: int) -> bool:
    """True when the answer names two options joined only by or/and ("A or B", "either A or B")."""
    gap = ans[first_pos + len(first_option):second_pos] if _find(ans, first_option) == first_pos else None
    if gap is None:  # named by a distinctive word: look at the words right before the second mention
        gap = ans[max(first_pos + 1, second_pos - 2):second_pos]
    return bool(gap) and all(t in _JOINERS for t in gap)


def _mention_pos(ans: list[str], option: list[str], others: list[list[str]]) -> int:
    """Where the answer first names an option: the full option, else its first distinctive word.

    A distinctive word belongs to this option and to no other candidate, is not a stopword, a number or a
    generic word ("Stark" names "Jonathan Stark"; "Hospital" names neither of two hospitals). -1: not named.
    """
    pos = _find(ans, option)
    if pos >= 0:
        return pos
    taken = {t for o in others for t in o}
    distinct = {t for t in option if t not in taken and t not in _STOPWORDS and t not in _GENERIC
                and not t.isdigit() and len(t) > 2}
    hits = [i for i, t in enumerate(ans) if t in distinct]
    return min(hits) if hits else -1


_QUESTION_WORDS = {"Which", "Who", "Whose", "Whom", "What", "When", "Where", "Why", "How", "In", "Is", "Are", "Was",
                   "Were", "Did", "Do", "Does", "The", "A", "An", "Of", "Between", "Among", "For", "At", "On"}
_ENTITY_RE = re.compile(r"(?:[A-Z][\w'.&-]*|\d[\w]*)(?:\s+(?:(?:of|the|de|la|von|van|den|der|du|da|y)\s+)*"
                        r"(?:[A-Z][\w'.&-]*|\d[\w]*))*")


def question_entities(question: str) -> list[str]:
    """Name-like spans of the question (runs of capitalised words), leading question words dropped."""
    out = []
    for m in _ENTITY_RE.finditer(question or ""):
        words = m.group(0).split()
        while words and words[0].strip("'\"") in _QUESTION_WORDS:
            words = words[1:]
        if words:
            out.append(" ".join(words))
    return out


def _closest_option(options: list[list[str]], g_tok: list[str]) -> Optional[int]:
    """The option a gold answer that matches none of them verbatim still names: the one sharing the most words
    with it (stopwords aside, a plural "s" folded), when exactly one shares the most. HaluEval's gold often
    spells out what the question shortens: "Lorraine Vivian Hansberry" for the option "Lorraine Hansberry",
    "Firs" for "Fir". None when no option shares a word, or two tie."""
    def words(toks: list[str]) -> set[str]:
        return {t[:-1] if len(t) > 3 and t.endswith("s") else t for t in toks if t not in _STOPWORDS}
    gold = words(g_tok)
    shared = [len(words(o) & gold) for o in options]
    best = max(shared, default=0)
    return shared.index(best) if best > 0 and shared.count(best) == 1 else None


def answer_candidates(question: Optional[str], g_tok: list[str]) -> Optional[tuple[list[list[str]], int]]:
    """Candidate answers the question itself names, and which is the gold: (candidates, gold index) or None.

    Either the options of a choice question ("A or B?"), or -- when the gold is named in the question
    ("...out of Sibley Memorial Hospital and MedStar Georgetown University Hospital?") -- the gold and the
    question's other names.
    """
    if not question:
        return None
    opts = choice_options(question)
    if opts:
        o_tok = [normalize_tokens(o) for o in opts]
        gi = next((i for i, o in enumerate(o_tok) if o and (o == g_tok or _find(o, g_tok) >= 0
                                                           or _find(g_tok, o) >= 0)), None)
        if gi is None:
            gi = _closest_option(o_tok, g_tok)
        if gi is not None:
            return o_tok, gi
    if _find(normalize_tokens(question), g_tok) < 0:
        return None
    others = []
    for ent in question_entities(question):
        e = normalize_tokens(ent)
        if e and _find(e, g_tok) < 0 and _find(g_tok, e) < 0 and e not in others:
            others.append(e)
    if not others:
        return None
    return [g_tok] + others, 0


# ----------------------------------------------------------------------------- the grader

GRADE_SCOPES = ("whole", "first-sentence")


def graded_span(answer: str, scope: str = "whole") -> tuple[int, int]:
    """``(start, end)``: the characters of ``answer`` the grader reads: all of it (``whole``) or its first sentence
    (``first-sentence``; all of it when it has none)."""
    if scope == "whole":
        return 0, len(answer)
    if scope != "first-sentence":
        raise ValueError(f"grade scope (GRADE_SCOPE, --grade-scope) must be one of {', '.join(GRADE_SCOPES)}, "
                         f"got {scope!r}")
    sentences = split_sentences(answer)
    return (sentences[0].start, sentences[0].end) if sentences else (0, len(answer))


def graded_part(answer: str, scope: str = "whole") -> str:
    """The part of ``answer`` the grader reads (:func:`graded_span`)."""
    start, end = graded_span(answer, scope)
    return answer[start:end]


@dataclass
class Grade:
    grade: str                 # correct | incorrect | not_attempted
    reason: str                # which rule decided (see module docstring)
    hedged: bool = False       # the answer expresses uncertainty
    abstained: bool = False    # explicit abstention without a guess
    f1: float = 0.0            # token F1 with the gold answer


def _stem(t: str) -> str:
    return t[:-1] if len(t) > 3 and t.endswith("s") and not t.endswith("ss") else t


# "both" in "Are A and B both animators?" is no content: "A and B are both artists" does not address it
_QUANTIFIERS = frozenset({"both", "either", "neither", "all", "each"})


def predicate_words(question: str) -> set[str]:
    """The question's content words outside its names ("same", "nationality", "director"), crudely stemmed."""
    names = {t for ent in question_entities(question) for t in normalize_tokens(ent)}
    return {_stem(t) for t in _content(normalize_tokens(question))
            if t not in names and t.lower() not in {w.lower() for w in _QUESTION_WORDS} and not t.isdigit()
            and t not in _QUANTIFIERS}


def addresses_question(answer: str, question: Optional[str], min_share: float = PREDICATE_SHARE) -> bool:
    """True when the answer repeats at least ``min_share`` of the question's predicate words (or the question
    has none): "Both were American citizens" addresses "Were A and B American citizens?", "The film A has a
    male and a female lead" does not address "Are the directors of A and B from the same country?"."""
    if not question:
        return True
    pred = predicate_words(question)
    if not pred:
        return True
    have = {_stem(t) for t in normalize_tokens(answer)}
    return len(pred & have) / len(pred) >= min_share


def only_in_compounds(answer: str, gold: str) -> bool:
    """True when every mention of the gold in the answer is glued into a hyphenated compound: "American" in
    "a Canadian-American actor" names a different nationality; False when no mention is found at all."""
    def fold(t: str) -> str:
        t = unicodedata.normalize("NFKD", t)
        return "".join(ch for ch in t if not unicodedata.combining(ch)).lower()
    words = re.findall(r"\w+", fold(gold))
    if not words:
        return False
    pat = re.compile(r"(?<!\w)" + r"[\s\-]+".join(map(re.escape, words)) + r"(?!\w)")
    hits = list(pat.finditer(fold(answer)))
    if not hits:
        return False
    a = fold(answer)

    def glued(m) -> bool:
        before = a[max(0, m.start() - 2):m.start()]
        after = a[m.end():m.end() + 2]
        return bool(re.match(r"\w-$", before) or re.match(r"^-\w", after))
    return all(glued(m) for m in hits)


# ----------------------------------------------------------------------------- named rules of grader v4
# Each answers one question about an answer and its gold; grade_answer applies them in a fixed order (see there).
# Written on the tune part of the three hand-labelled sets in bench/data/ (bench.real.split_of); their held-out
# part is only reported (`rlfh bench grader`).

# Comparisons a choice question can ask for; an answer that names an option without any of them (or "than", or
# two years) describes the option instead of choosing it ("This Is Elvis is a 1981 documentary film ..." for
# "Which documentary is older, This Is Elvis or Capturing the Friedmans?").
COMPARATIVES = frozenset("""older oldest younger youngest earlier earliest later latest first last more most less
least fewer fewest larger largest smaller smallest bigger biggest longer longest shorter shortest higher highest
lower lowest taller tallest newer newest greater greatest before after farther further closer heavier lighter
faster slower wider deeper richer""".split())
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
_MONTHS = frozenset("january february march april may june july august september october november december".split())


def comparison_asked(question: Optional[str]) -> bool:
    """The question asks to compare (a comparative or superlative word: "older", "first", "more")."""
    return bool(question) and any(t in COMPARATIVES for t in normalize_tokens(question))


def states_comparison(answer: str) -> bool:
    """The answer compares: a comparative word, "than", or two different years ("1981 ... 2003")."""
    toks = normalize_tokens(answer)
    return any(t in COMPARATIVES or t == "than" for t in toks) or len(set(_YEAR.findall(answer))) >= 2


def other_candidate_first(answer: str, gold: str, question: Optional[str]) -> bool:
    """The answer opens with a name that is neither the gold nor one of the question's, as its subject, and names
    the gold only after a comma or a bracket ("J. Walter Ruben is a co-author of Open Range, a 1927 film ...
    written by Zane Grey", "Duran Duran (Arcadia) was ..."): it answers with that other name."""
    ents = question_entities(answer)
    if not ents or not question or any(ch.isdigit() for ch in gold):
        return False   # a number or date asked for: the sentence's subject is who it is about, not the answer
    first = ents[0]
    if any(ch.isdigit() for ch in first):
        return False
    if not answer.lstrip(" \"'").startswith(first):
        return False
    f_tok, g_tok = normalize_tokens(first), normalize_tokens(gold)
    if not f_tok or _find(f_tok, g_tok) >= 0 or _find(g_tok, f_tok) >= 0 or set(f_tok) & set(g_tok):
        return False
    if _find(normalize_tokens(question), f_tok) >= 0:
        return False
    cut = min([i for i in (answer.find(","), answer.find("(")) if i >= 0], default=-1)
    if cut < 0:
        return False
    return _find(normalize_tokens(answer[:cut]), g_tok) < 0 and _find(normalize_tokens(answer[cut:]), g_tok) >= 0


def only_possessive(answer: str, gold: str) -> bool:
    """Every mention of the gold is a possessive inside the sentence ("to surround Muammar Gaddafi's hometown" for
    "Which revolutionary was killed ...?"): the answer speaks of something of the gold's, not of the gold."""
    g = gold.strip(" \"'.,")
    if not g:
        return False
    hits = list(re.finditer(r"(?<!\w)" + re.escape(g) + r"(?!\w)", answer, re.IGNORECASE))
    # ("Stephen King's 1986 novel "It" contains ..." opens with it: the owner is the sentence's topic, an answer)
    return bool(hits) and all(re.match(r"['\u2019]s\b", answer[m.end():]) and answer[:m.start()].strip(" \"'")
                              for m in hits)


def inverted_comparison(answer: str, question: Optional[str]) -> bool:
    """"Who is more powerful than the Old Ones?" answered "The Old Ones are more powerful than ...": the
    question's term after "than" is put before the comparison, where the answer belongs."""
    if not question:
        return False
    m = re.search(r"\b(\w+)\s+than\s+(.+?)(?:\s+(?:in|at|on|of|by|for)\b.*)?\W*$", question, re.IGNORECASE)
    if not m:
        return False
    term = normalize_tokens(m.group(2))
    a_tok = normalize_tokens(answer)
    where = _find(a_tok, term) if term else -1
    if where < 0:
        return False
    rest = a_tok[where + len(term):where + len(term) + 5]
    return "than" in rest and (m.group(1).lower() in rest or any(t in COMPARATIVES for t in rest))


def country_alias_match(a_tok: list[str], g_tok: list[str], q_tok: list[str]) -> bool:
    """The answer names the gold's country by another of its names ("South Korea" for "South Korean", "the
    United States" for "American"), one the question does not already say."""
    return any(_find(a_tok, alias.split()) >= 0 and _find(q_tok, alias.split()) < 0
               for alias in country_aliases_of(" ".join(g_tok)))


def name_parts_match(answer: str, gold: str, question: Optional[str]) -> bool:
    """The gold is a name of 3 or more words and the answer gives it without its middle names ("David Mamet" for
    "David Alan Mamet"), or the gold's last name is the question's own and the answer gives its first name
    ("his brother Virgil" for "Virgil Walter Earp", asked about Wyatt Earp's brother)."""
    words = [w for w in re.findall(r"[\w'.-]+", gold) if w[:1].isupper()]
    if len(words) < 2 or len(words) != len(gold.split()):
        return False
    g_tok = normalize_tokens(gold)
    a_tok = normalize_tokens(answer)
    if len(g_tok) < 2:
        return False
    first, last = g_tok[0], g_tok[-1]
    for i, t in enumerate(a_tok):
        if t == first and last in a_tok[i + 1:i + 3] and len(g_tok) >= 3:
            return True
    q_tok = set(normalize_tokens(question or ""))
    return (last in q_tok and first not in q_tok and len(first) >= 4 and first in a_tok
            and re.search(r"\b" + re.escape(words[0]) + r"\b", answer) is not None)


def date_year_match(a_tok: list[str], g_tok: list[str]) -> bool:
    """The gold is a full date and the answer gives its year and no other month ("was born in 1958" for
    "January 14, 1958"): less precise, not wrong."""
    months = [t for t in g_tok if t in _MONTHS]
    years = [t for t in g_tok if _YEAR.fullmatch(t)]
    if not months or len(years) != 1:
        return False
    other_months = {t for t in a_tok if t in _MONTHS} - set(months)
    return years[0] in a_tok and not other_months


def new_words_f1(answer: str, gold: str, question: Optional[str]) -> float:
    """Token F1 of the gold against the answer's words that the question does not already hold: a reply that
    restates the question and then gives a long gold phrase ("... got its nickname from the first initials
    "C.B."") is judged on what it adds."""
    q = set(normalize_tokens(question or ""))
    new = [t for t in _content(normalize_tokens(answer)) if t not in q]
    g = _content(normalize_tokens(gold))
    if len(g) < 3 or not new:
        return 0.0
    return token_f1(" ".join(new), " ".join(g))


def grade_answer(answer: Optional[str], gold: Optional[str], question: Optional[str] = None,
                 strict: bool = True, scope: str = "whole") -> Grade:
    """Grade one answer against its gold answer (see the module docstring for the rules).

    Args:
        answer: the model's answer text.
        gold: the reference answer; required (a ``ValueError`` names it when missing).
        question: the question, used for choice questions ("A or B?") and the strict yes/no reading.
        strict: the stricter reading (default): a yes/no answer without an explicit "yes"/"no" or a negation
            must address the question's predicate (else ``incorrect``, reason ``yes_no_unanswered``), and a gold
            found only inside a hyphenated compound ("Canadian-American" for "American") is ``incorrect``
            (``compound``). ``strict=False`` is the earlier, lenient reading; reports show both where they differ.
        scope: ``whole`` (the whole answer) or ``first-sentence`` (its first sentence only: see the module docstring).
    """
    if gold is None or not str(gold).strip():
        raise ValueError("grade_answer: the gold answer ('right_answer') is missing or empty; "
                         "the gold grader needs it for every item")
    answer = graded_part(answer or "", scope)
    a_tok = normalize_tokens(answer)
    g_tok = normalize_tokens(gold)
    hedged = detect_hedge(answer)
    f1 = token_f1(answer, gold)
    if not a_tok:
        return Grade(NOT_ATTEMPTED, "empty", hedged=False, abstained=False, f1=0.0)
    if detect_abstention(answer):
        return Grade(NOT_ATTEMPTED, "abstain", hedged=True, abstained=True, f1=f1)

    # the answer's first sentence is a question (typically the question echoed back): no answer given,
    # and no explicit abstention either -- it counts against the model
    first = re.split(r"(?<=[.!?])\s+", answer.strip(), maxsplit=1)[0]
    if first.rstrip().endswith("?"):
        ok, reason = False, "echo"
    elif g_tok in (["yes"], ["no"]):
        ok, reason = _yes_no_verdict(answer, g_tok, question, strict)
    else:
        ok, reason = (_choice_verdict(answer, a_tok, g_tok, question) or _not_an_answer(answer, gold, question)
                      or _open_verdict(answer, gold, question, a_tok, g_tok, f1, strict))
    return Grade(CORRECT if ok else INCORRECT, reason, hedged=hedged, abstained=False, f1=f1)


def _yes_no_verdict(answer: str, g_tok: list[str], question: Optional[str], strict: bool) -> tuple[bool, str]:
    """A yes/no gold ("Yes or no." offers both: no answer, and no abstention either)."""
    if _BOTH_POLARITIES.search(answer):
        return False, "both_options"
    pol, explicit = polarity(answer, question)
    if strict and not explicit and pol == "yes" and not addresses_question(answer, question):
        return False, "yes_no_unanswered"
    return pol == g_tok[0], "yes_no" if explicit else "yes_no_implicit"


def _choice_verdict(answer: str, a_tok: list[str], g_tok: list[str],
                    question: Optional[str]) -> Optional[tuple[bool, str]]:
    """A question that names its candidate answers: the candidate the answer names first is its choice (None: the
    question names none, or the answer names none of them)."""
    cands = answer_candidates(question, g_tok)
    if not cands:
        return None
    options, gold_idx = cands
    pos = [_mention_pos(a_tok, o, options[:i] + options[i + 1:]) for i, o in enumerate(options)]
    named = sorted((p, i) for i, p in enumerate(pos) if p >= 0)
    if len(named) >= 2 and _offers_both(a_tok, named[0][0], options[named[0][1]], named[1][0]):
        return False, "both_options"  # "A or B", "both A and B": the question repeated, no choice
    if not named:
        return None
    if comparison_asked(question) and not states_comparison(answer) and len(a_tok) > len(options[named[0][1]]) + 3:
        return False, "no_comparison"  # describes an option, compares nothing: no choice made
    return named[0][1] == gold_idx, "choice"


def _not_an_answer(answer: str, gold: str, question: Optional[str]) -> Optional[tuple[bool, str]]:
    """Not an answer, though the gold's words are there: after another candidate, on the wrong side of the
    question's comparison, or only as the owner of something else (None: none of these)."""
    if other_candidate_first(answer, gold, question):
        return False, "other_candidate"
    if inverted_comparison(answer, question):
        return False, "inverted"
    if only_possessive(answer, gold):
        return False, "possessive"
    return None


def _open_verdict(answer: str, gold: str, question: Optional[str], a_tok: list[str], g_tok: list[str], f1: float,
                  strict: bool) -> tuple[bool, str]:
    """Containment, the gold said otherwise, numbers, then fuzzy matching (rules 6-8 of the module docstring)."""
    if _find(a_tok, g_tok) >= 0:
        if strict and only_in_compounds(answer, gold):
            return False, "compound"
        return True, "gold_in_answer"
    if country_alias_match(a_tok, g_tok, normalize_tokens(question)):
        return True, "alias"
    if name_parts_match(answer, gold, question):
        return True, "name_parts"
    g_content = _content(g_tok) or g_tok
    a_content = _content(a_tok) or a_tok
    if len(a_tok) <= SHORT_ANSWER_WORDS and _find(g_tok, a_tok) >= 0 and a_content:
        covered = sum(1 for t in set(a_content) if t in g_content) / len(set(g_content))
        return (True, "answer_in_gold") if covered >= ANSWER_IN_GOLD_COVERAGE else (False, "partial")
    if date_year_match(a_tok, g_tok):
        return True, "date_year"
    # numbers must agree exactly
    g_nums = {t for t in g_tok if t.isdigit()}
    if g_nums and not g_nums <= {t for t in a_tok if t.isdigit()}:
        overlap = any(t in a_content for t in g_content)
        return False, "partial" if overlap else "number_mismatch"
    # fuzzy: token F1 on the answer's content, for answers not much longer than the gold
    if f1 >= F1_THRESHOLD:
        return True, "f1"
    if new_words_f1(answer, gold, question) >= F1_THRESHOLD:
        return True, "f1_new"
    # the gold's content words all present (in any order) in a short-ish answer
    # (not when the question itself holds all of them: "... Harold & Kumar 3D Christmas is part of the 2019
    # Marvel Cinematic Universe series" for the gold "the Harold & Kumar series")
    q_set = set(normalize_tokens(question))
    if g_content and all(t in a_content for t in g_content) and len(a_content) <= 3 * len(g_content) + 6 \
            and not all(t in q_set for t in g_content):
        return True, "gold_words_in_answer"
    overlap = any(t in a_content for t in g_content)
    return False, "partial" if overlap else "mismatch"
