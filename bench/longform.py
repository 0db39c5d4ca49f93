"""Long-form verifier benchmark: multi-sentence answers with a known label and span for every statement.

Construction (deterministic: every choice is drawn from ``random.Random(sha1(question))``), per HaluEval item:

- **supported** statements: sentences of the item's own passages, copied verbatim (5-30 words, with at
  least one entity, number or date, no hedge cue of their own, not a restatement of the question),
  label ``Correct``;
- **swapped** statements: such a sentence with ONE entity, number or date replaced by another of the same
  kind (name for name, number/date for number/date) taken from the same passage (other passages of the
  item when the passage has none), sharing no word with the original; label ``Wrong``. The swapped-in
  entity does occur in the materials, so a check that only asks "is this name in the evidence?" passes it;
- **hedged** versions of both ("I think ...", "Probably, ..."): ``Hedged correct`` / ``Hedged wrong``;
- **unverifiable filler** ("I hope this helps."): ``Vague``;
- an **answer** sentence ("So the answer is X."): X is the right answer (``Correct``) or the entity-swap
  distractor of :func:`swap_entity` (``Wrong``; ``rlfh bench verifier``'s (b) pairs), sometimes hedged.

Each true statement is one sentence of the response; its span is the sentence without its final period
(a hedge prefix is part of the statement). Metrics, all pure functions of (true statements, VerifyResult):

- **statement label**: the verifier's atomic statements overlapping the true span are pooled: a bad label
  (``Wrong`` / ``Hedged wrong``) among them wins, then a good one, then ``Vague`` (no overlapping statement
  counts as ``Vague``: it earns no truth reward). Within a class, the label covering most characters.
  Accuracy is exact agreement on the 5 labels; precision / recall per label.
- **span cover**: share of the characters of each true span covered by the predicted statements that
  overlap it (the issue's "span agreement"); **span IoU**: intersection over union of the true span and
  the union of those predicted statements (penalises a predicted statement that runs into a neighbour).
- **token sign agreement**: the response is cut into word/punctuation tokens (regex, with character
  offsets); the reward service's own :func:`reward_service.token_rewards.compute_token_rewards` gives the
  FSPO label sign of every token (+1 good, -1 bad, 0 Vague / outside) for the verifier's result and for
  the true statements; agreement is the share of tokens inside true statements whose signs match.
  Caveat: a swapped sentence's true sign is -1 on all its tokens, so a verifier that flags only the clause
  holding the swapped entity loses the other clauses' tokens here (finer is not rewarded).
"""
from __future__ import annotations

import hashlib
import random
import re
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from core.verify_schema import BAD_LABELS, GOOD_LABELS, LABELS, Sentence, Statement, VerifyRequest, VerifyResult
from verifier_service import text as T
from verifier_service.question import NATIONALITIES

HEDGES = ("I think ", "I believe ", "Probably, ", "If I remember correctly, ", "I'm fairly sure that ")
FILLERS = (
    "That is a good question.",
    "Here is what I can tell you.",
    "I hope this helps.",
    "Let me explain.",
    "There is some background to cover first.",
    "Thanks for asking.",
)
# first words that are lower-cased after a hedge prefix ("The film ..." -> "I think the film ...")
_LOWER_FIRST = frozenset("The A An He She It They His Her Its Their This That These Those In On At As After "
                         "Before During From By For With Since When While There Both Each".split())
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

GOOD = GOOD_LABELS
BAD = BAD_LABELS


@dataclass
class TrueStatement:
    """One constructed statement: ``response[start:end] == text``."""

    text: str
    start: int
    end: int
    label: str
    kind: str                                  # supported | swapped | filler | answer
    swap: Optional[tuple[str, str]] = None     # (original, replacement) for swapped statements


@dataclass
class LongResponse:
    uid: str
    question: str
    materials: list[str]
    gold: str
    response: str
    statements: list[TrueStatement] = field(default_factory=list)


# ----------------------------------------------------------------------------- construction

def _rng(item) -> random.Random:
    return random.Random(int(hashlib.sha1(("longform:" + item.question).encode("utf-8")).hexdigest()[:12], 16))


def _group(kind: str) -> str:
    return "num" if kind in ("number", "date") else "name"


def _swap_candidates(item, passage_i: int, sentence: str):
    """Entities of the item's passages (same passage first) usable as replacements in ``sentence``."""
    sn = " " + T.normalize(sentence) + " "
    order = [passage_i] + [i for i in range(len(item.knowledge)) if i != passage_i]
    out, seen = [], set()
    for pi in order:
        for e in T.entities(item.knowledge[pi]):
            n = e.norm
            if not n or len(n) < 2 or n in seen or f" {n} " in sn or n in ("yes", "no"):
                continue
            seen.add(n)
            out.append((pi == passage_i, e))
    return out


