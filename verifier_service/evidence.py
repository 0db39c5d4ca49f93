"""The ``evidence`` backend: atomic-fact verification without an LLM.

Per request (all CPU, linear in the text):

1. :func:`verifier_service.text.decompose` cuts the response into sentences and atomic statements with
   exact spans, and flags hedges and abstentions;
2. a :class:`~verifier_service.retrieval.MaterialIndex` (BM25 via ``bm25s`` over the materials' sentences)
   is built once;
3. every statement is checked by the named rules of :data:`RULES`, the first that decides giving its verdict
   (:func:`judge` has them as a table; every number they decide by is a field of :class:`JudgeThresholds`):

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
from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

from core.lexicon import country_aliases_of
from core.verify_schema import Sentence, Statement, VerifyRequest, VerifyResult
from verifier_service import text as T
from verifier_service.question import (ALL_HEADS, LOCATION_WORDS, ORG_WORDS, AnswerRanker, QuestionInfo,
                                       Ranking, analyze_question, predict_yesno)
from verifier_service.question_rules import apply_question_rules
from verifier_service.retrieval import MaterialIndex

ALGO_VERSION = "evidence-2.0"  # bump on any verdict change: cached verdicts of other versions are not reused


@dataclass(frozen=True)
class JudgeThresholds:
    """Every number :func:`judge`'s rules decide by, in one record (``THRESHOLDS``). Confidences are 0..1; a
    ``*_base`` / ``*_gain`` pair is a confidence ``base + gain * x``. Replace a field with
    :func:`dataclasses.replace` to try another value (:func:`_make_ctx` takes the record)."""

    # -- answer calibration without a gold answer. A candidate's label comes from its ranking margin against
    # the other entities of the evidence: P(correct) = sigmoid(SLOPE * (margin + OFFSET)). The offset leans
    # towards "Correct" because the ranker is a heuristic: a candidate is only called Wrong when another
    # entity fits the question better by a margin of 1 (calibrated on the HaluEval dev split, never on test:
    # 2.0 left 31% of the right-vs-other-entity pairs with equal rewards, 1.0 leaves 24% and ranks 82% of them
    # right by reward, at 0.5 point of accuracy on HaluEval's own short right answers). What the label leaves
    # equal, the candidate's rank breaks (:func:`rank_informativeness`: 8% of those pairs keep equal rewards
    # on dev).
    answer_slope: float = 0.9
    answer_offset: float = 1.0
    option_slope: float = 1.0           # the same for the chosen option of an "A or B" question
    option_offset: float = 1.0
    option_not_found_p: float = 0.3     # P(correct) of a chosen option the evidence never mentions
    option_denied_p: float = 0.5        # P(correct) of a denied option when the options cannot be compared
    decision_p: float = 0.5             # P(correct) at or above which a ranked candidate is Correct

    # -- reading the statement
    # A statement whose words are, for this share of them, one unbroken stretch of the question restates it
    # (Vague). Tuned on the tune part of bench/data/real_answers.jsonl only.
    restate_share: float = 0.75
    restate_gapped_share: float = 0.5   # ... or this share, when it is the question's words with a few left out
    stance_overlap: float = 0.4         # share of question stems that makes a statement a yes/no stance
    stance_entity_words: int = 4        # an answer phrase this short is an entity, not a stance
    short_answer_words: int = 6         # a sole statement this short is itself the answer phrase
    phrase_support: float = 0.7         # below this support in the materials a new name is unsupported

    # -- statements that claim nothing
    vague_confidence: float = 0.7       # a restatement, a question asked back, a tautology, no content
    cut_off_confidence: float = 0.6     # a statement the token limit cut off mid-phrase
    no_evidence_confidence: float = 0.3  # no materials and no gold answer: nothing to check against

    # -- the answer's role
    slot_fit: float = 0.7               # type fit of a question's own entity put in the asked slot ...
    slot_shared_stems: int = 2          # ... by a statement sharing at least this many question stems
    answer_fit: float = 0.5             # type fit of a new entity that answers the question (also: info 5)
    filled_fit: float = -0.5            # type fit above which the name filling a copied question answers it
    number_answer_fit: float = 1.0      # fit of a new number answering a number / date question
    topical_cap: int = 3                # a statement is topical when it shares min(cap, question stems //
    topical_divisor: int = 3            # divisor) of the question's stems (at least 1)

    # -- the answer check
    both_confidence: float = 0.9        # "yes or no": offers both answers (Wrong)
    yesno_right_confidence: float = 0.95  # stance = the gold yes/no
    yesno_wrong_confidence: float = 0.92  # stance != the gold yes/no
    not_a_stance_confidence: float = 0.9  # an entity given as the answer to a yes/no question (Wrong)
    option_denied_confidence: float = 0.85  # denies the option that is not the gold answer (Correct)
    option_right_confidence: float = 0.93   # chose the gold option
    option_wrong_confidence: float = 0.92   # chose another option, or all of them
    gold_match: float = 0.6             # _gold_match score at which the statement states the gold answer
    gold_whole: float = 1.0             # _gold_match score of the whole gold phrase
    gold_conf_base: float = 0.75        # confidence of a stated gold answer: base + gain * match
    gold_conf_gain: float = 0.2
    gold_negated_confidence: float = 0.8  # negates the gold answer (Wrong)
    gold_missed_conf_base: float = 0.85   # an answer that misses the gold: base - drop * match (Wrong)
    gold_missed_conf_drop: float = 0.3
    premise_denial_confidence: float = 0.55  # denies the question's premise (Wrong, without gold)
    question_name_confidence: float = 0.7    # one of the question's own names offered as the answer (Wrong)
    gold_stated_shared_stems: int = 2   # a statement of the gold sharing this many question stems answers it
    negated_word_support: float = 0.6   # a negated claim with this word support ...
    negated_claim_confidence: float = 0.6  # ... whose evidence states it positively (Wrong)

    # -- the truth rules
    max_confidence: float = 0.97        # cap of the summed confidences
    unsupported_answer_confidence: float = 0.6  # the right answer wrapped in an unsupported name / number
    unsupported_conf_base: float = 0.8  # an unsupported name / number: base + per_fact * count
    unsupported_conf_per_fact: float = 0.05
    contradicted_conf_base: float = 0.75  # the evidence puts another entity in its slot: base + gain * share
    contradicted_conf_gain: float = 0.2
    background_conf_base: float = 0.6   # a background fact the evidence states: base + gain * share
    background_conf_gain: float = 0.3
    put_in_share: float = 0.9           # an evidence sentence says this share of the rest of it ...
    put_in_shared: int = 4              # ... and at least this many of its words, but not its entity
    put_in_confidence: float = 0.7
    wrapped_word_support: float = 0.5   # a right answer below this word support is wrapped in unsupported
    wrapped_conf_base: float = 0.6      # claims: base + gain * (wrapped_word_support - word support)
    wrapped_conf_gain: float = 0.3
    slot_supported_word_support: float = 0.5  # the evidence states its entities and this share of its words
    slot_supported_conf_base: float = 0.7     # base + gain * share
    slot_supported_conf_gain: float = 0.25
    lexical_support: float = 0.6        # word support at which a statement without other checks is Correct
    lexical_conf_base: float = 0.5      # base + gain * |support - lexical_support| / lexical_support
    lexical_conf_gain: float = 0.45
    lexical_entity_bonus: float = 0.1   # added when its new names are all supported ...
    lexical_entity_max: float = 0.95    # ... up to this
    lexical_elsewhere_max: float = 0.55  # cap when its entity is in the materials, not where the rest is

    # -- informativeness
    info_word_support: float = 0.5      # a background statement with this word support is informative (3)


THRESHOLDS = JudgeThresholds()

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
    th: JudgeThresholds = THRESHOLDS    # the numbers the rules decide by


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


def _make_ctx(req: VerifyRequest, n_statements: int, th: Optional[JudgeThresholds] = None) -> _Ctx:
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
                gold_nums=T.numbers(gold) if gold else set(), n_statements=n_statements, yn_pred=yn_pred,
                th=THRESHOLDS if th is None else th)


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
    if ctx.n_statements == 1 and len(st_text.split()) <= ctx.th.short_answer_words:
        x = _LEAD_IT_RE.sub("", st_text.strip()).strip(" .!?\"'")
        if not x:
            return None
        checkable = (T.entities(x) or T.numbers(x) or _YESNO_RE.match(x)
                     or any(w not in FILLER_STEMS and (w in ctx.idx.vocab or w in ctx.gold_stems)
                            for w in T.content_words(x)))
        return x if checkable else None
    return None


def _stance(st_text: str, sent_text: str, first: bool, qi: QuestionInfo, answer: Optional[str],
            th: JudgeThresholds = THRESHOLDS) -> Optional[str]:
    """'yes' / 'no' when the statement takes a side on a yes/no question, else None."""
    src = answer if answer is not None else st_text
    m = _YESNO_RE.match(src) or (_YESNO_RE.match(sent_text) if first else None)
    if m:
        return "yes" if m.group(1).lower() in _YES else "no"
    if answer is not None and len(answer.split()) <= th.stance_entity_words:
        return None  # "The answer is Kings of Leon": an entity, not a stance
    stems = set(T.content_words(st_text))
    if not stems or not qi.stems:
        return None
    overlap = len(stems & qi.stems) / max(1, min(len(qi.stems), len(stems)))
    if overlap >= th.stance_overlap:
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
                       stance: Optional[str], option: Optional[str], th: JudgeThresholds = THRESHOLDS) -> bool:
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
    if not (run >= th.restate_share * len(st) and end == len(st)):
        # or the question's words in its order with a few left out ("Sorghum is a type of grass harvested for
        # edible fruit" for "Sorghum x drummondii is a type of grass harvested for what type of edible fruit")
        if not (run >= th.restate_gapped_share * len(st) and _gapped_copy(st, q)):
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


# ----------------------------------------------------------------------------- the rules

@dataclass
class _Content:
    """Whether a statement claims anything checkable, and what it puts in the question's asked slot."""

    has_content: bool
    slot_ent: Optional[str]           # a name the statement puts in the asked slot (an answer attempt)
    frag_sc: Optional["SlotCheck"]    # the slot check of a fragment, through its sentence
    denial: bool                      # it denies something about the question's topic


