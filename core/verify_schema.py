"""Data contracts shared by the verifier, the reward service and the trainer.

These pydantic models are the wire format of ``POST /v1/verify`` and the
in-process format that backends return. Spans are character offsets into the
*response* string, half-open ``[start, end)``.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The closed label set (DESIGN.md): the one place the five labels are spelled out; everything else imports
# LABELS (or Label, its pydantic type). Order runs from best to worst; code that needs "is this label good" uses
# GOOD_LABELS rather than string tests.
LABELS: tuple[str, ...] = ("Correct", "Hedged correct", "Vague", "Hedged wrong", "Wrong")
Label = Literal[LABELS]     # Literal[("a", "b")] is Literal["a", "b"]: the same enum in the OpenAPI schema
GOOD_LABELS = frozenset({"Correct", "Hedged correct"})
BAD_LABELS = frozenset({"Wrong", "Hedged wrong"})
INFO_SCORES: tuple[int, ...] = (1, 2, 3, 4, 5)

# Request size guards: big enough for long-form answers, small enough that one
# request cannot pin a replica (422 beyond these).
MAX_RESPONSE_CHARS = 20_000
MAX_QUESTION_CHARS = 4_000
MAX_MATERIAL_CHARS = 200_000
MAX_MATERIALS = 64


def wrap_single_material(v):
    """``materials`` validator (mode="before"): one string is one passage (a blank one is none)."""
    if isinstance(v, str):
        return [v] if v.strip() else []
    return v


class VerifyRequest(BaseModel):
    """One response to verify against its materials."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(..., max_length=MAX_QUESTION_CHARS, description="The prompt/question the response answers.")
    response: str = Field(..., max_length=MAX_RESPONSE_CHARS, description="The model's answer to verify.")
    materials: list[str] = Field(
        default_factory=list,
        max_length=MAX_MATERIALS,
        description="Evidence passages (e.g. HaluEval `knowledge`). A single string is accepted and wrapped.",
    )
    gold_answer: Optional[str] = Field(None, description="Reference answer, when known; sharpens verification.")

    _wrap_single_material = field_validator("materials", mode="before")(wrap_single_material)

    @model_validator(mode="after")
    def _check_material_size(self):
        total = sum(len(m) for m in self.materials)
        if total > MAX_MATERIAL_CHARS:
            raise ValueError(
                f"materials: {total} characters in all, over the limit of {MAX_MATERIAL_CHARS}; "
                "send the relevant passages only"
            )
        return self


class Statement(BaseModel):
    """An atomic statement with its verdict."""

    text: str
    start: int = Field(..., ge=0, description="Character span start in the response.")
    end: int = Field(..., ge=0, description="Character span end (exclusive) in the response.")
    label: Label
    informativeness: int = Field(..., ge=1, le=5)
    evidence: list[str] = Field(default_factory=list, description="Evidence snippets used for the verdict.")
    confidence: float = Field(0.5, ge=0.0, le=1.0)
    aligned: bool = Field(True, description="False when the span fell back to the enclosing sentence.")
    fallback: bool = Field(False, description="True when the judge failed and a fallback label was used.")


class Sentence(BaseModel):
    text: str
    start: int = Field(..., ge=0)
    end: int = Field(..., ge=0)
    statements: list[Statement] = Field(default_factory=list)


class VerifyResult(BaseModel):
    """Verifier output for one response."""

    sentences: list[Sentence] = Field(default_factory=list)
    abstained: bool = Field(False, description="The response declines to answer (\"I don't know\").")
    backend: str = "evidence"
    num_statements: int = 0
    num_unaligned: int = Field(0, description="Statements whose span fell back to their sentence.")
    num_fallback: int = Field(0, description="Statements labelled by the fallback after judge failures.")
    cached: bool = False
    latency_ms: float = 0.0

    def statements(self) -> list[Statement]:
        return [s for sent in self.sentences for s in sent.statements]

    def label_counts(self) -> dict[str, int]:
        counts = {label: 0 for label in LABELS}
        for st in self.statements():
            counts[st.label] += 1
        return counts