def swap_one(item, passage_i: int, sentence: str, rng: random.Random) -> Optional[tuple[str, str, str, int]]:
    """``sentence`` with one entity replaced: (new sentence, original, replacement, replacement offset).

    None when the sentence has no entity with a usable same-kind replacement.
    """
    ents = [e for e in T.entities(sentence) if e.norm and len(e.norm) > 1 and e.norm not in ("yes", "no")]
    rng.shuffle(ents)
    cands = _swap_candidates(item, passage_i, sentence)
    sent_words = {w for e in ents for w in e.norm.split()}
    for e in ents:
        ewords = set(e.norm.split())
        e_nat = e.norm in NATIONALITIES
        pool = [(same, c) for same, c in cands if _group(c.kind) == _group(e.kind)
                and not (set(c.norm.split()) & ewords) and c.norm not in e.norm and e.norm not in c.norm
                and (c.norm in NATIONALITIES) == e_nat  # "American" only for another nationality
                and not (set(c.norm.split()) & sent_words)]  # nor a variant of a name already there
        if _group(e.kind) == "num":
            # a year for a year, a count for a count ("1991" -> "2003", not "1991" -> "12")
            is_year = bool(re.fullmatch(r"1[0-9]{3}|20[0-9]{2}", e.text.strip()))
            pool = [(s, c) for s, c in pool if bool(re.search(r"\b(1[0-9]{3}|20[0-9]{2})\b", c.text)) == is_year
                    or c.kind == "date" and e.kind == "date"]
        if not pool:
            continue
        same = [c for s, c in pool if s]
        pick = rng.choice(same or [c for _, c in pool])
        new = sentence[:e.start] + pick.text + sentence[e.end:]
        return new, e.text, pick.text, e.start
    return None


def _hedge(sentence: str, rng: random.Random) -> str:
    first = sentence.split(" ", 1)[0]
    body = sentence[0].lower() + sentence[1:] if first in _LOWER_FIRST else sentence
    return rng.choice(HEDGES) + body


def strip_hedge_prefix(text: str) -> str:
    """Undo :func:`_hedge`: the source sentence of a hedged statement."""
    for h in HEDGES:
        if text.startswith(h):
            rest = text[len(h):]
            first = rest.split(" ", 1)[0]
            return (rest[0].upper() + rest[1:]) if first[:1].upper() + first[1:] in _LOWER_FIRST else rest
    return text


def _evidence_sentences(item) -> list[tuple[int, str]]:
    """Usable passage sentences: 5-30 words, an entity, no hedge cue of their own ("about 200 species"
    would make a copied fact a hedged one), and not a restatement of the question (at least 2 content
    words and a third of them that the question lacks: a restatement is Vague by design)."""
    qs = set(T.content_words(item.question))
    out = []
    for pi, p in enumerate(item.knowledge):
        for sp in T.split_sentences(p):
            s = sp.text.strip()
            n = len(s.split())
            if not (5 <= n <= 30 and s.endswith(".") and T.entities(s) and '"' not in s and "\n" not in s):
                continue
            if T.is_hedged(s):
                continue
            cw = set(T.content_words(s))
            if len(cw - qs) < max(2, len(cw) / 3):
                continue
            out.append((pi, s))
    return out


def swap_entity(item) -> Optional[str]:
    """A deterministic distractor for ``item``: another entity from its knowledge, not the right answer.

    Candidates are the entities (capitalised names, quoted titles, dates, numbers) of the passage that
    contains the right answer (all passages when none does) whose normalised text neither contains nor is
    contained in the right answer. Candidates of the right answer's kind (number/date vs name) are preferred.
    The pick is ``candidates[sha1(question) % len(candidates)]`` in reading order. None when there is none.
    """
    right = item.right_answer or ""
    rn = T.normalize(right)
    if not rn:
        return None
    rset = set(rn.split())
    passages = [p for p in item.knowledge if f" {rn} " in " " + T.normalize(p) + " "] or list(item.knowledge)
    right_is_num = bool(T.numbers(right))
    seen, cands = set(), []
    for p in passages:
        for e in T.entities(p):
            n = e.norm
            if not n or n in seen or n in rn or rn in n or (set(n.split()) <= rset):
                continue
            if n in ("yes", "no"):
                continue
            seen.add(n)
            cands.append((e.kind in ("number", "date"), e.text))
    if not cands:
        return None
    same = [t for is_num, t in cands if is_num == right_is_num]
    pool = same or [t for _, t in cands]
    h = int(hashlib.sha1(item.question.encode("utf-8")).hexdigest()[:8], 16)
    return pool[h % len(pool)]