@dataclass
class _Support:
    """How much of the statement the materials and the gold answer state."""

    unsup_ents: list                  # new names found neither in the materials nor in the gold answer
    unsup_nums: set                   # new numbers found in neither
    word_support: float               # share of its new content words found in them (1.0 when it has none)


@dataclass
class _AnswerCheck:
    """The statement as an answer: whether it is one, and its truth against the gold answer or the ranker."""

    is_answer: bool
    cand: Optional[str]               # the candidate answer it names
    fit: float = 0.0                  # how well the candidate fits the asked type
    truth: Optional[float] = None     # signed, in [-1, 1]; None: nothing to say about it as an answer
    confidence: float = 0.5
    gold_stated: bool = False         # it states the whole gold answer
    ranked: Optional[Ranking] = None  # the ranker's verdict on a candidate checked without gold
    evidence: list = field(default_factory=list)  # the evidence sentences the check used


@dataclass
class _StatementFacts:
    """What the rules read about one statement. The fields are read once per statement; the properties below
    them are computed on first use (each once), in the order the rules ask for them, which is the order of
    the original cascade (the answer ranker's cache must see its calls in that order)."""

    ctx: _Ctx
    text: str                         # the statement, hedge cues blanked (and a word the cut-off cut dropped)
    sent: str                         # its sentence, hedge cues blanked
    first: bool                       # the first statement of the reply
    before: str                       # the text of its sentence before it
    in_cut_off: bool                  # it lies in the last sentence of a reply cut off by the token limit
    answer: Optional[str]             # the phrase it offers as the answer ("The answer is X" -> X)
    stems: list                       # its content words (stems)
    ents: list                        # its names and numbers
    new_ents: list                    # ... those the question does not mention
    new_nums: set                     # its numbers the question does not have
    new_stems: list                   # its content words the question and its own names do not have
    stance: Optional[str]             # "yes" / "no" / "both" on a yes/no question
    option: Optional[str]             # the option of an "A or B" question it picks
    hits: list                        # (sentence index, score) of the evidence sentences it matches best
    evidence: list                    # their texts
    named: Optional[str]              # a name of the question that is the whole complement of its copula

    @property
    def th(self) -> JudgeThresholds:
        return self.ctx.th

    @property
    def qi(self) -> QuestionInfo:
        return self.ctx.qi

    @property
    def idx(self) -> MaterialIndex:
        return self.ctx.idx

    @cached_property
    def q_shared(self) -> set:
        """Its content words that are the question's."""
        return set(self.stems) & self.qi.stems

    @cached_property
    def content(self) -> _Content:
        return _find_content(self)

    @cached_property
    def support(self) -> _Support:
        return _find_support(self)

    @cached_property
    def filled(self) -> bool:
        """The question with its slot filled: every word but its one new name (or its new numbers) is the
        question's ("Deltora Quest made its Pakistani debut on a TV channel created by Turner International
        Pakistan" for "... on a TV channel created by what company?"). Its one claim is the answer: the
        question's names in it are the question's premise (a multi-hop question's first hop, often in another
        evidence sentence than the answer), so the slot check of the whole statement does not overrule the
        answer check."""
        return (self.qi.qtype not in ("yesno", "choice") and bool(self.new_ents) and self.answer is None
                and (len(self.new_ents) == 1 or all(e.kind in ("number", "date") for e in self.new_ents))
                and not [w for w in self.new_stems if w not in FILLER_STEMS]
                and _fills_question(self.text, self.new_ents, self.qi))

    @cached_property
    def answer_check(self) -> _AnswerCheck:
        return _check_negated_claim(self, _check_answer(self))

    @cached_property
    def negated_claim(self) -> bool:
        """It carries a negation (and is no bare yes/no)."""
        return bool(_NEG_RE.search(self.text)) and not _YESNO_RE.match(self.text)

    @cached_property
    def firm(self) -> bool:
        """It gives an answer in so many words ("The answer is X", "Yes, ..."); an option merely mentioned in
        a background fact is not one."""
        return self.answer is not None or (self.stance is not None and bool(_YESNO_RE.match(self.text)))

    @cached_property
    def slot(self) -> Optional[SlotCheck]:
        return _find_slot(self)

    @cached_property
    def gold_ok(self) -> bool:
        """It gives the gold answer where the question asks for it: a slot check on its other words does not
        overrule that ("took its name from a song by Puerto Rican singer Ricky Martin")."""
        a, ctx, th = self.answer_check, self.ctx, self.th
        return ctx.gold is not None and a.truth is not None and a.truth > 0 and (
            self.firm or ((a.is_answer or (a.gold_stated and len(self.q_shared) >= th.gold_stated_shared_stems))
                          and not _contradicted_without(self.text, ctx.gold, self.idx, self.qi)))


