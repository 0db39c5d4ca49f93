"""The reference actor: the frozen initial policy, log-probs only (for the KL penalty)."""
from __future__ import annotations

import logging
import time

import torch

from actors.base import BaseActor, response_logprobs, weights_checksum
from actors.types import Batch
from core.model_loader import load_causal_lm, resolve_model_path

log = logging.getLogger(__name__)


class ReferenceActor(BaseActor):
    """Frozen causal LM (MODEL_PATH): ``logprobs(batch) -> [B, R]`` under no_grad. Needs no process group."""

    role = "reference"

    def init_model(self) -> dict:
        t0 = time.time()
        self.model_path = resolve_model_path(self.cfg.model_path)
        self._load_tokenizer(self.model_path)
        self.model = load_causal_lm(self.model_path, dtype=self.cfg.dtype, device=str(self.device))
        self.model.eval()
        self.model.requires_grad_(False)
        info = {"model_path": self.model_path, "device": str(self.device), "load_s": round(time.time() - t0, 2)}
        log.info("reference rank %d ready: %s", self.rank, info)
        return info

    @torch.no_grad()
    def logprobs(self, batch: Batch, share: int = 1) -> torch.Tensor:
        """Reference log-probs of the response tokens: CPU float32 [B, R] (0 off the action mask).

        ``share``: actors the driver runs concurrently in this phase (they split CPU_THREADS).
        """
        self._phase_threads(share)
        return response_logprobs(self.model, batch, self.cfg, self.device, self.autocast)

    def weights_fingerprint(self) -> dict[str, float]:
        return weights_checksum(self.model.named_parameters())
