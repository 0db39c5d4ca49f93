"""Question-answering data with evidence: HaluEval-QA (embedded) or any JSONL.

Every source becomes a list of :class:`QAItem`. A JSONL line needs
``question`` and ``knowledge`` (a string or a list of passages); ``right_answer``
and ``hallucinated_answer`` are optional. A malformed line raises
:class:`DataError` naming the file and line number.

Splits are deterministic by a hash of the normalised question, so the same
question always lands in the same split whatever the file order, and the
test split (>= 1,000 of HaluEval's 10,000 items) is never trained on.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from core.assets import HALUEVAL_QA, fetch_asset
from core.questions import question_type

SPLITS = ("train", "dev", "test")
# Fractions by hash bucket (out of 1000): 80% train, 5% dev, 15% test.
_SPLIT_BOUNDS = {"train": (0, 800), "dev": (800, 850), "test": (850, 1000)}


class DataError(ValueError):
    """Bad data input; the message names the file, line and field."""


@dataclass
class QAItem:
    question: str
    knowledge: list[str]
    right_answer: Optional[str] = None
    hallucinated_answer: Optional[str] = None
    uid: str = ""
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.uid:
            self.uid = question_hash(self.question)[:16]

    @property
    def knowledge_text(self) -> str:
        return "\n".join(self.knowledge)


def question_hash(question: str) -> str:
    norm = re.sub(r"\s+", " ", question.strip().lower())
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()


def split_of(question: str) -> str:
    bucket = int(question_hash(question)[:8], 16) % 1000
    for name, (lo, hi) in _SPLIT_BOUNDS.items():
        if lo <= bucket < hi:
            return name
    raise AssertionError("unreachable")


def _split_passages(knowledge) -> list[str]:
    if isinstance(knowledge, list):
        return [str(k) for k in knowledge if str(k).strip()]
    text = str(knowledge)
    # HaluEval glues Wikipedia paragraphs without a space ("...century.First for Women is...");
    # split there so retrieval sees passages, not one blob.
    parts = re.split(r"(?<=[a-z0-9\)\]\"'][.!?])(?=[A-Z])", text)
    return [p.strip() for p in parts if p.strip()]


def parse_item(obj: object, where: str) -> QAItem:
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    q = obj.get("question")
    if not isinstance(q, str) or not q.strip():
        raise DataError(f"{where}: field 'question' is missing or empty (a non-empty string is required)")
    if "knowledge" not in obj:
        raise DataError(f"{where}: field 'knowledge' is missing (a string or a list of passages is required)")
    k = obj["knowledge"]
    if not isinstance(k, (str, list)) or (isinstance(k, list) and not all(isinstance(x, str) for x in k)):
        raise DataError(f"{where}: field 'knowledge' must be a string or a list of strings, "
                        f"got {type(k).__name__}")
    for opt in ("right_answer", "hallucinated_answer"):
        if opt in obj and obj[opt] is not None and not isinstance(obj[opt], str):
            raise DataError(f"{where}: field '{opt}' must be a string when given, got {type(obj[opt]).__name__}")
    extra = {kk: v for kk, v in obj.items()
             if kk not in ("question", "knowledge", "right_answer", "hallucinated_answer", "id", "uid")}
    uid = str(obj.get("id") or obj.get("uid") or "")
    return QAItem(question=q.strip(), knowledge=_split_passages(k), right_answer=obj.get("right_answer"),
                  hallucinated_answer=obj.get("hallucinated_answer"), uid=uid, meta=extra)


def read_jsonl(path: str | Path) -> list[QAItem]:
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file (PROMPT_DATA / --data takes a JSONL path or halueval:SPLIT)")
    items = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
            items.append(parse_item(obj, f"{path}:{lineno}"))
    if not items:
        raise DataError(f"{path}: no items (the file is empty)")
    return items


def halueval_path() -> Path:
    return fetch_asset(HALUEVAL_QA)


def load_halueval(split: Optional[str] = None) -> list[QAItem]:
    items = read_jsonl(halueval_path())
    if split is None or split == "all":
        return items
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; use one of {', '.join(SPLITS)} or all")
    return [it for it in items if split_of(it.question) == split]


def load_items(spec: str, split: Optional[str] = None, limit: Optional[int] = None) -> list[QAItem]:
    """Load ``halueval:SPLIT`` or a JSONL path (optionally filtered to ``split`` by question hash)."""
    if spec.startswith("halueval"):
        _, _, sp = spec.partition(":")
        items = load_halueval(sp or split or "all")
    else:
        items = read_jsonl(spec)
        if split:
            items = [it for it in items if split_of(it.question) == split]
    return items[:limit] if limit else items


def stratify_question_types(items: list[QAItem], n: int, min_share: float) -> list[QAItem]:
    """``n`` distinct items of which each rare type (yes/no, two-option) makes up at least ``min_share``.

    Unlike :func:`balance_question_types` (which repeats items, for RL over many epochs), this picks distinct
    questions: the first ``ceil(min_share * n)`` of each rare type in ``items`` (fewer when ``items`` has fewer),
    then open questions, in their original order, up to ``n``. For self-labelled baselines (R-Tuning, DPO),
    where a repeated question would be memorised rather than generalised from. ``min_share = 0``: the first
    ``n`` items.
    """
    if not 0.0 <= min_share < 0.5:
        raise ValueError(f"min_share must be in [0, 0.5), got {min_share!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    if min_share == 0:
        return items[:n]
    want = int(-(-min_share * n // 1))  # ceil
    picked: set[int] = set()
    for t in ("yes_no", "choice"):
        idx = [i for i, it in enumerate(items) if question_type(it.question) == t][:want]
        picked.update(idx)
    for i, it in enumerate(items):
        if len(picked) >= n:
            break
        if i not in picked and question_type(it.question) == "open":
            picked.add(i)
    return [items[i] for i in sorted(picked)][:n]


def balance_question_types(items: list[QAItem], min_share: float) -> list[QAItem]:
    """Repeat the rarer question types (yes/no, two-option) until each makes up at least ``min_share``.

    HotpotQA-style data is ~85% open questions, and a small model knows almost none of them: trained on the data
    as given, it sees abstaining pay on nearly every prompt and learns to abstain everywhere. The closed-form
    types are where it is often right (yes/no ~50-70%, two-option ~40% for SmolLM2-135M), so repeating them
    gives each batch the contrast it needs to learn *where* to abstain. The type comes from the question text
    alone (:func:`evaluation.selectivity.question_type`). Deterministic; order: the original items, then the
    repeats, so a shuffled epoch mixes them. ``min_share = 0`` returns ``items`` unchanged.
    """
    if not 0.0 <= min_share < 0.5:
        raise ValueError(f"min_share (TYPE_BALANCE) must be in [0, 0.5), got {min_share!r}")
    if min_share == 0 or not items:
        return items
    by_type: dict[str, list[QAItem]] = {"yes_no": [], "choice": [], "open": []}
    for it in items:
        by_type[question_type(it.question)].append(it)
    rare = [t for t in ("yes_no", "choice") if by_type[t]]
    # final size N: open items stay as they are, each rare type gets max(own count, min_share * N)
    n_open = len(by_type["open"])
    total = n_open / max(1e-9, 1.0 - min_share * len(rare)) if n_open else len(items)
    out = list(items)
    for t in rare:
        want = int(-(-min_share * total // 1))  # ceil
        have = len(by_type[t])
        out += [by_type[t][i % have] for i in range(max(0, want - have))]
    return out