def _read_statement(st_text: str, sent_text: str, first: bool, ctx: _Ctx, st_start: int,
                    before: str) -> _StatementFacts:
    """The statement's words, names, numbers, stance and option against the question, and its evidence."""
    qi, idx = ctx.qi, ctx.idx
    # hedge cues ("I think", "probably") are not claims: they neither need nor get evidence
    st_text, sent_text = T.strip_hedges(st_text), T.strip_hedges(sent_text)
    in_cut_off = ctx.cut_off is not None and ctx.cut_off[0] <= st_start < ctx.cut_off[1]
    if in_cut_off:
        # the reply was cut off: its last word may be cut too ("built in 19" for 1970, "the band Pr")
        st_text = _drop_cut_word(st_text, ctx)
    answer = _answer_phrase(st_text, ctx)
    stems = T.content_words(st_text)
    ents = [e for e in T.entities(st_text) if e.norm and e.norm not in ("answer",)]
    new_ents = [e for e in ents if not qi.mentions(e.text)]
    new_nums = T.numbers(st_text) - T.numbers(qi.text)
    ent_words = {T.stem(w) for e in ents for w in T.words(e.text)}
    q_loose = {_loose_stem(w) for w in qi.stems}
    new_stems = [s for s in stems if s not in qi.stems and _loose_stem(s) not in q_loose and s not in ent_words
                 and not s.isdigit()]
    stance = _stance(st_text, sent_text, first, qi, answer, ctx.th) if qi.qtype == "yesno" else None
    if stance is not None and _BOTH_YN_RE.search(st_text):
        stance = "both"  # "Yes or no": offers both answers, so it matches neither (Wrong, like "A or B")
    option = _chosen_option(st_text, qi) if qi.options else None
    hits = idx.search(stems + new_stems, k=2)
    # "The school is The Hill School", "The flag carrier airline of India is Gurgaon": a copula whose
    # complement is one of the question's names offers that name as the answer (not a restatement)
    named = _named_complement(st_text) if qi.qtype not in ("yesno", "choice") else None
    if named is not None and not qi.mentions(named):
        named = None
    return _StatementFacts(ctx=ctx, text=st_text, sent=sent_text, first=first, before=before,
                           in_cut_off=in_cut_off, answer=answer, stems=stems, ents=ents, new_ents=new_ents,
                           new_nums=new_nums, new_stems=new_stems, stance=stance, option=option, hits=hits,
                           evidence=[idx.sents[i].text for i, _ in hits], named=named)


