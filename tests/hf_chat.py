"""A :data:`~verifier_service.core.ChatFn` over a transformers causal LM (``generate``, greedy).

Used by the test OpenAI server's model mode (``tests/openai_server.py``); the training cluster's ``self``
backend passes its own rollout engine instead, with the same signature ``list of conversations -> list of
reply texts``.

It is a thin, thread-safe wrapper around :meth:`actors.rollout.HFRolloutEngine.chat`, so the judge and the
rollout engines share one implementation of batched greedy chat generation (chat template, left padding,
prompt truncation to the model's context, EOS handling, decoding).
"""
from __future__ import annotations

import threading
from typing import Optional


class HFChat:
    """Batched greedy chat completions with a HF model and its chat template.

    Args:
        model_path: HF folder or ``smollm2-135m-instruct`` (the embedded model).
        max_new_tokens: reply length cap (a call may ask for another cap).
        batch_size: conversations per ``generate`` call (left padding).
        dtype: ``fp32`` | ``bf16`` | ``fp16`` when the model is loaded here.
        device: ``cpu`` / ``cuda`` / ``cuda:1`` ... (default: a GPU when this process sees one).
        model, tokenizer: pass already-loaded objects to share them (e.g. with a rollout engine).
    """

    def __init__(self, model_path: str = "smollm2-135m-instruct", *, max_new_tokens: int = 256,
                 batch_size: int = 8, dtype: str = "fp32", device: Optional[str] = None, model=None,
                 tokenizer=None):
        from actors.rollout import HFRolloutEngine
        from core.config import RLFHConfig

        # environ={}: the judge's settings are these arguments, not the trainer's environment
        # rollout_dtype=dtype: a judge runs in the dtype asked for (the rollout default, auto, may pick bf16)
        cfg = RLFHConfig.load(environ={}, model_path=model_path, dtype=dtype, rollout_dtype=dtype,
                              micro_rollout_batch_size=batch_size)
        self.engine = HFRolloutEngine(cfg, model=model, tokenizer=tokenizer, device=device)
        self.tokenizer = self.engine.tokenizer
        self.model = self.engine.model
        self.device = self.engine.device
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.model_name = model_path
        self._lock = threading.Lock()  # one generate at a time per model

    def __call__(self, convs: list[list[dict]], max_new_tokens: Optional[int] = None) -> list[str]:
        with self._lock:
            replies = self.engine.chat(convs, max_new_tokens=max_new_tokens or self.max_new_tokens)
        return [r.strip() for r in replies]
