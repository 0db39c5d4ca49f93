"""Sentence splitting with exact character spans: the gold grader's answer sentence, the verifier's sentences
and the trainer's graded span all read this one rule (regex only: abbreviations and initials do not end a
sentence)."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class Span:
    start: int
    end: int
    text: str


ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st mt ft vs etc inc ltd co corp no gen gov sen rep rev col lt sgt capt cmdr adm
u.s u.k e.g i.e a.m p.m jan feb mar apr jun jul aug sep sept oct nov dec approx dept univ est fig al ca
""".split())

_SENT_END_RE = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s+|$)|\n+")
_NEXT_CHAR_RE = re.compile(r"\s*(\S)")


def split_sentences(text: str) -> list[Span]:
    """Split ``text`` into sentences with exact spans (whitespace trimmed, abbreviations and initials respected)."""
    spans: list[Span] = []
    start = 0
    n = len(text)
    for m in _SENT_END_RE.finditer(text):
        end = m.end()
        if m.group(0).startswith("\n"):
            end = m.start()
        else:
            # previous word before the period
            j = m.start()
            k = j
            while k > start and not text[k - 1].isspace():
                k -= 1
            prev = text[k:j].lower().strip("(\"'")
            if text[m.start()] == "." and (prev in ABBREVIATIONS or re.fullmatch(r"[a-z]", prev)
                                           or re.fullmatch(r"(?:[a-z]\.)+[a-z]?", prev)):
                nm = _NEXT_CHAR_RE.match(text, m.end())
                if not (prev == "no" and nm and not nm.group(1).isdigit()):
                    continue  # "No. 32" is an abbreviation, "The answer is no. Thanks" ends a sentence
            # next char must look like a sentence start (upper-case, digit, quote) or end of text
            # (found in place: copying the rest of the text at every candidate end was quadratic)
            nm = _NEXT_CHAR_RE.match(text, m.end())
            nxt = nm.group(1) if nm else ""
            if nxt and not (nxt.isupper() or nxt.isdigit() or nxt in "\"'\u201c\u2018(["):
                continue
        _push(text, start, end, spans)
        start = m.end()
    if start < n:
        _push(text, start, n, spans)
    return spans


def _push(text: str, s: int, e: int, out: list[Span]) -> None:
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    if e > s and any(ch.isalnum() for ch in text[s:e]):
        out.append(Span(s, e, text[s:e]))