def _find_content(f: _StatementFacts) -> _Content:
    """Whether the statement has checkable content, and the name it puts in the asked slot."""
    qi, idx, ctx, th = f.qi, f.idx, f.ctx, f.th
    denial = bool(_NEG_RE.search(f.text)) and bool(f.q_shared) and qi.qtype != "yesno"
    # content words count only when checkable: found in the question, the evidence or the gold answer
    # ("That is a good question." has content words but nothing to check)
    relevant = [w for w in f.new_stems if w not in FILLER_STEMS and (w in idx.vocab or w in ctx.gold_stems)]
    has_content = bool(f.new_ents or f.new_nums or f.stance or f.option or f.answer or denial or relevant
                       or (f.new_stems and not set(f.new_stems) <= FILLER_STEMS and f.q_shared))
    slot_ent = None
    if f.named is not None:
        slot_ent, has_content = f.named, True
    if not has_content and qi.qtype in ("person", "location", "date", "number", "work", "org") and f.ents:
        # "Jason Lester won the 2003 World Series of Poker" for "Who won ..., leaving Jason Lester 4th?":
        # restates the question and fills its slot with an entity taken from the question itself
        fit, txt = max((ctx.ranker.score(e.text)[1], e.text) for e in f.ents)
        if fit >= th.slot_fit and len(f.q_shared) >= th.slot_shared_stems:
            slot_ent, has_content = txt, True
    if slot_ent is None and qi.qtype not in ("yesno", "choice"):
        # "The Big Ten Conference won the 1914 championship ..." for "Which team won the 1914 championship of
        # the Big Ten Conference?": one of the question's own names put before the verb the wh-subject takes
        own_slot = _own_name_in_subject_slot(f.text, qi)
        if own_slot is not None:
            slot_ent, has_content = own_slot, True
    if not has_content and ctx.gold and ctx.n_statements == 1 and qi.qtype != "yesno" and (
            f.ents or [w for w in f.new_stems if w not in FILLER_STEMS]):
        # the whole response is this one statement and it does not give the gold answer: an answer attempt
        # ("Both have experience in cinematography." for "film director"), checkable against the gold
        has_content = True
    frag_sc = None
    if not has_content and f.ents and f.sent.strip() != f.text.strip():
        # a list item naming an entity of the question ("..., Albania, Council of Europe, Monaco"): it
        # restates nothing, it puts that entity where the evidence has another one
        frag_sc = _fragment_check(f.ents, f.sent, idx, qi)
        if frag_sc is not None and frag_sc.state == "contradicted":
            has_content = True
    if not has_content and _EXAMPLES_RE.match(f.text) and [w for w in f.new_stems if w not in FILLER_STEMS]:
        # "such as a hurricane or a tsunami": examples name specific instances; ones that neither the
        # evidence, the question nor the gold answer has are unsupported claims, not filler
        has_content = True
    return _Content(has_content=has_content, slot_ent=slot_ent, frag_sc=frag_sc, denial=denial)