def build_response(item, n_facts: int = 3) -> Optional[LongResponse]:
    """One long answer for ``item`` (None when its passages give no usable sentence)."""
    rng = _rng(item)
    sents = _evidence_sentences(item)
    if not sents or not (item.right_answer or "").strip():
        return None
    picks = rng.sample(sents, min(n_facts, len(sents)))
    parts: list[tuple[str, str, str, Optional[tuple[str, str]]]] = []  # (text, label, kind, swap)
    for pi, s in picks:
        swapped = rng.random() < 0.5
        hedged = rng.random() < 0.35
        sw = swap_one(item, pi, s, rng) if swapped else None
        if sw is not None:
            text, label, kind, swap = sw[0], "Wrong", "swapped", (sw[1], sw[2])
        else:
            text, label, kind, swap = s, "Correct", "supported", None
        if hedged:
            text = _hedge(text, rng)
            label = "Hedged " + label.lower()
        parts.append((text, label, kind, swap))
    # the answer sentence
    right = item.right_answer.strip().rstrip(".")
    wrong = swap_entity(item)
    use_wrong = wrong is not None and rng.random() < 0.5
    x = wrong.strip().rstrip(".") if use_wrong else right
    hedged = rng.random() < 0.3
    ans = (rng.choice(("I think the answer is ", "The answer is probably ")) if hedged
           else rng.choice(("So the answer is ", "The answer is "))) + x + "."
    label = ("Wrong" if use_wrong else "Correct")
    if hedged:
        label = "Hedged " + label.lower()
    parts.append((ans, label, "answer", (right, x) if use_wrong else None))
    # filler: 0-2 sentences at random places
    for _ in range(rng.choice((0, 1, 1, 2))):
        parts.insert(rng.randrange(len(parts) + 1), (rng.choice(FILLERS), "Vague", "filler", None))
    response, statements = "", []
    for text, label, kind, swap in parts:
        if response:
            response += " "
        start = len(response)
        response += text
        body_end = len(response) - (1 if text.endswith((".", "!", "?")) else 0)
        statements.append(TrueStatement(response[start:body_end], start, body_end, label, kind, swap))
    return LongResponse(uid=getattr(item, "uid", ""), question=item.question, materials=list(item.knowledge),
                        gold=item.right_answer, response=response, statements=statements)


def build_longform(items: Sequence, n_facts: int = 3) -> list[LongResponse]:
    """One long answer per item that has usable passages (see the module docstring)."""
    out = []
    for it in items:
        r = build_response(it, n_facts=n_facts)
        if r is not None:
            out.append(r)
    return out


# ----------------------------------------------------------------------------- metrics (pure)

def tokens(text: str) -> list[tuple[int, int]]:
    """(start, end) of each word / punctuation token of ``text``."""
    return [(m.start(), m.end()) for m in _TOKEN_RE.finditer(text)]


def predicted_label(st: TrueStatement, res) -> tuple[str, list]:
    """The verifier's label for true statement ``st`` (pooled as in the module docstring) and the predicted
    statements overlapping it."""
    over = []
    for p in res.statements():
        ov = min(p.end, st.end) - max(p.start, st.start)
        if ov > 0:
            over.append((p, ov))
    if not over:
        return "Vague", []
    for cls in (BAD, GOOD):
        chars: dict[str, int] = {}
        for p, ov in over:
            if p.label in cls:
                chars[p.label] = chars.get(p.label, 0) + ov
        if chars:
            return max(chars.items(), key=lambda kv: (kv[1], kv[0]))[0], [p for p, _ in over]
    return "Vague", [p for p, _ in over]


def span_scores(st: TrueStatement, preds: list) -> tuple[float, float]:
    """(cover, IoU) of true statement ``st`` against the predicted statements ``preds`` overlapping it."""
    n = st.end - st.start
    if n <= 0:
        return 1.0, 1.0
    if not preds:
        return 0.0, 0.0
    lo = min(min(p.start for p in preds), st.start)
    hi = max(max(p.end for p in preds), st.end)
    cov = bytearray(hi - lo)
    for p in preds:
        cov[p.start - lo:p.end - lo] = b"\x01" * (p.end - p.start)
    inter = sum(cov[st.start - lo:st.end - lo])
    union = sum(cov) + (n - inter)
    return inter / n, inter / union if union else 0.0


def gold_result(resp: LongResponse):
    """The true statements as a VerifyResult (one sentence per statement), for the reward service's signs."""
    sents = []
    for st in resp.statements:
        s = Statement(text=st.text, start=st.start, end=st.end, label=st.label, informativeness=3)
        sents.append(Sentence(text=st.text, start=st.start, end=st.end, statements=[s]))
    return VerifyResult(sentences=sents, backend="gold", num_statements=len(sents))


