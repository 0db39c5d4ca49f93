"""Text analysis shared by every backend: sentence and statement splitting with exact
character spans, hedge and abstention detection, tokens, entities and numbers (those from
:mod:`verifier_service.words`, re-exported here).

All spans are half-open ``[start, end)`` character offsets into the original
response string, so ``response[start:end] == text`` always holds for what
these functions return. Everything here is regex based and linear in the text
length.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.sentences import Span, split_sentences  # noqa: F401 (the verifier's sentences are these)
from verifier_service.question_info import analyze_question
from verifier_service.words import (  # noqa: F401 (re-exported: the verifier's words are these)
    MONTHS, NUMBER_WORDS, STOPWORDS, Entity, content_words, entities, grounded_share, normalize, numbers, stem,
    words)

# ----------------------------------------------------------------------------- hedges & abstention

HEDGE_CUES = (
    r"i think", r"i believe", r"i guess", r"i suppose", r"i assume", r"i suspect", r"i recall", r"i'm fairly sure",
    r"if i recall(?: correctly)?", r"if i remember(?: correctly| right)?", r"as far as i know", r"to my knowledge",
    r"probably", r"possibly", r"perhaps", r"maybe", r"might", r"may", r"could be", r"could have", r"likely",
    r"presumably", r"apparently", r"seemingly", r"it seems", r"seems to", r"appears to", r"it appears",
    r"it may be", r"not (?:entirely |completely |totally |100% )?(?:sure|certain)", r"i'm not (?:entirely )?sure",
    r"i am not (?:entirely )?sure", r"supposedly", r"allegedly", r"reportedly", r"i would guess", r"my guess",
    r"roughly", r"approximately", r"around", r"about", r"if i'm not mistaken", r"unless i'm mistaken",
)
# "about"/"around" only hedge when they qualify a number ("about 300 people").
_NUMERIC_ONLY = {"roughly", "approximately", "around", "about"}
_HEDGE_RE = re.compile(
    r"\b(?:" + "|".join(c for c in HEDGE_CUES if c not in _NUMERIC_ONLY) + r")\b", re.IGNORECASE)
_NUM_HEDGE_RE = re.compile(r"\b(?:roughly|approximately|around|about|circa|some)\s+(?=\d|one|two|three|four|five|"
                           r"six|seven|eight|nine|ten|twenty|thirty|forty|fifty|hundred)", re.IGNORECASE)

_ABSTAIN_RE = re.compile(
    r"\b(?:i\s+(?:do\s*n[o']t|don't|don’t|dont|do not)\s+(?:really\s+)?know|"
    r"i\s*(?:'m|’m| am)\s+(?:not\s+(?:sure|certain)|unsure|uncertain|unable\s+to|not\s+able\s+to)|"
    r"i\s+(?:cannot|can't|can’t|can\s+not|could\s+not|couldn't|won't)\s+(?:answer|say|tell|determine|know|"
    r"provide|verify|confirm|find|be\s+sure|recall|help)|"
    r"i\s+(?:have|had)\s+no\s+(?:idea|information|knowledge|clue|data)|no\s+idea|"
    r"i\s+(?:do\s+not|don't|don’t)\s+have\s+(?:enough\s+|any\s+|the\s+|that\s+|sufficient\s+)?"
    r"(?:information|knowledge|data|context|details)|"
    r"(?:there\s+is\s+)?(?:not\s+enough|insufficient)\s+(?:information|evidence|context)|"
    r"(?:the\s+answer\s+is\s+)?unknown|i\s+(?:am|'m)\s+afraid\s+i|(?:it\s+is|it's)\s+(?:unclear|not\s+clear)|"
    r"i\s+(?:can(?:not|'t)|could(?:\s+not|n't))\s+(?:be\s+)?(?:certain|sure)|unsure|"
    r"i\s+(?:do\s+not|don't|don’t)\s+(?:remember|recall))\b",
    re.IGNORECASE)


def hedge_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of hedge cues ("I think", "probably", "might", "about 30"...)."""
    spans = [(m.start(), m.end()) for m in _HEDGE_RE.finditer(text)]
    spans += [(m.start(), m.end()) for m in _NUM_HEDGE_RE.finditer(text)]
    # "may" as a month name ("in May 1990") is not a hedge
    out = []
    for s, e in sorted(spans):
        if text[s:e] == "May":
            continue
        out.append((s, e))
    return out


