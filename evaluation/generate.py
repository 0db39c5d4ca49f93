"""Batched greedy generation for evaluation (transformers ``generate``, left padding, progress bar).

Prompts are sorted by token length before batching so a batch pads to similar
lengths (evidence prompts vary from ~100 to ~500 tokens), then answers are put
back in the input order.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Sequence


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


def generate_greedy(model, tokenizer, prompts: Sequence[str], batch_size: int = 16, max_new_tokens: int = 40,
                    prompt_max_len: int = 1024, progress: bool = True, desc: str = "generate"
                    ) -> tuple[list[Generation], GenerationStats]:
    """Greedy answers for ``prompts`` (chat-template text ending with the assistant turn).

    Args:
        model: a causal LM in eval mode.
        tokenizer: its tokenizer; padding is forced to the left for generation.
        prompts: N prompt strings.
        batch_size: prompts per ``generate`` call.
        max_new_tokens: cap on generated tokens per answer.
        prompt_max_len: longer prompts are left-truncated to this many tokens.

    Returns:
        (N generations in input order, timing stats).
    """
    import torch
    from tqdm import tqdm

    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    if max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    pad_id = tokenizer.pad_token_id
    eos_ids = model.generation_config.eos_token_id
    eos_set = set(eos_ids if isinstance(eos_ids, (list, tuple)) else [eos_ids if eos_ids is not None
                                                                        else tokenizer.eos_token_id])

    lengths = [len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]
    order = sorted(range(len(prompts)), key=lambda i: -lengths[i])
    out: list[Optional[Generation]] = [None] * len(prompts)
    device = next(model.parameters()).device
    t0 = time.perf_counter()
    total_new = total_prompt = 0
    bar = tqdm(total=len(prompts), desc=desc, unit="ans", disable=not progress, dynamic_ncols=True)
    try:
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            enc = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True, truncation=True,
                            max_length=prompt_max_len, add_special_tokens=False).to(device)
            with torch.inference_mode():
                seq = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, temperature=None,
                                     top_p=None, top_k=None, pad_token_id=pad_id)
            new = seq[:, enc["input_ids"].shape[1]:].tolist()
            plen = enc["attention_mask"].sum(dim=1).tolist()
            for row, i in enumerate(idx):
                toks = new[row]
                n = len(toks)
                for j, t in enumerate(toks):
                    if t in eos_set:
                        n = j + 1
                        break
                ended = n < len(toks) or (n > 0 and toks[n - 1] in eos_set)
                text = tokenizer.decode(toks[:n], skip_special_tokens=True).strip()
                out[i] = Generation(text=text, prompt_tokens=int(plen[row]), new_tokens=n, truncated=not ended)
                total_new += n
                total_prompt += int(plen[row])
            bar.update(len(idx))
            el = time.perf_counter() - t0
            bar.set_postfix_str(f"{total_new / el:.0f} tok/s")
    finally:
        bar.close()
    stats = GenerationStats(seconds=time.perf_counter() - t0, new_tokens=total_new, prompt_tokens=total_prompt)
    return [g for g in out if g is not None], stats
