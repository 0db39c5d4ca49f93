"""The critic actor: a value head on a transformer backbone, trained with the clipped value loss."""
from __future__ import annotations

import copy
import logging
import os
import time
from typing import Optional

import torch
from torch import nn

from actors.base import autocast_context, batched_response_forward, frozen_lower_modules, response_hidden_states
from actors.policy import TrainableLMActor, lora_target_modules
from actors.types import Batch, check_batch, position_ids, prompt_length, response_length
from core.core_algos import value_loss
from core.model_loader import resolve_model_path, torch_dtype

log = logging.getLogger(__name__)

VALUE_HEAD_FILE = "value_head.safetensors"


class ValueModel(nn.Module):
    """``backbone`` (HF AutoModel, no LM head) + ``value_head`` Linear(hidden, 1).

    ``forward(input_ids [B, L], attention_mask [B, L], position_ids [B, L]) -> values [B, L]`` (float32).
    """

    def __init__(self, backbone: nn.Module, hidden_size: int):
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.normal_(self.value_head.weight, std=1.0 / (hidden_size + 1))
        nn.init.zeros_(self.value_head.bias)
        self.config = backbone.config

    def forward(self, input_ids, attention_mask, position_ids=None):
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=False)
        h = out.last_hidden_state
        return self.value_head(h.to(self.value_head.weight.dtype)).squeeze(-1).float()


def freeze_critic_below(backbone: nn.Module, train_layers: int, frozen_from: Optional[nn.Module] = None) -> bool:
    """CRITIC_TRAIN_LAYERS: stop gradients to the embeddings and the layers below the last ``train_layers`` of
    ``backbone`` (an AutoModel). ``frozen_from``: a frozen decoder of the same architecture (the reference's base
    model); where its frozen modules hold exactly the critic's weights they replace the critic's own, so the two
    roles keep one copy. Returns whether they were shared."""
    frozen = frozen_lower_modules(backbone, train_layers, "CRITIC_TRAIN_LAYERS")
    shared = False
    if frozen_from is not None:
        theirs = frozen_lower_modules(frozen_from, train_layers, "CRITIC_TRAIN_LAYERS")
        same = len(theirs) == len(frozen) and all(
            type(a) is type(b) and all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                                         b.state_dict().values()))
            for (_, _, a), (_, _, b) in zip(frozen, theirs))
        if same:
            for (parent, name, _), (_, _, module) in zip(frozen, theirs):
                setattr(parent, name, module)
            frozen, shared = theirs, True
        else:
            log.warning("critic: the reference's weights differ from the critic's initial ones; the frozen "
                        "CRITIC_TRAIN_LAYERS part keeps its own copy")
    for _, _, module in frozen:
        module.requires_grad_(False)
    return shared


def response_values(model: nn.Module, batch: Batch, share_prompt: bool = True) -> torch.Tensor:
    """Values of the response positions [B, R] float32: column ``j`` is the value at position ``P + j - 1``.

    ``model``: a :class:`ValueModel` (or a DeepSpeed engine around one). ``share_prompt``: run each distinct prompt
    once (:func:`actors.base.response_hidden_states`; SHARE_PROMPT_FORWARD)."""
    value_model = model.module if isinstance(getattr(model, "module", None), ValueModel) else model
    if isinstance(value_model, ValueModel):
        backbone = value_model.backbone
        decoder = backbone.get_base_model() if hasattr(backbone, "get_base_model") else backbone
        h = response_hidden_states(decoder, batch, share_prompt)
        head = value_model.value_head
        v = head(h.to(head.weight.dtype)).squeeze(-1).float()
    else:
        seq, attn = batch["sequences"], batch["attention_mask"]
        P, R = prompt_length(batch), response_length(batch)
        v = model(input_ids=seq, attention_mask=attn, position_ids=position_ids(attn))[:, P - 1:P + R - 1]
    return torch.where(batch["action_mask"], v, torch.zeros((), dtype=v.dtype, device=v.device))


