"""Batched greedy generation for evaluation, on the training rollout engine's code.

:func:`generate_greedy` wraps the evaluated model in :class:`actors.rollout.HFRolloutEngine` (no copy: the
engine generates with the model it is given), so `rlfh eval` uses the same ``generate`` call, EOS rule
(tokenizer EOS + the model's generation-config EOS, kept in the count), left truncation and decoding as the
training rollouts. Prompts are sorted by token length before batching so a batch pads to similar lengths
(evidence prompts vary from ~100 to ~500 tokens), then answers are put back in the input order.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Optional, Sequence

from core.config import RLFHConfig


@dataclass
class Generation:
    text: str            # decoded answer (special tokens dropped, stripped)
    prompt_tokens: int   # prompt length without padding
    new_tokens: int      # generated tokens up to and including EOS
    truncated: bool      # stopped by max_new_tokens rather than EOS


@dataclass
class GenerationStats:
    seconds: float
    new_tokens: int
    prompt_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else float("nan")


#: `rlfh eval --batch-size`: prompts per sampling call. Each decode step reads every weight once for all its rows, so
#: wide batches decode more tokens per second (docs/PERFORMANCE.md, "Evaluation decode batch"); the prompts are still
#: prefilled a few at a time (`actors.decode.PREFILL_TOKENS`).
EVAL_BATCH_SIZE = 64

#: `rlfh eval --dtype`: weight dtypes, and ``autocast`` (fp32 weights, bf16 matmuls: :func:`inference_precision`).
EVAL_DTYPES = ("fp32", "bf16", "fp16", "autocast")


def weights_dtype(dtype: str) -> str:
    """The dtype ``--dtype`` loads the weights in (``autocast`` keeps them fp32)."""
    return "fp32" if dtype == "autocast" else dtype


def inference_precision(model, dtype: str):
    """The context `rlfh eval` generates and scores in. ``autocast``: bf16 matmuls under ``torch.autocast`` over
    fp32 weights, the numerics a colocated training rollout samples with (faster on a CPU with native bf16:
    docs/PERFORMANCE.md, "Mixed precision on CPU"). The weights are marked trainable because autocast caches
    only the bf16 casts of leaf tensors that require grad (else it re-casts every weight at every forward);
    nothing computes a gradient (every caller runs under ``no_grad``). Other dtypes: no context."""
    import torch
    if dtype != "autocast":
        return nullcontext()
    model.requires_grad_(True)
    return torch.autocast(next(model.parameters()).device.type, dtype=torch.bfloat16)


def eval_engine(model, tokenizer, batch_size: int, prompt_max_len: int):
    """An :class:`~actors.rollout.HFRolloutEngine` over ``model`` / ``tokenizer`` (shared, not copied)."""
    from actors.rollout import HFRolloutEngine   # torch: this module is on `rlfh --help`'s import path
    path = getattr(getattr(model, "config", None), "_name_or_path", "") or getattr(model, "name_or_path", "")
    kw = {"model_path": path} if path else {}
    cfg = RLFHConfig(rollout_backend="hf", micro_rollout_batch_size=batch_size, prompt_max_len=prompt_max_len, **kw)
    device = str(next(model.parameters()).device)
    return HFRolloutEngine(cfg, model=model, tokenizer=tokenizer, device=device)


def generate_greedy(model, tokenizer, prompts: Sequence[str], batch_size: int = EVAL_BATCH_SIZE,
                    max_new_tokens: int = 40, prompt_max_len: int = 1024, progress: bool = True, desc: str = "generate",
                    suppress_first_ids: Sequence[int] = ()) -> tuple[list[Generation], GenerationStats]:
    """Greedy answers for ``prompts`` (chat-template text ending with the assistant turn).

    Args:
        model: a causal LM in eval mode (its dtype is the evaluation's: fp32 by default, since bf16 changes
            about half of the greedy answers of the embedded model, `rlfh bench drift`).
        tokenizer: its tokenizer.
        prompts: N prompt strings.
        batch_size: prompts per sampling call (the decode batch).
        max_new_tokens: cap on generated tokens per answer.
        prompt_max_len: longer prompts are left-truncated to this many tokens.
        suppress_first_ids: token ids no answer may start with (empty: none).

    Returns:
        (N generations in input order, timing stats).
    """
    from tqdm import tqdm

    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    if max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    engine = eval_engine(model, tokenizer, batch_size, prompt_max_len)
    enc = engine.encode_prompts(list(prompts), max_len=prompt_max_len) if prompts else []
    order = sorted(range(len(prompts)), key=lambda i: -len(enc[i]))
    out: list[Optional[Generation]] = [None] * len(prompts)
    t0 = time.perf_counter()
    total_new = total_prompt = 0
    bar = tqdm(total=len(prompts), desc=desc, unit="ans", disable=not progress, dynamic_ncols=True)
    try:
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            for i, (ids, stopped, text) in zip(idx, engine.complete_greedy([enc[i] for i in idx], max_new_tokens,
                                                                               suppress_first_ids)):
                out[i] = Generation(text=text.strip(), prompt_tokens=len(enc[i]), new_tokens=len(ids),
                                    truncated=not stopped)
                total_new += len(ids)
                total_prompt += len(enc[i])
            bar.update(len(idx))
            el = time.perf_counter() - t0
            bar.set_postfix_str(f"{total_new / el:.0f} tok/s")
    finally:
        bar.close()
    stats = GenerationStats(seconds=time.perf_counter() - t0, new_tokens=total_new, prompt_tokens=total_prompt)
    return [g for g in out if g is not None], stats
