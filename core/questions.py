"""What kind of question is this, from its text alone: ``yes_no``, ``choice`` ("..., A or B?") or ``open``.

Below evaluation and the data loaders, which both use it: the data loader balances question types in the training
prompts (TYPE_BALANCE), the graders read a choice question's two options, and the selectivity tables report by
type. Pure functions (re only).
"""
from __future__ import annotations

import re
from typing import Optional

QUESTION_TYPES = ("yes_no", "choice", "open")
_AUX = frozenset({"is", "are", "was", "were", "do", "does", "did", "has", "have", "had", "can", "could", "will",
                  "would", "should"})


def question_type(question: str) -> str:
    """``choice`` ("..., A or B?"), ``yes_no`` (starts with an auxiliary verb) or ``open``; text only.

    On HaluEval-QA this agrees with the gold answers' form on about 99% of questions (gold yes/no for
    ``yes_no``), and it never looks at the gold answer, so a model could learn the same rule.
    """
    q = (question or "").strip()
    if not q:
        return "open"
    if " or " in q and choice_options(q):
        return "choice"
    first = re.sub(r"^\W+", "", q.split()[0]).lower()
    return "yes_no" if first in _AUX else "open"


_CHOICE_CAPS = re.compile(r"((?:[A-Z0-9][\w'.&-]*|of|the|and|de|la|von|van|du|da)(?:\s+(?:[A-Z0-9][\w'.&-]*|of|"
                          r"the|and|de|la|von|van|du|da))*)\s*$")


_CHOICE_HEAD = re.compile(r"^((?:the\s+|The\s+)?[A-Z0-9][\w'.&-]*(?:\s+(?:[A-Z0-9][\w'.&-]*|of|the|and|de|la|von|van|"
                          r"den|der|du|da|y)(?=\s|$))*)")


def choice_options(question: str) -> Optional[tuple[str, str]]:
    """The two options of a choice question ("Which ..., A or B?"), or None."""
    q = (question or "").strip()
    q = q[:q.rfind("?")] if "?" in q else q
    idx = q.rfind(" or ")
    if idx < 0:
        return None
    b = q[idx + 4:].strip(" ,\"'")
    before = q[:idx].rstrip(" ,")
    segments = [s.strip(" \"'") for s in before.split(",")]
    a = ""
    if len(segments) > 1:
        # the last comma segment that starts like a name (capital letter or digit)
        for seg in reversed(segments[1:]):
            if seg and (seg[0].isupper() or seg[0].isdigit()):
                a = seg
                break
    if not a:
        m = _CHOICE_CAPS.search(before)
        a = m.group(1).strip() if m else ""
        # drop a leading question word that happens to be capitalised
        a = re.sub(r"^(?:Which|Who|What|Where|When|Is|Are|Was|Were|Did|Do|Does|The)\s+", "", a).strip()
    # "Does A or B have more ...?": keep the name-like head of B
    m = _CHOICE_HEAD.match(b)
    if m and m.group(1).strip() and len(m.group(1).strip()) < len(b):
        b = m.group(1).strip()
    if not a or not b or len(b.split()) > 12:
        return None
    return a, b
