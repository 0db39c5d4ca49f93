"""HTTP wire format of the reward service (pydantic; light: no Ray, no numpy).

Shared by the server (:mod:`reward_service.app`) and the trainer-side client
(:mod:`reward_service.client`). Character offsets are Python ``str`` indices
into the *response* text, half-open ``[start, end)``.
"""
from __future__ import annotations

import json
from typing import Annotated, Any, Optional

from pydantic import BaseModel, ConfigDict, Field, Strict, StrictBool, WithJsonSchema, field_validator

# The reward settings and their per-request overrides are defined once, in core.reward_settings.
from core.reward_settings import MAX_SETTING_ABS, RewardNumber, RewardOverrides  # noqa: F401 (re-exported)
from core.verify_schema import (MAX_MATERIALS, MAX_QUESTION_CHARS, MAX_RESPONSE_CHARS, VerifyRequest,
                                VerifyResult, wrap_single_material)

#: Upper bound on tokens per response: byte-level BPE may split one character into up to 4 tokens.
MAX_TOKENS = 4 * MAX_RESPONSE_CHARS + 64
#: Requests whose body is larger than this are refused (413) while they stream in, before parsing.
MAX_BODY_BYTES = 64 * 1024 * 1024


#: A character offset into the response (strict: false / 1.0 / "1" are refused).
Offset = Annotated[int, Strict(), Field(ge=0)]


_EXAMPLE_QUESTION = "Where is the head office of the Oberoi Group?"
_EXAMPLE_KNOWLEDGE = "The Oberoi Group is a hotel company with its head office in Delhi."


#: ``materials``: a list of passages, or one string (one passage; blank: none). The JSON schema says both, as the
#: validator accepts both (a fuzzer reading the schema must find no accepted input the schema forbids).
Materials = Annotated[list[str], WithJsonSchema({
    "anyOf": [{"type": "array", "items": {"type": "string"}, "maxItems": MAX_MATERIALS}, {"type": "string"}]})]


class RewardItem(BaseModel):
    """One response to reward."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(..., max_length=MAX_QUESTION_CHARS, description="The question the response answers.")
    response: str = Field(..., max_length=MAX_RESPONSE_CHARS, description="The policy's response text.")
    materials: Materials = Field(default_factory=list, max_length=MAX_MATERIALS,
                                 description="Evidence passages (a single string is wrapped).")
    gold_answer: Optional[str] = Field(None, description="Reference answer, when known.")
    token_offsets: Optional[list[tuple[Offset, Offset]]] = Field(
        None, max_length=MAX_TOKENS,
        description="Character offsets [start, end) of every response token in `response`, in order "
                    "(special tokens such as EOS: [len(response), len(response)]). Omitted: the service "
                    "tokenizes the response alone with REWARD_TOKENIZER (or MODEL_PATH).")

    _wrap = field_validator("materials", mode="before")(wrap_single_material)

    def verify_request(self) -> VerifyRequest:
        return VerifyRequest(question=self.question, response=self.response, materials=self.materials,
                             gold_answer=self.gold_answer)


class VerifyBody(VerifyRequest):
    """``POST /v1/verify``: a :class:`VerifyRequest` whose schema documents the single-string ``materials``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "question": _EXAMPLE_QUESTION, "response": "It is in Delhi.", "materials": _EXAMPLE_KNOWLEDGE}]})

    materials: Materials = Field(
        default_factory=list, max_length=MAX_MATERIALS,
        description="Evidence passages (e.g. HaluEval `knowledge`). A single string is accepted and wrapped.")


