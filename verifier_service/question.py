"""Question analysis and answer-candidate ranking for the ``evidence`` backend (no gold answer needed).

``analyze_question`` finds the expected answer type (yes/no, choice between named options, person,
location, date, number, work, organisation, other), the head noun of "which/what X" questions, the
options of "A or B" questions and a comparison direction ("first", "more"...).

``AnswerRanker`` scores how well a candidate string answers the question *from the materials alone*:
it must occur in the evidence, near the question's words, with a type that fits the question, not be
part of the question itself (unless it is one of the offered options), and for comparisons it must
win the comparison of years/numbers found next to each option. This is a small extractive-QA
heuristic; it never looks at a gold answer.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from verifier_service import text as T
from verifier_service.question_info import (  # noqa: F401 (re-exported: the question analysis)
    COUNTRIES, DATE_HEADS, LOCATION_HEADS, LOCATION_WORDS, _MONTHS, NATIONALITIES, NUMBER_HEADS, OCCUPATION_HEADS,
    ORG_HEADS, ORG_WORDS, PERSON_HEADS, _PREPS, _WH, WORK_HEADS, QuestionInfo, analyze_question, _head_type,
    _question_word)
from verifier_service.retrieval import MaterialIndex

# ----------------------------------------------------------------------------- candidate types

_YEAR_RE = re.compile(r"(?<![0-9])(1[0-9]{3}|20[0-9]{2})")
_AGENT_VERBS = frozenset("directed written produced founded created composed performed sung played starred hosted "
                         "designed invented discovered painted authored illustrated coached led owned "
                         "narrated voiced developed".split())
ALL_HEADS = PERSON_HEADS | LOCATION_HEADS | WORK_HEADS | ORG_HEADS


def candidate_types(x: str, idx: MaterialIndex, occ: list[tuple[int, int, int]]) -> set[str]:
    """Coarse types of a candidate string from its shape and its evidence contexts."""
    types: set[str] = set()
    low = x.lower().strip()
    ws = T.words(x)
    if low in ("yes", "no"):
        return {"yesno"}
    wl = set(ws)
    if _YEAR_RE.search(x) or (wl & _MONTHS and any(w.isdigit() for w in ws)):
        types.add("date")
    if T.numbers(x) and not types:
        types.add("number")
    if not any(w[:1].isupper() for w in x.split()) and ws and T.stem(ws[-1]) in PERSON_HEADS:
        return {"occupation"}
    if len(ws) <= 2 and wl <= NATIONALITIES | {"south", "north", "new", "zealand", "korean"} and wl & NATIONALITIES:
        return {"nationality"}
    if x[:1] in "\"\u201c'":
        types.add("work")
    if wl & LOCATION_WORDS or wl & COUNTRIES:
        types.add("location")
    if wl & ORG_WORDS:
        types.add("org")
    caps = [w for w in x.split() if w[:1].isupper()]
    for si, pos, n in occ[:6]:
        es = idx.sents[si]
        nw = es.nwords
        before = nw[max(0, pos - 3):pos]
        after = nw[pos + n: pos + n + 4]
        raw = es.text
        core = x.strip("\"\u201c\u201d ")
        k = raw.find(core)
        if k > 0 and raw[k - 1] in "\"\u201c" and raw[k + len(core): k + len(core) + 2][-1:] in ("\"", "\u201d") \
                or k > 0 and raw[k - 1] in "\"\u201c" and raw[k + len(core): k + len(core) + 1] in ("\"", "\u201d"):
            types.add("work")
        if before and before[-1] in ("in", "at", "from", "near") and caps and "date" not in types:
            types.add("location")
        if after[:1] == ["born"] or (len(after) > 1 and after[0] in ("is", "was")
                                     and (after[1] in PERSON_HEADS or after[1] in NATIONALITIES)):
            types.add("person")
        if len(before) >= 2 and before[-1] == "by" and before[-2] in _AGENT_VERBS and caps:
            types.add("person")
        if (before[-1:] and before[-1] in WORK_HEADS) or (after[:1] and after[0] in WORK_HEADS):
            types.add("work")
        if (before[-1:] and before[-1] in ORG_HEADS) or (after[:1] and T.stem(after[0]) in ORG_HEADS):
            types.add("org")
        if before[-1:] and before[-1] in PERSON_HEADS and caps:
            types.add("person")
        if after[:1] and after[0] in LOCATION_HEADS and after[0] not in ("where",):
            types.add("location")
    if types & {"date", "number"}:
        types -= {"person", "location", "org", "work"}  # "(born 8 October 1988) is a Russian dancer"
    if not types and 2 <= len(caps) <= 4 and len(caps) == len(x.split()) and not (wl & ORG_WORDS):
        types.add("person?")
    if not types and caps:
        types.add("name")
    if not types:
        types.add("phrase")
    return types


_COMPAT = {
    # qtype -> {candidate type: score}
    "person": {"person": 1.0, "person?": 0.7, "name": 0.3, "org": 0.0, "location": -0.6, "date": -1.0,
               "number": -1.0, "work": -0.5, "phrase": -0.3, "nationality": -1.0},
    "location": {"location": 1.0, "name": 0.3, "person?": -0.2, "org": 0.0, "person": -0.8, "date": -1.0,
                 "number": -1.0, "work": -0.5, "phrase": -0.3, "nationality": 0.2},
    "date": {"date": 1.0, "number": 0.2, "name": -1.0, "person": -1.0, "person?": -1.0, "location": -1.0,
             "org": -1.0, "work": -1.0, "phrase": -0.5, "nationality": -1.0},
    "number": {"number": 1.0, "date": 0.2, "name": -1.0, "person": -1.0, "person?": -1.0, "location": -1.0,
               "org": -1.0, "work": -1.0, "phrase": -0.3, "nationality": -1.0},
    "work": {"work": 1.0, "name": 0.3, "person?": 0.0, "org": 0.0, "person": -0.6, "location": -0.5,
             "date": -1.0, "number": -0.8, "phrase": 0.0, "nationality": -1.0},
    "org": {"org": 1.0, "name": 0.4, "person?": 0.0, "work": 0.0, "person": -0.5, "location": -0.3,
            "date": -1.0, "number": -0.8, "phrase": 0.0, "nationality": -1.0},
    "occupation": {"occupation": 1.0, "phrase": 0.2, "name": -1.0, "person": -1.0, "person?": -1.0,
                   "location": -1.0, "org": -1.0, "work": -1.0, "date": -1.0, "number": -1.0, "nationality": -0.5},
    "entity": {"name": 0.2, "person": 0.1, "person?": 0.1, "location": 0.1, "org": 0.1, "work": 0.1,
               "date": -0.3, "number": -0.3, "phrase": 0.0, "nationality": -0.3},
}
_NATIONALITY_HEADS = frozenset("nationality citizenship ethnicity origin descent heritage language".split())


def type_fit(qtype: str, ctypes: set[str], head: str = "") -> float:
    if qtype == "yesno":
        return 1.0 if "yesno" in ctypes else -2.0
    if "yesno" in ctypes:
        return -2.0
    if head in _NATIONALITY_HEADS:
        return 1.0 if "nationality" in ctypes else (0.3 if "location" in ctypes else -0.5)
    table = _COMPAT.get(qtype)
    if not table:
        return 0.0
    return max(table.get(t, 0.0) for t in ctypes)


def _similar(a: str, b: str) -> bool:
    """Two words are the same up to one typo (for misspelt names in questions: 'Mindon' ~ 'Minden')."""
    if a == b:
        return True
    if len(a) < 4 or len(b) < 4 or abs(len(a) - len(b)) > 1 or a[0] != b[0]:
        return False
    if len(a) == len(b):
        return sum(1 for x, y in zip(a, b) if x != y) <= 1
    s, l = (a, b) if len(a) < len(b) else (b, a)
    return any(l[:i] + l[i + 1:] == s for i in range(len(l)))


# ----------------------------------------------------------------------------- ranker

_SLOT_SKIP = frozenset("is are was were be been did do does has have had the a an of that this which what".split())


@lru_cache(maxsize=4096)
def question_slot(q: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The words that frame the asked slot: (stems right before the wh-word, stems right after it).

    "... named after who?" -> (("name", "after"), ()); "... released by which company?" ->
    (("releas", "by"), ()); "Who released their second album ...?" -> ((), ("releas",)). A leading
    wh-word asks for a subject, so its frame is the verb after it; a later one, the words before it.
    """
    ws = T.normalize(q).split()
    if not ws:
        return (), ()
    wh = _question_word(ws)
    tail = [i for i in range(max(0, len(ws) - 2), len(ws)) if ws[i] in _WH]
    if tail:
        wh = tail[-1]  # "... who Matt Groening named after who?": the slot is the last one
    if wh is None:
        return (), ()
    if wh == 0 or (wh == 1 and ws[0] in _PREPS):
        # "Who released ...?": the verb right after a leading who/whom frames a subject slot
        nxt = ws[wh + 1] if wh + 1 < len(ws) else ""
        if ws[wh] in ("who", "whom") and nxt and nxt not in T.STOPWORDS and nxt not in _SLOT_SKIP:
            return (), (T.stem(nxt),)
        return (), ()
    before = []
    for w in reversed(ws[max(0, wh - 3):wh]):
        if w in _SLOT_SKIP or w in _WH or w.isdigit():
            continue
        before.append(T.stem(w) if w not in _PREPS else w)
        if len(before) == 2:
            break
    return tuple(reversed(before)), ()


