"""Sampling answers from a Hugging Face causal LM (``generate``): what the baselines and the claim judge's
training data both draw from the policy."""
from __future__ import annotations

from typing import Sequence


def eos_id(model, tokenizer) -> int:
    """The token ``generate`` stops on (the first of the generation config's EOS ids)."""
    e = model.generation_config.eos_token_id
    if isinstance(e, (list, tuple)):
        e = e[0] if e else None
    return int(e if e is not None else tokenizer.eos_token_id)


def sample_answers(model, tokenizer, prompts: Sequence[str], n: int, temperature: float, top_p: float = 1.0,
                   max_new_tokens: int = 40, batch_size: int = 16, prompt_max_len: int = 1024,
                   progress: bool = True, desc: str = "sample") -> list[list[str]]:
    """``n`` sampled answers per prompt (``temperature`` > 0), decoded up to the first EOS, stripped.

    Prompts go ``max(1, batch_size // n)`` at a time, each with ``num_return_sequences=n``.
    Returns ``len(prompts)`` lists of ``n`` strings, in input order.
    """
    import torch
    from tqdm import tqdm

    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    eos = eos_id(model, tokenizer)
    device = next(model.parameters()).device
    per_call = max(1, batch_size // n)
    out: list[list[str]] = []
    model.eval()
    with tqdm(total=len(prompts), desc=desc, unit="q", disable=not progress, dynamic_ncols=True) as bar:
        for start in range(0, len(prompts), per_call):
            chunk = list(prompts[start:start + per_call])
            enc = tokenizer(chunk, return_tensors="pt", padding=True, truncation=True, max_length=prompt_max_len,
                            add_special_tokens=False).to(device)
            with torch.inference_mode():
                seq = model.generate(**enc, do_sample=True, temperature=temperature, top_p=top_p, top_k=None,
                                     num_return_sequences=n, max_new_tokens=max_new_tokens,
                                     pad_token_id=tokenizer.pad_token_id)
            new = seq[:, enc["input_ids"].shape[1]:].tolist()
            for i in range(len(chunk)):
                answers = []
                for toks in new[i * n:(i + 1) * n]:
                    cut = toks.index(eos) if eos in toks else len(toks)
                    answers.append(tokenizer.decode(toks[:cut], skip_special_tokens=True).strip())
                out.append(answers)
            bar.update(len(chunk))
    return out
