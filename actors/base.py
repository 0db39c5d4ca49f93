"""What every model actor shares: config, rank / world size, device, torch.distributed setup, forwards.

Actor classes here are plain Python classes; :class:`actors.group.ActorGroup`
wraps them with ``ray.remote``. Every public method returns plain Python or
CPU tensors so results cross Ray without CUDA.

The forward helpers implement the log-prob / value convention of
:mod:`actors.types`: response column ``j`` is token ``sequences[:, P + j]``,
scored from the model output at position ``P + j - 1``.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any, Optional

import torch

from actors.types import Batch, check_batch, pad_response, position_ids, prompt_length, response_length, trim_batch
from cluster.config import RLFHConfig

log = logging.getLogger(__name__)


def node_ip() -> str:
    """This node's IP as Ray sees it (loopback outside Ray)."""
    try:
        import ray
        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:
        pass
    return "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def pick_device() -> torch.device:
    """cuda:0 when this process sees a GPU (Ray sets CUDA_VISIBLE_DEVICES per actor) and RLFH_FORCE_CPU != 1.

    The device form of :func:`actors.model_loader.default_device` (one rule for every loader and actor).
    """
    from actors.model_loader import default_device
    return torch.device("cuda", 0) if default_device() == "cuda" else torch.device("cpu")


