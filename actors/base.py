"""What every model actor shares: config, rank / world size, device, torch.distributed setup, forwards.

Actor classes here are plain Python classes; :class:`actors.group.ActorGroup`
wraps them with ``ray.remote``. Every public method returns plain Python or
CPU tensors so results cross Ray without CUDA.

The forward helpers implement the log-prob / value convention of
:mod:`actors.types`: response column ``j`` is token ``sequences[:, P + j]``,
scored from the model output at position ``P + j - 1``.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any, Optional

import torch
import torch.distributed as dist

from actors.types import (Batch, check_batch, pad_response, position_ids, prompt_groups, prompt_length, response_length,
                          MIN_SHARED_PREFIX, columns_after_shared_prefix, shared_prefix_length, trim_batch,
                          uses_sliding_window)
from core.config import ProcessSettings, RLFHConfig
from core.core_algos import entropy_from_logits, logprobs_from_logits
from core.model_loader import default_device, load_tokenizer
from core.ports import free_port

log = logging.getLogger(__name__)



def cpu_has_fast_bf16() -> bool:
    """True when this CPU computes bf16 natively (oneDNN: AVX512-BF16 or AMX)."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:  # noqa: BLE001 - older torch / no oneDNN
        return False


def process_allocator(pid: Optional[int] = None) -> str:
    """The malloc a process runs with: ``jemalloc`` when libjemalloc is mapped into it (ACTOR_ALLOCATOR),
    ``system`` otherwise, ``unknown`` where /proc cannot tell (not Linux, another user's process)."""
    try:
        with open(f"/proc/{pid or 'self'}/maps") as f:
            return "jemalloc" if any("libjemalloc" in line for line in f) else "system"
    except OSError:
        return "unknown"


def cpu_summary() -> str:
    """One line for benchmark tables: cores, torch's CPU instruction set level and whether bf16 is native.
    Timings on CPU depend on both (bf16 autocast on a CPU with native bf16 against fp32: docs/PERFORMANCE.md,
    "Mixed precision on CPU"), so every table says it."""
    try:
        isa = torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001 - older torch
        isa = "unknown ISA"
    return f"{machine_cores()} cores, {isa}, bf16 {'native' if cpu_has_fast_bf16() else 'not native'}"


def resolve_train_autocast(cfg: RLFHConfig, device: torch.device) -> Optional[torch.dtype]:
    """TRAIN_AUTOCAST as a dtype for ``torch.autocast`` (None: no autocast).

    ``auto`` is bf16 on a CPU with native bf16 when the weights are fp32 (DTYPE=fp32), else off: on GPUs the
    weights themselves are bf16 (DTYPE=bf16) and autocast adds nothing.
    """
    if cfg.train_autocast == "off" or cfg.dtype != "fp32":
        return None
    if cfg.train_autocast == "bf16":
        return torch.bfloat16
    return torch.bfloat16 if device.type == "cpu" and cpu_has_fast_bf16() else None


def autocast_context(dtype: Optional[torch.dtype], device: torch.device):
    """``torch.autocast`` for ``dtype`` on ``device``; a no-op context for None.

    Weights, gradients and optimizer state stay fp32 (the master copy); matmuls run in ``dtype``. Log-probs are
    still returned in fp32 (the LM head's chunks are upcast before the log-softmax)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def weights_checksum(named_params) -> dict[str, float]:
    """name -> float64 sum of the parameter: a cheap change detector (tests, debugging, weight-sync checks).

    Summed by numpy (pairwise, single-threaded) rather than ``torch.sum``: a parallel reduction's order, and so
    its last bits, depends on the torch thread count, which the actors change between phases (CPU_THREADS
    auto), so two checksums of the same weights could differ. The float64 conversion is exact.
    """
    import numpy as np
    return {n: float(np.sum(p.detach().to("cpu", torch.float64).numpy())) for n, p in named_params}


def abs_checksum(t: torch.Tensor) -> float:
    """float64 sum of ``|t|``, order-stable like :func:`weights_checksum` (optimizer-state fingerprints)."""
    import numpy as np
    return float(np.sum(np.abs(t.detach().to("cpu", torch.float64).numpy())))


def node_ip() -> str:
    """This node's IP as Ray sees it (loopback outside Ray)."""
    try:
        import ray
        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:
        pass
    return "127.0.0.1"


