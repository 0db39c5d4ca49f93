"""The ``evidence`` backend: atomic-fact verification without an LLM.

Per request (all CPU, linear in the text):

1. :func:`verifier_service.text.decompose` cuts the response into sentences and atomic statements with
   exact spans, and flags hedges and abstentions;
2. a :class:`~verifier_service.retrieval.MaterialIndex` (BM25 via ``bm25s`` over the materials' sentences)
   is built once;
3. every statement is checked:

   * **unsupported facts** - a named entity or number that occurs neither in the materials, the question
     nor the gold answer makes the statement ``Wrong`` (a made-up name/date is the typical hallucination);
   * **answer check** - a statement that answers the question (``The answer is X``, a short answer, the
     chosen option of an ``A or B`` question, a yes/no stance, or a new entity of the asked type) is
     compared with the gold answer when one is given; without a gold answer, the candidate is ranked
     against every other entity of the evidence by :class:`~verifier_service.question.AnswerRanker`
     (type fit, proximity to the question's words, head noun, comparisons of years) and yes/no stances
     against :func:`~verifier_service.question.predict_yesno`;
   * **evidence strength** (:func:`slot_check`) - the evidence sentence that best matches the statement's
     other words must state its entities: one that puts another entity of the same kind in the same slot
     contradicts it (``Wrong``: "a 2004 comedy film" where the evidence says "a 1988 comedy film", though
     2004 occurs elsewhere in the materials); one that states them all supports it (a background fact is
     ``Correct`` whatever the question asks); a fragment too short to locate ("written by Marc Klein")
     is checked through its sentence;
   * **lexical support** - the share of the statement's new content words found in the evidence;

4. hedge cues ("I think", "probably") are blanked before the checks (they are not claims), and hedged
   statements get the hedged labels; statements without checkable content are ``Vague`` (so are all
   statements of a request with neither materials nor a gold answer: there is nothing to check against);
   informativeness (1-5) follows the statement's role for the question (restating it = 1, background = 2-4,
   a specific answer of the asked type = 5); a candidate answer ranked without a gold answer gets it from
   its rank among the evidence's entities (:func:`rank_informativeness`), so two candidates with the same
   label still earn different rewards, the better-supported one more.
"""
from __future__ import annotations

import dataclasses
import math
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

from core.lexicon import country_aliases_of
from core.verify_schema import Sentence, Statement, VerifyRequest, VerifyResult
from verifier_service import text as T
from verifier_service.question import (ALL_HEADS, LOCATION_WORDS, ORG_WORDS, AnswerRanker, QuestionInfo,
                                       analyze_question, predict_yesno)
from verifier_service.question_rules import apply_question_rules
from verifier_service.retrieval import MaterialIndex

ALGO_VERSION = "evidence-2.0"  # bump on any verdict change: cached verdicts of other versions are not reused

# Without a gold answer, a candidate answer's label comes from its ranking margin against the other
# entities of the evidence: P(correct) = sigmoid(SLOPE * (margin + OFFSET)). The offset leans towards
# "Correct" because the ranker is a heuristic: a candidate is only called Wrong when another entity fits
# the question better by a margin of 1 (calibrated on the HaluEval dev split, never on test: 2.0 left 31% of
# the right-vs-other-entity pairs with equal rewards, 1.0 leaves 24% and ranks 82% of them right by reward,
# at 0.5 point of accuracy on HaluEval's own short right answers). What the label leaves equal, the
# candidate's rank breaks (:func:`rank_informativeness`: 8% of those pairs keep equal rewards on dev).
ANSWER_SLOPE, ANSWER_OFFSET = 0.9, 1.0
# A statement whose words are, for this share of them, one unbroken stretch of the question restates it
# (Vague). Tuned on the tune part of bench/data/real_answers.jsonl only.
RESTATE_SHARE = 0.75
OPTION_SLOPE, OPTION_OFFSET = 1.0, 1.0

_TEMPLATE_RE = re.compile(
    r"^\W*(?:so\s+|thus\s+|therefore\s+)?(?:i\s+think\s+|i\s+believe\s+|probably\s+|maybe\s+)?"
    r"(?:the\s+)?(?:correct\s+|right\s+|final\s+|short\s+)?answer\s+(?:is|was|would\s+be|might\s+be|"
    r"may\s+be|could\s+be|should\s+be|:)\s*:?\s*(?P<x>.+?)\W*$",
    re.IGNORECASE | re.DOTALL)
_LEAD_IT_RE = re.compile(r"^(?:it\s+(?:is|was|'s)|that\s+(?:is|was|would\s+be)|this\s+is)\s+", re.IGNORECASE)
_YESNO_RE = re.compile(r"^\W*(yes|yeah|yep|no|nope|correct|incorrect|true|false)\b", re.IGNORECASE)
_NEG_RE = re.compile(r"\b(?:not|never|no\s+longer|neither|nor|none|different|differ|differs|unlike|"
                     r"isn't|aren't|wasn't|weren't|doesn't|don't|didn't|cannot|can't|no)\b(?!\.\s?\d)|n't\b", re.IGNORECASE)
_YES = {"yes", "yeah", "yep", "correct", "true"}
FILLER_STEMS = frozenset(T.stem(w) for w in """
good great nice interesting important question thing things something anything lot really well sure know think
guess hope help happy glad course indeed actually basically simply kind sort way stuff point fact matter
background cover explain explanation overview context summary discuss mention clarify detail details topic ask
asking thanks thank tell let walk first firstly finally briefly
""".split())
GENERIC_NAME_WORDS = frozenset(LOCATION_WORDS | ORG_WORDS | ALL_HEADS | {"north", "south", "east", "west", "new",
                                                                      "great", "national", "international"})


@dataclass
class _Ctx:
    """Everything fixed for one request (built lazily: a response with no statement builds nothing)."""

    req: VerifyRequest
    idx: MaterialIndex
    qi: QuestionInfo
    ranker: AnswerRanker
    gold: Optional[str]
    gold_norm: str
    gold_yn: Optional[str]
    gold_stems: set
    gold_nums: set
    n_statements: int
    yn_pred: tuple[Optional[str], float]
    # (start, end) of the last sentence when the reply stops without closing punctuation (cut off by the
    # token limit), else None
    cut_off: Optional[tuple[int, int]] = None


class _PromptCache:
    """LRU of (MaterialIndex, AnswerRanker) per (question, materials): the N samples of one prompt, and a
    response verified with and without its gold answer, share retrieval and candidate ranking. Both objects
    depend only on the question and the materials, never on the response."""

    def __init__(self, size: int = 256):
        self.size = size
        self._d: "OrderedDict[tuple, tuple[MaterialIndex, AnswerRanker]]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, question: str, materials: list[str]) -> tuple[MaterialIndex, AnswerRanker]:
        key = (question, tuple(materials))
        with self._lock:
            hit = self._d.get(key)
            if hit is not None:
                self._d.move_to_end(key)
                return hit
        idx = MaterialIndex(materials)
        val = (idx, AnswerRanker(analyze_question(question), idx))
        with self._lock:
            self._d[key] = val
            while len(self._d) > self.size:
                self._d.popitem(last=False)
        return val