class BaseActor:
    """Rank bookkeeping and distributed init shared by the policy, critic and reference actors.

    Args:
        cfg: the run's :class:`RLFHConfig` (or its ``model_dump()`` dict).
        rank / world_size: this actor's place in its group.
        master_addr / master_port: rank 0's rendezvous (rank 0 picks its own when None).
    """

    role = "base"

    def __init__(self, cfg: RLFHConfig | dict, rank: int = 0, world_size: int = 1,
                 master_addr: Optional[str] = None, master_port: Optional[int] = None):
        self.cfg = cfg if isinstance(cfg, RLFHConfig) else RLFHConfig(**cfg)
        self.rank, self.world_size = int(rank), int(world_size)
        if master_addr is None:
            master_addr, master_port = node_ip(), free_port()
        self.master_addr, self.master_port = master_addr, int(master_port)
        os.environ.update({
            "MASTER_ADDR": str(master_addr), "MASTER_PORT": str(master_port), "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        })
        self.device = pick_device()
        if self.device.type == "cpu":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        # Intra-op threads: Ray gives fractional-CPU actors OMP_NUM_THREADS=1, and that is what a shared CPU box
        # wants (2 threads per actor on 2 busy cores ran a train step ~10x slower in OpenMP barriers).
        # RLFH_TORCH_THREADS overrides it for dedicated machines.
        threads = os.environ.get("RLFH_TORCH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        self.model = None
        self.tokenizer = None
        self._weights_version = 0
        logging.basicConfig(level=os.environ.get("RLFH_LOG_LEVEL", "INFO"),
                            format=f"%(asctime)s {self.role}[{self.rank}] %(levelname)s %(message)s")

    # ------------------------------------------------------------------ group plumbing
    def master_address(self) -> tuple[str, int]:
        """Rank 0's rendezvous address, handed to the other ranks by the group."""
        return self.master_addr, self.master_port

    def ping(self) -> dict:
        return {"role": self.role, "rank": self.rank, "world_size": self.world_size, "pid": os.getpid(),
                "device": str(self.device), "node_ip": node_ip()}

    def weights_version(self) -> int:
        return self._weights_version

    def free_port(self) -> int:
        """A free TCP port on this actor's node (rendezvous for extra groups, e.g. the weight-sync group)."""
        return free_port()

    def device_uuid(self) -> str:
        """The GPU's UUID ("cpu" on CPU): matches colocated actors to vLLM workers on the same GPU."""
        if self.device.type == "cuda":
            return str(torch.cuda.get_device_properties(self.device).uuid)
        return "cpu"

    def _init_distributed(self) -> None:
        """deepspeed.init_distributed over MASTER_ADDR/PORT: gloo on CPU, nccl on GPU."""
        import deepspeed
        import torch.distributed as dist
        if dist.is_initialized():
            return
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        if self.device.type == "cpu" and os.environ.get("RLFH_DS_SHM_COMM") != "1":
            # DeepSpeed JIT-compiles a shared-memory all-reduce op for CPU ranks (minutes of g++ on a fresh
            # machine). gloo does the same job; opt back in with RLFH_DS_SHM_COMM=1.
            try:
                import deepspeed.ops as ds_ops
                ds_ops.__compatible_ops__["deepspeed_shm_comm"] = False
            except Exception:  # pragma: no cover - layout of older DeepSpeed
                pass
        t0 = time.time()
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, rank=self.rank,
                                   world_size=self.world_size, distributed_port=self.master_port,
                                   init_method=f"tcp://{self.master_addr}:{self.master_port}")
        log.info("%s rank %d/%d: %s process group up in %.1fs", self.role, self.rank, self.world_size, backend,
                 time.time() - t0)

    def shutdown(self) -> bool:
        """Tear down the process group (safe to call twice)."""
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as e:  # pragma: no cover - best effort at exit
                log.warning("destroy_process_group failed: %s", e)
        return True

    # ------------------------------------------------------------------ helpers
    def _load_tokenizer(self, path: str):
        from actors.model_loader import load_tokenizer
        self.tokenizer = load_tokenizer(path)
        return self.tokenizer

    def _micro_batches(self, batch: Batch, size: int) -> list[Batch]:
        B = int(batch["sequences"].shape[0])
        return [{k: v[i:i + size] for k, v in batch.items()} for i in range(0, B, max(1, size))]


def ds_config(cfg: RLFHConfig, world_size: int, train: bool = True, offload: bool = False) -> dict:
    """DeepSpeed config from the run's settings.

    ``train_batch_size = micro * grad_accum * world_size`` (DeepSpeed checks this):
    grad_accum = TRAIN_BATCH_SIZE / (MICRO_TRAIN_BATCH_SIZE * world_size), at least 1.
    """
    micro = cfg.micro_train_batch_size
    gas = max(1, cfg.train_batch_size // (micro * world_size))
    zero: dict[str, Any] = {"stage": cfg.zero_stage}
    if cfg.zero_stage >= 2:
        zero.update({"overlap_comm": False, "contiguous_gradients": True, "reduce_bucket_size": 5e7})
    if cfg.zero_stage == 3:
        zero.update({"stage3_param_persistence_threshold": 1e5, "stage3_prefetch_bucket_size": 5e7,
                     "stage3_gather_16bit_weights_on_model_save": True})
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_batch_size": micro * gas * world_size,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": cfg.max_norm,
        "zero_optimization": zero,
        "bf16": {"enabled": cfg.dtype == "bf16"},
        "fp16": {"enabled": cfg.dtype == "fp16", "initial_scale_power": 16},
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
        "zero_allow_untested_optimizer": True,
    }


def causal_lm_response_logprobs(model, batch: Batch, temperature: float = 1.0, with_entropy: bool = False):
    """Log-probs of the response tokens under a causal LM.

    Args:
        model: a HF causal LM (or DeepSpeed engine / peft wrapper around one), on any device.
        batch: ``sequences`` / ``attention_mask`` [B, L] and ``action_mask`` [B, R] (on the model's device).
        temperature: logits are divided by it (the rollout sampled at this temperature).
        with_entropy: also return the per-token entropy.
    Returns:
        ``logprobs`` [B, R] float32 (0 where ``action_mask`` is False), and ``entropy`` [B, R] when asked.
    """
    from cluster.core_algos import entropy_from_logits, logprobs_from_logits
    seq, attn = batch["sequences"], batch["attention_mask"]
    P, R = prompt_length(batch), response_length(batch)
    # Only the last R + 1 positions' logits are needed: skip the LM head on the prompt.
    out = model(input_ids=seq, attention_mask=attn, position_ids=position_ids(attn), use_cache=False,
                logits_to_keep=R + 1)
    logits = out.logits[:, :R]  # positions P-1 .. P+R-2
    if temperature != 1.0:
        logits = logits / temperature
    labels = seq[:, P:P + R]
    lp = logprobs_from_logits(logits, labels)
    mask = batch["action_mask"]
    lp = torch.where(mask, lp, torch.zeros((), dtype=lp.dtype, device=lp.device))
    if not with_entropy:
        return lp
    ent = entropy_from_logits(logits.detach())  # a metric: no graph through the [B, R, V] softmax
    return lp, torch.where(mask, ent, torch.zeros((), dtype=ent.dtype, device=ent.device))


def batched_response_forward(fn, batch: Batch, micro: int, device: torch.device) -> torch.Tensor:
    """Run ``fn(micro_batch_on_device) -> [b, r']`` over trimmed micro batches; return CPU [B, R] float32."""
    check_batch(batch)
    B, R = int(batch["sequences"].shape[0]), response_length(batch)
    if B == 0:
        return torch.zeros((0, R), dtype=torch.float32)
    outs = []
    for i in range(0, B, max(1, micro)):
        mb = {k: v[i:i + micro] for k, v in batch.items()}
        mb, _, _ = trim_batch(mb)
        mb = {k: v.to(device) for k, v in mb.items()}
        outs.append(pad_response(fn(mb).float().cpu(), R))
    return torch.cat(outs, 0)


def response_logprobs(model, batch: Batch, cfg: RLFHConfig, device: torch.device) -> torch.Tensor:
    """Response log-probs of a causal LM at the rollout ``TEMPERATURE``: CPU float32 [B, R], 0 off the action mask.

    Micro batches of ``MICRO_ROLLOUT_BATCH_SIZE`` (trimmed, on ``device``); call it under ``torch.no_grad()``.
    The one forward the policy (old log-probs), the reference (KL) and the HF rollout engine share.
    """
    return batched_response_forward(lambda mb: causal_lm_response_logprobs(model, mb, cfg.temperature),
                                    batch, cfg.micro_rollout_batch_size, device)


def to_device(batch: Batch, device: torch.device) -> Batch:
    return {k: v.to(device) for k, v in batch.items()}
