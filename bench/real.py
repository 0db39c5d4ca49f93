"""`rlfh bench verifier --real`: the verifier on answers the policy really wrote, labelled by hand.

Data: ``bench/data/real_answers.jsonl`` (built from ``bench/data/real_answers_annotations.txt`` by
:func:`build_records`; the annotation rules are in ``bench/data/REAL_ANSWERS_GUIDE.md``). One record per
answer: question, passages, gold answer, the answer text, the gold grader's grade when it was annotated (the
bench grades it again with the current grader), and its atomic facts,
each with a character span, one of the five labels and a flag for the fact that carries the answer.

A third of the questions is held out from any tuning: :func:`split_of` (a stable hash of the question,
fixed before any tuning). Every answer to one question is in the same part.

Metrics of one verifier row over a set of answers (all pure functions of (facts, VerifyResult)):

- **decomposition**: a predicted statement *matches* a true fact when the intersection over union of their
  character spans is at least :data:`MATCH_IOU` (spans compared after trimming non-alphanumeric characters at
  both edges, so quotes, brackets and commas do not count); matching is one-to-one, greedy by IoU.
  Precision = matched / predicted statements, recall = matched / true facts, F1 of the two.
- **label accuracy**: each true fact takes the label of the predicted statement that overlaps it in most
  characters (``Vague`` when none does: it earns no truth reward); accuracy on the five labels, and per true
  label (the share of its facts labelled so: a recall).
- **answer fact vs gold grader**: of the answers the gold grader (as it grades now) accepts, the share whose
  answer-carrying fact gets a good label (``Correct`` / ``Hedged correct``); of those it rejects that have an
  answer fact, the share whose answer fact gets a bad one.
- **token sign agreement**: the answer is cut into word / punctuation tokens; the reward service's own
  :func:`reward_service.token_rewards.compute_token_rewards` gives each token's label sign (+1 good,
  -1 bad, 0 Vague or outside every statement) for the verifier's result and for the true facts; the share of
  the tokens inside true facts whose signs agree.
- **ms per answer**: verifier wall time per answer (on a shared machine it varies with load).
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from bench.longform import token_signs, tokens
from core.config import ConfigError, RLFHConfig
from core.grader import grade_answer
from core.verify_schema import BAD_LABELS, GOOD_LABELS, LABELS, Sentence, Statement, VerifyRequest, VerifyResult
from verifier_service.core import Verifier

DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "real_answers.jsonl"
#: the grounded recipe's held-out answers (base and trained, with the passage), labelled the same way
GROUNDED_PATH = Path(__file__).resolve().parent / "data" / "grounded_answers.jsonl"
LABEL_CODES = {"C": "Correct", "HC": "Hedged correct", "V": "Vague", "HW": "Hedged wrong", "W": "Wrong"}
MATCH_IOU = 0.5
PARTS = ("tune", "heldout")
# The salt and modulus were fixed before any tuning; changing them would leak tuned-on answers into the
# held-out part.
_SPLIT_SALT = "real-answers/"
_GRADES = ("correct", "incorrect", "not_attempted")


class RealDataError(ValueError):
    """The labelled set is malformed (the message names the record and the field)."""


@dataclass(frozen=True)
class Fact:
    """One atomic fact: ``answer[start:end] == text``."""

    start: int
    end: int
    text: str
    label: str          # one of core.verify_schema.LABELS
    answer: bool        # this fact carries the answer to the question


@dataclass(frozen=True)
class RealAnswer:
    id: str
    model: str          # which policy wrote it (warmstart | trained | base)
    mode: str           # closed | evidence
    question: str
    gold: str
    knowledge: tuple
    answer: str
    grade: str          # the gold grader's when the answer was annotated: correct | incorrect | not_attempted
    facts: tuple        # tuple[Fact, ...] in reading order

    @property
    def part(self) -> str:
        return split_of(self.question)

    @property
    def current_grade(self) -> str:
        """The gold grader's verdict now (``core.grader``, its current GRADER_VERSION): what the bench
        scores against, so a grader fix moves the answer-fact columns instead of leaving them on a stale grade
        (grader v3 reads 5 of the 206 answers otherwise than the recorded ``grade``)."""
        return grade_answer(self.answer, self.gold, self.question).grade


def split_of(question: str) -> str:
    """``"heldout"`` for a stable third of the questions (sha1 of salt + question, mod 3 == 0), else ``"tune"``."""
    h = int(hashlib.sha1((_SPLIT_SALT + question).encode("utf-8")).hexdigest()[:8], 16)
    return "heldout" if h % 3 == 0 else "tune"


# ----------------------------------------------------------------------------- building the labelled set

def parse_annotations(text: str) -> dict[str, list[tuple[str, bool, str]]]:
    """``{answer id: [(label, is_answer, pattern), ...]}`` from the annotation file's text.

    Block format: a line ``@<id>``, then one line per fact ``[*]<CODE> <pattern>`` (CODE in
    :data:`LABEL_CODES`; ``*`` marks the answer-carrying fact). Lines starting with ``#`` are comments.
    """
    out: dict[str, list[tuple[str, bool, str]]] = {}
    cur: Optional[str] = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("@"):
            cur = line[1:].strip()
            if cur in out:
                raise RealDataError(f"annotations line {n}: answer id {cur!r} annotated twice")
            out[cur] = []
            continue
        m = re.match(r"^(\*?)(HC|HW|C|V|W)\s+(.+)$", line)
        if cur is None or not m:
            raise RealDataError(f"annotations line {n}: expected '@<id>' or '[*]<C|HC|V|HW|W> <fact text>', "
                                f"got {line!r}")
        out[cur].append((LABEL_CODES[m.group(2)], m.group(1) == "*", m.group(3).strip()))
    return out


def locate(answer: str, pattern: str, cursor: int) -> tuple[int, int]:
    """Span of ``pattern`` in ``answer`` at or after ``cursor``: ``"A ... B"`` is A through the next B."""
    head, sep, tail = pattern.partition(" ... ")
    s = answer.find(head, cursor)
    if s < 0:
        raise RealDataError(f"fact text {head!r} not found in the answer after offset {cursor}: {answer!r}")
    e = s + len(head)
    if sep:
        t = answer.find(tail, e)
        if t < 0:
            raise RealDataError(f"fact text end {tail!r} not found after {head!r} in the answer: {answer!r}")
        e = t + len(tail)
    return s, e


def build_records(pool: Sequence[dict], annotations: dict[str, list[tuple[str, bool, str]]]) -> list[dict]:
    """The labelled records (JSON-able dicts) of the annotated answers of ``pool``, in pool order."""
    out = []
    for rec in pool:
        ann = annotations.get(rec["id"])
        if ann is None:
            continue
        cursor, facts = 0, []
        for label, is_answer, pattern in ann:
            try:
                s, e = locate(rec["answer"], pattern, cursor)
            except RealDataError as err:
                raise RealDataError(f"answer {rec['id']}: {err}") from None
            facts.append({"start": s, "end": e, "text": rec["answer"][s:e], "label": label, "answer": is_answer})
            cursor = e
        out.append({**{k: rec[k] for k in ("id", "model", "mode", "question", "gold", "knowledge", "answer",
                                           "grade")}, "part": split_of(rec["question"]), "facts": facts})
    return out


def parse_record(obj: dict, where: str = "record") -> RealAnswer:
    """A :class:`RealAnswer` from one JSON object, or :class:`RealDataError` naming the bad field."""
    def need(key, typ):
        if key not in obj:
            raise RealDataError(f"{where}: missing field {key!r}")
        if not isinstance(obj[key], typ):
            raise RealDataError(f"{where}: field {key!r} must be {typ.__name__}, got {type(obj[key]).__name__}")
        return obj[key]
    answer = need("answer", str)
    grade = need("grade", str)
    if grade not in _GRADES:
        raise RealDataError(f"{where}: field 'grade' must be one of {_GRADES}, got {grade!r}")
    knowledge = need("knowledge", list)
    if not all(isinstance(k, str) for k in knowledge):
        raise RealDataError(f"{where}: field 'knowledge' must be a list of strings")
    facts = []
    prev_end = 0
    for i, f in enumerate(need("facts", list)):
        fw = f"{where}: facts[{i}]"
        if not isinstance(f, dict):
            raise RealDataError(f"{fw} must be an object")
        s, e = f.get("start"), f.get("end")
        if not isinstance(s, int) or not isinstance(e, int) or not (prev_end <= s < e <= len(answer)):
            raise RealDataError(f"{fw}: 'start'/'end' must be increasing, non-overlapping offsets inside the "
                                f"answer (0..{len(answer)}), got {s!r}..{e!r}")
        if f.get("label") not in LABELS:
            raise RealDataError(f"{fw}: 'label' must be one of {LABELS}, got {f.get('label')!r}")
        if answer[s:e] != f.get("text"):
            raise RealDataError(f"{fw}: 'text' {f.get('text')!r} is not answer[{s}:{e}] = {answer[s:e]!r}")
        facts.append(Fact(s, e, answer[s:e], f["label"], bool(f.get("answer", False))))
        prev_end = e
    if sum(f.answer for f in facts) > 1:
        raise RealDataError(f"{where}: more than one fact has 'answer': true")
    return RealAnswer(id=need("id", str), model=need("model", str), mode=need("mode", str),
                      question=need("question", str), gold=need("gold", str), knowledge=tuple(knowledge),
                      answer=answer, grade=grade, facts=tuple(facts))


def jsonl_objects(path: "str | Path") -> list[tuple[str, dict]]:
    """``(where, object)`` for each non-empty line of a JSONL file (``where``: ``"PATH:LINE"``, for the caller's
    errors); a line that is not a JSON object raises :class:`RealDataError` naming it."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise RealDataError(f"{path}:{n}: not JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise RealDataError(f"{path}:{n}: each line must be a JSON object")
            out.append((f"{path}:{n}", obj))
    return out