def machine_cores() -> int:
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def other_load(window_s: float = 0.2) -> float:
    """Cores kept busy right now (machine-wide, from ``/proc/stat`` over ``window_s``); 0.0 when unknown.

    Called while this run's other actors wait for the calling one, so it measures other people's jobs.
    """
    def snap():
        with open("/proc/stat", encoding="ascii") as fh:
            vals = [int(x) for x in fh.readline().split()[1:]]
        return sum(vals), vals[3] + (vals[4] if len(vals) > 4 else 0)
    try:
        t0, i0 = snap()
        time.sleep(window_s)
        t1, i1 = snap()
    except (OSError, ValueError, IndexError):
        return 0.0
    total = t1 - t0
    return 0.0 if total <= 0 else machine_cores() * max(0.0, 1.0 - (i1 - i0) / total)


#: Busy cores (other jobs) above which CPU_THREADS=0 uses one thread, and how long a probe's answer is kept.
#: Most of a core: a CPU-bound job beside the run keeps at least one busy, while the run's own Ray processes
#: (raylet, GCS, dashboard, the Serve replicas between calls) keep 0.3-0.6 of one busy on a quiet machine. At 0.5
#: that noise alone sent whole phases to one thread, and they ran slower (docs/PERFORMANCE.md, "CPU threads on a
#: busy machine"). `rlfh eval` uses the same rule.
BUSY_THRESHOLD = 0.9
_PROBE_TTL_S = 30.0
_probe: dict[str, float] = {}


def auto_cores(now: Optional[float] = None) -> int:
    """CPU_THREADS=0: every core on a quiet machine, ONE when other jobs keep most of a core busy (BUSY_THRESHOLD).

    On a shared 2-core machine two OpenMP threads that are descheduled in turn wait for each other at every
    op, so one thread is faster there (docs/PERFORMANCE.md, "CPU threads on a busy machine"). The probe (0.2 s
    of /proc/stat) is cached for 30 s per process.
    """
    now = time.monotonic() if now is None else now
    if now - _probe.get("at", -1e9) > _PROBE_TTL_S:
        cores, busy = machine_cores(), other_load()
        n = float(cores if cores <= 1 or busy <= BUSY_THRESHOLD else 1)
        if n != _probe.get("cores", float(cores)):   # say so when the rule changes its answer, not every probe
            log.info("CPU_THREADS=0 (auto): other processes keep %.1f of %d cores busy: %d intra-op thread(s) for "
                     "the next %.0f s (set CPU_THREADS to fix the count)", busy, cores, int(n), _PROBE_TTL_S)
        _probe["cores"] = n
        _probe["at"] = now
    return int(_probe["cores"])