_ORDINAL_ONE = frozenset("zero one first second".split())
# person nouns that name no occupation (kinship, pronouns, generic): never candidates for "what profession"
_NOT_OCCUPATIONS = frozenset(T.stem(w) for w in """person people man woman men women who whom whose brother sister
son daughter father mother wife husband child member star personality celebrity candidate leader""".split())


@dataclass
class Ranking:
    score: float           # candidate's own score
    best_other: float      # best score among other candidates in the evidence
    best_other_text: str
    found: bool            # the candidate occurs in the evidence
    type_fit: float
    evidence: list[int]    # sentence indices used
    above: int = 0         # other candidates (sharing no word with it) that score strictly higher

    @property
    def margin(self) -> float:
        return self.score - self.best_other


class AnswerRanker:
    """Ranks candidate answers to one question against one material index (both fixed per request).

    Score of a candidate = relevance of its best evidence sentence to the question (BM25, normalised)
    + proximity to the question's words in that sentence + the question's slot frame around it there
    (:func:`question_slot`: "released by which company" -> "released by X") + head-noun agreement + type fit
    + subject-of-the-most-relevant-passage bonus + relevance of the candidate's passage, minus a penalty
    when the candidate is part of the question (for "A or B" questions: a bonus for the options and the
    comparison winner instead).
    """

    # Weights fitted on the HaluEval train split's entity-swap pairs (never dev or test; bench/verifier.py):
    # the right answer vs another entity of the same passage, ranked by the reward the two get. The
    # relevance of the candidate's sentence to the question now weighs 0: on two-hop questions the sentence
    # most like the question restates the first hop, and the answer sits in the bridge passage's sentence.
    # The question's slot frame and the asked head noun next to the candidate carry more ("Played by actress
    # Amy Jo Johnson"). Old weights (1.0, 1.5, 0.8, 1.5, 0.8, 2.0; slot 1.0) ranked 81% of the train pairs
    # right by reward, these 85% (dev, checked once after fitting: 82% -> 87%).
    W_REL, W_PROX, W_HEAD, W_TYPE, W_SUBJ, W_INQ = 0.0, 0.5, 2.0, 1.5, 0.8, 2.0
    W_SLOT = 2.5
    # Evidence strength of the candidate's passage: its relevance to the question (summed BM25 of its
    # sentences, normalised to the best passage). Without it a candidate of the asked type scored the same
    # from a passage that shares no word with the question as from the best-matching sentence, and the
    # answer margin (the statement's confidence, weighed in by TRUTH_CONFIDENCE) put an entity found only
    # in another passage above the best sentence's runner-ups. 0.5 fitted on the first 1,500 train items
    # (reward pairs at TRUTH_CONFIDENCE 0.1: 86.3% -> 86.4%; 1.0, and a flat penalty of 0.5 / 1.0 for a
    # candidate whose sentences share no question word, were no better); the entity-swap pairs take both
    # answers from one passage, so it moves them little.
    W_PREL = 0.5

    def __init__(self, qi: QuestionInfo, idx: MaterialIndex):
        self.qi = qi
        self.idx = idx
        self.qscores = idx.scores(qi.stem_list)
        top = max(self.qscores) if self.qscores else 0.0
        self.qrel = [s / top if top > 0 else 0.0 for s in self.qscores]
        self.qstems = {s for s in qi.stem_list}
        self.qwords = [w for w in T.normalize(qi.text).split() if w not in T.STOPWORDS]
        self.qword_set = set(self.qwords)
        self._cands: Optional[list[str]] = None
        self._cache: dict[str, tuple[float, float, list[int]]] = {}
        self._cmp: Optional[dict[str, float]] = None
        self._subj: Optional[dict[str, float]] = None
        self._prel: Optional[dict[int, float]] = None
        self.slot_before, self.slot_after = question_slot(qi.text)

    # -- candidates present in the evidence
    def candidates(self) -> list[str]:
        """The evidence's entities, and for number / occupation questions its number words ("six") and
        occupation nouns ("director"): answers of the asked type that are not names must rank too."""
        if self._cands is None:
            seen, out = set(), []
            for ents in self.idx.sentence_entities:
                for e in ents:
                    n = e.norm
                    if n and n not in seen and len(n) > 1:
                        seen.add(n)
                        out.append(e.text)
            if self.qi.qtype in ("number", "occupation"):
                for es in self.idx.sents:
                    for w in es.nwords:
                        if w in seen:
                            continue
                        if (self.qi.qtype == "number" and w in T.NUMBER_WORDS and w not in _ORDINAL_ONE) or (
                                self.qi.qtype == "occupation" and T.stem(w) in PERSON_HEADS
                                and T.stem(w) not in _NOT_OCCUPATIONS):
                            seen.add(w)
                            out.append(w)
            self._cands = out
        return self._cands

    def in_question(self, x: str) -> float:
        """1.0 when ``x`` is part of the question (typos tolerated), 0.5 when all its words are, else 0."""
        if self.qi.mentions(x):
            return 1.0
        xs = [w for w in T.normalize(x).split() if w not in T.STOPWORDS and len(w) > 1]
        if not xs:
            return 0.0
        found = [w in self.qword_set or any(_similar(w, q) for q in self.qwords) for w in xs]
        if all(found):
            return 1.0 if len(xs) >= 2 else 0.5
        if len(xs) >= 3 and found[0] and found[-1]:
            return 1.0  # "Jodi Lynn Picoult" for the question's "Jodi Picoult"
        return 0.0

    def _passage_rel(self) -> dict[int, float]:
        """Passage index -> relevance of that passage to the question (summed BM25 of its sentences), 0..1."""
        if self._prel is None:
            rel: dict[int, float] = {}
            for si, es in enumerate(self.idx.sents):
                rel[es.passage] = rel.get(es.passage, 0.0) + self.qscores[si]
            top = max(rel.values()) if rel else 0.0
            self._prel = {p: (r / top if top > 0 else 0.0) for p, r in rel.items()}
        return self._prel

    def _passage_subjects(self) -> dict[str, float]:
        """Normalised subject (first entity) of each passage -> relevance of that passage to the question."""
        if self._subj is None:
            self._subj = {}
            rel: dict[int, float] = {}
            first: dict[int, str] = {}
            for si, es in enumerate(self.idx.sents):
                rel[es.passage] = rel.get(es.passage, 0.0) + self.qscores[si]
                if es.passage not in first:
                    ents = [e for e in self.idx.sentence_entities[si] if e.kind in ("name", "quoted") and e.start < 8]
                    if ents:
                        first[es.passage] = ents[0].norm
            top = max(rel.values()) if rel else 0.0
            for p, n in first.items():
                if top > 0 and not self.qi.mentions(n):
                    self._subj[n] = rel[p] / top
        return self._subj

    def _slot(self, si: int, pos: int, n: int) -> float:
        """Evidence strength of one occurrence: the words that frame the question's slot frame it here too.

        "... described in 1809 by whom?" -> "described by" right before the candidate ("It was described
        by Panzer"); "Who released ...?" -> "released" right after it. Share of those words found within
        4 words on that side, 0..1.
        """
        st = self.idx.sents[si].nstems
        tot = hit = 0.0
        if self.slot_before:
            win = set(st[max(0, pos - 4):pos])
            tot += len(self.slot_before)
            hit += sum(1 for w in self.slot_before if w in win)
        if self.slot_after:
            win = set(st[pos + n:pos + n + 4])
            tot += len(self.slot_after)
            hit += sum(1 for w in self.slot_after if w in win)
        return hit / tot if tot else 0.0

    def _proximity(self, si: int, pos: int, n: int) -> float:
        st = self.idx.sents[si].nstems
        tot = 0.0
        seen = set()
        for j, w in enumerate(st):
            if pos <= j < pos + n or w in seen or w not in self.qstems:
                continue
            d = pos - j if j < pos else j - (pos + n - 1)
            tot += 1.0 / (1.0 + d / 4.0)
            seen.add(w)
        return tot / max(1, len(self.qstems)) ** 0.5

    def _comparison(self) -> dict[str, float]:
        """+1/-1 per option when the question compares years/numbers ("born first", "founded earlier")."""
        if self._cmp is not None:
            return self._cmp
        self._cmp = {}
        qi = self.qi
        if len(qi.options) != 2 or not qi.direction:
            return self._cmp
        vals = {}
        for opt in qi.options:
            v = self._option_value(opt, years=qi.year_compare)
            if v is not None:
                vals[T.normalize(opt)] = v
        if len(vals) == 2:
            (a, va), (b, vb) = vals.items()
            if va != vb:
                best = a if (va < vb) == (qi.direction == "min") else b
                self._cmp = {k: (1.0 if k == best else -1.0) for k in vals}
        return self._cmp

    def _option_value(self, opt: str, years: bool) -> Optional[float]:
        occ = self.idx.occurrences(opt, fuzzy=True)
        if not occ:
            last = T.normalize(opt).split()[-1:] or [""]
            occ = self.idx.occurrences(last[0]) if last[0] and last[0] not in T.STOPWORDS else []
        for si, pos, n in occ:
            text = self.idx.sents[si].text
            if years:
                ys = _YEAR_RE.findall(text)
                if ys:
                    return float(ys[0])
            else:
                nums = [x for x in T.numbers(text) if not _YEAR_RE.fullmatch(x)]
                nums.sort(key=lambda s: text.find(s))
                if nums:
                    try:
                        return float(nums[0])
                    except ValueError:
                        continue
        return None

    def _head_bonus(self, x: str, occ) -> float:
        head = self.qi.head
        if not head:
            return 0.0
        xw = {T.stem(w) for w in T.words(x)}
        if head in xw:
            return 1.0
        if head in ("country", "nation") and (set(T.words(x)) & COUNTRIES):
            return 1.0
        ctx_heads = set()
        for si, pos, n in occ[:4]:
            st = self.idx.sents[si].nstems
            window = st[max(0, pos - 4):pos] + st[pos + n:pos + n + 5]
            if head in window:
                return 0.7
            ctx_heads |= {w for w in st[pos + n:pos + n + 2] if w in ALL_HEADS}
        own = (xw | ctx_heads) & ALL_HEADS
        if own and head in ALL_HEADS and _head_type(head) == _head_type(min(own)):
            return -0.5  # same category, different head ("stadium" for "what town"); min: the same head in every
            #              process (a set's first element moves with the string hash seed)
        return 0.0

    def score(self, x: str) -> tuple[float, float, list[int]]:
        """(score, type fit, evidence sentence indices) of candidate ``x``; score is -inf if absent."""
        key = T.normalize(x)
        if key in self._cache:
            return self._cache[key]
        qi = self.qi
        occ = self.idx.occurrences(x, fuzzy=True)
        ctypes = candidate_types(x, self.idx, occ)
        fit = type_fit(qi.qtype, ctypes, qi.head)
        if not occ:
            res = (-math.inf, fit, [])
            self._cache[key] = res
            return res
        best, best_si = -math.inf, occ[0][0]
        prel = self._passage_rel()
        for si, pos, n in occ:
            s = self.W_REL * self.qrel[si] + self.W_PROX * self._proximity(si, pos, n) \
                + self.W_SLOT * self._slot(si, pos, n) + self.W_PREL * prel.get(self.idx.sents[si].passage, 0.0)
            if s > best:
                best, best_si = s, si
        s = best + self.W_TYPE * fit + self.W_HEAD * self._head_bonus(x, occ)
        s += self.W_SUBJ * self._passage_subjects().get(key, 0.0)
        if qi.options:
            is_option = any(T.normalize(o) == key or key in T.normalize(o) or T.normalize(o) in key
                            for o in qi.options)
            s += 1.5 if is_option else -1.5
            s += 2.0 * self._comparison().get(key, 0.0)
        else:
            s -= self.W_INQ * self.in_question(x)
        res = (s, fit, [best_si])
        self._cache[key] = res
        return res

    def rank(self, x: str) -> Ranking:
        s, fit, ev = self.score(x)
        key = T.normalize(x)
        kset = set(key.split())
        best_o, best_t = -math.inf, ""
        above = 0
        for c in self.candidates():
            ck = T.normalize(c)
            if not ck or ck == key or ck in key or key in ck:
                continue  # the candidate itself, or a variant of it
            cs, _, _ = self.score(c)
            if cs > s:
                above += 1  # another name sharing a word ("John Smith" for "John Lennon") still ranks
            if kset and set(ck.split()) & kset:
                continue
            if cs > best_o:
                best_o, best_t = cs, c
        if best_o == -math.inf:
            best_o = 0.0
        return Ranking(score=s, best_other=best_o, best_other_text=best_t, found=s > -math.inf, type_fit=fit,
                       evidence=ev, above=above)


