"""Judge prompts of the ``llm`` and ``self`` backends, and the strict parsers of their replies.

Two calls per response:

1. **extract** - the response's sentences (numbered, split by :mod:`verifier_service.text`) go in; a JSON
   object with the atomic statements of each sentence comes out;
2. **verify** - the statements, the retrieved evidence lines and the gold answer (when known) go in; a
   JSON object with, per statement, a label from the closed set, an informativeness score 1-5, a
   confidence and the evidence ids used comes out.

Replies are parsed strictly: one JSON object (a Markdown code fence around it is tolerated), the expected
keys and types, labels exactly from :data:`~core.verify_schema.LABELS`. Anything else raises
:class:`JudgeFormatError`, which the backend treats like a failed call (retry, then fallback).

Changing a prompt changes verdicts: bump :data:`PROMPT_VERSION` (it is part of the cache identity).
"""
from __future__ import annotations

import json
import re
from typing import Optional

from core.verify_schema import LABELS

PROMPT_VERSION = "judge-v1"

EXTRACT_SYSTEM = (
    "You split answers into atomic facts for a fact checker. You reply with one JSON object and nothing else."
)

EXTRACT_TEMPLATE = """Question: {question}

Answer, one numbered sentence per line:
{sentences}

Rewrite every sentence as a list of atomic statements. An atomic statement states exactly one fact, keeps
the sentence's own words where possible, and can be understood without the other statements (replace
"he"/"it" by the name it refers to). A sentence that only refuses or greets has no statements.

Reply with one JSON object and nothing else, in this form:
{{"sentences": [{{"id": 1, "statements": ["first fact of sentence 1", "second fact of sentence 1"]}},
{{"id": 2, "statements": ["fact of sentence 2"]}}]}}"""

VERIFY_SYSTEM = (
    "You are a strict fact checker. You judge each statement only by the evidence and the reference "
    "answer you are given. You reply with one JSON object and nothing else."
)

VERIFY_TEMPLATE = """Question: {question}
Reference answer: {gold}

Evidence:
{evidence}

Statements to check:
{statements}

For every statement give:
- "label", exactly one of:
  "Correct" - the evidence or the reference answer supports it;
  "Wrong" - the evidence or the reference answer contradicts it, or it states a name, date or number
            that they do not support;
  "Hedged correct" / "Hedged wrong" - as Correct / Wrong, for a statement that itself signals
            uncertainty ("I think", "probably", "might", "possibly");
  "Vague" - it has no checkable content.
- "informativeness", an integer: 1 = says nothing or only repeats the question, 2 = off-topic detail,
  3 = related background, 4 = specific relevant fact, 5 = the specific answer to the question.
- "confidence", a number from 0 to 1.
- "evidence", the ids of the evidence lines you used, e.g. ["E1"].

Reply with one JSON object and nothing else, in this form:
{{"results": [{{"id": "S1", "label": "Correct", "informativeness": 5, "confidence": 0.9, "evidence": ["E1"]}}]}}"""


class JudgeFormatError(ValueError):
    """A judge reply that is not the JSON object the prompt asks for."""


def extract_messages(question: str, sentences: list[str]) -> list[dict]:
    numbered = "\n".join(f"[{i + 1}] {s}" for i, s in enumerate(sentences))
    return [{"role": "system", "content": EXTRACT_SYSTEM},
            {"role": "user", "content": EXTRACT_TEMPLATE.format(question=question.strip(), sentences=numbered)}]


def verify_messages(question: str, statements: list[str], evidence: list[str], gold: Optional[str]) -> list[dict]:
    ev = "\n".join(f"[E{i + 1}] {e}" for i, e in enumerate(evidence)) or "(no evidence given)"
    st = "\n".join(f"[S{i + 1}] {s}" for i, s in enumerate(statements))
    return [{"role": "system", "content": VERIFY_SYSTEM},
            {"role": "user", "content": VERIFY_TEMPLATE.format(
                question=question.strip(), gold=(gold or "(not given)").strip(), evidence=ev, statements=st)}]


_FENCE_RE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)


def parse_json_object(reply: str) -> dict:
    """The reply as one JSON object: whitespace and a Markdown code fence around it are the only slack."""
    if not isinstance(reply, str) or not reply.strip():
        raise JudgeFormatError("empty reply")
    text = reply.strip()
    m = _FENCE_RE.match(text)
    if m:
        text = m.group(1)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise JudgeFormatError(f"not valid JSON ({e.msg} at char {e.pos}): {reply[:120]!r}") from None
    if not isinstance(obj, dict):
        raise JudgeFormatError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def parse_extract(reply: str, n_sentences: int) -> dict[int, list[str]]:
    """{sentence index (0-based): [statement text]} from an extract reply. Raises JudgeFormatError."""
    obj = parse_json_object(reply)
    sents = obj.get("sentences")
    if not isinstance(sents, list):
        raise JudgeFormatError('missing list "sentences"')
    out: dict[int, list[str]] = {}
    for item in sents:
        if not isinstance(item, dict):
            raise JudgeFormatError("each sentence entry must be an object")
        sid, sts = item.get("id"), item.get("statements")
        if isinstance(sid, bool) or not isinstance(sid, int) or not 1 <= sid <= n_sentences:
            raise JudgeFormatError(f"sentence id {sid!r} is not an integer in 1..{n_sentences}")
        if not isinstance(sts, list) or not all(isinstance(s, str) for s in sts):
            raise JudgeFormatError(f'sentence {sid}: "statements" must be a list of strings')
        out[sid - 1] = [s.strip() for s in sts if s.strip()]
    return out


def parse_verify(reply: str, n_statements: int, n_evidence: int) -> dict[int, dict]:
    """{statement index (0-based): {label, informativeness, confidence, evidence: [0-based ids]}}.

    Raises JudgeFormatError on any malformed entry (a label outside the closed set included).
    """
    obj = parse_json_object(reply)
    results = obj.get("results")
    if not isinstance(results, list):
        raise JudgeFormatError('missing list "results"')
    out: dict[int, dict] = {}
    for item in results:
        if not isinstance(item, dict):
            raise JudgeFormatError("each result must be an object")
        sid = item.get("id")
        m = re.fullmatch(r"S?(\d+)", str(sid).strip()) if isinstance(sid, (str, int)) and not isinstance(
            sid, bool) else None
        if not m or not 1 <= int(m.group(1)) <= n_statements:
            raise JudgeFormatError(f"result id {sid!r} is not one of S1..S{n_statements}")
        label = item.get("label")
        if label not in LABELS:
            raise JudgeFormatError(f"label {label!r} is not one of {list(LABELS)}")
        info = item.get("informativeness")
        if isinstance(info, bool) or not isinstance(info, int) or not 1 <= info <= 5:
            raise JudgeFormatError(f"informativeness {info!r} is not an integer 1..5")
        conf = item.get("confidence", 0.5)
        if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0.0 <= float(conf) <= 1.0:
            raise JudgeFormatError(f"confidence {conf!r} is not a number in [0, 1]")
        ev_ids = item.get("evidence", [])
        if not isinstance(ev_ids, list):
            raise JudgeFormatError('"evidence" must be a list of ids like "E1"')
        ev = []
        for e in ev_ids:
            em = re.fullmatch(r"E?(\d+)", str(e).strip())
            if em and 1 <= int(em.group(1)) <= n_evidence:
                ev.append(int(em.group(1)) - 1)
        out[int(m.group(1)) - 1] = {"label": label, "informativeness": info, "confidence": float(conf),
                                    "evidence": ev}
    return out
