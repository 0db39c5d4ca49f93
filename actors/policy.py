"""The policy actor: a causal LM under DeepSpeed, PPO train step, log-probs, weight export, checkpoints."""
from __future__ import annotations

import json
import logging
import os
import time
from contextlib import contextmanager
from typing import Optional

import torch
import torch.distributed as dist
from torch.multiprocessing.reductions import reduce_tensor

from actors.base import (BaseActor, abs_checksum, autocast_context, causal_lm_response_logprobs, ds_config,
                         frozen_lower_modules, response_logprobs, weights_checksum)
from actors.types import Batch, check_batch, length_grouped_order, trim_batch
from actors.weight_sync import stateless_nccl_group
from core.core_algos import masked_mean, policy_loss
from core.model_loader import load_causal_lm, resolve_model_path
from core.optim import make_adamw, resolve_state_dtype

log = logging.getLogger(__name__)

LORA_PREFIX = "base_model.model."


def lora_target_modules(model) -> list[str]:
    """Every nn.Linear's leaf name except the LM head (peft's 'all-linear' but explicit for older peft)."""
    names = set()
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and not name.endswith("lm_head"):
            names.add(name.rsplit(".", 1)[-1])
    return sorted(names)



def micro_batch_units(action_mask: torch.Tensor, micro: int, by_tokens: bool) -> list[float]:
    """What each micro batch of ``micro`` rows contributes to a batch-wide mean: its valid tokens
    (``by_tokens``: token-mean losses) or its sequences with at least one valid token (sequence means).

    A micro batch's loss is a mean over its own units; weighted by ``units[m] / sum(units)`` the micro batches
    of one optimizer step add up to the mean over all of the step's units.
    """
    m = action_mask.bool()
    out = []
    for i in range(0, m.shape[0], micro):
        part = m[i:i + micro]
        out.append(float(part.sum()) if by_tokens else float(part.any(dim=-1).sum()))
    return out