class CriticActor(TrainableLMActor):
    """Values and the value-loss train step. Backbone from CRITIC_PRETRAIN (default: MODEL_PATH)."""

    role = "critic"

    def init_model(self, frozen_from: Optional[nn.Module] = None) -> dict:
        """Load the backbone and value head and build the optimizer. ``frozen_from``: a frozen decoder with the
        critic's initial weights (the colocated reference's) to take the CRITIC_TRAIN_LAYERS-frozen part from."""
        from safetensors.torch import load_file
        from transformers import AutoModel

        t0 = time.time()
        self.model_path = resolve_model_path(self.cfg.effective_critic_pretrain)
        self._load_tokenizer(self.model_path)
        backbone = AutoModel.from_pretrained(self.model_path, dtype=torch_dtype(self.cfg.dtype),
                                             attn_implementation="sdpa")
        hidden = backbone.config.hidden_size
        train_layers = self.cfg.critic_train_layers
        shares_reference = bool(train_layers) and freeze_critic_below(backbone, train_layers, frozen_from)
        self.lora = self.cfg.lora_rank > 0
        # new weights (value head, LoRA) drawn from SEED: the same critic whichever process or layout builds it
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.cfg.seed)
            if self.lora:
                from peft import LoraConfig, get_peft_model
                lcfg = LoraConfig(r=self.cfg.lora_rank, lora_alpha=self.cfg.lora_alpha, lora_dropout=0.0,
                                  target_modules=lora_target_modules(backbone), bias="none")
                backbone = get_peft_model(backbone, lcfg)
            if self.lora and train_layers:   # the adapters of the frozen layers too
                frozen = frozen_lower_modules(backbone.get_base_model(), train_layers, "CRITIC_TRAIN_LAYERS")
                for _, _, module in frozen:
                    module.requires_grad_(False)
            model = ValueModel(backbone, hidden).to(device=self.device)
        model.value_head.to(torch_dtype(self.cfg.dtype))
        head = os.path.join(self.model_path, VALUE_HEAD_FILE)
        if os.path.exists(head):  # a critic saved by save_hf: keep its trained head
            model.value_head.load_state_dict({k: v.to(model.value_head.weight.dtype)
                                              for k, v in load_file(head).items()})
            log.info("critic: value head loaded from %s", head)
        self._build_engine(model, self.cfg.critic_lr)
        info = {"model_path": self.model_path, "device": str(self.device), "load_s": round(time.time() - t0, 2),
                "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
                "shares_reference_weights": shares_reference, "optim_state_dtype": self.optim_state_dtype}
        log.info("critic rank %d ready: %s", self.rank, info)
        return info

    @torch.no_grad()
    def values(self, batch: Batch, share: int = 1) -> torch.Tensor:
        """Values of the response positions: CPU float32 [B, R] (0 off the action mask).

        ``share``: actors the driver runs concurrently in this phase (they split CPU_THREADS).
        """
        self._phase_threads(share)
        self.engine.eval()
        def forward(mb):
            with autocast_context(self.autocast, self.device):
                return response_values(self.engine, mb, self.share_prompt)
        return batched_response_forward(forward, batch,
                                        self.cfg.micro_rollout_batch_size, self.device)

    def train_step(self, batch: Batch, value_clip: Optional[float] = None, share: int = 1) -> dict:
        """One pass of the clipped value loss (needs ``old_values`` and ``returns`` [B, R]).

        Returns means over micro batches: value_loss, vf_clipfrac, value_mean, plus grad_norm, lr.
        """
        check_batch(batch, need=("old_values", "returns"))
        clip = self.cfg.value_clip if value_clip is None else value_clip
        self._phase_threads(share)

        def loss_fn(mb):
            # under TRAIN_AUTOCAST (set by _ppo_pass)
            v = response_values(self.engine, mb, self.share_prompt).float()
            loss, m = value_loss(v, mb["old_values"].float(), mb["returns"].float(), mb["action_mask"], clip)
            return loss, {"value_loss": float(loss.detach()), **{k: float(x) for k, x in m.items()}}

        t0 = time.time()
        out = self._ppo_pass(batch, loss_fn)
        out["train_s"] = time.time() - t0
        return out

    def save_hf(self, out_dir: str) -> str:
        """Backbone as a HF folder (LoRA merged) + ``value_head.safetensors`` + tokenizer. Every rank calls it."""
        from safetensors.torch import save_file
        module = self.module
        with self._gathered(list(module.parameters())):
            if self.rank == 0:
                os.makedirs(out_dir, exist_ok=True)
                backbone = module.backbone
                if self.lora:
                    backbone = copy.deepcopy(backbone).merge_and_unload()
                sd = {k: v.detach().cpu().contiguous() for k, v in backbone.state_dict().items()}
                backbone.save_pretrained(out_dir, state_dict=sd, safe_serialization=True)
                save_file({k: v.detach().cpu().contiguous() for k, v in module.value_head.state_dict().items()},
                          os.path.join(out_dir, VALUE_HEAD_FILE))
                self.tokenizer.save_pretrained(out_dir)
        return out_dir
