"""Fuzzy alignment of rewritten statements (from an LLM judge) back to character spans of the response.

An LLM rewrites statements ("He was born in 1971" -> "Jonathan Stark was born in 1971"), so the text is
not a substring of the response. :func:`align_statement` finds the window of response tokens that best
matches the statement's tokens (weighted F1 over stemmed words, stop-words weigh less), searching the
sentence the judge named first and the other sentences only when that fails. Windows start at a
matching token and are at most ``len(statement) + 4`` tokens long, so the cost is
O(tokens x statement length): linear in the response for a bounded statement.

When no window reaches :data:`MIN_F1` (or shares no content word), the statement falls back to its
sentence's span with ``aligned=False`` (the caller counts it in ``num_unaligned``).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from verifier_service import text as T

MIN_F1 = 0.5
_TOKEN_RE = re.compile(r"[A-Za-z0-9\u00C0-\u024F]+(?:['\u2019][A-Za-z]+)?")


@dataclass
class Token:
    stem: str
    start: int
    end: int
    weight: float


def tokenize(text: str, start: int = 0, end: Optional[int] = None) -> list[Token]:
    """Tokens of ``text[start:end]`` with absolute offsets, stems and weights (content 1.0, stop-word 0.25)."""
    end = len(text) if end is None else end
    out = []
    for m in _TOKEN_RE.finditer(text, start, end):
        w = m.group(0).lower().replace("\u2019", "'")
        out.append(Token(T.stem(w), m.start(), m.end(), 0.25 if w in T.STOPWORDS else 1.0))
    return out


@dataclass
class Alignment:
    start: int
    end: int
    aligned: bool
    sentence: int
    f1: float


def _best_window(toks: list[Token], target: Counter, target_w: float, wmap: dict[str, float]) -> tuple[float, int, int]:
    best = (0.0, -1, -1)
    if not toks or target_w <= 0:
        return best
    max_len = int(sum(target.values())) + 4
    for i, t0 in enumerate(toks):
        if t0.stem not in target:
            continue
        used: Counter = Counter()
        matched = 0.0
        win_w = 0.0
        content_hit = False
        for j in range(i, min(len(toks), i + max_len)):
            t = toks[j]
            win_w += t.weight
            if used[t.stem] < target.get(t.stem, 0):
                used[t.stem] += 1
                matched += wmap[t.stem]
                content_hit = content_hit or wmap[t.stem] >= 1.0
            if toks[j].stem not in target:
                continue  # only end a window on a matching token
            if not content_hit:
                continue
            p = matched / win_w
            r = matched / target_w
            f1 = 2 * p * r / (p + r) if p + r else 0.0
            if f1 > best[0] + 1e-9:
                best = (f1, i, j)
    return best


def align_statement(statement: str, response: str, sentences: list[tuple[int, int]],
                    hint: Optional[int] = None, sent_tokens: Optional[list[list[Token]]] = None) -> Alignment:
    """Span of ``statement`` in ``response``.

    Args:
        sentences: (start, end) of each response sentence.
        hint: index of the sentence the judge attributed the statement to (searched first).
        sent_tokens: pre-tokenised sentences (pass them when aligning many statements of one response).
    """
    if not sentences:
        return Alignment(0, len(response), False, -1, 0.0)
    toks = tokenize(statement)
    target = Counter(t.stem for t in toks)
    wmap = {t.stem: t.weight for t in toks}
    target_w = sum(wmap[s] * c for s, c in target.items())
    if sent_tokens is None:
        sent_tokens = [tokenize(response, s, e) for s, e in sentences]
    order = list(range(len(sentences)))
    if hint is not None and 0 <= hint < len(sentences):
        order.remove(hint)
        order.insert(0, hint)
    best = (0.0, -1, -1, -1)
    for k, si in enumerate(order):
        f1, i, j = _best_window(sent_tokens[si], target, target_w, wmap)
        if f1 > best[0]:
            best = (f1, i, j, si)
        if k == 0 and best[0] >= 0.8:
            break  # good enough in the judge's own sentence
    f1, i, j, si = best
    if f1 >= MIN_F1 and si >= 0:
        st = sent_tokens[si]
        return Alignment(st[i].start, st[j].end, True, si, f1)
    fb = hint if hint is not None and 0 <= hint < len(sentences) else (si if si >= 0 else 0)
    s, e = sentences[fb]
    return Alignment(s, e, False, fb, f1)