# ----------------------------------------------------------------------------- yes/no

def predict_yesno(qi: QuestionInfo, idx: MaterialIndex) -> tuple[Optional[str], float]:
    """Guess the yes/no answer from the materials: ('yes'|'no'|None, confidence 0.5-0.75).

    'Are both A and B American rock bands?': each subject's passage must carry the property words.
    'Are A and B of the same nationality?': the subjects' nationality/profession words must intersect.
    """
    subjects = [e for e in qi.entities if T.normalize(e) and e.lower() not in ("both",)]
    if not subjects or not idx.sents:
        return None, 0.5
    subj_words = {w for e in subjects for w in T.normalize(e).split()}
    props = [s for s in qi.stem_list if s not in {T.stem(w) for w in subj_words}
             and s not in ("both", "same", "also")]
    passages = []
    for e in subjects[:3]:
        occ = idx.occurrences(e)
        if not occ:
            last = T.normalize(e).split()[-1]
            occ = idx.occurrences(last) if last not in T.STOPWORDS else []
        if not occ:
            continue
        pi = idx.sents[occ[0][0]].passage
        sents = [es for es in idx.sents if es.passage == pi][:2]
        passages.append(sents)
    if len(passages) < 2:
        return None, 0.5
    if "same" in qi.stems or "same" in qi.norm.split():
        cats = []
        for sents in passages:
            ws = {w for es in sents for w in es.words}
            cats.append((ws & NATIONALITIES) | (ws & COUNTRIES) | {T.stem(w) for w in ws if T.stem(w) in PERSON_HEADS}
                        | {T.stem(w) for w in ws if T.stem(w) in ORG_HEADS | WORK_HEADS})
        if all(cats):
            inter = set.intersection(*cats)
            return ("yes", 0.65) if inter else ("no", 0.65)
        return None, 0.5
    if not props:
        return None, 0.5
    covs = []
    for sents in passages:
        st = {s for es in sents for s in es.stems}
        covs.append(sum(1 for p in props if p in st) / len(props))
    if min(covs) >= 0.5:
        return "yes", 0.55 + 0.2 * min(covs)
    return "no", 0.55 + 0.2 * (1 - min(covs))