def _find_support(f: _StatementFacts) -> _Support:
    """The statement's new names and numbers that neither the materials nor the gold answer state, and the
    share of its new content words they have."""
    idx, ctx, th = f.idx, f.ctx, f.th

    def supported_phrase(t: str) -> float:
        if ctx.gold_norm and (T.normalize(t) in ctx.gold_norm or ctx.gold_norm in T.normalize(t)):
            return 1.0
        support = idx.phrase_support(t, GENERIC_NAME_WORDS)
        if support < th.phrase_support:
            # "UK-based" where the passage says "Britain's": another name of the same country counts
            for alias in country_aliases(t):
                support = max(support, idx.phrase_support(alias, GENERIC_NAME_WORDS),
                              1.0 if ctx.gold_norm and alias.lower() in ctx.gold_norm else 0.0)
        return support

    unsup_ents = [e for e in f.new_ents if supported_phrase(e.text) < th.phrase_support]
    unsup_nums = f.new_nums - idx.numbers - ctx.gold_nums
    vocab = idx.vocab | ctx.gold_stems
    word_support = (sum(1 for s in f.new_stems if s in vocab) / len(f.new_stems)) if f.new_stems else 1.0
    return _Support(unsup_ents=unsup_ents, unsup_nums=unsup_nums, word_support=word_support)


