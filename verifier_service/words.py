"""Words, stems, numbers and entities: the lexical layer of the verifier's text analysis (:mod:`verifier_service.text`
re-exports all of it, so ``text.stem`` and the like still work). Below the question analysis
(:mod:`verifier_service.question_info`), which :mod:`verifier_service.text`'s fact split uses: both read words
from here, so text and question analysis do not import each other.

Everything here is regex based and linear in the text length.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from core.sentences import ABBREVIATIONS as _ABBREV

# ----------------------------------------------------------------------------- words

STOPWORDS = frozenset("""
a an the and or but nor so yet of in on at to for from by with without about as into onto over under than then
is are was were be been being am do does did done has have had having will would shall should can could may might
must it its it's this that these those there here their they them he him his she her hers we us our you your i me
my mine not no yes also too very just only both either neither each every all any some such own same other another
which who whom whose what when where why how while whereas although though because if unless until since after
before during between among against up down out off again further once more most less least many much few several
one s t d ll re ve m o y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn
weren won't wouldn answer answers correct true known named called name called later former
""".split())

_WORD_RE = re.compile(r"[A-Za-z0-9\u00C0-\u024F]+(?:['\u2019][A-Za-z]+)?")
_NUM_RE = re.compile(r"(?<![\w.])((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)(?:st|nd|rd|th|s)?(?![\w])")
_YEAR_RE = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})s?\b")

NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1_000_000, "billion": 1_000_000_000, "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5,
    "sixth": 6, "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "once": 1, "twice": 2, "single": 1,
    "double": 2, "triple": 3,
}
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters/digits, internal apostrophes kept)."""
    return [w.lower().replace("\u2019", "'") for w in _WORD_RE.findall(text)]


@lru_cache(maxsize=65536)
def stem(w: str) -> str:
    """A tiny suffix stripper: enough to match 'founded'/'founding', 'bands'/'band', 'cities'/'city'."""
    w = w.lower()
    if w.endswith("'s"):
        w = w[:-2]
    if len(w) <= 3 or w.isdigit():
        return w
    for suf, rep in (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""), ("ly", "")):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: len(w) - len(suf)] + rep
            break
    return w


def content_words(text: str) -> list[str]:
    """Stemmed words that carry content (stop-words removed)."""
    return [stem(w) for w in words(text) if w not in STOPWORDS and len(w) > 1 or w.isdigit()]


def grounded_share(answer: str, question: str, evidence: str) -> "float | None":
    """Share of the content words an answer adds to its question that occur in the evidence.

    Stemmed content words (:func:`content_words`) of ``answer`` that are not in ``question`` are what the
    answer claims beyond the question; the share of them found anywhere in ``evidence`` says whether the
    passage could have told the model so. ``None`` when the answer adds no content word (a yes / no or
    either-or reply, or one that only restates the question). Bag-of-words and order-free: 0.0 flags an
    answer with nothing from the passage; 1.0 does not prove the answer right.
    """
    asked = set(content_words(question))
    added = [w for w in content_words(answer) if w not in asked]
    if not added:
        return None
    found = set(content_words(evidence))
    return sum(w in found for w in added) / len(added)


@lru_cache(maxsize=65536)
def normalize(text: str) -> str:
    """Lower-case, drop articles and punctuation, squeeze spaces (SQuAD-style answer normalisation)."""
    ws = [w[:-2] if w.endswith("'s") else w for w in words(text) if w not in ("a", "an", "the")]
    return " ".join(ws)


def numbers(text: str) -> set[str]:
    """Numbers as canonical strings ('1,200' -> '1200'; number words -> digits; years kept)."""
    out = set()
    for m in _NUM_RE.finditer(text):
        s = m.group(1).replace(",", "")
        try:
            v = float(s)
            out.add(str(int(v)) if v == int(v) else str(v))
        except ValueError:
            continue
    for w in words(text):
        if w in NUMBER_WORDS and w not in ("one", "once", "single", "first", "second"):
            out.add(str(NUMBER_WORDS[w]))
    return out


# ----------------------------------------------------------------------------- entities

_CAP = r"(?:[A-Z\u00C0-\u00DE][\w\u00C0-\u024F'\u2019\-.&]*|[0-9]+(?:st|nd|rd|th))"
_LINK = r"(?:of(?:\s+the)?|de|da|del|der|van|von|la|le|du|for|y|al|bin|el|&)"
# A run of capitalised words, allowing short lower-case linkers inside ("Kings of Leon", "University of Texas").
_ENTITY_RE = re.compile(rf"{_CAP}(?:\s+(?:{_LINK}\s+)*{_CAP})*")
_QUOTED_RE = re.compile(r"[\"\u201c\u2018']([^\"\u201d\u2019']{2,80})[\"\u201d\u2019']")
_DATE_RE = re.compile(
    r"\b(?:(?:\d{1,2}\s+)?(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December)(?:\s+\d{1,2})?(?:,)?\s+\d{3,4}|\d{3,4})\b")