def phase_threads(cfg: RLFHConfig, share: int = 1, device: Optional[torch.device] = None) -> int:
    """Intra-op threads for one phase (generate, a log-prob forward, a train step) of an actor on CPU.

    ``CPU_THREADS`` (0: :func:`auto_cores`, i.e. every core of a quiet machine) divided by ``share``, the
    number of actors the driver runs at the same time in this phase (e.g. 2 when the critic and the policy
    train concurrently), at least 1. Ray starts fractional-CPU actors with ``OMP_NUM_THREADS=1``; without
    this the actor that works computes on one core while the idle ones hold the rest.
    ``RLFH_TORCH_THREADS`` (``cfg.torch_threads``, when > 0) overrides everything.
    """
    forced = int(getattr(cfg, "torch_threads", 0) or 0)
    if forced:
        return forced
    total = int(getattr(cfg, "cpu_threads", 0) or 0) or auto_cores()
    return max(1, total // max(1, int(share)))


def set_threads(n: int) -> int:
    """``torch.set_num_threads(n)`` when it changes anything; returns ``n``."""
    n = max(1, int(n))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def pick_device() -> torch.device:
    """cuda:0 when this process sees a GPU (Ray sets CUDA_VISIBLE_DEVICES per actor) and RLFH_FORCE_CPU is off.

    The device form of :func:`core.model_loader.default_device` (one rule for every loader and actor).
    """
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
            master_addr, master_port = node_ip(), free_port("")   # other nodes' ranks connect to it
        self.master_addr, self.master_port = master_addr, int(master_port)
        os.environ.update({
            "MASTER_ADDR": str(master_addr), "MASTER_PORT": str(master_port), "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        })
        self.device = pick_device()
        #: TRAIN_AUTOCAST resolved: every forward of this actor's model that feeds the loss runs in it.
        self.autocast = resolve_train_autocast(self.cfg, self.device)
        if self.device.type == "cpu":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        # Intra-op threads: Ray gives fractional-CPU actors OMP_NUM_THREADS=1; each phase (forward, train step)
        # sets its own count from CPU_THREADS (see :meth:`_phase_threads`). RLFH_TORCH_THREADS forces one.
        if self.cfg.torch_threads:
            set_threads(self.cfg.torch_threads)
        self.model = None
        self.tokenizer = None
        self._weights_version = 0
        logging.basicConfig(level=ProcessSettings.load().log_level,
                            format=f"%(asctime)s {self.role}[{self.rank}] %(levelname)s %(message)s")

    def _phase_threads(self, share: int = 1) -> int:
        """Set this phase's intra-op threads: CPU_THREADS split over ``share`` concurrent actors and over this
        group's ranks on one node (data-parallel CPU ranks run at the same time)."""
        nodes = {"policy": self.cfg.actor_num_nodes, "critic": self.cfg.critic_num_nodes,
                 "reference": self.cfg.ref_num_nodes}.get(self.role, 1)
        local = max(1, self.world_size // max(1, nodes))
        return set_threads(phase_threads(self.cfg, max(1, int(share)) * local, self.device))

    def phase_threads(self, share: int = 1) -> dict:
        """Apply this actor's phase thread rule now; ``{"threads": n, "omp_env": OMP_NUM_THREADS}`` (debugging)."""
        return {"threads": self._phase_threads(share), "omp_env": os.environ.get("OMP_NUM_THREADS", "")}

    # ------------------------------------------------------------------ group plumbing
    def master_address(self) -> tuple[str, int]:
        """Rank 0's rendezvous address, handed to the other ranks by the group."""
        return self.master_addr, self.master_port

    def ping(self) -> dict:
        return {"role": self.role, "rank": self.rank, "world_size": self.world_size, "pid": os.getpid(),
                "device": str(self.device), "node_ip": node_ip(), "allocator": process_allocator()}

    def weights_version(self) -> int:
        return self._weights_version

    def free_port(self) -> int:
        """A free TCP port on this actor's node (rendezvous for extra groups, e.g. the weight-sync group)."""
        return free_port("")

    def device_uuid(self) -> str:
        """The GPU's UUID ("cpu" on CPU): matches colocated actors to vLLM workers on the same GPU."""
        if self.device.type == "cuda":
            return str(torch.cuda.get_device_properties(self.device).uuid)
        return "cpu"

    def _init_distributed(self) -> None:
        """deepspeed.init_distributed over MASTER_ADDR/PORT: gloo on CPU, nccl on GPU."""
        import deepspeed
        if dist.is_initialized():
            return
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        if self.device.type == "cpu" and not self.cfg.ds_shm_comm:
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
        if dist.is_available() and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as e:  # pragma: no cover - best effort at exit
                log.warning("destroy_process_group failed: %s", e)
        return True

    # ------------------------------------------------------------------ helpers
    def _load_tokenizer(self, path: str):
        self.tokenizer = load_tokenizer(path)
        return self.tokenizer


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


#: Model types whose causal-LM head is exactly ``lm_head(decoder(x).last_hidden_state)`` (no logit scaling or
#: soft-capping): their response log-probs are computed from the hidden states in row chunks.
HEAD_ONLY_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
#: Positions per chunk of the LM head + log-softmax (a chunk's fp32 logits: rows x vocab x 4 bytes).
LOGPROB_CHUNK_ROWS = 256
#: Under autograd, chunks are checkpointed (logits recomputed in the backward pass) only when the whole micro
#: batch's fp32 logits would exceed this: below it, keeping them is cheaper than a second LM-head pass
#: (docs/PERFORMANCE.md, "Log-probs under autograd").
LOGPROB_KEEP_LOGITS_BYTES = 256 << 20


def decoder_layers(decoder, setting: str) -> "torch.nn.ModuleList":
    """The transformer blocks of a HF decoder (``config.num_hidden_layers`` of them, in order); ``setting`` names
    what asked for them in the error."""
    n = getattr(getattr(decoder, "config", None), "num_hidden_layers", None)
    lists = [m for m in decoder.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    if not lists:
        raise ValueError(f"{type(decoder).__name__}: no ModuleList of num_hidden_layers={n} transformer layers; "
                         f"{setting} needs a standard HF decoder (set {setting}=0)")
    return lists[0]


def frozen_lower_modules(decoder, train_layers: int, setting: str) -> list[tuple]:
    """``(parent, attribute name, module)`` of what training only the last ``train_layers`` transformer layers
    freezes: the input embeddings (and with them an LM head tied to them) and every layer below. ``decoder``: the
    base model (no LM head). Nothing below the lowest trained layer needs a gradient, so the backward stops there.
    ``setting`` (CRITIC_TRAIN_LAYERS, ACTOR_TRAIN_LAYERS, the warm start's --train-layers) names the value in the
    error."""
    layers = decoder_layers(decoder, setting)
    if not 0 < train_layers <= len(layers):
        raise ValueError(f"{setting}={train_layers}: the model has {len(layers)} transformer layers; "
                         f"use 1..{len(layers)}, or 0 to train all of them")
    embed = decoder.get_input_embeddings()
    parent = next(m for m in decoder.modules() if any(c is embed for c in m.children()))
    name = next(k for k, c in parent.named_children() if c is embed)
    return [(parent, name, embed)] + [(layers, str(i), layers[i]) for i in range(len(layers) - train_layers)]


def _decoder_and_head(model):
    """``(decoder, lm_head)`` of a HF causal LM (inside a DeepSpeed engine / peft wrapper) whose logits are
    exactly ``lm_head(decoder(...).last_hidden_state)``; None for any other model (full-logits path)."""
    m = model.module if isinstance(getattr(model, "module", None), torch.nn.Module) else model
    if hasattr(m, "get_base_model"):
        m = m.get_base_model()
    if getattr(getattr(m, "config", None), "model_type", None) not in HEAD_ONLY_MODEL_TYPES:
        return None
    try:
        dec, head = m.get_decoder(), m.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    return None if dec is None or head is None else (dec, head)


def _can_share_prompt(decoder, batch: Batch) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`prompt_groups` when :func:`response_hidden_states` may split the forward at the prompt, else None.

    Needs a decoder whose key/value cache holds every position (no sliding window), no gradient checkpointing
    while training (transformers then drops ``past_key_values``: the responses would silently not see the
    prompt) and a prompt of at least two columns.
    """
    config = getattr(decoder, "config", None)
    if prompt_length(batch) < 2 or getattr(config, "model_type", None) not in HEAD_ONLY_MODEL_TYPES:
        return None
    if uses_sliding_window(config):
        return None
    if torch.is_grad_enabled() and decoder.training and any(
            getattr(m, "gradient_checkpointing", False) for m in decoder.modules()):
        return None
    return prompt_groups(batch)


def response_hidden_states(decoder, batch: Batch, share_prompt: bool = True) -> torch.Tensor:
    """The decoder's last hidden states at positions ``P-1 .. P+R-2`` (those that predict the R response tokens).

    Args:
        decoder: a HF decoder stack (``model.get_decoder()`` / an ``AutoModel`` backbone): ``input_ids``,
            ``attention_mask``, ``position_ids`` -> ``last_hidden_state``.
        batch: ``sequences`` / ``attention_mask`` [B, L = P + R] (prompts left padded) and ``action_mask`` [B, R].
        share_prompt: SHARE_PROMPT_FORWARD. The forward runs in up to three passes over one key/value cache:
            the tokens every prompt starts with (the chat template's system prompt, S of them) once, [1, S]; the
            rest of each distinct prompt's first ``P-1`` positions once, [U, P-1-S] (the n samples of a prompt
            share it); each row's response, [B, R]. The cache is repeated per row with an index, which is
            differentiable, so the gradients of all rows add up in the shared passes. Falls back to the full
            forward where :func:`_can_share_prompt` says no, or when no prompt repeats and S < MIN_SHARED_PREFIX.
    Returns:
        [B, R, H] in the decoder's output dtype.
    """
    seq, attn = batch["sequences"], batch["attention_mask"]
    B, P, R = seq.shape[0], prompt_length(batch), response_length(batch)
    pos = position_ids(attn)
    groups = _can_share_prompt(decoder, batch) if share_prompt else None
    S = 0
    if groups is not None:
        first = groups[0]
        S = shared_prefix_length(seq[first, :P - 1], attn[first, :P - 1], at_least=MIN_SHARED_PREFIX)
        if S == 0 and len(first) == B:
            groups = None
    if groups is None:
        out = decoder(input_ids=seq, attention_mask=attn, position_ids=pos, use_cache=False)
        return out.last_hidden_state[:, P - 1:P + R - 1]
    from transformers import DynamicCache
    first, inverse = groups
    U, M = len(first), P - 1 - S
    # each distinct prompt without its shared start: its left padding, then its remaining tokens ([U, M]); the
    # shared start goes first in the cache, so padding sits between the two (masked; positions are explicit)
    src = columns_after_shared_prefix(attn[first, :P - 1], S)
    mid_ids, mid_attn, mid_pos = (t[first].gather(1, src) for t in (seq, attn, pos))
    start = P - 1 - int(attn[first[0], :P - 1].sum())              # where the first prompt's real tokens begin
    # one embedding lookup for all passes: its backward builds one dense [vocab, H] gradient, not several
    embeds = decoder.get_input_embeddings()(torch.cat([seq[first[0], start:start + S], mid_ids.reshape(-1),
                                                       seq[:, P - 1:P + R - 1].reshape(-1)]))
    cache = DynamicCache(config=decoder.config)
    prompt_keys = torch.cat([attn.new_ones((U, S)), mid_attn], 1)   # [U, P-1] in cache order
    if S:
        decoder(inputs_embeds=embeds[:S][None], attention_mask=prompt_keys[:1, :S],
                position_ids=pos.new_tensor(range(S))[None], past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(U)
    if M:
        decoder(inputs_embeds=embeds[S:S + U * M].view(U, M, -1), attention_mask=prompt_keys,
                position_ids=mid_pos, past_key_values=cache, use_cache=True)
    cache.batch_select_indices(inverse)   # [U, ...] -> [B, ...] per layer
    return decoder(inputs_embeds=embeds[S + U * M:].view(B, R, -1),
                   attention_mask=torch.cat([prompt_keys[inverse], attn[:, P - 1:P + R - 1]], 1),
                   position_ids=pos[:, P - 1:P + R - 1], past_key_values=cache, use_cache=True).last_hidden_state


def chunked_head_logprobs(head, hidden: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0,
                          with_entropy: bool = False, chunk_rows: int = LOGPROB_CHUNK_ROWS):
    """``log softmax(head(hidden) / T)[labels]`` ([B, R] float32) without the [B, R, V] logits: the LM head and the
    log-softmax run over ``chunk_rows`` positions at a time. Under autograd, when all the chunks' fp32 logits would
    exceed :data:`LOGPROB_KEEP_LOGITS_BYTES`, each chunk is checkpointed (its logits are recomputed in the backward
    pass instead of kept). ``with_entropy``: also the (detached) entropy."""
    B, R, H = hidden.shape
    flat_h, flat_y = hidden.reshape(B * R, H), labels.reshape(B * R)

    def chunk(h, y):
        z = head(h).float()
        if temperature != 1.0:
            z = z / temperature
        lp = logprobs_from_logits(z, y)
        if not with_entropy:
            return lp, None
        with torch.no_grad():
            return lp, entropy_from_logits(z.detach())

    vocab = int(getattr(head, "out_features", 0) or head.weight.shape[0])
    grad = torch.is_grad_enabled() and flat_h.requires_grad
    recompute = grad and B * R * vocab * 4 > LOGPROB_KEEP_LOGITS_BYTES
    if grad and not recompute:   # the logits are kept anyway: one chunk, one [V, H] weight gradient, not several
        chunk_rows = B * R
    lps, ents = [], []
    for a in range(0, B * R, max(1, chunk_rows)):
        h, y = flat_h[a:a + chunk_rows], flat_y[a:a + chunk_rows]
        if recompute:
            from torch.utils.checkpoint import checkpoint
            lp, ent = checkpoint(chunk, h, y, use_reentrant=False)
        else:
            lp, ent = chunk(h, y)
        lps.append(lp)
        ents.append(ent)
    lp = torch.cat(lps).view(B, R) if lps else hidden.new_zeros((B, R), dtype=torch.float32)
    if not with_entropy:
        return lp
    return lp, (torch.cat(ents).view(B, R) if ents else torch.zeros_like(lp))


def causal_lm_response_logprobs(model, batch: Batch, temperature: float = 1.0, with_entropy: bool = False,
                                share_prompt: bool = True):
    """Log-probs of the response tokens under a causal LM.

    Args:
        model: a HF causal LM (or DeepSpeed engine / peft wrapper around one), on any device.
        batch: ``sequences`` / ``attention_mask`` [B, L] and ``action_mask`` [B, R] (on the model's device).
        temperature: logits are divided by it (the rollout sampled at this temperature).
        with_entropy: also return the per-token entropy.
        share_prompt: run each distinct prompt once (:func:`response_hidden_states`; SHARE_PROMPT_FORWARD).
    Returns:
        ``logprobs`` [B, R] float32 (0 where ``action_mask`` is False), and ``entropy`` [B, R] when asked.
    """
    seq, attn = batch["sequences"], batch["attention_mask"]
    P, R = prompt_length(batch), response_length(batch)
    mask = batch["action_mask"]
    parts = _decoder_and_head(model)
    if parts is not None:   # hidden states -> LM head + log-softmax in row chunks: no [B, R, V] logits
        dec, head = parts
        h = response_hidden_states(dec, batch, share_prompt)
        res = chunked_head_logprobs(head, h, seq[:, P:P + R], temperature, with_entropy)
        lp, ent = res if with_entropy else (res, None)
        lp = torch.where(mask, lp, torch.zeros((), dtype=lp.dtype, device=lp.device))
        if not with_entropy:
            return lp
        return lp, torch.where(mask, ent, torch.zeros((), dtype=ent.dtype, device=ent.device))
    # Only the last R + 1 positions' logits are needed: skip the LM head on the prompt.
    out = model(input_ids=seq, attention_mask=attn, position_ids=position_ids(attn), use_cache=False,
                logits_to_keep=R + 1)
    logits = out.logits[:, :R]  # positions P-1 .. P+R-2
    if temperature != 1.0:
        logits = logits / temperature
    labels = seq[:, P:P + R]
    lp = logprobs_from_logits(logits, labels)
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
    # length buckets: micro batches of rows with similar prompt and response lengths (sorted by both), so
    # trimming drops most of the padding; rows of one prompt stay together (a shared prompt forward runs it
    # once per micro batch); the results go back to the caller's row order
    P = prompt_length(batch)
    first, inverse = prompt_groups(batch)
    key = (batch["attention_mask"][:, :P].sum(1) * (B + 1) + first[inverse]) * (R + 1) + batch["action_mask"].sum(1)
    order = torch.argsort(key, descending=True, stable=True)
    outs = []
    for i in range(0, B, max(1, micro)):
        idx = order[i:i + micro]
        mb = {k: v[idx] for k, v in batch.items()}
        mb, _, _ = trim_batch(mb)
        mb = {k: v.to(device) for k, v in mb.items()}
        outs.append(pad_response(fn(mb).float().cpu(), R))
    out = torch.empty((B, R), dtype=torch.float32)
    out[order] = torch.cat(outs, 0)
    return out


def response_logprobs(model, batch: Batch, cfg: RLFHConfig, device: torch.device,
                      autocast: Optional[torch.dtype] = None, share_prompt: Optional[bool] = None) -> torch.Tensor:
    """Response log-probs of a causal LM at the rollout ``TEMPERATURE``: CPU float32 [B, R], 0 off the action mask.

    Micro batches of ``MICRO_ROLLOUT_BATCH_SIZE`` (trimmed, on ``device``); call it under ``torch.no_grad()``.
    The one forward the policy (old log-probs), the reference (KL) and the HF rollout engine share.
    ``autocast``: run the forward under ``torch.autocast`` in this dtype (the policy and the reference pass
    :func:`resolve_train_autocast`, so old, reference and training log-probs share one precision).
    ``share_prompt``: run each prompt once per micro batch (default SHARE_PROMPT_FORWARD).
    """
    share = cfg.share_prompt_forward if share_prompt is None else share_prompt

    def forward(mb):
        with autocast_context(autocast, device):
            return causal_lm_response_logprobs(model, mb, cfg.temperature, share_prompt=share)
    return batched_response_forward(forward, batch, cfg.micro_rollout_batch_size, device)
