"""The policy's and critic's optimizer: AdamW, with its moment estimates in fp32 or bf16 (OPTIM_STATE_DTYPE).

AdamW keeps two moments per parameter: fp32 state is 8 bytes per parameter, 1.08 GB for the embedded 135M model,
twice its weights. :class:`AdamWLowPrecisionState` stores both moments in bf16 (4 bytes per parameter) and does
all arithmetic in fp32: each step upcasts a parameter's moments, updates them with the fp32 gradient, applies the
update to the fp32 parameter from the unrounded moments, and stores the moments rounded to bf16. With the betas
used here (0.9, 0.95) every step moves a moment by 5-10%, well above bf16's relative rounding of 2^-9, so the
rounding does not freeze the moments (the failure mode of bf16 state with beta2 = 0.999 and round-to-nearest).
"""
from __future__ import annotations

from typing import Iterable

import torch

#: The AdamW hyper-parameters of the policy and the critic (weight decay off, as in OpenRLHF's PPO defaults).
BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.0


#: Elements per slice of :meth:`AdamWLowPrecisionState.step` (256 K: 1 MB per fp32 working copy).
STEP_CHUNK = 1 << 18


class AdamWLowPrecisionState(torch.optim.Optimizer):
    """AdamW (decoupled weight decay, bias-corrected moments) whose ``exp_avg`` / ``exp_avg_sq`` are stored in
    ``state_dtype``; parameters and gradients keep their own dtype and the update is computed in fp32.

    With ``state_dtype=torch.float32`` it computes what ``torch.optim.AdamW`` computes (tested).
    """

    def __init__(self, params: Iterable, lr: float, betas: tuple[float, float] = BETAS, eps: float = EPS,
                 weight_decay: float = WEIGHT_DECAY, state_dtype: torch.dtype = torch.bfloat16):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"AdamWLowPrecisionState: bad hyper-parameters lr={lr} betas={betas} eps={eps} "
                             f"weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.state_dtype = state_dtype

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's loader casts floating state to each parameter's dtype; the moments go back to ``state_dtype``."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key] = state[key].to(self.state_dtype)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, dtype=self.state_dtype, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=self.state_dtype,
                                                           memory_format=torch.preserve_format)
                state["step"] = state["step"] + 1   # not in place: a loaded state dict may share it
                t = float(state["step"])
                if wd:
                    p.mul_(1 - lr * wd)
                bias1, bias2 = 1 - beta1 ** t, 1 - beta2 ** t
                # in slices of STEP_CHUNK elements: the fp32 working copies stay small (the embedding's would be
                # 4 x 113 MB) and in cache
                tensors = (p.data, p.grad, state["exp_avg"], state["exp_avg_sq"])
                slices = zip(*(x.view(-1).split(STEP_CHUNK) for x in tensors)) \
                    if all(x.is_contiguous() for x in tensors) else [tensors]
                for param, grad, avg, avg_sq in slices:
                    grad = grad.float()
                    # fp32 working copies (a copy also for fp32 state: the stored moments must not see the update)
                    m = avg.to(torch.float32, copy=True).lerp_(grad, 1 - beta1)
                    v = avg_sq.to(torch.float32, copy=True).mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    avg.copy_(m)
                    avg_sq.copy_(v)
                    denom = v.div_(bias2).sqrt_().add_(eps)
                    param.add_(m.div_(denom).mul_(-lr / bias1).to(param.dtype))
        return loss


def resolve_state_dtype(state_dtype: str, device: torch.device | str) -> str:
    """OPTIM_STATE_DTYPE for an actor training on ``device``: ``auto`` is ``bf16`` on CPU (the moments are half of
    a CPU trainer's memory, and RAM is what a laptop runs out of) and ``fp32`` on accelerators (torch's fused
    kernel; DeepSpeed shards the state there)."""
    if state_dtype == "auto":
        return "bf16" if torch.device(device).type == "cpu" else "fp32"
    if state_dtype not in ("fp32", "bf16"):
        raise ValueError(f"OPTIM_STATE_DTYPE must be auto, fp32 or bf16, got {state_dtype!r}")
    return state_dtype


def make_adamw(params: list[torch.nn.Parameter], lr: float, state_dtype: str = "fp32",
               device: torch.device | str = "cpu") -> torch.optim.Optimizer:
    """The optimizer of a trainable actor on ``device``. ``state_dtype`` (OPTIM_STATE_DTYPE, ``auto`` resolved by
    :func:`resolve_state_dtype`): ``fp32``: ``torch.optim.AdamW``, with the fused kernel where every parameter is
    a float tensor on CPU or CUDA (one pass over all tensors instead of a loop over them); ``bf16``:
    :class:`AdamWLowPrecisionState` (half the state's memory, a slower step: docs/PERFORMANCE.md, "Optimizer
    state").
    """
    state_dtype = resolve_state_dtype(state_dtype, device)
    if state_dtype == "bf16":
        return AdamWLowPrecisionState(params, lr=lr, state_dtype=torch.bfloat16)
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(params, lr=lr, betas=BETAS, weight_decay=WEIGHT_DECAY, eps=EPS, fused=fused or None)