class RewardsRequest(BaseModel):
    """``POST /v1/rewards``: a batch of responses (at most ``MAX_BATCH_ITEMS``)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "items": [{"question": _EXAMPLE_QUESTION, "response": "It is in Delhi.", "materials": [_EXAMPLE_KNOWLEDGE],
                   "gold_answer": "Delhi", "token_offsets": [[0, 2], [2, 5], [5, 8], [8, 14], [14, 15]]}],
        "overrides": {"granularity": "sentence"}}]})

    items: list[RewardItem] = Field(..., min_length=1, description="Responses to reward (at least one).")
    overrides: Optional[RewardOverrides] = Field(None, description="Reward settings for this request only.")
    return_verification: StrictBool = Field(False, description="Include each item's VerifyResult (statements, labels).")


class ItemReward(BaseModel):
    """Rewards of one response. Arrays have one entry per response token (``num_tokens``)."""

    token_rewards: list[float] = Field(..., description="Per-token rewards, clipped (shape (T,)).")
    token_label_signs: list[int] = Field(
        ..., description="Per-token FSPO sign: +1 Correct/Hedged correct statement, -1 Wrong/Hedged wrong, 0 else.")
    score: float = Field(..., description="Sum of token_rewards.")
    is_correct: bool = Field(..., description=">= 1 statement and all of them Correct / Hedged correct.")
    abstained: bool
    label_counts: dict[str, int]
    num_statements: int
    num_unaligned: int = Field(..., description="Statements whose reward went to their sentence span.")
    num_tokens: int = 0
    truth_reward: float = 0.0
    info_reward: float = 0.0
    num_clipped: int = 0
    cached: bool = Field(False, description="The verification came from the cache.")
    verification: Optional[VerifyResult] = None


class RewardsResponse(BaseModel):
    items: list[ItemReward]
    settings: dict[str, Any] = Field(..., description="The reward settings applied (after overrides).")
    num_cached: int
    latency_ms: float


class GetRewardRequest(BaseModel):
    """OpenRLHF remote reward protocol (``--reward.remote_url http://host:port/get_reward``)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [{
        "query": [f"{_EXAMPLE_QUESTION} It is in Delhi.<|im_end|>"], "prompts": [_EXAMPLE_QUESTION],
        "labels": [json.dumps({"knowledge": _EXAMPLE_KNOWLEDGE, "answer": "Delhi"})]}]})

    query: list[str] = Field(..., min_length=1, description="Full prompt + response texts.")
    prompts: Optional[list[str]] = Field(None, description="Prompt texts; response = query[i][len(prompts[i]):].")
    labels: Optional[list[Optional[str]]] = Field(
        None, description="Gold answers, or JSON strings {\"knowledge\": ..., \"answer\": ..., \"question\": ...}.")


class GetRewardResponse(BaseModel):
    rewards: list[float] = Field(..., description="Scalar reward per sample (sum of its token rewards).")
    scores: list[float] = Field(..., description="Factual precision per sample in [0, 1] (for filtering).")
    extra_logs: dict[str, list[float]] = Field(default_factory=dict)


class ErrorDetail(BaseModel):
    field: str
    message: str
    fix: str = ""


class ErrorBody(BaseModel):
    """Every 4xx/5xx body: ``error`` is one readable line; ``detail`` lists each problem."""

    error: str
    status: int
    detail: list[ErrorDetail] = Field(default_factory=list)
    item_index: Optional[int] = None


def parse_label(label: Optional[str]) -> dict[str, Any]:
    """An OpenRLHF label -> ``{"gold_answer", "materials", "question"}`` (missing keys: None / []).

    A JSON object string may carry ``knowledge`` (string or list), ``answer`` and ``question``;
    any other string is the gold answer. A lone surrogate in any of them raises :class:`LabelError`.
    """
    out: dict[str, Any] = {"gold_answer": None, "materials": [], "question": None}
    if label is None:
        return out
    text = label.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            k = obj.get("knowledge", obj.get("materials"))
            if isinstance(k, str):
                out["materials"] = [k] if k.strip() else []
            elif isinstance(k, list):
                out["materials"] = [str(x) for x in k if str(x).strip()]
            ans = obj.get("answer", obj.get("gold_answer", obj.get("right_answer")))
            out["gold_answer"] = None if ans is None else str(ans)
            q = obj.get("question")
            out["question"] = None if q is None else str(q)
            _check_text(out)
            return out
    out["gold_answer"] = label
    _check_text(out)
    return out


class LabelError(ValueError):
    """A label the service cannot use (``field`` is the key inside the label, ``fix`` what to send instead)."""

    def __init__(self, field: str, message: str, fix: str = ""):
        self.field = field
        self.message = message
        self.fix = fix
        super().__init__(f"{field}: {message}")


def _check_text(parsed: dict[str, Any]) -> None:
    """Refuse lone UTF-16 surrogates (``"\\ud800"`` escapes inside a label's JSON): no UTF-8 text can hold them."""
    values = [("answer", parsed["gold_answer"]), ("question", parsed["question"])]
    values += [(f"knowledge.{i}", m) for i, m in enumerate(parsed["materials"])]
    for key, v in values:
        if v is None:
            continue
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise LabelError(key, f"holds a lone UTF-16 surrogate at character {e.start}",
                             "send valid Unicode text (pair each \\uD800-\\uDBFF escape with a \\uDC00-\\uDFFF one)"
                             ) from None