def token_signs(res, response: str):
    """``(T,)`` int8 FSPO label signs of the regex tokens of ``response`` (the reward service's rule)."""
    import numpy as np

    # numpy: kept lazy, this module is on `rlfh --help`'s import path
    from reward_service.token_rewards import RewardSettings, compute_token_rewards
    off = np.asarray(tokens(response), dtype=np.int64).reshape(-1, 2)
    if off.shape[0] == 0:
        return np.zeros(0, dtype=np.int8)
    return np.asarray(compute_token_rewards(res, off, len(response), RewardSettings()).token_label_signs,
                      dtype=np.int8)


def sign_agreement(resp: LongResponse, res) -> tuple[int, int]:
    """(tokens whose predicted sign equals the true sign, tokens inside true statements)."""
    import numpy as np
    toks = tokens(resp.response)
    if not toks:
        return 0, 0
    pred = token_signs(res, resp.response)
    gold = token_signs(gold_result(resp), resp.response)
    inside = np.zeros(len(toks), dtype=bool)
    for i, (a, b) in enumerate(toks):
        inside[i] = any(a < st.end and b > st.start for st in resp.statements)
    return int(np.count_nonzero((pred == gold) & inside)), int(np.count_nonzero(inside))


class LongformScore:
    """Accumulates the long-form metrics over (true response, verifier result) pairs."""

    LABELS = LABELS     # the label set, in core.verify_schema's order (bench/verifier.py prints columns by it)

    def __init__(self, name: str):
        self.name = name
        self.note = ""
        self.n = 0
        self.right = 0
        self.sign_right = 0
        self.confusion: dict[tuple[str, str], int] = {}
        self.cover = 0.0
        self.iou = 0.0
        self.tok_agree = 0
        self.tok_total = 0
        self.seconds = 0.0
        self.n_responses = 0
        self.by_kind: dict[str, list[int]] = {}

    def add(self, resp: LongResponse, res) -> None:
        self.n_responses += 1
        for st in resp.statements:
            lab, preds = predicted_label(st, res)
            self.n += 1
            self.right += lab == st.label
            self.sign_right += _cls(lab) == _cls(st.label)
            self.confusion[(st.label, lab)] = self.confusion.get((st.label, lab), 0) + 1
            c, u = span_scores(st, preds)
            self.cover += c
            self.iou += u
            k = self.by_kind.setdefault(st.kind, [0, 0])
            k[0] += lab == st.label
            k[1] += 1
        a, t = sign_agreement(resp, res)
        self.tok_agree += a
        self.tok_total += t

    def metrics(self) -> dict:
        out: dict = {"row": self.name, "note": self.note}
        if not self.n:
            return out
        out.update(n_statements=self.n, n_responses=self.n_responses, accuracy=self.right / self.n,
                   sign_accuracy=self.sign_right / self.n, span_cover=self.cover / self.n,
                   span_iou=self.iou / self.n,
                   token_sign_agreement=self.tok_agree / self.tok_total if self.tok_total else 0.0,
                   by_kind={k: v[0] / v[1] for k, v in self.by_kind.items()})
        per = {}
        for lab in self.LABELS:
            tp = self.confusion.get((lab, lab), 0)
            pred = sum(v for (t, p), v in self.confusion.items() if p == lab)
            true = sum(v for (t, p), v in self.confusion.items() if t == lab)
            per[lab] = {"precision": tp / pred if pred else None, "recall": tp / true if true else None,
                        "support": true}
        out["per_label"] = per
        if self.n_responses:
            out["ms_per_response"] = 1000.0 * self.seconds / self.n_responses
        return out


def _cls(label: str) -> int:
    return 1 if label in GOOD else (-1 if label in BAD else 0)


def requests(responses: Sequence[LongResponse], use_gold: bool):
    return [VerifyRequest(question=r.question, response=r.response, materials=r.materials,
                          gold_answer=r.gold if use_gold else None) for r in responses]


def score_verifier(name: str, verifier, responses: Sequence[LongResponse], use_gold: bool, progress=None,
                   batch: int = 8) -> LongformScore:
    """Run ``verifier`` over the long answers and score it."""
    sc = LongformScore(name)
    reqs = requests(responses, use_gold)
    task = progress.add_task(name, total=len(reqs)) if progress is not None else None
    for i in range(0, len(reqs), batch):
        t0 = time.perf_counter()
        results = verifier.verify_many(reqs[i:i + batch])
        sc.seconds += time.perf_counter() - t0
        for resp, res in zip(responses[i:i + batch], results):
            sc.add(resp, res)
        if task is not None:
            progress.advance(task, len(results))
    return sc
