"""A :data:`~verifier_service.core.ChatFn` over a transformers causal LM (``generate``, greedy).

Used by the test/replay OpenAI server (:mod:`verifier_service.openai_server`) and as the reference
``self``-backend engine on CPU: the training cluster passes its own rollout engine instead, with the
same signature ``list of conversations -> list of reply texts``.
"""
from __future__ import annotations

import threading
from typing import Optional


class HFChat:
    """Batched greedy chat completions with a HF model and its chat template.

    Args:
        model_path: HF folder or ``smollm2-135m-instruct`` (the embedded model).
        max_new_tokens: reply length cap.
        batch_size: conversations per ``generate`` call (left padding).
        model, tokenizer: pass already-loaded objects to share them (e.g. with a rollout engine).
    """

    def __init__(self, model_path: str = "smollm2-135m-instruct", *, max_new_tokens: int = 256,
                 batch_size: int = 8, dtype: str = "fp32", device: Optional[str] = None, model=None,
                 tokenizer=None):
        import torch

        from actors.model_loader import default_device, load_causal_lm, load_tokenizer
        self.device = device or default_device()
        self.tokenizer = tokenizer or load_tokenizer(model_path)
        self.model = model or load_causal_lm(model_path, dtype=dtype, device=self.device)
        self.model.eval()
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.model_name = model_path
        self._lock = threading.Lock()  # one generate at a time per model
        self._torch = torch

    def __call__(self, convs: list[list[dict]], max_new_tokens: Optional[int] = None) -> list[str]:
        out: list[str] = []
        for i in range(0, len(convs), self.batch_size):
            out.extend(self._generate(convs[i:i + self.batch_size], max_new_tokens or self.max_new_tokens))
        return out

    def _generate(self, convs: list[list[dict]], max_new_tokens: int) -> list[str]:
        tok = self.tokenizer
        prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in convs]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        with self._lock, self._torch.no_grad():
            gen = self.model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        new = gen[:, enc["input_ids"].shape[1]:]
        return [tok.decode(row, skip_special_tokens=True).strip() for row in new]