def load_real(path: "str | Path" = DEFAULT_PATH) -> list[RealAnswer]:
    """The labelled answers of a JSONL file (clear errors naming the line and field)."""
    return [parse_record(obj, where) for where, obj in jsonl_objects(path)]


# ----------------------------------------------------------------------------- metrics (pure)

def core_span(text: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` without non-alphanumeric characters at either edge (quotes, brackets, commas)."""
    while start < end and not text[start].isalnum():
        start += 1
    while end > start and not text[end - 1].isalnum():
        end -= 1
    return start, end


def span_iou(a: tuple[int, int], b: tuple[int, int]) -> float:
    """Intersection over union of two half-open character spans."""
    inter = max(0, min(a[1], b[1]) - max(a[0], b[0]))
    union = (a[1] - a[0]) + (b[1] - b[0]) - inter
    return inter / union if union > 0 else 0.0


def match_facts(text: str, facts: Sequence[Fact], preds: Sequence) -> list[tuple[int, int, float]]:
    """One-to-one ``(fact index, predicted statement index, IoU)`` pairs with IoU >= :data:`MATCH_IOU`, greedy
    by IoU. ``preds``: objects with ``start`` / ``end`` (the verifier's statements)."""
    fs = [core_span(text, f.start, f.end) for f in facts]
    ps = [core_span(text, p.start, p.end) for p in preds]
    cands = sorted(((span_iou(a, b), i, j) for i, a in enumerate(fs) for j, b in enumerate(ps)),
                   key=lambda t: (-t[0], t[1], t[2]))
    used_f, used_p, out = set(), set(), []
    for iou, i, j in cands:
        if iou < MATCH_IOU:
            break
        if i in used_f or j in used_p:
            continue
        used_f.add(i)
        used_p.add(j)
        out.append((i, j, iou))
    return sorted(out)


def fact_label(fact: Fact, preds: Sequence) -> str:
    """The label the verifier gives ``fact``: that of the predicted statement overlapping it in most characters
    (the earlier one on a tie); ``Vague`` when none overlaps."""
    best, label = 0, "Vague"
    for p in preds:
        ov = min(p.end, fact.end) - max(p.start, fact.start)
        if ov > best:
            best, label = ov, p.label
    return label


def facts_result(ans: RealAnswer):
    """The true facts as a VerifyResult (one sentence per fact), for the reward service's token signs."""
    sents = [Sentence(text=f.text, start=f.start, end=f.end,
                      statements=[Statement(text=f.text, start=f.start, end=f.end, label=f.label,
                                            informativeness=3)]) for f in ans.facts]
    return VerifyResult(sentences=sents, backend="annotation", num_statements=len(sents))


def token_sign_agreement(ans: RealAnswer, result) -> tuple[int, int]:
    """(tokens inside true facts whose predicted label sign equals the true one, tokens inside true facts)."""
    import numpy as np

    toks = tokens(ans.answer)
    if not toks or not ans.facts:
        return 0, 0
    pred = token_signs(result, ans.answer)
    gold = token_signs(facts_result(ans), ans.answer)
    inside = np.array([any(a < f.end and b > f.start for f in ans.facts) for a, b in toks], dtype=bool)
    return int(np.count_nonzero((pred == gold) & inside)), int(np.count_nonzero(inside))


class RealScore:
    """Accumulates the ``--real`` metrics of one verifier row over (labelled answer, VerifyResult) pairs."""

    def __init__(self, name: str):
        self.name = name
        self.note = ""
        self.n_answers = 0
        self.n_facts = 0
        self.n_pred = 0
        self.n_matched = 0
        self.label_right = 0
        self.per_label: dict[str, list[int]] = {lab: [0, 0] for lab in LABELS}   # label -> [right, support]
        self.accepted = [0, 0]      # [answer fact good, answers the grader accepts with an answer fact]
        self.rejected = [0, 0]      # [answer fact bad, rejected answers with an answer fact]
        self.answer_fact = [0, 0]   # [answer fact label == annotated label, answer facts]
        self.tok = [0, 0]
        self.seconds = 0.0

    def add(self, ans: RealAnswer, result) -> None:
        preds = result.statements()
        self.n_answers += 1
        self.n_facts += len(ans.facts)
        self.n_pred += len(preds)
        self.n_matched += len(match_facts(ans.answer, ans.facts, preds))
        grade = ans.current_grade
        for f in ans.facts:
            lab = fact_label(f, preds)
            ok = lab == f.label
            self.label_right += ok
            self.per_label[f.label][0] += ok
            self.per_label[f.label][1] += 1
            if f.answer:
                self.answer_fact[0] += ok
                self.answer_fact[1] += 1
                if grade == "correct":
                    self.accepted[0] += lab in GOOD_LABELS
                    self.accepted[1] += 1
                else:
                    self.rejected[0] += lab in BAD_LABELS
                    self.rejected[1] += 1
        a, t = token_sign_agreement(ans, result)
        self.tok[0] += a
        self.tok[1] += t

    def metrics(self) -> dict:
        def ratio(a, b):
            return a / b if b else None
        p, r = ratio(self.n_matched, self.n_pred), ratio(self.n_matched, self.n_facts)
        f1 = 2 * p * r / (p + r) if p and r else (0.0 if p is not None and r is not None else None)
        return {
            "row": self.name, "note": self.note, "answers": self.n_answers, "facts": self.n_facts,
            "statements": self.n_pred, "span_precision": p, "span_recall": r, "span_f1": f1,
            "label_accuracy": ratio(self.label_right, self.n_facts),
            "per_label": {lab: {"accuracy": ratio(*v), "support": v[1]} for lab, v in self.per_label.items()},
            "answer_fact_good_when_accepted": ratio(*self.accepted), "accepted_with_answer_fact": self.accepted[1],
            "answer_fact_bad_when_rejected": ratio(*self.rejected), "rejected_with_answer_fact": self.rejected[1],
            "answer_fact_label_accuracy": ratio(*self.answer_fact),
            "token_sign_agreement": ratio(*self.tok),
            "ms_per_answer": 1000.0 * self.seconds / self.n_answers if self.n_answers else None,
        }


def score_verifier(name: str, verifier, answers: Sequence[RealAnswer], use_gold: bool,
                   batch: int = 8) -> RealScore:
    """Run ``verifier`` (anything with ``verify_many``) over ``answers`` and score it."""
    sc = RealScore(name)
    reqs = [VerifyRequest(question=a.question, response=a.answer, materials=list(a.knowledge),
                          gold_answer=a.gold if use_gold else None) for a in answers]
    for i in range(0, len(reqs), batch):
        t0 = time.perf_counter()
        results = verifier.verify_many(reqs[i:i + batch])
        sc.seconds += time.perf_counter() - t0
        for ans, res in zip(answers[i:i + batch], results):
            sc.add(ans, res)
    return sc


# ----------------------------------------------------------------------------- statement figures per model

def statement_figures(answers: Sequence[RealAnswer], labels: Optional[Sequence[Sequence[str]]] = None) -> dict:
    """The gate's statement figures of each model's answers: ``{model: {"answers", "statements_per_answer",
    "supported_per_answer", "fact_precision", "answer_fact_good"}}``, from the hand-labelled facts, or, given
    ``labels`` (one list of statement labels per answer, e.g. a verifier's), from those. As
    ``evaluation.runner.summarise`` counts them: supported = Correct + Hedged correct, precision = supported /
    statements (Vague counts against it). ``answer_fact_good`` (hand labels only): the share of answers whose
    answer-carrying fact is labelled good (an answer without one counts as not good)."""
    out: dict[str, dict] = {}
    for i, a in enumerate(answers):
        labs = [f.label for f in a.facts] if labels is None else list(labels[i])
        m = out.setdefault(a.model, {"answers": 0, "statements": 0, "supported": 0, "answer_good": 0})
        m["answers"] += 1
        m["statements"] += len(labs)
        m["supported"] += sum(lab in GOOD_LABELS for lab in labs)
        m["answer_good"] += any(f.answer and f.label in GOOD_LABELS for f in a.facts)
    return {model: {"answers": m["answers"], "statements_per_answer": m["statements"] / m["answers"],
                    "supported_per_answer": m["supported"] / m["answers"],
                    "fact_precision": m["supported"] / m["statements"] if m["statements"] else None,
                    "answer_fact_good": m["answer_good"] / m["answers"] if labels is None else None}
            for model, m in out.items()}


def run_by_model(path: "str | Path", cfg=None, batch: int = 8) -> list[dict]:
    """Rows of the statement figures per model: the hand labels, and the evidence verifier (with the gold answer,
    as ``rlfh eval`` runs it) on the same answers. Each row: ``{"judge", "model", **statement_figures}``."""
    cfg = cfg or RLFHConfig.load()
    answers = load_real(path)
    ver = Verifier(cfg, backend="evidence")
    labels: list[list[str]] = []
    for i in range(0, len(answers), batch):
        reqs = [VerifyRequest(question=a.question, response=a.answer, materials=list(a.knowledge), gold_answer=a.gold)
                for a in answers[i:i + batch]]
        labels += [[s.label for s in r.statements()] for r in ver.verify_many(reqs)]
    rows = [{"judge": "hand labels", "model": k, **v} for k, v in statement_figures(answers).items()]
    rows += [{"judge": "verifier (evidence, with gold)", "model": k, **v}
             for k, v in statement_figures(answers, labels).items()]
    return rows


def print_by_model_table(rows: list[dict], path: "str | Path", file=None) -> None:
    from rich.console import Console
    from rich.table import Table

    def pct(v):
        return "-" if v is None else f"{100 * v:.1f}%"
    t = Table(title=f"Statement figures per model ({Path(path).name}): hand labels vs the verifier",
              caption="supported = Correct + Hedged correct; fact precision = supported / statements (Vague counts "
                      "against it), as rlfh eval counts them; answer fact good: the hand-labelled answer-carrying "
                      "fact is Correct / Hedged correct.")
    for c in ("judge", "model", "answers", "statements per answer", "supported per answer", "fact precision",
              "answer fact good"):
        t.add_column(c, justify="left" if c in ("judge", "model") else "right")
    for m in rows:
        t.add_row(m["judge"], m["model"], str(m["answers"]), f"{m['statements_per_answer']:.2f}",
                  f"{m['supported_per_answer']:.2f}", pct(m["fact_precision"]), pct(m["answer_fact_good"]))
    Console(file=file, width=max(140, Console(file=file).width)).print(t)


# ----------------------------------------------------------------------------- the bench

def run_real(path: "str | Path" = DEFAULT_PATH, parts: Sequence[str] = PARTS, cfg=None,
             with_llm: bool = True, llm_limit: Optional[int] = None, with_judge: bool = True) -> list[dict]:
    """Metrics rows: every backend (evidence; judge, the trained claim judge of CLAIM_JUDGE_WEIGHTS; llm when
    MODEL_URL is set), without and with the gold answer, on
    each part of the labelled set. Each row dict has ``part``, ``backend`` and ``gold``."""
    cfg = cfg or RLFHConfig.load()
    answers = load_real(path)
    backends = [("evidence", Verifier(cfg, backend="evidence"), None)]
    judge_missing = None
    if with_judge:
        try:
            backends.append(("judge", Verifier(cfg, backend="judge"), None))
        except ConfigError as e:
            judge_missing = f"not built ({e})"
    if with_llm and cfg.model_url:
        backends.append(("llm", Verifier(cfg, backend="llm"), llm_limit))
    for _, ver, _ in backends:
        # one request first, so that ms/answer does not carry the backend's start-up (imports, tokenizers)
        ver.verify(VerifyRequest(question="Who wrote it?", response="Jane wrote it.", materials=["Jane wrote it."]))
    rows = []
    for part in parts:
        subset = [a for a in answers if a.part == part]
        for bname, ver, limit in backends:
            sub = subset[:limit] if limit else subset
            for gold in (False, True):
                m = score_verifier(f"{bname}, {'with' if gold else 'no'} gold", ver, sub, gold).metrics()
                m.update(part=part, backend=bname, gold=gold)
                if limit and limit < len(subset):
                    m["note"] = f"first {limit} answers"
                rows.append(m)
        if judge_missing:
            for gold in (False, True):
                rows.append({"row": f"judge, {'with' if gold else 'no'} gold", "part": part, "backend": "judge",
                             "gold": gold, "note": "not built: `rlfh judge train`, then CLAIM_JUDGE_WEIGHTS=<folder>"})
        if with_llm and not cfg.model_url:
            for gold in (False, True):
                rows.append({"row": f"llm, {'with' if gold else 'no'} gold", "part": part, "backend": "llm",
                             "gold": gold, "note": "not configured (set MODEL_URL / --model-url)"})
    return rows


def print_real_table(rows: list[dict], path: "str | Path" = DEFAULT_PATH, file=None) -> None:
    from rich.console import Console
    from rich.table import Table

    def pct(v):
        return "-" if v is None else f"{100 * v:.1f}%"
    t = Table(title=f"Verifier on real policy answers ({Path(path).name})",
              caption=f"span P/R/F1: predicted statements vs hand-labelled facts, matched one-to-one at character "
                      f"IoU >= {MATCH_IOU}; label acc: each fact takes the label of the statement overlapping it "
                      "most (none: Vague); ans ok|accepted: answer fact Correct/Hedged correct where the gold grader "
                      "accepts the answer; ans bad|rejected: answer fact Wrong/Hedged wrong where it rejects it; "
                      "tok sign: per-token reward sign agrees (tokens inside facts).")
    for c in ("part", "row", "answers", "facts", "stmts", "span P", "span R", "span F1", "label acc") + tuple(
            f"{lab} acc" for lab in LABELS) + ("ans ok|accepted", "ans bad|rejected", "tok sign", "ms/answer"):
        t.add_column(c, justify="left" if c in ("part", "row") else "right")
    for m in rows:
        if "span_f1" not in m:
            t.add_row(m.get("part", ""), m["row"], m.get("note", ""), *[""] * (len(t.columns) - 3))
            continue
        name = m["row"] + (f" [{m['note']}]" if m.get("note") else "")
        pl = m["per_label"]
        t.add_row(m["part"], name, str(m["answers"]), str(m["facts"]), str(m["statements"]), pct(m["span_precision"]),
                  pct(m["span_recall"]), pct(m["span_f1"]), pct(m["label_accuracy"]),
                  *[f"{pct(pl[lab]['accuracy'])} ({pl[lab]['support']})" for lab in LABELS],
                  f"{pct(m['answer_fact_good_when_accepted'])} ({m['accepted_with_answer_fact']})",
                  f"{pct(m['answer_fact_bad_when_rejected'])} ({m['rejected_with_answer_fact']})",
                  pct(m["token_sign_agreement"]), f"{m['ms_per_answer']:.2f}" if m["ms_per_answer"] else "-")
    con = Console(file=file, width=max(220, Console(file=file).width))
    con.print(t)


def _build_main(argv: Optional[list[str]] = None) -> int:
    """``python -m bench.real POOL.json ANNOTATIONS.txt OUT.jsonl``: (re)build the labelled set."""
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 3:
        print("usage: python -m bench.real POOL.json ANNOTATIONS.txt OUT.jsonl", file=sys.stderr)
        return 2
    pool = json.load(open(args[0], encoding="utf-8"))
    ann = parse_annotations(open(args[1], encoding="utf-8").read())
    missing = set(ann) - {r["id"] for r in pool}
    if missing:
        raise RealDataError(f"annotated ids not in the pool: {sorted(missing)}")
    recs = build_records(pool, ann)
    with open(args[2], "w", encoding="utf-8") as fh:
        for r in recs:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {len(recs)} answers, {sum(len(r['facts']) for r in recs)} facts to {args[2]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(_build_main())