# Capitalised words that start sentences or are function words, not names.
_NOT_NAMES = frozenset(w.capitalize() for w in STOPWORDS) | {
    "I", "It", "The", "A", "An", "Yes", "No", "In", "On", "At", "He", "She", "They", "This", "That", "These",
    "Those", "His", "Her", "Their", "Its", "There", "Here", "Both", "However", "Also", "Although", "While",
    "Maybe", "Perhaps", "Probably", "Possibly", "Likely", "Unlikely", "Answer", "Sure", "Well", "So", "Then",
    "Because", "Since", "As", "After", "Before", "During", "According", "Despite", "Following", "Classified",
    "Born", "Located", "Based", "Known", "Founded", "Formed", "Originally", "Currently", "Today", "Later",
    "Initially", "Upon", "Unlike", "Like", "Along", "Together", "Many", "Most", "Some", "Several", "Other", "Each",
    "Every", "Our", "Its", "Following", "Including", "Although", "Though", "Instead", "Meanwhile", "Thus",
    "Therefore", "Furthermore", "Moreover", "Nevertheless", "Yet", "Still", "Even", "Only", "Just", "Once",
    "Previously", "Subsequently", "Eventually", "Finally", "First", "Second", "Third", "Sir", "Dr", "Mr", "Mrs",
    # conversational sentence starters ("Let me explain.", "Thanks for asking.")
    "Let", "Lets", "Let's", "Thanks", "Thank", "Hope", "Please", "Hello", "Hi", "Okay", "Ok", "Sorry", "Overall",
    "Actually", "Honestly", "Interestingly", "Unfortunately", "Fortunately", "Additionally", "Note", "Hopefully",
    "Certainly", "Indeed", "Sure", "Great", "Good", "Anyway", "Basically", "Essentially", "Generally", "Prior",
}


@dataclass
class Entity:
    text: str
    start: int
    end: int
    kind: str  # "name" | "number" | "date" | "quoted"

    @property
    def norm(self) -> str:
        return normalize(self.text)


def entities(text: str) -> list[Entity]:
    """Named-entity-like spans: capitalised runs, quoted titles, dates and numbers (sorted, de-overlapped)."""
    found: list[Entity] = []
    for m in _QUOTED_RE.finditer(text):
        inner = m.group(1).strip()
        if inner and len(inner.split()) <= 12 and not inner.lower().startswith(("s ", "t ")):
            found.append(Entity(inner, m.start(1), m.start(1) + len(inner), "quoted"))
    for m in _DATE_RE.finditer(text):
        found.append(Entity(m.group(0), m.start(), m.end(), "date"))
    for m in _ENTITY_RE.finditer(text):
        toks = [(t.start() + m.start(), t.end() + m.start()) for t in re.finditer(r"\S+", m.group(0))]
        # cut at a sentence end inside the run ("...of England. He"): a word of 4+ letters ending in '.'
        groups, cur = [], []
        for a, b in toks:
            cur.append((a, b))
            w = text[a:b]
            if w.endswith(".") and len(w) > 4 and w.lower().rstrip(".") not in _ABBREV and "." not in w[:-1]:
                groups.append(cur)
                cur = []
        if cur:
            groups.append(cur)
        for g in groups:
            while g and (text[g[0][0]:g[0][1]] in _NOT_NAMES
                         or text[g[0][0]:g[0][1]].lower() in ("of", "and", "the", "for")):
                g = g[1:]
            while g and text[g[-1][0]:g[-1][1]].lower().rstrip(".") in ("of", "the", "and", "de", "for", "&"):
                g = g[:-1]
            if not g:
                continue
            s, e = g[0][0], g[-1][1]
            while e > s and text[e - 1] in ".-'\u2019&,":
                if text[e - 1] == "." and e - s >= 2 and text[e - 3:e - 1].isupper() is False \
                        and re.search(r"(?:^|[\s.])[A-Z]\.$", text[s:e]):
                    break  # keep the period of an initial ("U.S.", "J.")
                e -= 1
            if e <= s:
                continue
            t = text[s:e]
            if t in _NOT_NAMES or not t.strip():
                continue
            kind = "number" if t[0].isdigit() else "name"
            found.append(Entity(t, s, e, kind))
    for m in _NUM_RE.finditer(text):
        found.append(Entity(m.group(0), m.start(), m.end(), "number"))
    # de-overlap: prefer longer spans, then quoted/date over names. A character map of the spans taken so
    # far makes each check cost the candidate's length (pairwise checks were quadratic in the entity count:
    # 1.6 s for a 20k-character text). Every span here is non-empty.
    pri = {"quoted": 0, "date": 1, "name": 2, "number": 3}
    found.sort(key=lambda x: (-(x.end - x.start), pri[x.kind], x.start))
    taken: list[Entity] = []
    used = bytearray(len(text))
    for ent in found:
        if any(used[ent.start:ent.end]):
            continue
        used[ent.start:ent.end] = b"\x01" * (ent.end - ent.start)
        taken.append(ent)
    taken.sort(key=lambda x: x.start)
    return taken
