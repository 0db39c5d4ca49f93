"""Prompt templates shared by rollouts, evaluation and the `self` verifier.

Kept in one place so training and evaluation ask the same question the same
way (and so a prompt-only baseline differs from the default by one sentence).
"""
from __future__ import annotations

import hashlib
from typing import Optional

SYSTEM_DEFAULT = "You are a helpful assistant. Answer the question in one or two short sentences."
# The prompt-only baseline: the base model is *told* it may abstain. Training
# must beat this, or the gain is the prompt's, not the training's.
SYSTEM_MAY_ABSTAIN = (
    "You are a helpful assistant. Answer the question in one or two short sentences. "
    "If you are not sure of the answer, say \"I don't know\" instead of guessing.")

# The grounded reply (PROMPT_MODE=evidence): the answer first, then the facts of the passage behind it, so a reply
# holds several statements the verifier checks one by one and the gold grader reads the first sentence only
# (GRADE_SCOPE=first-sentence).
SYSTEM_GROUNDED = (
    "You are a helpful assistant. Answer the question using the information given. First give the answer in one "
    "short sentence. Then give one or two facts from the information that support it.")
# The grounded recipe's prompt-only baseline: the grounded prompt, plus the one sentence that allows declining.
SYSTEM_GROUNDED_MAY_ABSTAIN = (
    SYSTEM_GROUNDED + " If you are not sure of the answer, say \"I don't know\" instead of guessing.")

#: The abstention reply: the trainer's ABSTAIN_TEXT default, the baselines' and `rlfh eval --abstain-text`'s.
ABSTAIN_TEXT = "I don't know."

# Named system prompts (SYSTEM_PROMPT / `rlfh eval --system`); any other text is used as given.
SYSTEM_PROMPTS = {"default": SYSTEM_DEFAULT, "may-abstain": SYSTEM_MAY_ABSTAIN, "grounded": SYSTEM_GROUNDED,
                  "grounded-may-abstain": SYSTEM_GROUNDED_MAY_ABSTAIN}
#: A training prompt's prompt-only baseline (`make demo`'s middle row): the same prompt, told it may decline. A
#: gain that prompt alone gives is not credited to training.
PROMPT_ONLY_SYSTEMS = {"default": "may-abstain", "grounded": "grounded-may-abstain"}
PROMPT_MODES = ("closed", "evidence", "mixed")


def resolve_system(spec: str) -> str:
    """A system prompt from its name (a key of SYSTEM_PROMPTS) or the literal text itself."""
    if not spec or not spec.strip():
        raise ValueError(f"system prompt is empty; use {', '.join(repr(k) for k in SYSTEM_PROMPTS)} or a literal "
                         "prompt text")
    return SYSTEM_PROMPTS.get(spec, spec)


def prompt_mode_for(question: str, mode: str, evidence_share: float = 0.5) -> str:
    """The template one question gets: ``mode`` itself, or for 'mixed' closed/evidence by a stable hash
    (a share ``evidence_share`` of the questions get 'evidence').

    A stable hash (not a random draw) keeps a question's template fixed across epochs, resumes and
    processes, so the two halves of a mixed run are the same questions every time.
    """
    if mode not in PROMPT_MODES:
        raise ValueError(f"prompt mode must be one of {', '.join(PROMPT_MODES)}, got {mode!r}")
    if mode != "mixed":
        return mode
    if not 0.0 <= evidence_share <= 1.0:
        raise ValueError(f"evidence_share (EVIDENCE_SHARE) must be in [0, 1], got {evidence_share!r}")
    # the hash's first two bytes as a uniform number in [0, 1): stable across runs and processes
    u = int.from_bytes(hashlib.sha1(question.encode("utf-8")).digest()[:2], "big") / 65536.0
    return "evidence" if u < evidence_share else "closed"


def build_messages(question: str, knowledge: Optional[str] = None, mode: str = "closed",
                   system: str = SYSTEM_DEFAULT) -> list[dict[str, str]]:
    if mode not in ("closed", "evidence"):
        raise ValueError(f"prompt mode must be 'closed' or 'evidence', got {mode!r}")
    if mode == "evidence" and knowledge:
        user = f"Use this information:\n{knowledge}\n\nQuestion: {question}"
    else:
        user = f"Question: {question}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def render_prompt(tokenizer, question: str, knowledge: Optional[str] = None, mode: str = "closed",
                  system: str = SYSTEM_DEFAULT) -> str:
    """Chat-template text ending with the assistant turn's opening (what generate continues)."""
    msgs = build_messages(question, knowledge, mode, system)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in msgs) + "\n\nAnswer:"