def strip_hedges(text: str) -> str:
    """``text`` with its hedge cues blanked out (same length, so offsets still hold):
    "I think the film was released in 1999" -> "        the film was released in 1999"."""
    out = text
    spans = hedge_spans(text) + [(m.start(), m.end()) for m in _NOT_SURE_BUT_RE.finditer(text)]
    for s, e in spans:
        out = out[:s] + " " * (e - s) + out[e:]
    return out


def is_hedged(text: str) -> bool:
    return bool(hedge_spans(text))


def abstention_spans(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _ABSTAIN_RE.finditer(text)]


def is_abstention_text(text: str) -> bool:
    """True when ``text`` declines to answer and carries no checkable content besides the refusal.

    "I don't know." and "I'm not sure about that." are abstentions; "I'm not sure, but I think it is Paris."
    is a hedged answer (content remains once the refusal phrase is removed).
    """
    spans = abstention_spans(text)
    if not spans:
        return False
    rest = text
    for s, e in reversed(spans):
        rest = rest[:s] + " " + rest[e:]
    rest_words = [w for w in words(rest) if w not in STOPWORDS and w not in _ABSTAIN_FILLER]
    return not rest_words and not entities_outside_caps(rest)


_ABSTAIN_FILLER = frozenset("""
i'm sorry unfortunately really exactly honestly sure certain know answer question information that this
question's enough specific details detail say tell determine based given provided context knowledge about
regarding without access currently clue idea able unable help data certainly provide confirm verify which
however but remember recall afraid unclear clear
""".split())


def entities_outside_caps(text: str) -> bool:
    return any(e.kind in ("number", "date", "quoted") for e in entities(text))


# ----------------------------------------------------------------------------- statement split

# Clause boundaries inside a sentence. The separator itself is dropped from both statements.
_CLAUSE_SEP_RE = re.compile(
    r"\s*;\s*|\s+[\u2013\u2014-]{1,2}\s+|"
    r",\s+(?=(?:but|while|whereas|although|though|yet|so|which|who|whose|where|when|because|as\s+well\s+as)\b)|"
    r"\s+(?=(?:but|whereas|although|because|while)\s)",
    re.IGNORECASE)
# Leading connector words removed from the front of a clause's span.
_LEAD_RE = re.compile(r"^(?:and|but|while|whereas|although|though|yet|so|because|as\s+well\s+as)\s+",
                      re.IGNORECASE)
_PRONOUN_VERB_START = re.compile(
    r"(?:he|she|it|they|we|i|there)\b|"
    r"(?:is|was|are|were|has|had|have|became|become|won|received|served|played|wrote|directed|founded|"
    r"formed|released|starred|lived|died|studied|worked|moved|joined|married|born|also|later|then|"
    r"[a-z]+ed)\b", re.IGNORECASE)
_AND_RE = re.compile(r"\s+and\s+", re.IGNORECASE)
_LIST_RE = re.compile(r",\s+")


def _quote_spans(body: str) -> list[tuple[int, int]]:
    """``(open, close)`` offsets of the quoted stretches of ``body`` (straight quotes paired in order, curly
    quotes by kind); a title in quotes ("Two and a Half Men") is never cut."""
    out = []
    straight = [i for i, ch in enumerate(body) if ch == '"']
    out += [(straight[i], straight[i + 1]) for i in range(0, len(straight) - 1, 2)]
    opened = -1
    for i, ch in enumerate(body):
        if ch == "\u201c":
            opened = i
        elif ch == "\u201d" and opened >= 0:
            out.append((opened, i))
            opened = -1
    return out