_CACHE = _PromptCache()


def _make_ctx(req: VerifyRequest, n_statements: int) -> _Ctx:
    idx, ranker = _CACHE.get(req.question, req.materials)
    qi = ranker.qi
    gold = (req.gold_answer or "").strip() or None
    gn = T.normalize(gold) if gold else ""
    gyn = gn if gn in ("yes", "no") else None
    if gyn and qi.qtype != "yesno":
        # a yes/no gold answer settles the question type ("X and Y, are Chilean?" has no auxiliary first)
        qi = dataclasses.replace(qi, qtype="yesno", options=[])
    if gyn is None and gold:
        m = _YESNO_RE.match(gold)
        if m and qi.qtype == "yesno":
            gyn = "yes" if m.group(1).lower() in _YES else "no"
    yn_pred = predict_yesno(qi, idx) if (qi.qtype == "yesno" and not gold) else (None, 0.5)
    return _Ctx(req=req, idx=idx, qi=qi, ranker=ranker, gold=gold, gold_norm=gn, gold_yn=gyn,
                gold_stems=set(T.content_words(gold)) if gold else set(),
                gold_nums=T.numbers(gold) if gold else set(), n_statements=n_statements, yn_pred=yn_pred)


@dataclass
class Verdict:
    truth: float        # > 0 supports the statement, < 0 contradicts it
    confidence: float   # 0..1
    informativeness: int
    evidence: list[str]
    vague: bool = False
    answer: bool = False    # the rules took the statement for an answer (a stance, an option, a candidate)


class EvidenceBackend:
    """No-LLM verifier. Stateless across requests; safe to share between threads."""

    name = "evidence"

    def __init__(self, cfg=None):
        self.cfg = cfg

    def identity(self) -> dict:
        return {"backend": self.name, "version": ALGO_VERSION}

    def verify_many(self, reqs: list[VerifyRequest]) -> list[VerifyResult]:
        return [self.verify(r) for r in reqs]

    def verify(self, req: VerifyRequest) -> VerifyResult:
        t0 = time.perf_counter()
        d = T.decompose(req.response, req.question)
        n_st = sum(len(s) for s in d.statements)
        ctx = _make_ctx(req, n_st) if n_st else None
        if ctx is not None and d.sentences and not re.search(r"[.!?][\"')\]\u201d\u2019]*\s*$", req.response):
            ctx.cut_off = (d.sentences[-1].start, d.sentences[-1].end)
        sentences, flagged = [], []
        first = True
        for sent, sts, hedged in zip(d.sentences, d.statements, d.hedged):
            out, flags = [], []
            for st, h in zip(sts, hedged):
                v = judge(st.text, sent.text, first, ctx, st.start, req.response[sent.start:st.start])
                first = False
                out.append(Statement(text=st.text, start=st.start, end=st.end, label=label_of(v, h),
                                     informativeness=v.informativeness, evidence=v.evidence[:3],
                                     confidence=round(v.confidence, 4)))
                flags.append(v.answer)
            sentences.append(Sentence(text=sent.text, start=sent.start, end=sent.end, statements=out))
            flagged.append(flags)
        if ctx is not None and (ctx.idx.sents or ctx.gold):
            # the statements read against the question: the answer follows the gold grader, informativeness
            # is the paper's five levels (verifier_service.question_rules)
            apply_question_rules(sentences, req.question, ctx.gold, ctx.qi, flagged, d.hedged)
        res = VerifyResult(sentences=sentences, abstained=d.abstained, backend=self.name)
        res.latency_ms = (time.perf_counter() - t0) * 1000.0
        return res


def rank_informativeness(above: int, correct: bool) -> int:
    """Informativeness of a candidate answer checked without a gold answer, from its rank among the
    evidence's entities (``above`` = how many others fit the question better).

    Evidence strength breaks what the label leaves equal: the label only says whether the candidate is
    within the answer margin of the best one, and two candidates on the same side of it would earn the same
    reward. The reward service maps informativeness 5 > 4 > 3 (> 3 adds nothing more), so the candidate the
    evidence ties closer to the question's slot earns more: Correct -> 5 for the best candidate, 4 for the
    runner-up, else 3; Wrong -> 5 when at most 2 others fit better, 4 when at most 7 do, else 3 (cut-offs
    fitted on the HaluEval train split: they leave the fewest equal rewards on right-vs-other-entity pairs).
    """
    if correct:
        return 5 if above <= 0 else (4 if above <= 1 else 3)
    return 5 if above <= 2 else (4 if above <= 7 else 3)


def label_of(v: Verdict, hedged: bool) -> str:
    if v.vague:
        return "Vague"
    if v.truth >= 0:
        return "Hedged correct" if hedged else "Correct"
    return "Hedged wrong" if hedged else "Wrong"


# ----------------------------------------------------------------------------- statement analysis

def _answer_phrase(st_text: str, ctx: _Ctx) -> Optional[str]:
    """The phrase a statement offers as the answer: 'The answer is X' -> X; a short sole statement -> itself."""
    m = _TEMPLATE_RE.match(st_text)
    if m:
        return m.group("x").strip()
    if ctx.n_statements == 1 and len(st_text.split()) <= 6:
        x = _LEAD_IT_RE.sub("", st_text.strip()).strip(" .!?\"'")
        if not x:
            return None
        checkable = (T.entities(x) or T.numbers(x) or _YESNO_RE.match(x)
                     or any(w not in FILLER_STEMS and (w in ctx.idx.vocab or w in ctx.gold_stems)
                            for w in T.content_words(x)))
        return x if checkable else None
    return None


def _stance(st_text: str, sent_text: str, first: bool, qi: QuestionInfo, answer: Optional[str]) -> Optional[str]:
    """'yes' / 'no' when the statement takes a side on a yes/no question, else None."""
    src = answer if answer is not None else st_text
    m = _YESNO_RE.match(src) or (_YESNO_RE.match(sent_text) if first else None)
    if m:
        return "yes" if m.group(1).lower() in _YES else "no"
    if answer is not None and len(answer.split()) <= 4:
        return None  # "The answer is Kings of Leon": an entity, not a stance
    stems = set(T.content_words(st_text))
    if not stems or not qi.stems:
        return None
    overlap = len(stems & qi.stems) / max(1, min(len(qi.stems), len(stems)))
    if overlap >= 0.4:
        return "no" if _NEG_RE.search(st_text) else "yes"
    return None