class TrainableLMActor(BaseActor):
    """DeepSpeed plumbing shared by the policy and critic: engine init, micro-batched PPO passes, checkpoints."""

    engine = None
    lr: float = 1e-6

    def _build_engine(self, model, lr: float) -> None:
        import deepspeed

        self._init_distributed()
        if self.cfg.gradient_checkpointing:
            inner = model.get_base_model() if hasattr(model, "get_base_model") else model
            target = getattr(inner, "backbone", inner)
            if hasattr(target, "activation_checkpointing_enable"):  # transformers >= 5.2x name
                target.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                target.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if self.cfg.lora_rank > 0 and hasattr(target, "enable_input_require_grads"):
                target.enable_input_require_grads()
        params = [p for p in model.parameters() if p.requires_grad]
        # our AdamW as DeepSpeed's client optimizer: no CPU-Adam compile, same maths (OPTIM_STATE_DTYPE)
        self.optim_state_dtype = resolve_state_dtype(self.cfg.optim_state_dtype, self.device)
        optim = make_adamw(params, lr, self.optim_state_dtype, self.device)
        self.ds_cfg = ds_config(self.cfg, self.world_size)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optim, config=self.ds_cfg,
                                                                 dist_init_required=False)
        self.lr = lr

    @property
    def module(self):
        return self.engine.module

    @property
    def share_prompt(self) -> bool:
        """SHARE_PROMPT_FORWARD, except under ZeRO-3 with several ranks: there every rank must run the same module
        forwards (each one gathers its parameters collectively), and whether a micro batch repeats a prompt can
        differ between ranks."""
        return bool(self.cfg.share_prompt_forward) and not (self.cfg.zero_stage == 3 and self.world_size > 1)

    # ------------------------------------------------------------------ the PPO pass
    def _ppo_pass(self, batch: Batch, loss_fn) -> dict:
        """One pass over ``batch`` in micro batches, an optimizer step every ``grad_accum`` micro batches.

        ``loss_fn(micro_batch_on_device) -> (loss, metrics)``. Every rank runs the same number of
        micro batches and optimizer steps (ranks with a shorter shard repeat their last micro batch with
        zero weight) so the gradient all-reduce never waits on a missing peer.
        """
        micro = self.cfg.micro_train_batch_size
        gas = self.ds_cfg["gradient_accumulation_steps"]
        B = int(batch["sequences"].shape[0])
        n_local = (B + micro - 1) // micro
        n_micro = n_local
        if self.world_size > 1:
            t = torch.tensor([n_local], device=self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            n_micro = int(t.item())
        if n_micro == 0:
            return {}
        self.engine.train()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        grad_norms = []
        steps = 0
        groups = [list(range(i, min(i + gas, n_micro))) for i in range(0, n_micro, gas)]
        # Each micro batch's loss is a mean over its own tokens (or sequences); weighting it by its share of the
        # optimizer step's valid tokens (sequences) makes the step's loss the mean over ALL of the step's tokens
        # (sequences) of this rank, as LOSS_AGG says, instead of a mean of per-micro-batch means (which gives the
        # tokens of a micro batch of short answers more weight).
        by_tokens = self.role != "policy" or self.cfg.effective_loss_agg == "token-mean"
        # each optimizer step's prompt groups by length: micro batches pair similar prompts (less padding)
        order = length_grouped_order(batch, gas * micro)
        batch = {key: v[order] for key, v in batch.items()}
        units = micro_batch_units(batch["action_mask"], micro, by_tokens)
        for group in groups:
            group_units = sum(units[m] for m in group if m < n_local)
            # One autocast region per optimizer step: autocast caches the bf16 casts of the fp32 weights inside a
            # region, so they are cast once per step instead of once per micro batch (TRAIN_AUTOCAST).
            with autocast_context(self.autocast, self.device):
                for k, m in enumerate(group):
                    real = m < n_local
                    idx = m if real else n_local - 1
                    if idx < 0:
                        raise RuntimeError(f"{self.role} rank {self.rank}: empty shard in a multi-rank train step; "
                                           "give every rank at least one sample")
                    mb = {key: v[idx * micro:(idx + 1) * micro] for key, v in batch.items()}
                    mb, _, _ = trim_batch(mb)
                    mb = {key: v.to(self.device) for key, v in mb.items()}
                    boundary = k == len(group) - 1
                    self.engine.set_gradient_accumulation_boundary(boundary)
                    loss, metrics = loss_fn(mb)
                    weight = (units[m] / group_units if group_units > 0 else 1.0 / len(group)) if real else 0.0
                    self.engine.backward(loss * weight, scale_wrt_gas=False)
                    if boundary and self.cfg.zero_stage < 2:
                        grad_norms.append(self._grad_norm())  # grads are full (and all-reduced) here
                    self.engine.step()
                    if real:
                        for name, v in metrics.items():
                            sums[name] = sums.get(name, 0.0) + float(v)
                            counts[name] = counts.get(name, 0) + 1
            if self.cfg.zero_stage >= 2:
                gn = self.engine.get_global_grad_norm()
                grad_norms.append(float(gn) if gn is not None else float("nan"))
            steps += 1
        self._weights_version += steps
        out = {k: sums[k] / counts[k] for k in sums}
        out["grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else 0.0
        out["lr"] = float(self.engine.optimizer.param_groups[0]["lr"]) if hasattr(self.engine.optimizer,
                                                                                   "param_groups") else self.lr
        out["optimizer_steps"] = steps
        out["micro_batches"] = n_local
        return out

    def _grad_norm(self) -> float:
        """L2 norm of the accumulated gradients, before clipping."""
        sq = torch.zeros((), dtype=torch.float64)
        for p in self.module.parameters():
            if p.grad is not None:
                sq += p.grad.detach().double().pow(2).sum().cpu()
        return float(sq.sqrt())

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, ckpt_dir: str, tag: Optional[str] = None, client_state: Optional[dict] = None) -> str:
        """DeepSpeed checkpoint (model + optimizer + engine counters) under ``ckpt_dir/<role>``. Every rank calls it."""
        path = os.path.join(ckpt_dir, self.role)
        tag = tag or "latest_ckpt"
        state = {"weights_version": self._weights_version, **(client_state or {})}
        self.engine.save_checkpoint(path, tag=tag, client_state=state)
        return path

    def load_checkpoint(self, ckpt_dir: str, tag: Optional[str] = None) -> dict:
        """Restore what :meth:`save_checkpoint` wrote; returns the client state. Every rank calls it."""
        path = os.path.join(ckpt_dir, self.role)
        if not os.path.isdir(path):
            raise FileNotFoundError(f"no {self.role} checkpoint under {ckpt_dir} (expected the folder {path})")
        load_path, client = self.engine.load_checkpoint(path, tag=tag, load_optimizer_states=True,
                                                        load_lr_scheduler_states=True)
        if load_path is None:
            raise FileNotFoundError(f"DeepSpeed found no loadable checkpoint in {path} (tag={tag})")
        client = client or {}
        self._weights_version = int(client.get("weights_version", self._weights_version))
        return {k: v for k, v in client.items() if isinstance(v, (int, float, str, bool, list, dict))}

    # ------------------------------------------------------------------ test / debug helpers
    @contextmanager
    def _gathered(self, params):
        """Full parameters inside the block (ZeRO-3 gathers, other stages are already full)."""
        if self.cfg.zero_stage == 3:
            import deepspeed
            with deepspeed.zero.GatheredParameters(list(params), modifier_rank=None):
                yield
        else:
            yield

    def weights_fingerprint(self) -> dict[str, float]:
        """float64 sum of every trainable parameter (cheap change detector for tests and debugging)."""
        named = [(n, p) for n, p in self.module.named_parameters() if p.requires_grad]
        with self._gathered([p for _, p in named]):
            return weights_checksum(named)

    def optimizer_fingerprint(self) -> dict[str, float]:
        """Sums of the AdamW moments and the step count (proves optimizer state round trips)."""
        opt = self.optimizer
        inner = getattr(opt, "optimizer", opt)
        m = v = 0.0
        step = 0.0
        for st in inner.state.values():
            if "exp_avg" in st:
                m += abs_checksum(st["exp_avg"])
                v += abs_checksum(st["exp_avg_sq"])
                step = max(step, float(st.get("step", 0)))
        return {"exp_avg": m, "exp_avg_sq": v, "step": step}


class PolicyActor(TrainableLMActor):
    """The policy: log-probs, PPO train step, weight export for the rollout engines, checkpoints."""

    role = "policy"

    def init_model(self) -> dict:
        """Load the causal LM (LoRA when LORA_RANK > 0), wrap it in DeepSpeed. Returns basic info."""
        t0 = time.time()
        self.model_path = resolve_model_path(self.cfg.model_path)
        self._load_tokenizer(self.model_path)
        model = load_causal_lm(self.model_path, dtype=self.cfg.dtype, device=str(self.device))
        model.config.use_cache = False
        self.lora = self.cfg.lora_rank > 0
        if self.lora:
            from peft import LoraConfig, get_peft_model
            lcfg = LoraConfig(r=self.cfg.lora_rank, lora_alpha=self.cfg.lora_alpha, lora_dropout=0.0,
                              target_modules=lora_target_modules(model), task_type="CAUSAL_LM", bias="none")
            with torch.random.fork_rng(devices=[]):   # the adapter's init from SEED (same in every layout)
                torch.manual_seed(self.cfg.seed)
                model = get_peft_model(model, lcfg)
        if self.cfg.actor_train_layers:   # the embeddings and the layers below (with LoRA: their adapters too)
            decoder = (model.get_base_model() if self.lora else model).get_decoder()
            for _, _, module in frozen_lower_modules(decoder, self.cfg.actor_train_layers, "ACTOR_TRAIN_LAYERS"):
                module.requires_grad_(False)
        self._build_engine(model, self.cfg.actor_lr)
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        info = {"model_path": self.model_path, "trainable_params": n_train, "device": str(self.device),
                "load_s": round(time.time() - t0, 2), "grad_accum": self.ds_cfg["gradient_accumulation_steps"],
                "optim_state_dtype": self.optim_state_dtype}
        log.info("policy rank %d ready: %s", self.rank, info)
        return info

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def logprobs(self, batch: Batch, share: int = 1) -> torch.Tensor:
        """Log-probs of the response tokens under the current policy: CPU float32 [B, R] (0 off the action mask).

        ``share``: actors the driver runs concurrently in this phase (they split CPU_THREADS).
        """
        self._phase_threads(share)
        self.engine.eval()
        return response_logprobs(self.engine, batch, self.cfg, self.device, self.autocast, self.share_prompt)

    # ------------------------------------------------------------------ training
    def train_step(self, batch: Batch, eps_clip: Optional[float] = None, share: int = 1) -> dict:
        """One PPO pass over ``batch`` (needs ``advantages`` [B, R]; ``old_logprobs`` [B, R] unless this pass
        is the rollout's only update, where the pass's own detached log-probs are the old ones: ratio 1).

        The loss is ``core_algos.policy_loss`` with EPS_CLIP, EPS_CLIP_HIGH and LOSS_AGG (Dr.GRPO's constant
        normaliser is GENERATE_MAX_LEN): :meth:`core.config.RLFHConfig.policy_loss_kwargs`.

        Returns means over micro batches: policy_loss, clipfrac, approx_kl, entropy, plus grad_norm (mean
        over optimizer steps), lr, optimizer_steps, train_s and train_threads (the intra-op threads it used).
        """
        check_batch(batch, need=("advantages",))
        clip = self.cfg.eps_clip if eps_clip is None else eps_clip
        loss_kwargs = self.cfg.policy_loss_kwargs()
        threads = self._phase_threads(share)

        def loss_fn(mb):
            lp, ent = causal_lm_response_logprobs(self.engine, mb, self.cfg.temperature, with_entropy=True,
                                                  share_prompt=self.share_prompt)
            old = mb["old_logprobs"].float() if "old_logprobs" in mb else lp.detach()
            loss, m = policy_loss(lp, old, mb["advantages"].float(), mb["action_mask"], clip, **loss_kwargs)
            metrics = {"policy_loss": float(loss.detach()), "clipfrac": m.get("clipfrac", 0.0),
                       "approx_kl": m.get("approx_kl", 0.0),
                       "entropy": float(masked_mean(ent.detach(), mb["action_mask"]))}
            return loss, metrics

        t0 = time.time()
        out = self._ppo_pass(batch, loss_fn)
        out["train_s"] = time.time() - t0
        out["train_threads"] = threads   # CPU_THREADS=0 drops to 1 when other processes keep the cores busy
        return out

    # ------------------------------------------------------------------ weight export
    def _hf_named_tensors(self):
        """Yield ``(hf_name, full_tensor)`` for every weight the inference model needs (LoRA merged).

        Tied weights appear once (under the first name, e.g. ``model.embed_tokens.weight``). Must be
        called on every rank under ZeRO-3 (parameters are gathered one module at a time).
        """
        module = self.module
        if not self.lora:
            seen = set()
            for name, p in module.named_parameters():
                if id(p) in seen:
                    continue
                seen.add(id(p))
                with self._gathered([p]):
                    yield name, p.detach()
            for name, b in module.named_buffers():
                if name.endswith("inv_freq") or "rotary" in name:
                    continue  # recomputed at load, not part of a HF checkpoint
                yield name, b.detach()
            return
        from peft.tuners.lora import LoraLayer
        adapter = "default"
        lora_layers = {name: mod for name, mod in module.named_modules() if isinstance(mod, LoraLayer)}
        seen = set()
        for name, p in module.named_parameters():
            if "lora_" in name or id(p) in seen:
                continue
            seen.add(id(p))
            clean = name[len(LORA_PREFIX):] if name.startswith(LORA_PREFIX) else name
            owner = name.rsplit(".", 2)[0] if ".base_layer." in name else None
            if owner is not None and owner in lora_layers and name.endswith(".base_layer.weight"):
                layer = lora_layers[owner]
                with self._gathered([p, *layer.parameters()]):
                    w = p.detach() + layer.get_delta_weight(adapter).to(p.dtype)
                yield clean.replace(".base_layer", ""), w
            else:
                with self._gathered([p]):
                    yield clean.replace(".base_layer", ""), p.detach()

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        """Full HF-named weights on CPU (LoRA merged, ZeRO-3 gathered). Rank 0 returns them; other ranks ``{}``.

        Every rank must be called (ZeRO-3 gathers are collective).
        """
        t0 = time.time()
        out = {}
        for name, t in self._hf_named_tensors():
            if self.rank == 0:
                out[name] = t.to("cpu", copy=True).contiguous()
        if self.rank == 0:
            nbytes = sum(t.numel() * t.element_size() for t in out.values())
            self._last_export = {"tensors": len(out), "bytes": nbytes, "export_s": time.time() - t0,
                                 "version": self._weights_version}
        return out

    @torch.no_grad()
    def copy_weights_into(self, model: torch.nn.Module) -> dict:
        """Copy the inference weights into ``model`` (an engine's module in this process) in place, tensor by
        tensor: on one GPU a device-to-device copy per tensor, no CPU round trip and no second full copy in
        flight (ZeRO-3 gathers one module at a time). Every rank must call it. Returns what moved.

        The colocated layout needs none of this (its engine samples from this very module); this is the sync of
        a separate engine in the same process (``scripts/gpu_smoke.py``'s in-process mode).
        """
        t0 = time.time()
        targets = dict(model.named_parameters(remove_duplicate=False))
        targets.update(model.named_buffers())
        tensors = nbytes = 0
        for name, t in self._hf_named_tensors():
            dst = targets.get(name)
            if dst is None:
                raise KeyError(f"copy_weights_into: the engine's model has no {name!r}")
            if tuple(dst.shape) != tuple(t.shape):
                raise ValueError(f"copy_weights_into: {name} is {tuple(t.shape)} here, {tuple(dst.shape)} there")
            dst.data.copy_(t)
            tensors, nbytes = tensors + 1, nbytes + t.numel() * t.element_size()
        self._last_export = {"tensors": tensors, "bytes": nbytes, "export_s": time.time() - t0,
                             "version": self._weights_version, "in_place": True}
        return dict(self._last_export)

    def sync_meta(self) -> dict:
        """Numbers from the last :meth:`state_dict_for_sync` (tensors, bytes, export_s, version)."""
        return dict(getattr(self, "_last_export", {}), version=self._weights_version)

    def weight_meta(self) -> list[tuple[str, str, list[int]]]:
        """``(hf_name, dtype, shape)`` of every exported tensor, in broadcast order (NCCL / IPC sync)."""
        return [(n, str(t.dtype).replace("torch.", ""), list(t.shape)) for n, t in self._hf_named_tensors()]

    # -------------- GPU weight sync: NCCL broadcast to vLLM workers (policy rank 0 is rank 0 of that group)
    def init_weight_sync_group(self, master_addr: str, master_port: int, world_size: int) -> bool:
        """Join the policy-rank-0 + vLLM-workers NCCL group (rank 0 only; other ranks return at once)."""
        if self.rank != 0:
            return True
        self._sync_group = stateless_nccl_group(master_addr, master_port, 0, world_size, self.device)
        return True

    def broadcast_weights_nccl(self) -> dict:
        """Broadcast every exported tensor (order of :meth:`weight_meta`) from rank 0. All ranks must call it."""
        t0 = time.time()
        n = nbytes = 0
        for name, t in self._hf_named_tensors():
            if self.rank == 0:
                t = t.to(self.device).contiguous()
                self._sync_group.broadcast(t, src=0, stream=torch.cuda.current_stream())
                n += 1
                nbytes += t.numel() * t.element_size()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return {"tensors": n, "bytes": nbytes, "seconds": time.time() - t0, "version": self._weights_version}

    # -------------- GPU weight sync: CUDA IPC handles to colocated vLLM workers (same GPU)
    def ipc_handles_for_sync(self, bucket_bytes: int = 1 << 30, bucket: int = 0) -> dict:
        """CUDA IPC handles of one bucket of full weights, starting at tensor index ``bucket``.

        Every rank returns the handles of its own GPU copy (all ranks hold full weights after the gather), so
        each colocated vLLM worker picks the rank on its GPU: ``{"uuid": gpu_uuid, "handles": [(name,
        (rebuild_fn, args)), ...], "more": bool, "next": int, "bytes": int}``. The tensors stay alive here until
        :meth:`release_ipc` (call it once every engine has loaded the bucket).
        """
        keep, handles = [], []
        size = 0
        index = 0
        more = False
        start = bucket
        uuid = str(torch.cuda.get_device_properties(self.device).uuid)
        for name, t in self._hf_named_tensors():
            b = t.numel() * t.element_size()
            if index < start:
                index += 1
                continue
            if size and size + b > bucket_bytes:
                more = True
                break
            t = t.to(self.device).clone().contiguous()  # a private copy: training may not touch it meanwhile
            keep.append(t)
            handles.append((name, reduce_tensor(t)))
            size += b
            index += 1
        torch.cuda.synchronize()
        self._ipc_keep = keep
        return {"uuid": uuid, "handles": handles, "more": more, "next": index, "bytes": size}

    def release_ipc(self) -> bool:
        self._ipc_keep = []
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return True

    # ------------------------------------------------------------------ HF export
    def save_hf(self, out_dir: str) -> str:
        """HF folder (safetensors + config + tokenizer) of the current policy, LoRA merged. Every rank calls it."""
        sd = self.state_dict_for_sync()
        if self.rank == 0:
            os.makedirs(out_dir, exist_ok=True)
            base = self.module.get_base_model() if self.lora else self.module
            base.save_pretrained(out_dir, state_dict=sd, safe_serialization=True)
            self.tokenizer.save_pretrained(out_dir)
            with open(os.path.join(out_dir, "rlfh_meta.json"), "w") as f:
                json.dump({"weights_version": self._weights_version, "source": self.model_path}, f)
        return out_dir