def _in_quotes(i: int, spans: list[tuple[int, int]]) -> bool:
    return any(a < i < b for a, b in spans)


def _trim(text: str, s: int, e: int) -> tuple[int, int]:
    while s < e and (text[s].isspace() or text[s] in ",;:"):
        s += 1
    while e > s and (text[e - 1].isspace() or text[e - 1] in ",;:.!?"):
        e -= 1
    return s, e


def _cut(text: str, s: int, e: int, cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Split [s, e) at separator spans ``cuts`` (absolute offsets)."""
    out = []
    cur = s
    for cs, ce in cuts:
        if cs <= cur:
            continue
        out.append((cur, cs))
        cur = ce
    out.append((cur, e))
    return out


def split_statements(text: str, sent: Span, question: str = "") -> list[Span]:
    """Split one sentence into atomic statements (clauses, predicate conjunctions, lists, brackets,
    appositives, relative and participle clauses, "born on DATE in PLACE"): one span per fact.

    Each returned span indexes ``text`` exactly. A sentence with one clause returns itself
    (minus the final punctuation). ``question`` (optional) keeps a restatement of the question's own
    frame together with what it adds ("The playwright, who wrote X, was made Poet Laureate in 1668" is
    one fact when the question asks about the playwright who wrote X).
    """
    s0, e0 = _trim(text, sent.start, sent.end)
    if e0 <= s0:
        return []
    body = text[s0:e0]
    # 1) clause separators
    quotes = _quote_spans(body)
    cuts = [(s0 + m.start(), s0 + m.end()) for m in _CLAUSE_SEP_RE.finditer(body)
            if m.start() > 0 and m.end() < len(body) and not _frame_relative(body, m, question)
            and not _in_quotes(m.start(), quotes)]
    pieces = _cut(text, s0, e0, cuts)
    out: list[Span] = []
    for ps, pe in pieces:
        ps, pe = _trim(text, ps, pe)
        m = _LEAD_RE.match(text[ps:pe])
        if m and pe - ps - m.end() > 0:
            ps += m.end()
        if pe <= ps:
            continue
        for fs, fe in split_facts(text, ps, pe, question):
            out.extend(_split_clause(text, fs, fe))
    # merge fragments that carry no content into their neighbour
    merged: list[Span] = []
    for sp in out:
        if merged and not content_words(sp.text) and not numbers(sp.text):
            prev = merged[-1]
            merged[-1] = Span(prev.start, sp.end, text[prev.start:sp.end])
        else:
            merged.append(sp)
    if len(merged) > 1 and not content_words(merged[0].text) and not numbers(merged[0].text):
        first = merged.pop(0)
        merged[0] = Span(first.start, merged[0].end, text[first.start:merged[0].end])
    return merged


# ----------------------------------------------------------------------------- fact split

# A finite verb (or a participle that heads a predicate): a piece without one is a noun phrase, never a
# fact of its own after a comma split ("The person who defeated X was ..." stays whole).
_VERB_RE = re.compile(
    r"\b(?:is|was|are|were|be|been|being|has|had|have|became|becomes|become|won|wins|made|makes|took|takes|"
    r"gave|wrote|writes|stars|starred|sings|sang|plays|played|serves|served|works|worked|lives|lived|died|"
    r"features|featured|includes|included|contains|produces|produced|provided|provides|hosted|hosts|known|"
    r"born|located|based|[a-z]{3,}ed)\b", re.IGNORECASE)
_REL_WORDS = r"(?:who|which|that|whose|where)"
# Comma-led dependents that state a fact of their own: relative clauses, participle phrases, "including",
# "such as", "specifically", "now", and appositives ("X, a Y").
_COMMA_DEP_RE = re.compile(
    rf",\s+(?=(?:{_REL_WORDS}|including|such\s+as|specifically|especially|featuring|starring|with|"
    r"now|currently|not|formerly|also\s+known|better\s+known|best\s+known|well\s+known|known|born|located|"
    r"based|headquartered|"
    r"released|founded|formed|directed|written|produced|created|established|owned|operated|built|"
    r"(?:a|an|the)\s)\b)", re.IGNORECASE)
# A new clause with its own named subject after a comma ("Barton Mine was halted by X, Camlaren Mine was not").
_COMMA_CLAUSE_RE = re.compile(r",\s+(?=[A-Z][\w\-.']*(?:\s+[A-Z][\w\-.']*){0,3}\s+(?:is|was|are|were|has|had)\b)")
# An appositive name closing the clause ("from the same country, North Korea").
_COMMA_NAME_RE = re.compile(r",\s+(?=[A-Z][\w\-]*(?:\s+[A-Z][\w\-]*)*\s*$)")
# Relative clauses and "such as" without a comma ("plants that are both ...", "cases such as X").
_BARE_DEP_RE = re.compile(rf"\s+(?=(?:{_REL_WORDS}\s+(?:is|was|are|were|has|had|have|also|now|then|"
                          r"[a-z]+ed)\b|such\s+as\b|including\b|(?:best\s+|well\s+|widely\s+)?known\s+for\b))",
                          re.IGNORECASE)
# A place after a date ("born on 14 November 1797, in a Scottish village"). (A date range after its
# predicate, "was built from 1884 to 1889", stays with it: the predicate alone would restate the question.)
_DATE_THEN_PLACE_RE = re.compile(r"(?<=\d)(?:,)?\s+(?=in\s+(?:(?:the|a|an)\s+)?[A-Z])")
# "and" that starts a new clause with its own subject ("and Shifty Shellshock is ...", "and the actress is")
# or a new object after a verb ("was a conductor and a Finnish composer").
_AND_NEW_RE = re.compile(
    r",?\s+and\s+(?=(?:(?:the|a|an)\s+\w+(?:\s+\w+){0,3}\s+(?:is|was|are|were|has|had)\b)|"
    r"(?:[A-Z][\w\-.']*(?:\s+[A-Z][\w\-.']*){0,3}\s+(?:is|was|are|were|has|had|serving)\b)|"
    r"(?:a|an)\s+[A-Za-z])")
_COPULA_END_RE = re.compile(r"\b(?:is|was|are|were|be|been|being)\s*$", re.IGNORECASE)
_PAREN_RE = re.compile(r"\(([^()]*)\)?")
_ACRONYM_RE = re.compile(r"^[A-Z][A-Za-z0-9&.\-]{0,7}$")
_PAREN_INNER_SEP_RE = re.compile(r"\s*[;\u2013\u2014]\s*|\s+-\s+|,\s+(?!\d)")
_REL_START_RE = re.compile(_REL_WORDS + r"\b", re.IGNORECASE)
_DET_START_RE = re.compile(r"(?:a|an|the)\s", re.IGNORECASE)


_YESNO_Q_RE = re.compile(r"\s*(?:is|are|was|were|do|does|did|can|could|has|have|had|will|would|should)\s",
                         re.IGNORECASE)


def _has_verb(text: str) -> bool:
    return bool(_VERB_RE.search(text))


def _frame_only(piece: str, question: str) -> bool:
    """The piece says nothing the question does not (all its content words are the question's)."""
    cw = content_words(piece)
    return bool(question) and bool(cw) and set(cw) <= set(content_words(question))


def _names_option(piece: str, question: str) -> bool:
    """The piece names one of the options of an "A or B" question."""
    opts = analyze_question(question).options if question else []
    n = " " + normalize(piece) + " "
    return any(normalize(o) and f" {normalize(o)} " in n for o in opts)


def split_facts(text: str, s: int, e: int, question: str = "") -> list[tuple[int, int]]:
    """Cut the clause ``text[s:e]`` into fact spans (half-open, absolute offsets, trimmed).

    Cuts:

    - brackets: "Peña (September 23, 1959 – October 14, 2014) was ..." -> "Peña", "September 23, 1959",
      "October 14, 2014", "was ..." (an acronym in brackets, "(ALAAP)", stays with its name);
    - comma-led dependents: relative clauses (", which ..."), participle phrases (", directed by ..."),
      ", including / such as / specifically ...", appositives (", a low-cost airline", ", North Korea");
    - bare relative clauses and "such as" ("plants that are ...", "cases such as X");
    - "born on DATE in PLACE", "... from 2012": a place after a date, a date range after a predicate;
    - "and" that starts a new clause or a new object ("and the actress is ...", "and a Finnish composer").

    A cut is kept only where both sides say something and the left side is already a clause (it has a
    verb; brackets excepted). A relative clause after a left side that only restates the question's frame
    stays with it: "... the German composer who created X" is one fact, the answer.
    """
    body = text[s:e]
    cuts, in_paren = _bracket_cuts(body)
    _add_dependent_cuts(body, cuts, in_paren, question)
    return _fact_spans(text, s, e, cuts)


def _bracket_cuts(body: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The cuts brackets make in ``body`` (separator spans, relative to it): each bracket, and each separator
    inside one ("(September 23, 1959 \u2013 October 14, 2014)"); an acronym's brackets are kept. A bracket the
    clause split already cut in two leaves a lone "(" or ")": a cut too. Returns ``(cuts, bracketed spans)``."""
    cuts: list[tuple[int, int]] = []
    kept_parens: set = set()
    in_paren = []
    for m in _PAREN_RE.finditer(body):
        inner = m.group(1).strip(" ;,")
        if inner and _ACRONYM_RE.match(inner) and not inner.isdigit():
            kept_parens.update((m.start(), m.end() - 1))
            continue
        in_paren.append((m.start(), m.end()))
        for sm in _PAREN_INNER_SEP_RE.finditer(m.group(1)):
            cuts.append((m.start(1) + sm.start(), m.start(1) + sm.end()))
    for i, ch in enumerate(body):
        if ch in "()" and i not in kept_parens:
            cuts.append((i, i + 1))
    return cuts, in_paren


def _add_cut(body: str, cuts: list[tuple[int, int]], in_paren: list[tuple[int, int]], question: str,
             a: int, b: int, rel: bool = False) -> None:
    """Append the cut ``body[a:b]`` to ``cuts`` where both sides say something and the left side is already a
    clause; ``rel``: a relative clause, kept with a left side that only restates the question's frame."""
    if any(pa < a < pb for pa, pb in in_paren):
        return
    prev = max([ce for _, ce in cuts if ce <= a], default=0)
    piece = body[prev:a]
    if not _has_verb(body[:a]):
        return   # a noun phrase ("The person who defeated X was ..."), not a clause yet
    if not any(ch.isalnum() for ch in body[b:]) or (not content_words(piece) and not numbers(piece)):
        return
    if rel and _frame_only(piece, question) and not _YESNO_Q_RE.match(question) \
            and not _names_option(piece, question):
        # "... the German composer who created X": the question's frame and its answer: one fact. (For a
        # yes/no question the frame is the answer: "A and B are both plants" takes the side "yes"; for an
        # "A or B" question a frame that names one option has chosen it: "David Mamet is a film
        # director" answers "Between Augusto Roa Bastos and David Mamet, who is a film director?")
        return
    cuts.append((a, b))


def _add_dependent_cuts(body: str, cuts: list[tuple[int, int]], in_paren: list[tuple[int, int]],
                        question: str) -> None:
    """Add the cuts before dependents, in this order (each cut sees the ones before it): comma-led dependents,
    comma-led clauses, ", Name" appositives, bare relative clauses, a place after a date, "and" + a new
    clause or object."""
    def add(a: int, b: int, rel: bool = False) -> None:
        _add_cut(body, cuts, in_paren, question, a, b, rel)

    for m in _COMMA_DEP_RE.finditer(body):
        nxt = body[m.end():]
        left_words = body[:m.start()].split()
        if _DET_START_RE.match(nxt) and left_words and _VERB_RE.fullmatch(left_words[-1]):
            continue   # "who wrote, The Assignation": an object after its verb, not an appositive
        add(m.start(), m.end(), rel=bool(_REL_START_RE.match(nxt)))
    for m in _COMMA_CLAUSE_RE.finditer(body):
        add(m.start(), m.end())
    for m in _COMMA_NAME_RE.finditer(body):
        left_words = body[:m.start()].split()
        if left_words and left_words[-1][:1].islower():
            add(m.start(), m.end())   # "from the same country, North Korea" (not "Winchester, Nevada")
    for m in _BARE_DEP_RE.finditer(body):
        if _COPULA_END_RE.search(body[:m.start()]) or re.search(r"\b(?:best|well|widely)$", body[:m.start()]):
            continue   # "the actress is known for ...": the predicate itself, not a dependent
        add(m.start(), m.end(), rel=True)
    for m in _DATE_THEN_PLACE_RE.finditer(body):
        add(m.start(), m.end())
    for m in _AND_NEW_RE.finditer(body):
        if not re.search(r"\b(?:both|between|either|neither)\b", body[max(0, m.start() - 60):m.start()].lower()):
            add(m.start(), m.end())


def _fact_spans(text: str, s: int, e: int, cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pieces of ``text[s:e]`` between the ``cuts`` (relative to ``s``; cuts inside quotes and cuts
    overlapping an earlier one dropped), trimmed, those with a letter or digit; the whole clause if none."""
    body = text[s:e]
    quotes = _quote_spans(body)
    cuts = sorted(c for c in cuts if not _in_quotes(c[0], quotes))
    pieces, cur = [], 0
    for a, b in cuts:
        if a < cur:
            continue
        pieces.append((cur, a))
        cur = b
    pieces.append((cur, len(body)))
    out = []
    for a, b in pieces:
        a2, b2 = _trim(text, s + a, s + b)
        if b2 > a2 and any(ch.isalnum() for ch in text[a2:b2]):
            out.append((a2, b2))
    return out or [_trim(text, s, e)]


def _frame_relative(body: str, m: "re.Match", question: str) -> bool:
    """A ", who / which ..." clause cut whose left side is a bare noun phrase or only the question's frame:
    "The playwright, who wrote X, was made ..." is one fact, not "The playwright" + the rest."""
    if not re.match(r",\s+(?:which|who|whose|where|when)\b", m.group(0) + body[m.end():m.end() + 6],
                    re.IGNORECASE):
        return False
    left = body[:m.start()]
    return not _has_verb(left) or _frame_only(left, question)


def _split_clause(text: str, s: int, e: int) -> list[Span]:
    """Split a clause on 'and' joining predicates ("was born in X and studied in Y") and on lists."""
    body = text[s:e]
    low = body.lower()
    # "both A and B", "between A and B", "A and B are" (compound subject) stay whole
    spans: list[tuple[int, int]] = []
    cur = s
    quotes = _quote_spans(body)
    for m in _AND_RE.finditer(body):
        if _in_quotes(m.start(), quotes):
            continue
        right = body[m.end():]
        left = body[:m.start()]
        if re.search(r"\b(?:both|between|either|neither)\b", left[-60:].lower()):
            continue
        if _PRONOUN_VERB_START.match(right) and len(content_words(left)) >= 2:
            spans.append((cur, s + m.start()))
            cur = s + m.end()
    spans.append((cur, e))
    out: list[Span] = []
    for a, b in spans:
        a, b = _trim(text, a, b)
        if b > a:
            out.extend(_split_list(text, a, b))
    if not out:
        a, b = _trim(text, s, e)
        out = [Span(a, b, text[a:b])] if b > a else []
    del low
    return out


_LIST_TAIL_RE = re.compile(r",?\s+(?:and|or)\s+", re.IGNORECASE)


def _split_list(text: str, s: int, e: int) -> list[Span]:
    """'X includes A, B, and C' -> ['X includes A', 'B', 'C'] when the items are short (<= 4 words each)."""
    body = text[s:e]
    quotes = _quote_spans(body)
    parts = [(m.start(), m.end()) for m in _LIST_RE.finditer(body) if not _in_quotes(m.start(), quotes)]
    tail = None
    for m in _LIST_TAIL_RE.finditer(body):
        if not _in_quotes(m.start(), quotes):
            tail = (m.start(), m.end())
    if len(parts) < 1 or tail is None or tail[0] < (parts[-1][0] if parts else 0):
        return [Span(s, e, body)]
    seps = [p for p in parts if p[0] < tail[0]] + [tail]
    seps = sorted(set(seps))
    # items after the first separator
    bounds = []
    cur = 0
    for a, b in seps:
        bounds.append((cur, a))
        cur = b
    bounds.append((cur, len(body)))
    items = bounds[1:]
    if len(items) < 2 or any(len(body[a:b].split()) > 4 or not body[a:b].strip() for a, b in items):
        return [Span(s, e, body)]
    out = []
    for a, b in bounds:
        a2, b2 = _trim(text, s + a, s + b)
        if b2 > a2:
            out.append(Span(a2, b2, text[a2:b2]))
    return out


@dataclass
class Decomposition:
    """A response cut into sentences and statement spans, plus hedge and abstention flags."""

    sentences: list[Span] = field(default_factory=list)
    statements: list[list[Span]] = field(default_factory=list)  # per sentence
    hedged: list[list[bool]] = field(default_factory=list)       # per statement
    abstain_sentence: list[bool] = field(default_factory=list)
    abstained: bool = False


_TRAILING_HEDGE_RE = re.compile(r",\s*(?:i think|i believe|i guess|i suppose|probably|perhaps|maybe|if i recall"
                                r"(?: correctly)?|i'm not sure|i am not sure)\s*[.!?]*$", re.IGNORECASE)
_NOT_SURE_BUT_RE = re.compile(r"\b(?:not\s+(?:entirely\s+)?(?:sure|certain)|unsure|don't\s+know\s+for\s+sure)\b",
                              re.IGNORECASE)


def decompose(text: str, question: str = "") -> Decomposition:
    """Sentences, statements, hedge flags and abstention for a response (linear time).

    ``question`` (optional) lets the statement split keep restatements of the question's frame whole
    (:func:`split_statements`)."""
    d = Decomposition()
    hedge_all_after = False
    for sent in split_sentences(text):
        d.sentences.append(sent)
        if is_abstention_text(sent.text):
            d.abstain_sentence.append(True)
            d.statements.append([])
            d.hedged.append([])
            # "I'm not sure. It might be X." : a refusal sentence followed by content hedges that content
            hedge_all_after = True
            continue
        d.abstain_sentence.append(False)
        sts = split_statements(text, sent, question)
        # a leading "I'm not sure, but ..." clause is a hedge for the rest, not a statement
        sts = [st for st in sts if not is_abstention_text(st.text)] or sts
        cues = hedge_spans(sent.text)
        cues += [(m.start(), m.end()) for m in _NOT_SURE_BUT_RE.finditer(sent.text)]
        trailing = bool(_TRAILING_HEDGE_RE.search(sent.text))
        flags = []
        for st in sts:
            rel_end = st.end - sent.start
            h = hedge_all_after or trailing or any(cs < rel_end for cs, _ in cues)
            flags.append(h)
        d.statements.append(sts)
        d.hedged.append(flags)
    n_st = sum(len(s) for s in d.statements)
    d.abstained = n_st == 0 and any(d.abstain_sentence)
    return d