def _lcs(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence (tiny inputs: gold answers are a few words)."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _gold_match(text: str, ctx: _Ctx) -> float:
    """How well the statement states the gold answer, 0..1.

    1.0 for the whole gold phrase; otherwise the best in-order overlap of the gold's words with a window
    of the statement a little longer than the gold (so "Genesee ... cold river" does not match "the
    Genesee River", nor "Every Poisonous Thorn Has a Rose" "Every Rose Has Its Thorn"). Numeric golds
    (dates, counts) match on their numbers.
    """
    if not ctx.gold_norm:
        return 0.0
    n = " " + T.normalize(text) + " "
    if f" {ctx.gold_norm} " in n:
        return 1.0
    if any(f" {alias} " in n for alias in country_aliases(ctx.gold_norm)):
        return 1.0   # "from South Korea" states the gold "South Korean"; "in the United States", "American"
    g = [T.stem(w) for w in ctx.gold_norm.split()]
    numeric_gold = bool(ctx.gold_nums) and len([w for w in g if not w.isdigit() and w not in T.STOPWORDS
                                                and w not in T.MONTHS]) <= 1
    if numeric_gold:
        nums = T.numbers(text)
        if ctx.gold_nums <= nums:
            return 1.0
        if ctx.gold_nums & nums:
            return 0.5
        return 0.0
    s = [T.stem(w) for w in n.split()]
    if len(g) > 8:
        # a sentence-long gold: the statement matches when it covers the gold or is part of it
        st = set(T.content_words(text))
        recall = len(ctx.gold_stems & st) / max(1, len(ctx.gold_stems))
        precision = len(ctx.gold_stems & st) / max(1, len(st))
        return max(recall, precision if len(st) >= 3 else 0.0)
    width = len(g) + 2
    best = 0
    for i in range(max(1, len(s) - width + 1)):
        best = max(best, _lcs(g, s[i:i + width]))
    score = best / len(g)
    gold_names = [e.norm for e in T.entities(ctx.gold) if e.kind in ("name", "quoted")]
    if len(gold_names) >= 2 and any(f" {gn} " not in n for gn in gold_names):
        score = min(score, 0.5)  # "Bobby Jones and Clifford Roberts": every name must be there
    return score


def _option_matches_gold(option: str, ctx: _Ctx) -> bool:
    """The chosen option is the gold answer ("Frank Iero" ~ "Frank Anthony Iero, Jr.")."""
    on = T.normalize(option)
    if on in ctx.gold_norm or ctx.gold_norm in on:
        return True
    gset = set(ctx.gold_norm.split())
    scores = []
    for opt in ctx.qi.options:
        ow = [w for w in T.normalize(opt).split() if w not in T.STOPWORDS and len(w) > 1]
        scores.append((sum(1 for w in ow if w in gset) / max(1, len(ow)), opt))
    best = max(scores)
    return best[0] >= 0.5 and best[1] == option and sum(1 for sc, _ in scores if sc == best[0]) == 1


def _negates(text: str, gold: Optional[str]) -> bool:
    """The statement carries a negation that is not part of the gold answer itself."""
    neg = len(_NEG_RE.findall(text))
    return neg > (len(_NEG_RE.findall(gold)) if gold else 0)


def _mentions_all_options(text: str, qi: QuestionInfo) -> bool:
    """"Both A and B are ..." answers an "A or B" question without choosing."""
    if len(qi.options) < 2 or not re.search(r"\b(?:both|neither|either|all)\b", text, re.IGNORECASE):
        return False
    n = " " + T.normalize(text) + " "
    return all(f" {T.normalize(o)} " in n for o in qi.options)


def _denies_option(text: str, option: str, first: bool) -> bool:
    """A later statement that denies the option it names, after the reply has chosen ("Barton Mine was halted
    by a fire, Camlaren Mine was not."): the negation follows the option and does not stand before the
    other one ("Lucrezia Borgia, not Il pirata" chooses Lucrezia Borgia)."""
    if first:
        return False
    i = text.lower().find(option.lower())
    if i < 0:
        return False
    rest = text[i + len(option):]
    return bool(_NEG_RE.search(rest)) and _NEG_RE.search(text[:i]) is None and \
        not re.search(r"\bnot\s+(?:the\s+)?[A-Z]", rest)


def _chosen_option(text: str, qi: QuestionInfo) -> Optional[str]:
    """The option of an 'A or B' question the statement picks (the first one it mentions)."""
    n = " " + T.normalize(text) + " "
    best, pos = None, 10 ** 9
    for opt in qi.options:
        on = T.normalize(opt)
        # the whole option, or its last capitalised word ("Kazan" for "Elia Kazan"): never a lower-case word
        # the parse swept into it ("first" of "The Jungle Book released first")
        caps = [T.normalize(w) for w in opt.split() if w[:1].isupper()]
        cands = [on] + [w for w in caps if w and w not in T.STOPWORDS and len(w) > 3][-1:]
        for c in cands:
            p = n.find(f" {c} ")
            if p >= 0 and p < pos:
                best, pos = opt, p
                break
    return best


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


_BOTH_YN_RE = re.compile(r"\b(?:yes\s*(?:,\s*)?(?:or|and|/)\s*no|no\s*(?:,\s*)?(?:or|and|/)\s*yes)\b", re.IGNORECASE)


@dataclass
class SlotCheck:
    """Where a statement's entities stand against the evidence sentence that best matches its other words."""

    state: str            # "supported" | "contradicted" | "elsewhere"
    sentence: int         # index of that evidence sentence
    context_share: float  # share of the statement's non-entity content words found in it
    conflict: str = ""    # the evidence's entity in the slot of the statement's (contradicted)
    shared: int = 0       # number of those words


_PRONOUN_WORDS = frozenset("he she it they his her its their him them".split())


def _ent_group(kind: str) -> str:
    return "num" if kind in ("number", "date") else "name"


def _ent_in(e: T.Entity, nwords: list[str], sent_nums: set) -> bool:
    """Entity ``e`` is stated in an evidence sentence (its normalised words ``nwords``)."""
    if e.kind in ("number", "date"):
        nums = T.numbers(e.text)
        if nums and nums <= sent_nums:
            return True
    target = e.norm.split()
    n = len(target)
    if not n:
        return False
    if len(e.norm) >= 4 and e.norm in " ".join(nwords):
        return True  # also inside a word: "PayOne Center" of "iPayOne Center"
    for j, w in enumerate(nwords):
        if w != target[0]:
            continue
        if nwords[j:j + n] == target:
            return True
        if n >= 2 and target[-1] in nwords[j + 1:j + n + 3]:
            return True  # "Oleg Menshikov" in "Oleg Evgenyevich Menshikov"
    return False


def _overlaps_any(c: T.Entity, ents: list) -> bool:
    """Evidence entity ``c`` shares a word with one of the statement's entities (a variant of it)."""
    cw = set(c.norm.split())
    return any(cw & set(e.norm.split()) for e in ents)


def _window(stems: list[str], a: int, b: int, skip: set, k: int = 3) -> tuple[set, set]:
    """Up to ``k`` content stems left of ``[a, b)`` and right of it, ignoring ``skip`` (entity words)."""
    left = [w for w in stems[:a] if w not in T.STOPWORDS and w not in skip][-k:]
    right = [w for w in stems[b:] if w not in T.STOPWORDS and w not in skip][:k]
    return set(left), set(right)


def _norm_positions(text: str, e: T.Entity) -> tuple[list[str], int, int]:
    """Stems of ``text``'s normalised words and the word range ``[a, b)`` of entity ``e`` in them."""
    before = T.normalize(text[:e.start]).split()
    inside = T.normalize(e.text).split()
    after = T.normalize(text[e.end:]).split()
    ws = before + inside + after
    return [T.stem(w) for w in ws], len(before), len(before) + len(inside)


def slot_check(text: str, idx: MaterialIndex, qi: QuestionInfo) -> Optional[SlotCheck]:
    """Check a statement's entities against the evidence sentence that best matches the rest of it.

    The best sentence maximises (shared non-entity content words) + (statement entities it states).
    ``supported``: it states every entity of the statement; ``contradicted``: an entity of the statement is
    missing from it and it holds another entity of the same kind (name / number-date) in the same slot
    (sharing a content word right or left of the entity); ``elsewhere``: missing, no conflicting slot.
    None when the statement has no entity or too little context to locate a sentence (fewer than 2
    shared content words, or under half of them).
    """
    ents = [e for e in T.entities(text) if e.norm and len(e.norm) > 1 and e.norm not in ("answer",)]
    if not ents or not idx.sents:
        return None
    ent_words = {T.stem(w) for e in ents for w in T.normalize(e.text).split()}
    ctx_stems = [w for w in dict.fromkeys(T.content_words(text)) if w not in ent_words and not w.isdigit()]
    if not ctx_stems:
        return None
    cset = set(ctx_stems)
    best, best_key = -1, (-1, -1)
    nums = [T.numbers(es.text) for es in idx.sents]
    present_in: list[list[bool]] = []
    for si, es in enumerate(idx.sents):
        shared = len(cset & set(es.stems))
        present = [_ent_in(e, es.nwords, nums[si]) for e in ents]
        present_in.append(present)
        if not shared:
            continue
        key = (shared + sum(present), shared)
        if key > best_key:
            best, best_key = si, key
    if best < 0:
        return None
    shared = best_key[1]
    share = shared / len(cset)
    # located: at least two anchors (shared words, or a shared word and one of its entities) and most of
    # the statement's other words
    if best_key[0] < 2 or share < 0.5:
        return None
    if len(ents) == 1 and shared < 2:
        # one entity and one other word ("It is operated by Wills Street"): located only when that word
        # occurs in no other evidence sentence
        w = next(iter(cset & set(idx.sents[best].stems)))
        if sum(1 for es in idx.sents if w in es.stems) > 1:
            return None
    missing = [e for e, ok in zip(ents, present_in[best])
               if not ok and not any(_name_variant(e.norm, c.norm) for c in idx.sentence_entities[best])]
    if not missing:
        return SlotCheck("supported", best, share, shared=shared)
    es = idx.sents[best]
    st_norm = " " + T.normalize(text) + " "
    ev_ents = [c for c in idx.sentence_entities[best] if c.norm and f" {c.norm} " not in st_norm]
    all_ev_words = {T.stem(w) for c in idx.sentence_entities[best] for w in T.normalize(c.text).split()}
    for e in missing:
        sst, a, b = _norm_positions(text, e)
        el, er = _window(sst, a, b, ent_words | all_ev_words)
        for c in ev_ents:
            if _ent_group(c.kind) != _ent_group(e.kind):
                continue
            cst, ca, cb = _norm_positions(es.text, c)
            cl, cr = _window(cst, ca, cb, ent_words | all_ev_words)
            if (el & cl) or (er & cr):
                return SlotCheck("contradicted", best, share, conflict=c.text, shared=shared)
    if len(missing) == 1 and share >= 0.8 and shared >= 2:
        # the sentence says all the rest of it and holds another entity of the missing one's kind that the
        # statement lacks ("Professor Emeritus at Phoenix" where it says "Professor Emeritus at Arizona State
        # University"): one entity was swapped for another, even when no slot word frames the two
        grp = _ent_group(missing[0].kind)
        extra = [c for c in ev_ents if _ent_group(c.kind) == grp and not _overlaps_any(c, ents)]
        if extra:
            return SlotCheck("contradicted", best, share, conflict=extra[0].text, shared=shared)
    if _PRONOUN_WORDS & set(es.words):
        # "During his career he won two titles": with no other name in its slot, a name from an earlier
        # sentence of the same passage is the one the pronoun stands for
        earlier = [si for si in range(best) if idx.sents[si].passage == es.passage]
        if all(any(present_in[si][ents.index(e)] for si in earlier) for e in missing):
            return SlotCheck("supported", best, share, shared=shared)
    return SlotCheck("elsewhere", best, share, shared=shared)


def _name_variant(a: str, b: str) -> bool:
    """Two spellings of one person's name (normalised): the same last word and first names that start alike
    ("bernard madoff" / "bernie madoff"; not "ruth madoff")."""
    aw, bw = a.split(), b.split()
    if len(aw) < 2 or len(bw) < 2 or a == b or aw[-1] != bw[-1]:
        return False
    f, g = aw[0], bw[0]
    return len(f) >= 3 and len(g) >= 3 and f[:3] == g[:3] and f.isalpha() and g.isalpha()


def _fragment_check(ents: list, sent_text: str, idx: MaterialIndex, qi: QuestionInfo) -> Optional[SlotCheck]:
    """Slot check of a statement too short to locate by itself ("written by Marc Klein"), through its
    sentence: the evidence sentence that best matches the whole sentence must state the fragment's
    entities (``supported``); a missing one is ``contradicted`` when the sentence is, else ``elsewhere``."""
    scs = slot_check(sent_text, idx, qi)
    if scs is None:
        return None
    es = idx.sents[scs.sentence]
    nums = T.numbers(es.text)
    ok = [e for e in ents if e.norm and len(e.norm) > 1]
    if not ok:
        return None
    if all(_ent_in(e, es.nwords, nums) for e in ok):
        return SlotCheck("supported", scs.sentence, scs.context_share)
    if scs.state == "contradicted":
        return SlotCheck("contradicted", scs.sentence, scs.context_share, conflict=scs.conflict)
    return SlotCheck("elsewhere", scs.sentence, scs.context_share)  # shared=0: never "put in" by itself


def _restates_question(st_text: str, qi: QuestionInfo, new_ents: list, new_nums: set, new_stems: list,
                       stance: Optional[str], option: Optional[str]) -> bool:
    """The statement adds no name, number or content word to the question (and is no yes/no stance or
    chosen option: "Onew and Judith Durham are both singers" answers "Are ... both singers?")."""
    if qi.qtype in ("yesno", "choice") or stance is not None or option is not None:
        return False
    if new_ents or new_nums or [w for w in new_stems if w not in FILLER_STEMS]:
        return False
    if not T.content_words(st_text) or _NEG_RE.search(st_text):
        return False
    # a copy of a stretch of the question, not the question's words rearranged: "The school is the The Hill
    # School" puts a name of the question in the asked slot (an answer attempt), "Akeo Watanabe was a
    # Japanese symphonic conductor" only repeats the question's premise
    # The copied stretch must run to the statement's end: "... is wholly owned by a company headquartered in
    # Colombia" copies the question up to "headquartered in" and then fills its slot (an answer attempt).
    # Words compare by stem ("high-profile cases" copies "high-profile case"), and the question's wh-word
    # is skipped: "... outspoken on a high-profile case that ..." copies "... outspoken on which high-profile
    # case that ..." (normalisation has already dropped the article that stands in for it).
    st = [_loose_stem(w) for w in T.normalize(st_text).split()]
    if len(st) < 3:
        return False
    q = [_loose_stem(w) for w in T.normalize(qi.text).split() if w not in _WH_WORDS]
    run, end = _longest_common_run(st, q)
    if not (run >= RESTATE_SHARE * len(st) and end == len(st)):
        # or the question's words in its order with a few left out ("Sorghum is a type of grass harvested for
        # edible fruit" for "Sorghum x drummondii is a type of grass harvested for what type of edible fruit")
        if not (run >= 0.5 * len(st) and _gapped_copy(st, q)):
            return False
        end, run = len(st), len(st)
    # what precedes the copied stretch must not be a name: "The band Primal Scream is a 2011 British action
    # comedy film parodying ..." puts a name (of the question, here) in the asked slot: an answer attempt
    head = T.normalize(st_text).split()[:end - run]
    names = {w for e in T.entities(st_text) if e.kind in ("name", "quoted") for w in e.norm.split()}
    return not (set(head) & names)


_COPULA_RE = re.compile(r"\b(?:is|was|are|were)\b", re.IGNORECASE)


# a fragment without a subject of its own: a relative clause or a bare predicate
_DEPENDENT_START_RE = re.compile(r"\W*(?:who|which|that|whose|where|is|was|are|were)\b", re.IGNORECASE)


_COMPLEMENT_RE = re.compile(r"\b(?:is|was|are|were)\s+(?:(?:the|a|an)\s+)*(?P<x>[^,;]+?)\W*$", re.IGNORECASE)


def _named_complement(st_text: str) -> Optional[str]:
    """The name that is the whole complement of the statement's last copula ("... is Gurgaon"), else None."""
    m = None
    for m in _COMPLEMENT_RE.finditer(st_text):
        pass
    if m is None or m.start() == 0:
        return None
    x = m.group("x").strip()
    es = T.entities(x)
    if len(es) == 1 and es[0].kind in ("name", "quoted") and re.sub(r"^(?:the|a|an)\s+", "", x.strip(" \"'"),
                                                                    flags=re.IGNORECASE) == es[0].text:
        return es[0].text
    return None


# "such as a hurricane or a tsunami": a statement that lists examples
_EXAMPLES_RE = re.compile(r"\W*(?:such\s+as|including|like|for\s+example|for\s+instance|e\.g\.)\s", re.IGNORECASE)
# "Which team won ...", "Who directed ...": the verb whose subject the wh-phrase is (auxiliaries and copulas
# excepted: "Who is ..." has no verb to match a statement's subject by)
_WH_SUBJECT_RE = re.compile(r"^\W*(?:who|(?:which|what)\s+[a-z]+)\s+(?P<v>[a-z]+)\b", re.IGNORECASE)
_WH_SUBJECT2_RE = re.compile(r"^\W*(?:which|what)\s+[a-z]+\s+[a-z]+\s+(?P<v>[a-z]+)\b", re.IGNORECASE)
_AUX_WORDS = frozenset("is was are were be been do does did has have had can could will would should may might "
                       "must".split())


def _question_name(phrase: str, qi: QuestionInfo) -> bool:
    """``phrase`` is one of the question's names as a whole (not a part of a longer one: "Harold & Kumar" is
    not the question's name in "A Very Harold & Kumar 3D Christmas is part of what series?")."""
    p = phrase.strip(" \"'")
    if not p:
        return False
    for m in re.finditer(r"(?<![\w&])" + re.escape(p) + r"(?![\w&])", qi.text, re.IGNORECASE):
        left = re.search(r"(\S+)\s+$", qi.text[:m.start()])
        right = re.match(r"\s+(\S+)", qi.text[m.end():])
        if not any(w and (w.group(1)[0].isupper() or w.group(1)[0].isdigit() or w.group(1) == "&")
                   for w in (left, right)):
            return True
    return False


def _own_name_in_subject_slot(st_text: str, qi: QuestionInfo) -> Optional[str]:
    """One of the question's own names as the subject of the verb the question's wh-subject takes
    ("The Big Ten Conference won the 1914 championship" for "Which team won the 1914 championship of the Big
    Ten Conference?", "Robert De Niro directed the film" for "Who directed this film ... portrayed by Robert
    De Niro?"): an answer attempt that fills the asked slot with a name the question gives another role."""
    ents = T.entities(st_text)
    if not ents:
        return None
    e = ents[0]
    lead = st_text[:e.start].strip().lower()
    if lead not in ("", "the") or not _question_name(e.text, qi):
        return None
    nxt = T.words(st_text[e.end:])
    if not nxt:
        return None
    for m in (_WH_SUBJECT_RE.match(qi.text), _WH_SUBJECT2_RE.match(qi.text)):
        if m is None:
            continue
        verb = m.group("v").lower()
        copula = verb in ("is", "was", "are", "were")
        if (verb in _AUX_WORDS or verb in T.STOPWORDS) and not copula:
            continue
        if T.stem(nxt[0]) != T.stem(verb):
            continue
        if copula:
            # "David Jason is the writer of the British television sitcom ..." for "Who is the writer of the
            # British television sitcom for which David Jason is best known ...?": the copula alone says
            # little, so the words after it must copy the question's (two content words of its first three)
            q_after = T.content_words(qi.text[m.end():])[:3]
            s_after = T.content_words(" ".join(nxt[1:]))[:3]
            if len(set(q_after) & set(s_after)) < 2:
                continue
        return e.text
    return None


def _tautology(st_text: str, before: str) -> bool:
    """The statement says nothing its own sentence has not: a fragment whose every content word and number
    the sentence already stated before it ("plants that are both Hottonia and Othonna" after "Hottonia and
    Othonna are both plants"), or "A is B" with the same content words on both sides of the copula."""
    cw = set(T.content_words(st_text))
    if not cw or _NEG_RE.search(st_text):
        return False
    if before.strip() and _DEPENDENT_START_RE.match(st_text):
        prev = set(T.content_words(before))
        if cw <= prev and T.numbers(st_text) <= T.numbers(before):
            return True
    m = _COPULA_RE.search(st_text)
    if m:
        left, right = set(T.content_words(st_text[:m.start()])), set(T.content_words(st_text[m.end():]))
        return bool(left) and left == right
    return False


def _fills_question(st_text: str, new_ents: list, qi: QuestionInfo) -> bool:
    """With its new names / numbers left out, the statement is the question's words in the question's order
    (a few of them left out): it copies the question and puts its answer in the asked slot."""
    rest = st_text
    for e in sorted(new_ents, key=lambda e: -e.start):
        rest = rest[:e.start] + " " + rest[e.end:]
    # ("between 1987 and 2001" leaves "between and": the linker of two answers is not a word of the frame)
    st = [_loose_stem(w) for w in T.normalize(rest).split() if w not in ("and", "or")]
    q = [_loose_stem(w) for w in T.normalize(qi.text).split() if w not in _WH_WORDS]
    return len(st) >= 4 and _gapped_copy(st, q)


_WH_WORDS = frozenset("which what who whom whose".split())


def _loose_stem(w: str) -> str:
    """:func:`T.stem` without a final "e", so that "case" and "cases" ("cas") compare equal."""
    s = T.stem(w)
    return s[:-1] if len(s) >= 4 and s.endswith("e") else s


def _gapped_copy(a: list[str], b: list[str], max_gap: int = 2) -> bool:
    """``a`` is ``b`` with words left out, at most ``max_gap`` in a row between two kept ones (the first
    kept word anywhere)."""
    reach = {j for j, y in enumerate(b) if y == a[0]} if a else set()
    for x in a[1:]:
        reach = {j for j, y in enumerate(b) if y == x and any(0 < j - r <= max_gap + 1 for r in reach)}
        if not reach:
            return False
    return bool(reach)


def _longest_common_run(a: list[str], b: list[str]) -> tuple[int, int]:
    """(length, end index in ``a``) of the longest run of words that ``a`` and ``b`` share
    (O(len(a) * len(b)): a sentence and a question)."""
    best, best_end, prev = 0, 0, [0] * (len(b) + 1)
    for i, x in enumerate(a):
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                cur[j + 1] = prev[j] + 1
                if cur[j + 1] > best or (cur[j + 1] == best and i + 1 == len(a)):
                    best, best_end = cur[j + 1], i + 1
        prev = cur
    return best, best_end


_DANGLING_END_RE = re.compile(r"(?:\b(?:such\s+as|as|is|was|are|were|to|the|a|an|of|in|on|at|by|for|with|from|"
                              r"and|or|but|that|who|which|had|has|have|her|his|their|its)|[\"(\-,:;])\s*$",
                              re.IGNORECASE)


def country_aliases(phrase: str) -> list[str]:
    """The other names of the country ``phrase`` names ("UK-based" -> "united kingdom", "britain", ...)."""
    return country_aliases_of(T.normalize(phrase.replace("-", " ").replace("based", "")))


def _contradicted_without(st_text: str, phrase: str, idx: MaterialIndex, qi: QuestionInfo) -> bool:
    """The statement with ``phrase`` (the gold answer) blanked out still puts a wrong entity in a slot:
    "Ringo Starr joined the Beatles in 1960" states the gold answer and a swapped year."""
    i = st_text.lower().find(phrase.strip().lower())
    if i < 0:
        return True   # the gold is stated only loosely: keep the slot check's verdict
    rest = st_text[:i] + " " * len(phrase.strip()) + st_text[i + len(phrase.strip()):]
    sc = slot_check(rest, idx, qi) if T.entities(rest) else None
    # only a number or date in another's slot counts: name slots are too loose to overrule the gold answer
    # (on the tune part of the real answers they flagged right answers more often than swaps)
    return sc is not None and sc.state == "contradicted" and bool(T.numbers(sc.conflict or ""))


_LAST_WORD_RE = re.compile(r"(\w+)\W*$")


def _drop_cut_word(st_text: str, ctx: _Ctx) -> str:
    """``st_text`` without its last word when the token limit cut that word short: it is a strict prefix of a
    word of the question, the materials or the gold answer and no word of them itself ("19" of 1970)."""
    m = _LAST_WORD_RE.search(st_text)
    if not m or not ctx.req.response.rstrip().endswith(st_text.rstrip()):
        return st_text
    w = m.group(1).lower()
    known = ctx.idx.word_set | set(T.words(ctx.qi.text)) | set(T.words(ctx.gold or ""))
    if w in known or not any(k.startswith(w) for k in known):
        return st_text
    return st_text[:m.start(1)].rstrip()


def _dangles(st_text: str) -> bool:
    """A statement that stops mid-phrase (on a function word or an open quote / bracket). A quote that closes
    a title ('the CBS sitcom "Zombie Night"') is no open quote: it dangles only when the quotes are unpaired."""
    t = st_text.rstrip()
    if t.endswith(('"', "\u201d")) and (t.count('"') + t.count("\u201c") + t.count("\u201d")) % 2 == 0:
        return False
    return bool(_DANGLING_END_RE.search(t))


def judge(st_text: str, sent_text: str, first: bool, ctx: _Ctx, st_start: int = -1, before: str = "") -> Verdict:
    """Verdict for one statement (see the module docstring for the rules). ``st_start``: the statement's
    offset in the response (-1: unknown), to tell the statement a cut-off reply ends in; ``before``: the
    text of its sentence before it (a fragment that only repeats it claims nothing new)."""
    qi, idx = ctx.qi, ctx.idx
    # hedge cues ("I think", "probably") are not claims: they neither need nor get evidence
    st_text, sent_text = T.strip_hedges(st_text), T.strip_hedges(sent_text)
    if ctx.cut_off is not None and ctx.cut_off[0] <= st_start < ctx.cut_off[1]:
        # the reply was cut off: its last word may be cut too ("built in 19" for 1970, "the band Pr")
        st_text = _drop_cut_word(st_text, ctx)
    answer = _answer_phrase(st_text, ctx)
    stems = T.content_words(st_text)
    ents = [e for e in T.entities(st_text) if e.norm and e.norm not in ("answer",)]
    new_ents = [e for e in ents if not qi.mentions(e.text)]
    nums = T.numbers(st_text)
    q_nums = T.numbers(qi.text)
    new_nums = nums - q_nums
    ent_words = {T.stem(w) for e in ents for w in T.words(e.text)}
    q_loose = {_loose_stem(w) for w in qi.stems}
    new_stems = [s for s in stems if s not in qi.stems and _loose_stem(s) not in q_loose and s not in ent_words
                 and not s.isdigit()]
    stance = _stance(st_text, sent_text, first, qi, answer) if qi.qtype == "yesno" else None
    if stance is not None and _BOTH_YN_RE.search(st_text):
        stance = "both"  # "Yes or no": offers both answers, so it matches neither (Wrong, like "A or B")
    option = _chosen_option(st_text, qi) if qi.options else None

    # evidence sentences for the statement
    hits = idx.search(stems + new_stems, k=2)
    evidence = [idx.sents[i].text for i, _ in hits]

    # "The school is The Hill School", "The flag carrier airline of India is Gurgaon": a copula whose
    # complement is one of the question's names offers that name as the answer (not a restatement)
    named = _named_complement(st_text) if qi.qtype not in ("yesno", "choice") else None
    if named is not None and not qi.mentions(named):
        named = None
    if named is None and _restates_question(st_text, qi, new_ents, new_nums, new_stems, stance, option):
        # every word, name and number of it is the question's: it claims nothing the question did not
        # (restating the question earns no truth reward, right or wrong)
        return Verdict(truth=0.0, confidence=0.7, informativeness=1, evidence=evidence, vague=True)
    if sent_text.rstrip().endswith("?") and sent_text.rstrip().rstrip("?").rstrip().endswith(st_text.rstrip(" ?")):
        # the reply asks (back) a question: "... starring Joseph Mazzello as who?" claims nothing
        return Verdict(truth=0.0, confidence=0.7, informativeness=1, evidence=[], vague=True)
    if _tautology(st_text, before):
        # "... are both plants that are both Hottonia and Othonna", "The team of X was once the team of X":
        # it only repeats what its own sentence already said
        return Verdict(truth=0.0, confidence=0.7, informativeness=1, evidence=evidence, vague=True)
    if ctx.cut_off is not None and ctx.cut_off[0] <= st_start < ctx.cut_off[1] and _dangles(st_text):
        # the reply was cut off inside this statement ("known for her work in films such as"): no claim yet
        return Verdict(truth=0.0, confidence=0.6, informativeness=1, evidence=evidence, vague=True)

    denial = bool(_NEG_RE.search(st_text)) and bool(set(stems) & qi.stems) and qi.qtype != "yesno"
    # content words count only when checkable: found in the question, the evidence or the gold answer
    # ("That is a good question." has content words but nothing to check)
    relevant = [w for w in new_stems if w not in FILLER_STEMS and (w in idx.vocab or w in ctx.gold_stems)]
    has_content = bool(new_ents or new_nums or stance or option or answer or denial or relevant
                       or (new_stems and not set(new_stems) <= FILLER_STEMS and (set(stems) & qi.stems)))
    slot_ent = None
    if named is not None:
        slot_ent, has_content = named, True
    if not has_content and qi.qtype in ("person", "location", "date", "number", "work", "org") and ents:
        # "Jason Lester won the 2003 World Series of Poker" for "Who won ..., leaving Jason Lester 4th?":
        # restates the question and fills its slot with an entity taken from the question itself
        fits = [(ctx.ranker.score(e.text)[1], e.text) for e in ents]
        fit, txt = max(fits)
        if fit >= 0.7 and len(set(stems) & qi.stems) >= 2:
            slot_ent, has_content = txt, True
    own_slot = None
    if slot_ent is None and qi.qtype not in ("yesno", "choice"):
        # "The Big Ten Conference won the 1914 championship ..." for "Which team won the 1914 championship of
        # the Big Ten Conference?": one of the question's own names put before the verb the wh-subject takes
        own_slot = _own_name_in_subject_slot(st_text, qi)
        if own_slot is not None:
            slot_ent, has_content = own_slot, True
    if not has_content and ctx.gold and ctx.n_statements == 1 and qi.qtype != "yesno" and (
            ents or [w for w in new_stems if w not in FILLER_STEMS]):
        # the whole response is this one statement and it does not give the gold answer: an answer attempt
        # ("Both have experience in cinematography." for "film director"), checkable against the gold
        has_content = True
    frag_sc = None
    if not has_content and ents and sent_text.strip() != st_text.strip():
        # a list item naming an entity of the question ("..., Albania, Council of Europe, Monaco"): it
        # restates nothing, it puts that entity where the evidence has another one
        frag_sc = _fragment_check(ents, sent_text, idx, qi)
        if frag_sc is not None and frag_sc.state == "contradicted":
            has_content = True
    if not has_content and _EXAMPLES_RE.match(st_text) and [w for w in new_stems if w not in FILLER_STEMS]:
        # "such as a hurricane or a tsunami": examples name specific instances; ones that neither the
        # evidence, the question nor the gold answer has are unsupported claims, not filler
        has_content = True
    if not has_content:
        restates = bool(set(stems) & qi.stems)
        return Verdict(truth=0.0, confidence=0.7, informativeness=1 if restates or not stems else 2,
                       evidence=evidence, vague=True)

    # ---- unsupported facts
    def supported_phrase(t: str) -> float:
        if ctx.gold_norm and (T.normalize(t) in ctx.gold_norm or ctx.gold_norm in T.normalize(t)):
            return 1.0
        support = idx.phrase_support(t, GENERIC_NAME_WORDS)
        if support < 0.7:
            # "UK-based" where the passage says "Britain's": another name of the same country counts
            for alias in country_aliases(t):
                support = max(support, idx.phrase_support(alias, GENERIC_NAME_WORDS),
                              1.0 if ctx.gold_norm and alias.lower() in ctx.gold_norm else 0.0)
        return support

    unsup_ents = [e for e in new_ents if supported_phrase(e.text) < 0.7]
    unsup_nums = new_nums - idx.numbers - ctx.gold_nums
    vocab = idx.vocab | ctx.gold_stems
    word_support = (sum(1 for s in new_stems if s in vocab) / len(new_stems)) if new_stems else 1.0

    # ---- the question with its slot filled: every word but its new names / numbers is the question's
    # ("Deltora Quest made its Pakistani debut on a TV channel created by Turner International Pakistan" for
    # "... on a TV channel created by what company?"). Its one claim is the answer: the question's names in
    # it are the question's premise (a multi-hop question's first hop, often in another evidence sentence
    # than the answer), so the slot check of the whole statement does not overrule the answer check.
    filled = (qi.qtype not in ("yesno", "choice") and bool(new_ents) and answer is None
              and (len(new_ents) == 1 or all(e.kind in ("number", "date") for e in new_ents))
              and not [w for w in new_stems if w not in FILLER_STEMS] and _fills_question(st_text, new_ents, qi))

    # ---- answer role & check
    truth_ans: Optional[float] = None   # signed, in [-1, 1]
    gold_stated = False                 # the statement states the whole gold answer
    conf_ans = 0.5
    is_answer = answer is not None or stance is not None or option is not None or denial or slot_ent is not None
    ans_fit = 0.0
    ranked = None                       # the ranker's verdict on a candidate answer checked without gold
    cand = answer or slot_ent
    if not is_answer and qi.qtype not in ("yesno", "choice"):
        # a new entity of the asked type in a statement about the question's topic answers it
        topical = len(set(stems) & qi.stems) >= max(1, min(3, len(qi.stems) // 3))
        best_fit, best_e = -9.0, None
        for e in new_ents:
            _, fit, _ = ctx.ranker.score(e.text)
            if fit > best_fit:
                best_fit, best_e = fit, e
        # (the name that fills a copied question's slot is its answer unless its type is plainly another)
        if best_e is not None and (best_fit >= 0.5 or (filled and best_fit > -0.5)) \
                and (topical or ctx.n_statements == 1):
            is_answer, cand, ans_fit = True, best_e.text, best_fit
        elif qi.qtype in ("number", "date") and new_nums and (topical or ctx.n_statements == 1):
            is_answer, ans_fit = True, 1.0  # "won two titles" answers "how many titles"
    if stance == "both":
        truth_ans, conf_ans = -1.0, 0.9
    elif ctx.gold:
        if ctx.gold_yn and qi.qtype == "yesno":
            if stance is not None:
                truth_ans, conf_ans = (1.0, 0.95) if stance == ctx.gold_yn else (-1.0, 0.92)
            elif is_answer:
                truth_ans, conf_ans = -1.0, 0.9  # an entity given as the answer to a yes/no question
        else:
            gm = _gold_match(st_text, ctx)
            gold_stated = gm >= 1.0
            negated = gm >= 0.6 and _negates(st_text, ctx.gold)
            if option is not None and ctx.qi.options:
                opt_ok = _option_matches_gold(option, ctx) and not _mentions_all_options(st_text, qi)
                if not opt_ok and _denies_option(st_text, option, first):
                    # "Camlaren Mine was not": denies the option that is not the answer
                    truth_ans, conf_ans = 1.0, 0.85
                else:
                    truth_ans, conf_ans = (1.0, 0.93) if opt_ok and not negated else (-1.0, 0.92)
            elif gm >= 0.6 and not negated:
                truth_ans, conf_ans = 1.0, 0.75 + 0.2 * gm
            elif negated:
                truth_ans, conf_ans = -1.0, 0.8
            elif is_answer or ctx.n_statements == 1:
                truth_ans, conf_ans = -1.0, 0.85 - 0.3 * gm
    else:
        if qi.qtype == "yesno" and stance is not None and ctx.yn_pred[0] is not None:
            agree = stance == ctx.yn_pred[0]
            truth_ans, conf_ans = (1.0 if agree else -1.0), ctx.yn_pred[1]
        elif qi.qtype == "yesno" and is_answer and stance is None:
            truth_ans, conf_ans = -1.0, 0.9
        elif option is not None:
            r = ctx.ranker.rank(option)
            p = _sigmoid(OPTION_SLOPE * (r.margin + OPTION_OFFSET)) if r.found else 0.3
            if _denies_option(st_text, option, first):
                # "Camlaren Mine was not": denies the option; right when another option fits better
                others = [ctx.ranker.rank(o).score for o in qi.options if o != option]
                best = max(others, default=-math.inf)
                p = _sigmoid(OPTION_SLOPE * (best - r.score)) if r.found and best > -math.inf else 0.5
            truth_ans, conf_ans = (1.0 if p >= 0.5 else -1.0), max(p, 1 - p)
            evidence = [idx.sents[i].text for i in r.evidence] + evidence
        elif denial and not new_ents and not new_nums and idx.sents:
            # "X was not replaced by a smart card": denies the question's premise, which the evidence states
            truth_ans, conf_ans = -1.0, 0.55
        elif is_answer and slot_ent is not None and answer is None and _question_name(slot_ent, qi):
            # a question does not name its own answer (an "A or B" question excepted): one of its names offered
            # as the answer ("The flag carrier airline of India is Gurgaon" for "What is a low-cost airline
            # headquartered at Gurgaon ...?") is another of its entities put in the asked slot
            truth_ans, conf_ans = -1.0, 0.7
        elif is_answer and cand:
            r = ctx.ranker.rank(cand)
            if r.found:
                p = _sigmoid(ANSWER_SLOPE * (r.margin + ANSWER_OFFSET))
                truth_ans, conf_ans = (1.0 if p >= 0.5 else -1.0), max(p, 1 - p)
                evidence = [idx.sents[i].text for i in r.evidence] + evidence
                ranked = r
            ans_fit = max(ans_fit, r.type_fit)

    # ---- a negated claim whose positive form the evidence states is wrong ("X is not Y" vs "X is Y")
    negated_claim = bool(_NEG_RE.search(st_text)) and not _YESNO_RE.match(st_text)
    if negated_claim and truth_ans is None and not unsup_ents and not unsup_nums and new_stems \
            and word_support >= 0.6 and (new_ents or new_nums) and hits:
        if not any(_NEG_RE.search(idx.sents[i].text) for i, _ in hits):
            truth_ans, conf_ans = -1.0, 0.6

    # ---- evidence strength: the statement's entities against the evidence sentence that says the rest of it
    # an answer the statement gives in so many words ("The answer is X", "Yes, ..."); an option merely
    # mentioned in a background fact is not one
    firm = answer is not None or (stance is not None and bool(_YESNO_RE.match(st_text)))
    sc = frag_sc
    if sc is None and ents and not _TEMPLATE_RE.match(st_text) and not unsup_ents and not unsup_nums:
        sc = slot_check(st_text, idx, qi)
        if sc is None and sent_text.strip() != st_text.strip():
            sc = _fragment_check(ents, sent_text, idx, qi)
    if sc is not None:
        evidence = [idx.sents[sc.sentence].text] + evidence
    # the statement gives the gold answer where the question asks for it: a slot check on its other words
    # does not overrule that ("took its name from a song by Puerto Rican singer Ricky Martin")
    gold_ok = ctx.gold is not None and truth_ans is not None and truth_ans > 0 and (
        firm or ((is_answer or (gold_stated and len(set(stems) & qi.stems) >= 2))
                 and not _contradicted_without(st_text, ctx.gold, idx, qi)))

    # ---- combine
    no_evidence = False
    by_rank = False                     # the verdict is the ranker's: grade informativeness by rank
    if not idx.sents and not ctx.gold:
        truth, conf, no_evidence = 0.0, 0.3, True  # nothing to check against: uncheckable, not wrong
    elif unsup_ents or unsup_nums:
        k = len(unsup_ents) + len(unsup_nums)
        if truth_ans is not None and truth_ans > 0:
            truth, conf = -1.0, 0.6  # the right answer wrapped in an unsupported name/number
        else:
            truth, conf = -1.0, min(0.97, 0.8 + 0.05 * k)
    elif sc is not None and sc.state == "contradicted" and not gold_ok and not (filled and truth_ans is not None):
        # "a 2004 comedy film" where the sentence saying the rest has "a 1988 comedy film": the swapped
        # entity occurs elsewhere in the materials, but the evidence puts another one in its place
        truth, conf = -1.0, 0.75 + 0.2 * sc.context_share
    elif sc is not None and sc.state == "supported" and not firm and ctx.n_statements > 1 \
            and truth_ans is not None and truth_ans < 0 and not negated_claim:
        # a background fact stated by the evidence, not offered as the answer: true, whatever the answer is
        truth, conf = 1.0, 0.6 + 0.3 * sc.context_share
    elif sc is not None and sc.state == "elsewhere" and sc.context_share >= 0.9 and sc.shared >= 4 \
            and not gold_ok and not (filled and truth_ans is not None):
        # one evidence sentence says all the rest of it, but not this entity: the entity was put in
        truth, conf = -1.0, 0.7
    elif truth_ans is not None:
        truth, conf = truth_ans, conf_ans
        by_rank = ranked is not None
        if truth > 0 and new_stems and word_support < 0.5:
            # right answer wrapped in unsupported claims
            truth, conf, by_rank = -1.0, 0.6 + 0.3 * (0.5 - word_support), False
    elif sc is not None and sc.state == "supported" and word_support >= 0.5:
        truth, conf = 1.0, min(0.97, 0.7 + 0.25 * sc.context_share)
    else:
        truth = 1.0 if word_support >= 0.6 else -1.0
        conf = 0.5 + 0.45 * abs(word_support - 0.6) / 0.6
        if new_ents and not unsup_ents:
            conf = min(0.95, conf + 0.1)
        if sc is not None and sc.state == "elsewhere" and truth > 0:
            conf = min(conf, 0.55)  # its entity is in the materials, but not where the rest of it is

    # ---- informativeness
    if by_rank:
        info = rank_informativeness(ranked.above, truth > 0)
    elif is_answer and (ans_fit >= 0.5 or stance is not None or option is not None
                      or (ctx.gold and truth_ans is not None and truth_ans > 0)):
        info = 5
    elif is_answer:
        info = 4
    elif new_ents or new_nums:
        info = 4 if set(stems) & qi.stems else 3
    elif new_stems:
        info = 3 if (set(stems) & qi.stems or word_support >= 0.5) else 2
    else:
        info = 2
    return Verdict(truth=truth, confidence=max(0.0, min(1.0, conf)), informativeness=info,
                   evidence=list(dict.fromkeys(evidence)), vague=no_evidence, answer=is_answer)
