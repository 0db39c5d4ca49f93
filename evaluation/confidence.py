"""The model's own confidence in its answers: mean token log-prob of each answer (teacher-forced).

Used by ``rlfh eval`` so that ``rlfh compare`` can ask whether the model's confidence predicts correctness
(AUROC, risk-coverage) before and after training. One forward pass over prompt + answer, with the same
response log-prob code the trainer uses (``actors.base.causal_lm_response_logprobs``).
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Sequence

from actors.base import batched_response_forward, causal_lm_response_logprobs
from actors.types import make_batch


#: Sequences per teacher-forced scoring forward. Unlike decoding, a forward gains nothing from more rows and pads
#: more, so it stays narrow (docs/PERFORMANCE.md, "Evaluation scoring batch").
SCORE_BATCH_SIZE = 16


def answer_confidence(model, tokenizer, prompts: Sequence[str], answers: Sequence[str],
                      batch_size: int = SCORE_BATCH_SIZE,
                      prompt_max_len: int = 1024) -> list[float]:
    """Mean log-prob per answer token of each ``answers[i]`` after ``prompts[i]`` (NaN for an empty answer).

    Args:
        model: a causal LM in eval mode.
        tokenizer: its tokenizer.
        prompts: N chat-template prompts ending with the assistant turn.
        answers: N answer texts (as decoded by generation).
        batch_size: sequences per forward.
        prompt_max_len: prompts are left-truncated to this many tokens.
    Returns:
        N floats (<= 0).
    """
    import torch

    if len(prompts) != len(answers):
        raise ValueError(f"answer_confidence: {len(prompts)} prompts vs {len(answers)} answers")
    p_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    a_ids = tokenizer([a or "" for a in answers], add_special_tokens=False)["input_ids"]
    out = [float("nan")] * len(prompts)
    idx = [i for i in range(len(prompts)) if a_ids[i]]
    if not idx:
        return out
    # longest first, so a batch pads to similar lengths
    idx.sort(key=lambda i: -(len(p_ids[i]) + len(a_ids[i])))
    samples = [SimpleNamespace(prompt_token_ids=p_ids[i][-prompt_max_len:], response_token_ids=a_ids[i])
               for i in idx]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(model.parameters()).device
    with torch.inference_mode():
        for start in range(0, len(samples), batch_size):
            chunk = samples[start:start + batch_size]
            batch = make_batch(chunk, pad)
            lp = batched_response_forward(lambda mb: causal_lm_response_logprobs(model, mb), batch, batch_size,
                                          device)
            mask = batch["action_mask"]
            mean = (lp * mask).sum(1) / mask.sum(1).clamp(min=1)
            for j, v in enumerate(mean.tolist()):
                out[idx[start + j]] = float(v)
    return out


def abstain_probability(model, tokenizer, prompts: Sequence[str], abstain_text: str, batch_size: int = SCORE_BATCH_SIZE,
                        prompt_max_len: int = 1024) -> list[float]:
    """P(``abstain_text`` | prompt) under ``model``, teacher-forced: the whole reply's probability, not a mean.

    A model trained to say the abstention on what it gets wrong (R-Tuning, RL with an abstain reward) puts more
    mass on it where it does not know, even when greedy decoding rounds that mass to always or never; this reads
    the mass itself. Returns N floats in [0, 1].
    """
    n_tok = len(tokenizer(abstain_text, add_special_tokens=False)["input_ids"])
    if not n_tok:
        raise ValueError("abstain_text is empty; give the model's abstention reply, e.g. \"I don't know.\"")
    mean = answer_confidence(model, tokenizer, prompts, [abstain_text] * len(prompts), batch_size, prompt_max_len)
    return [math.exp(m * n_tok) for m in mean]