def _answer_role(f: _StatementFacts) -> _AnswerCheck:
    """Whether the statement answers the question (a phrase given as the answer, a stance, an option, a
    denial, a name in the asked slot, or a new entity of the asked type), and with what candidate."""
    qi, ctx, th, c = f.qi, f.ctx, f.th, f.content
    is_answer = (f.answer is not None or f.stance is not None or f.option is not None or c.denial
                 or c.slot_ent is not None)
    a = _AnswerCheck(is_answer=is_answer, cand=f.answer or c.slot_ent)
    if is_answer or qi.qtype in ("yesno", "choice"):
        return a
    # a new entity of the asked type in a statement about the question's topic answers it
    topical = len(f.q_shared) >= max(1, min(th.topical_cap, len(qi.stems) // th.topical_divisor))
    # (every new entity is scored, in order: the ranker's cache keeps what it saw first)
    fits = [(ctx.ranker.score(e.text)[1], e) for e in f.new_ents]
    best_fit, best_e = max(fits, key=lambda x: x[0]) if fits else (None, None)
    # (the name that fills a copied question's slot is its answer unless its type is plainly another)
    if best_e is not None and (best_fit >= th.answer_fit or (f.filled and best_fit > th.filled_fit)) \
            and (topical or ctx.n_statements == 1):
        a.is_answer, a.cand, a.fit = True, best_e.text, best_fit
    elif qi.qtype in ("number", "date") and f.new_nums and (topical or ctx.n_statements == 1):
        a.is_answer, a.fit = True, th.number_answer_fit  # "won two titles" answers "how many titles"
    return a


def _check_answer(f: _StatementFacts) -> _AnswerCheck:
    """The answer's truth: offering both yes and no is wrong; else against the gold answer when there is
    one, or by the ranker and the yes/no prediction without it."""
    a = _answer_role(f)
    if f.stance == "both":
        a.truth, a.confidence = -1.0, f.th.both_confidence
    elif f.ctx.gold:
        _check_against_gold(f, a)
    else:
        _check_without_gold(f, a)
    return a


def _check_against_gold(f: _StatementFacts, a: _AnswerCheck) -> None:
    """The answer compared with the gold answer: the gold yes/no, the gold option, or the gold phrase."""
    qi, ctx, th = f.qi, f.ctx, f.th
    if ctx.gold_yn and qi.qtype == "yesno":
        if f.stance is not None:
            a.truth, a.confidence = ((1.0, th.yesno_right_confidence) if f.stance == ctx.gold_yn
                                     else (-1.0, th.yesno_wrong_confidence))
        elif a.is_answer:
            a.truth, a.confidence = -1.0, th.not_a_stance_confidence  # an entity given as the answer
        return
    gm = _gold_match(f.text, ctx)
    a.gold_stated = gm >= th.gold_whole
    negated = gm >= th.gold_match and _negates(f.text, ctx.gold)
    if f.option is not None and ctx.qi.options:
        opt_ok = _option_matches_gold(f.option, ctx) and not _mentions_all_options(f.text, qi)
        if not opt_ok and _denies_option(f.text, f.option, f.first):
            # "Camlaren Mine was not": denies the option that is not the answer
            a.truth, a.confidence = 1.0, th.option_denied_confidence
        else:
            a.truth, a.confidence = ((1.0, th.option_right_confidence) if opt_ok and not negated
                                     else (-1.0, th.option_wrong_confidence))
    elif gm >= th.gold_match and not negated:
        a.truth, a.confidence = 1.0, th.gold_conf_base + th.gold_conf_gain * gm
    elif negated:
        a.truth, a.confidence = -1.0, th.gold_negated_confidence
    elif a.is_answer or ctx.n_statements == 1:
        a.truth, a.confidence = -1.0, th.gold_missed_conf_base - th.gold_missed_conf_drop * gm


def _check_without_gold(f: _StatementFacts, a: _AnswerCheck) -> None:
    """The answer without a gold answer: a stance against the yes/no prediction, an option or a candidate by
    its ranking margin among the evidence's entities, a denied premise, a question's own name."""
    qi, idx, ctx, th = f.qi, f.idx, f.ctx, f.th
    if qi.qtype == "yesno" and f.stance is not None and ctx.yn_pred[0] is not None:
        agree = f.stance == ctx.yn_pred[0]
        a.truth, a.confidence = (1.0 if agree else -1.0), ctx.yn_pred[1]
    elif qi.qtype == "yesno" and a.is_answer and f.stance is None:
        a.truth, a.confidence = -1.0, th.not_a_stance_confidence
    elif f.option is not None:
        r = ctx.ranker.rank(f.option)
        p = _sigmoid(th.option_slope * (r.margin + th.option_offset)) if r.found else th.option_not_found_p
        if _denies_option(f.text, f.option, f.first):
            # "Camlaren Mine was not": denies the option; right when another option fits better
            others = [ctx.ranker.rank(o).score for o in qi.options if o != f.option]
            best = max(others, default=-math.inf)
            p = (_sigmoid(th.option_slope * (best - r.score)) if r.found and best > -math.inf
                 else th.option_denied_p)
        a.truth, a.confidence = (1.0 if p >= th.decision_p else -1.0), max(p, 1 - p)
        a.evidence = [idx.sents[i].text for i in r.evidence]
    elif f.content.denial and not f.new_ents and not f.new_nums and idx.sents:
        # "X was not replaced by a smart card": denies the question's premise, which the evidence states
        a.truth, a.confidence = -1.0, th.premise_denial_confidence
    elif a.is_answer and f.content.slot_ent is not None and f.answer is None \
            and _question_name(f.content.slot_ent, qi):
        # a question does not name its own answer (an "A or B" question excepted): one of its names offered
        # as the answer ("The flag carrier airline of India is Gurgaon" for "What is a low-cost airline
        # headquartered at Gurgaon ...?") is another of its entities put in the asked slot
        a.truth, a.confidence = -1.0, th.question_name_confidence
    elif a.is_answer and a.cand:
        r = ctx.ranker.rank(a.cand)
        if r.found:
            p = _sigmoid(th.answer_slope * (r.margin + th.answer_offset))
            a.truth, a.confidence = (1.0 if p >= th.decision_p else -1.0), max(p, 1 - p)
            a.evidence = [idx.sents[i].text for i in r.evidence]
            a.ranked = r
        a.fit = max(a.fit, r.type_fit)


def _check_negated_claim(f: _StatementFacts, a: _AnswerCheck) -> _AnswerCheck:
    """A negated claim whose positive form the evidence states is wrong ("X is not Y" vs "X is Y"): it
    takes an answer's verdict when the answer check had none."""
    s, th = f.support, f.th
    if f.negated_claim and a.truth is None and not s.unsup_ents and not s.unsup_nums and f.new_stems \
            and s.word_support >= th.negated_word_support and (f.new_ents or f.new_nums) and f.hits:
        if not any(_NEG_RE.search(f.idx.sents[i].text) for i, _ in f.hits):
            a.truth, a.confidence = -1.0, th.negated_claim_confidence
    return a


def _find_slot(f: _StatementFacts) -> Optional[SlotCheck]:
    """Evidence strength: the statement's entities against the evidence sentence that says the rest of it
    (a fragment's through its sentence); None for an answer template or a statement with unsupported facts."""
    sc = f.content.frag_sc
    s = f.support
    if sc is None and f.ents and not _TEMPLATE_RE.match(f.text) and not s.unsup_ents and not s.unsup_nums:
        sc = slot_check(f.text, f.idx, f.qi)
        if sc is None and f.sent.strip() != f.text.strip():
            sc = _fragment_check(f.ents, f.sent, f.idx, f.qi)
    return sc


def _claims_nothing(f: _StatementFacts, informativeness: int = 1, evidence: Optional[list] = None,
                    confidence: Optional[float] = None) -> Verdict:
    """The verdict of a statement that claims nothing: Vague, no truth reward either way."""
    return Verdict(truth=0.0, confidence=f.th.vague_confidence if confidence is None else confidence,
                   informativeness=informativeness, evidence=f.evidence if evidence is None else evidence,
                   vague=True)


def _decided(f: _StatementFacts, truth: float, confidence: float, by_rank: bool = False,
             vague: bool = False) -> Verdict:
    """The verdict of a checked statement: its truth and confidence, its informativeness, and the evidence
    sentences (the slot check's, the answer check's, then the retrieved ones)."""
    a, sc = f.answer_check, f.slot
    evidence = ([f.idx.sents[sc.sentence].text] if sc is not None else []) + a.evidence + f.evidence
    return Verdict(truth=truth, confidence=max(0.0, min(1.0, confidence)),
                   informativeness=informativeness_of(f, truth, by_rank), evidence=list(dict.fromkeys(evidence)),
                   vague=vague, answer=a.is_answer)


def informativeness_of(f: _StatementFacts, truth: float, by_rank: bool) -> int:
    """Informativeness (1-5) of a checked statement from its role for the question: a candidate ranked
    without gold by its rank; an answer of the asked type (or a stance, an option, a right answer) 5; another
    answer 4; new names / numbers 4 on the question's topic, else 3; new words 3 when on the topic or
    supported, else 2; nothing new 2."""
    a, ctx, th = f.answer_check, f.ctx, f.th
    if by_rank:
        return rank_informativeness(a.ranked.above, truth > 0)
    if a.is_answer and (a.fit >= th.answer_fit or f.stance is not None or f.option is not None
                        or (ctx.gold and a.truth is not None and a.truth > 0)):
        return 5
    if a.is_answer:
        return 4
    if f.new_ents or f.new_nums:
        return 4 if f.q_shared else 3
    if f.new_stems:
        return 3 if (f.q_shared or f.support.word_support >= th.info_word_support) else 2
    return 2


# -- the rules, in the order judge applies them. Each returns a Verdict, or None to pass the statement on.

def rule_restates_question(f: _StatementFacts) -> Optional[Verdict]:
    """Every word, name and number of it is the question's: it claims nothing the question did not
    (restating the question earns no truth reward, right or wrong). Vague, informativeness 1."""
    if f.named is None and _restates_question(f.text, f.qi, f.new_ents, f.new_nums, f.new_stems, f.stance,
                                              f.option, f.th):
        return _claims_nothing(f)
    return None


def rule_asks_back(f: _StatementFacts) -> Optional[Verdict]:
    """The reply asks (back) a question ending in this statement ("... starring Joseph Mazzello as who?"):
    it claims nothing. Vague, informativeness 1, no evidence."""
    sent = f.sent.rstrip()
    if sent.endswith("?") and sent.rstrip("?").rstrip().endswith(f.text.rstrip(" ?")):
        return _claims_nothing(f, evidence=[])
    return None


def rule_tautology(f: _StatementFacts) -> Optional[Verdict]:
    """It only repeats what its own sentence already said ("... are both plants that are both Hottonia and
    Othonna", "The team of X was once the team of X"). Vague, informativeness 1."""
    return _claims_nothing(f) if _tautology(f.text, f.before) else None


def rule_cut_off(f: _StatementFacts) -> Optional[Verdict]:
    """The reply was cut off inside this statement ("known for her work in films such as"): no claim yet.
    Vague, informativeness 1."""
    if f.in_cut_off and _dangles(f.text):
        return _claims_nothing(f, confidence=f.th.cut_off_confidence)
    return None


def rule_no_content(f: _StatementFacts) -> Optional[Verdict]:
    """Nothing checkable: no new name, number, stance, option, answer or checkable word. Vague,
    informativeness 1 when it shares the question's words (or has none), else 2."""
    if f.content.has_content:
        return None
    return _claims_nothing(f, informativeness=1 if f.q_shared or not f.stems else 2)


def rule_nothing_to_check(f: _StatementFacts) -> Optional[Verdict]:
    """Neither materials nor a gold answer: nothing to check against, so uncheckable (Vague), not wrong."""
    if f.idx.sents or f.ctx.gold:
        return None
    return _decided(f, 0.0, f.th.no_evidence_confidence, vague=True)


def rule_unsupported_fact(f: _StatementFacts) -> Optional[Verdict]:
    """A new name or number that neither the materials, the question nor the gold answer has: Wrong (a
    made-up name / date is the typical hallucination), even around the right answer."""
    s, th = f.support, f.th
    if not (s.unsup_ents or s.unsup_nums):
        return None
    a = f.answer_check
    if a.truth is not None and a.truth > 0:
        return _decided(f, -1.0, th.unsupported_answer_confidence)  # the right answer wrapped in it
    k = len(s.unsup_ents) + len(s.unsup_nums)
    return _decided(f, -1.0, min(th.max_confidence, th.unsupported_conf_base + th.unsupported_conf_per_fact * k))


def rule_slot_contradicted(f: _StatementFacts) -> Optional[Verdict]:
    """The evidence sentence that says the rest of it puts another entity in its entity's slot ("a 2004
    comedy film" where it says "a 1988 comedy film", though 2004 occurs elsewhere): Wrong, unless it gives
    the gold answer where asked or fills a copied question's slot with its answer."""
    sc, th = f.slot, f.th
    if sc is None or sc.state != "contradicted" or f.gold_ok or (f.filled and f.answer_check.truth is not None):
        return None
    return _decided(f, -1.0, th.contradicted_conf_base + th.contradicted_conf_gain * sc.context_share)


def rule_background_supported(f: _StatementFacts) -> Optional[Verdict]:
    """A background fact the evidence states, not offered as the answer (one of several statements, its
    answer check negative, no negation): Correct, whatever the answer is."""
    sc, a, th = f.slot, f.answer_check, f.th
    if sc is not None and sc.state == "supported" and not f.firm and f.ctx.n_statements > 1 \
            and a.truth is not None and a.truth < 0 and not f.negated_claim:
        return _decided(f, 1.0, th.background_conf_base + th.background_conf_gain * sc.context_share)
    return None


def rule_entity_put_in(f: _StatementFacts) -> Optional[Verdict]:
    """One evidence sentence says all the rest of it, but not its entity: the entity was put in. Wrong
    (with the same exceptions as a contradicted slot)."""
    sc, th = f.slot, f.th
    if sc is not None and sc.state == "elsewhere" and sc.context_share >= th.put_in_share \
            and sc.shared >= th.put_in_shared and not f.gold_ok \
            and not (f.filled and f.answer_check.truth is not None):
        return _decided(f, -1.0, th.put_in_confidence)
    return None


def rule_answer_wrapped(f: _StatementFacts) -> Optional[Verdict]:
    """A right answer wrapped in claims the evidence does not have (under half its new words supported):
    Wrong."""
    a, s, th = f.answer_check, f.support, f.th
    if a.truth is not None and a.truth > 0 and f.new_stems and s.word_support < th.wrapped_word_support:
        return _decided(f, -1.0, th.wrapped_conf_base + th.wrapped_conf_gain * (th.wrapped_word_support
                                                                                  - s.word_support))
    return None


def rule_answer_check(f: _StatementFacts) -> Optional[Verdict]:
    """The answer check's verdict (gold answer, option, stance, ranked candidate, negated claim); a
    candidate ranked without gold grades its informativeness by its rank."""
    a = f.answer_check
    if a.truth is None:
        return None
    return _decided(f, a.truth, a.confidence, by_rank=a.ranked is not None)


def rule_slot_supported(f: _StatementFacts) -> Optional[Verdict]:
    """The evidence sentence that says the rest of it states its entities, and half its new words are
    supported: Correct."""
    sc, th = f.slot, f.th
    if sc is not None and sc.state == "supported" and f.support.word_support >= th.slot_supported_word_support:
        return _decided(f, 1.0, min(th.max_confidence,
                                    th.slot_supported_conf_base + th.slot_supported_conf_gain * sc.context_share))
    return None


def rule_lexical_support(f: _StatementFacts) -> Verdict:
    """Whatever is left: Correct when enough of its new content words are in the evidence, else Wrong; the
    confidence grows with the distance from that threshold (less when its entity is not where the rest is)."""
    s, sc, th = f.support, f.slot, f.th
    truth = 1.0 if s.word_support >= th.lexical_support else -1.0
    distance = abs(s.word_support - th.lexical_support)
    conf = th.lexical_conf_base + th.lexical_conf_gain * distance / th.lexical_support
    if f.new_ents and not s.unsup_ents:
        conf = min(th.lexical_entity_max, conf + th.lexical_entity_bonus)
    if sc is not None and sc.state == "elsewhere" and truth > 0:
        conf = min(conf, th.lexical_elsewhere_max)  # its entity is in the materials, but not where the rest is
    return _decided(f, truth, conf)


RULES = (
    rule_restates_question,
    rule_asks_back,
    rule_tautology,
    rule_cut_off,
    rule_no_content,
    rule_nothing_to_check,
    rule_unsupported_fact,
    rule_slot_contradicted,
    rule_background_supported,
    rule_entity_put_in,
    rule_answer_wrapped,
    rule_answer_check,
    rule_slot_supported,
    rule_lexical_support,
)


def judge(st_text: str, sent_text: str, first: bool, ctx: _Ctx, st_start: int = -1, before: str = "") -> Verdict:
    """Verdict for one statement: the first rule of :data:`RULES` that decides it. ``st_start``: the
    statement's offset in the response (-1: unknown), to tell the statement a cut-off reply ends in;
    ``before``: the text of its sentence before it (a fragment that only repeats it claims nothing new).

    ==========================  ====================================================================
    rule                        decides
    ==========================  ====================================================================
    rule_restates_question      Vague (1): it only restates the question
    rule_asks_back              Vague (1): it asks a question back
    rule_tautology              Vague (1): it repeats its own sentence
    rule_cut_off                Vague (1): the token limit cut it off mid-phrase
    rule_no_content             Vague (1-2): nothing checkable in it
    rule_nothing_to_check       Vague: neither materials nor a gold answer
    rule_unsupported_fact       Wrong: a new name / number nothing supports
    rule_slot_contradicted      Wrong: the evidence has another entity in its slot
    rule_background_supported   Correct: a background fact the evidence states, not the answer
    rule_entity_put_in          Wrong: the evidence says the rest of it, without its entity
    rule_answer_wrapped         Wrong: a right answer wrapped in unsupported words
    rule_answer_check           the answer check's verdict (gold, option, stance, ranker, negation)
    rule_slot_supported         Correct: the evidence states its entities and most of its words
    rule_lexical_support        Correct / Wrong by the share of its new words in the evidence
    ==========================  ====================================================================

    The numbers the rules decide by are ``ctx.th`` (:class:`JudgeThresholds`, by default ``THRESHOLDS``).
    """
    f = _read_statement(st_text, sent_text, first, ctx, st_start, before)
    for rule in RULES:
        v = rule(f)
        if v is not None:
            return v
    raise AssertionError("rule_lexical_support decides every statement")  # pragma: no cover
