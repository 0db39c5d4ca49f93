"""Rollout engines: transformers ``generate`` (CPU default) or vLLM, one API.

``ROLLOUT_BACKEND``: ``hf`` | ``vllm`` | ``auto`` (vLLM when importable and the
rollout runs on GPUs, else hf). Both engines

* take chat-templated prompt *strings* (see :func:`core.prompts.render_prompt`),
  tokenize them the same way (no extra special tokens, left-truncated to
  ``PROMPT_MAX_LEN``) and return :class:`actors.types.RolloutSample` objects in
  prompt-major order (all ``n`` samples of prompt 0 first);
* stop at the model's EOS, which stays in ``response_token_ids`` (finish_reason
  ``stop``), or after ``max_new_tokens`` (``length``);
* decode and compute character offsets with the same function
  (:func:`actors.types.token_offsets`), so the reward service sees identical
  contracts whichever engine generated;
* load new weights with ``update_weights`` (HF names, as exported by
  :meth:`actors.policy.PolicyActor.state_dict_for_sync`).

Both classes are plain Python: :func:`create_rollout_engines` wraps them as Ray
actors; tests may build them in-process.
"""
from __future__ import annotations

import logging
import os
import time
from contextlib import nullcontext
from typing import Any, Optional, Sequence

import torch

from actors import calls
from actors.base import cpu_has_fast_bf16, phase_threads, pick_device, process_allocator, response_logprobs, set_threads
from actors.decode import kv_buffer_supported, sample
from actors.optional import VLLM_HINT, require_vllm, vllm_available
from actors.types import Batch, RolloutSample, response_length, token_offsets
from core.config import RLFHConfig
from core.model_loader import load_causal_lm, load_tokenizer, resolve_model_path, torch_dtype

log = logging.getLogger(__name__)


def resolve_rollout_backend(cfg: RLFHConfig, gpu_available: Optional[bool] = None) -> str:
    """``hf`` or ``vllm`` from ``cfg.rollout_backend``; ``vllm`` raises ImportError when vLLM is missing."""
    if cfg.rollout_backend == "hf":
        return "hf"
    if cfg.rollout_backend == "vllm":
        if not vllm_available():
            raise ImportError(VLLM_HINT)
        return "vllm"
    if gpu_available is None:
        gpu_available = rollout_gpus_available(cfg)
    return "vllm" if (vllm_available() and gpu_available) else "hf"


def rollout_gpus_available(cfg: RLFHConfig) -> bool:
    """True when the run is configured for GPUs and the Ray cluster (or this process) has some."""
    if cfg.actor_num_gpus_per_node == 0:
        return False
    try:
        import ray
        if ray.is_initialized():
            return ray.cluster_resources().get("GPU", 0) > 0
    except Exception:
        pass
    return torch.cuda.is_available()


#: bf16 rollout weights vs fp32 on the embedded model, CPU: |log p_bf16 - log p_fp32| per response token of
#: samples drawn by the fp32 model (16 closed-book dev prompts x 2 samples x <= 48 tokens, `rlfh bench drift`).
#: Tests assert bf16 rollouts stay within twice these.
BF16_LOGPROB_DRIFT = {"mean": 0.035, "p99": 0.18}


def resolve_rollout_dtype(cfg: RLFHConfig, device: torch.device) -> str:
    """ROLLOUT_DTYPE, with ``auto`` = bf16 on a CPU with native bf16, else DTYPE (GPUs: DTYPE)."""
    if cfg.rollout_dtype != "auto":
        return cfg.rollout_dtype
    if device.type == "cpu" and cfg.dtype == "fp32" and cpu_has_fast_bf16():
        return "bf16"
    return cfg.dtype


def resolve_decode_loop(cfg: RLFHConfig, model) -> str:
    """HF_DECODE_LOOP for this model: ``kv-buffer`` / ``graph`` (:mod:`actors.decode`) or ``generate``."""
    ok, why = kv_buffer_supported(model)
    if cfg.hf_decode_loop == "generate" or (cfg.hf_decode_loop == "auto" and not ok):
        if cfg.hf_decode_loop == "auto":
            log.info("hf rollout engine: model.generate (the kv-buffer loop cannot serve this model: %s)", why)
        return "generate"
    if not ok:
        raise ValueError(f"HF_DECODE_LOOP={cfg.hf_decode_loop} cannot serve {cfg.model_path}: {why}. "
                         "Set HF_DECODE_LOOP=auto or generate.")
    return "graph" if cfg.hf_decode_loop == "graph" else "kv-buffer"


class _EngineBase:
    """Tokenization, sample building and versioning shared by both backends."""

    backend = "base"

    def __init__(self, cfg: RLFHConfig | dict, engine_index: int = 0, tokenizer=None):
        self.cfg = cfg if isinstance(cfg, RLFHConfig) else RLFHConfig(**cfg)
        self.engine_index = engine_index
        self._version = 0
        self.model_path = resolve_model_path(self.cfg.model_path)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(self.model_path)
        self.tokenizer.truncation_side = "left"
        self.eos_ids = self._eos_ids()
        self.stats = {"generated_tokens": 0, "generate_s": 0.0, "calls": 0}

    def _eos_ids(self) -> list[int]:
        ids = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        try:
            from transformers import GenerationConfig
            g = GenerationConfig.from_pretrained(self.model_path)
            e = g.eos_token_id
            ids.update([int(x) for x in (e if isinstance(e, (list, tuple)) else [e]) if x is not None])
        except Exception:
            pass
        return sorted(ids)

    def encode_prompts(self, prompts: Sequence[str], max_len: Optional[int] = None) -> list[list[int]]:
        """Token ids of already-templated prompts (no added special tokens), keeping the LAST max_len tokens."""
        if isinstance(prompts, str):
            raise TypeError("prompts must be a list of strings, got one string")
        for i, p in enumerate(prompts):
            if not isinstance(p, str) or not p:
                raise ValueError(f"prompts[{i}] must be a non-empty string, got {p!r}")
        max_len = max_len or self.cfg.prompt_max_len
        enc = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        return [ids[-max_len:] for ids in enc]

    def _cut_at_eos(self, gen_ids: Sequence[int]) -> tuple[list[int], bool]:
        """Generated ids up to and including the first EOS, and whether there was one."""
        out = []
        eos = set(self.eos_ids)
        for t in gen_ids:
            t = int(t)
            out.append(t)
            if t in eos:
                return out, True
        return out, False

    def reply_text(self, gen_ids: Sequence[int]) -> str:
        """The text of a chat reply: cut at the first EOS, decoded without special tokens (no offsets needed).

        The same text as ``make_sample(...).response_text``, without the per-token offset work.
        """
        ids, _ = self._cut_at_eos(gen_ids)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def make_sample(self, prompt_index: int, prompt_ids: list[int], gen_ids: Sequence[int],
                    finished_by_eos: Optional[bool] = None) -> RolloutSample:
        """Cut at the first EOS (kept), decode, compute offsets, name the finish reason."""
        out, stop = self._cut_at_eos(gen_ids)
        if finished_by_eos is not None and finished_by_eos and not stop:
            stop = True  # stopped by a stop string / token vLLM did not echo: still a "stop"
        text, offsets = token_offsets(self.tokenizer, out)
        return RolloutSample(prompt_index=prompt_index, prompt_token_ids=list(prompt_ids),
                             response_token_ids=out, response_text=text, token_offsets=offsets,
                             finish_reason="stop" if stop else "length",
                             extra={"weights_version": self._version, "engine": self.engine_index})

    @staticmethod
    def _check_gen_args(n, max_new_tokens, temperature, top_p):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n (samples per prompt) must be an int >= 1, got {n!r}")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")

    def weights_version(self) -> int:
        return self._version

    def _phase_threads(self, share: int = 1) -> int:
        """Intra-op threads for this generate / forward call (CPU_THREADS split over ``share`` engines)."""
        return set_threads(phase_threads(self.cfg, share))

    def _next_version(self, version: Optional[int]) -> int:
        self._version = int(version) if version is not None else self._version + 1
        return self._version

    def info(self) -> dict:
        return {"backend": self.backend, "engine_index": self.engine_index, "model_path": self.model_path,
                "weights_version": self._version, "pid": os.getpid(), "dtype": getattr(self, "dtype", ""),
                "allocator": process_allocator(),
                "shares_policy_weights": bool(getattr(self, "shares_policy_weights", False)),
                **self.stats}

    def render_chat(self, messages: list[dict]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "\n\n".join(m["content"] for m in messages) + "\n\n"

    # sleep mode is a vLLM feature; the HF engine accepts the calls
    def sleep(self, level: int = 1) -> bool:
        return False

    def wake_up(self) -> bool:
        return True

    def device_uuid(self) -> str:
        return "cpu"

    def shutdown(self) -> bool:
        return True


# ================================================================================================ HF


class HFRolloutEngine(_EngineBase):
    """transformers ``generate``: batched in MICRO_ROLLOUT_BATCH_SIZE, left padding, sdpa attention, seeded.

    ``model`` / ``tokenizer`` / ``device``: already-loaded objects to share (e.g. the test
    server's ``HFChat`` over a model someone else holds); by default the engine loads
    MODEL_PATH on :func:`actors.base.pick_device`. A shared model is put in eval mode but its
    ``requires_grad`` flags are left alone (generation runs under ``no_grad`` anyway).
    """

    backend = "hf"

    def __init__(self, cfg: RLFHConfig | dict, engine_index: int = 0, *, model=None, tokenizer=None,
                 device: Optional[str] = None, autocast: Optional[str] = None, shares_policy_weights: bool = False):
        """``autocast``: ``"bf16"`` / ``"fp16"`` runs generation under ``torch.autocast`` (a shared fp32 model
        sampled at the rollout dtype without a second copy of its weights; the casts of trainable weights are
        cached for one generate call). ``shares_policy_weights``: the model IS the policy's module (colocated
        layout): a weight sync only records the policy's version (:meth:`follow_weights`)."""
        super().__init__(cfg, engine_index, tokenizer=tokenizer)
        self.shares_policy_weights = bool(shares_policy_weights)
        self.device = torch.device(device) if device is not None else pick_device()
        t0 = time.time()
        if model is None:
            self.dtype = resolve_rollout_dtype(self.cfg, self.device)
            self.model = load_causal_lm(self.model_path, dtype=self.dtype, device=str(self.device))
            self.model.requires_grad_(False)
        else:
            self.model = model.to(self.device)
        self.model.eval()
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.dtype = str(next(self.model.parameters()).dtype).replace("torch.", "")
        want = torch_dtype(autocast) if autocast else None
        self.autocast = want if want is not None and want != next(self.model.parameters()).dtype else None
        if self.autocast is not None:
            self.dtype = f"{self.dtype} (autocast {autocast})"
        self.decode_loop = resolve_decode_loop(self.cfg, self.model)
        log.info("hf rollout engine %d on %s (%s, %s) ready in %.1fs", engine_index, self.device, self.dtype,
                 self.decode_loop, time.time() - t0)

    def _autocast(self):
        if self.autocast is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast)

    def follow_weights(self, version: Optional[int] = None) -> int:
        """Colocated layout: the engine's model is the policy's module, already updated; record the version."""
        if not self.shares_policy_weights:
            raise RuntimeError("follow_weights: this engine holds its own weights; use update_weights")
        return self._next_version(version)

    @torch.no_grad()
    def _generate_ids(self, prompt_ids: list[list[int]], max_new_tokens: int, temperature: float, top_p: float,
                      seed: Optional[int], n: int = 1, suppress_first_ids: Sequence[int] = ()) -> list[list[int]]:
        """Generated ids of ``n`` samples per prompt (prompt-major), in micro batches of MICRO_ROLLOUT_BATCH_SIZE
        sequences. With ``n > 1`` each prompt is prefilled ONCE (:attr:`prefill_once`): a forward over the
        prompts fills the KV cache, the cache is repeated ``n`` times, and ``generate`` continues from it.
        ``suppress_first_ids``: token ids the first generated token may not be (``model.generate`` loop: ``n == 1``
        only)."""
        if self.shares_policy_weights:
            self.model.eval()   # the policy's module: its train step leaves it in train mode
        if self.decode_loop in ("kv-buffer", "graph"):
            return self._sample_kv_buffer(prompt_ids, max_new_tokens, temperature, top_p, seed, n, suppress_first_ids)
        from transformers import GenerationConfig
        greedy = temperature == 0
        gcfg = GenerationConfig(
            max_new_tokens=max_new_tokens, do_sample=not greedy, temperature=None if greedy else temperature,
            top_p=None if greedy else top_p, top_k=0 if not greedy else None, num_beams=1, use_cache=True,
            eos_token_id=self.eos_ids, pad_token_id=self.pad_id, bos_token_id=self.tokenizer.bos_token_id,
            begin_suppress_tokens=list(suppress_first_ids) or None)
        if suppress_first_ids and n > 1:   # the prefilled cache shifts generate's notion of the first step
            raise ValueError("suppress_first_ids needs n == 1")
        out: list[list[int]] = []
        micro = max(1, self.cfg.micro_rollout_batch_size)
        once = self.prefill_once and n > 1 and min(len(p) for p in prompt_ids) >= 2
        if not once:   # n copies of every prompt, each prefilled on its own
            prompt_ids, n = [p for p in prompt_ids for _ in range(n)], 1
        per = max(1, micro // n)   # prompts per micro batch
        for c, start in enumerate(range(0, len(prompt_ids), per)):
            chunk = prompt_ids[start:start + per]
            P = max(len(p) for p in chunk)
            ids = torch.full((len(chunk), P), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), P), dtype=torch.long)
            for i, p in enumerate(chunk):
                ids[i, P - len(p):] = torch.tensor(p, dtype=torch.long)
                mask[i, P - len(p):] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            kw = {}
            with self._autocast():
                if n > 1:
                    kw["past_key_values"] = self._prefill(ids[:, :-1], mask[:, :-1], n)
                    ids, mask = ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
                if seed is not None:
                    torch.manual_seed(int(seed) * 1_000_003 + c)
                gen = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=gcfg, **kw)
            out.extend(gen[:, P:].cpu().tolist())
        return out

    #: Prefill each prompt once for its ``n`` samples (set False to prefill every copy, as before).
    prefill_once = True

    def _sample_kv_buffer(self, prompt_ids: list[list[int]], max_new_tokens: int, temperature: float, top_p: float,
                          seed: Optional[int], n: int, suppress_first_ids: Sequence[int]) -> list[list[int]]:
        """:func:`actors.decode.sample` in micro batches of MICRO_ROLLOUT_BATCH_SIZE rows (``n`` rows a prompt)."""
        out: list[list[int]] = []
        per = max(1, max(1, self.cfg.micro_rollout_batch_size) // n)   # prompts per micro batch
        for c, start in enumerate(range(0, len(prompt_ids), per)):
            gen = None
            if seed is not None:
                gen = torch.Generator(device=self.device).manual_seed(int(seed) * 1_000_003 + c)
            with self._autocast():
                out.extend(sample(self.model, prompt_ids[start:start + per], n=n, max_new_tokens=max_new_tokens,
                                  temperature=temperature, top_p=top_p, eos_ids=self.eos_ids, pad_id=self.pad_id,
                                  generator=gen, suppress_first_ids=suppress_first_ids, device=self.device,
                                  share_prefix=self.cfg.share_prompt_forward,
                                  fixed_shapes=self.decode_loop == "graph",
                                  cuda_graph=self.decode_loop == "graph" and self.device.type == "cuda",
                                  compile_step=self.decode_loop == "graph" and self.cfg.hf_decode_compile))
        return out

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, n: int):
        """KV cache of ``ids`` (left padded, [b, P-1]: the prompt without its last token, which ``generate``
        feeds), repeated ``n`` times along the batch: [b * n] rows, sample-major within each prompt."""
        from transformers import DynamicCache
        cache = DynamicCache(config=getattr(self.model, "config", None))
        pos = mask.long().cumsum(-1) - 1
        pos.masked_fill_(mask == 0, 1)   # what generate uses for the left padding
        self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True,
                   logits_to_keep=1)
        cache.batch_repeat_interleave(n)
        return cache

    def generate(self, prompts: list[str], n: int, max_new_tokens: int, temperature: float, top_p: float,
                 seed: Optional[int] = None, share: int = 1) -> list[RolloutSample]:
        """``n`` samples for each prompt, prompt-major. ``temperature == 0`` is greedy.

        ``share``: engines generating at the same time on this machine (they split CPU_THREADS).
        """
        self._check_gen_args(n, max_new_tokens, temperature, top_p)
        self._phase_threads(share)
        t0 = time.time()
        enc = self.encode_prompts(prompts)
        # length buckets: prompts sorted by length share micro batches (less padding); results back in order
        order = sorted(range(len(enc)), key=lambda i: -len(enc[i]))
        gens_sorted = self._generate_ids([enc[i] for i in order], max_new_tokens, temperature, top_p, seed, n=n)
        gens: list = [None] * (len(enc) * n)
        for k, pi in enumerate(order):
            gens[pi * n:(pi + 1) * n] = gens_sorted[k * n:(k + 1) * n]
        flat = [(pi, ids) for pi, ids in enumerate(enc) for _ in range(n)]
        samples = [self.make_sample(pi, ids, g) for (pi, ids), g in zip(flat, gens)]
        self._account(samples, t0)
        return samples

    def _account(self, samples, t0):
        self.stats["generated_tokens"] += sum(len(s.response_token_ids) for s in samples)
        self.stats["generate_s"] += time.time() - t0
        self.stats["calls"] += 1

    def chat(self, messages_batch: list[list[dict]], max_new_tokens: int = 256) -> list[str]:
        """Greedy answers to chat conversations (the ChatFn of the verifier's ``self`` backend).

        Batched in MICRO_ROLLOUT_BATCH_SIZE with left padding; each prompt keeps its last
        ``max_position_embeddings - max_new_tokens`` tokens.
        """
        if not messages_batch:
            return []
        prompts = [self.render_chat(m) for m in messages_batch]
        enc = self.encode_prompts(prompts, max_len=self._max_context() - max_new_tokens)
        self._phase_threads()
        gens = self._generate_ids(enc, max_new_tokens, 0.0, 1.0, None)
        return [self.reply_text(g) for g in gens]

    def complete_greedy(self, prompt_ids: list[list[int]], max_new_tokens: int,
                        suppress_first_ids: Sequence[int] = ()) -> list[tuple[list[int], bool, str]]:
        """Greedy continuations of already-encoded prompts, batched as given (callers sort by length).
        ``suppress_first_ids``: token ids the reply may not start with (`rlfh eval --abstain-threshold` answers
        with the abstention blocked once the model's P(abstain) has said it should answer).

        Returns one ``(ids, stopped, text)`` per prompt: the generated ids cut after the first EOS (kept), whether
        an EOS ended it, and the reply text (special tokens dropped). The same generate call, EOS rule and decoding
        as :meth:`generate`: what `rlfh eval` scores is what training samples.
        """
        out = []
        for g in self._generate_ids(prompt_ids, max_new_tokens, 0.0, 1.0, None, suppress_first_ids=suppress_first_ids):
            ids, stop = self._cut_at_eos(g)
            out.append((ids, stop, self.tokenizer.decode(ids, skip_special_tokens=True)))
        return out

    def _max_context(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)

    @torch.no_grad()
    def update_weights(self, state_dict_or_ref: Any, version: Optional[int] = None) -> int:
        """Load HF-named weights (a dict or a Ray ObjectRef to one); returns the new weights version."""
        sd = _resolve_state(state_dict_or_ref)
        t0 = time.time()
        load_hf_state_dict(self.model, sd)
        v = self._next_version(version)
        log.info("hf engine %d: loaded %d tensors (version %d) in %.2fs", self.engine_index, len(sd), v,
                 time.time() - t0)
        return v

    @torch.no_grad()
    def logprobs(self, batch: Batch) -> torch.Tensor:
        """Response log-probs under the engine's weights [B, R] (proves a weight sync in tests)."""
        self._phase_threads()
        return response_logprobs(self.model, batch, self.cfg, self.device)


def _resolve_state(state_dict_or_ref: Any) -> dict[str, torch.Tensor]:
    obj = state_dict_or_ref
    try:
        import ray
        if isinstance(obj, ray.ObjectRef):
            obj = ray.get(obj)
        elif isinstance(obj, (list, tuple)) and len(obj) == 1 and isinstance(obj[0], ray.ObjectRef):
            obj = ray.get(obj[0])
    except ImportError:
        pass
    if not isinstance(obj, dict) or not obj:
        raise ValueError("update_weights needs a non-empty {hf_name: tensor} dict (or a Ray ObjectRef to one), "
                         f"got {type(obj).__name__}")
    return obj


def load_hf_state_dict(model: torch.nn.Module, sd: dict[str, torch.Tensor]) -> None:
    """Copy HF-named tensors into ``model`` in place (dtype/device cast). Every parameter must be covered
    (tied weights count as covered through their twin); unknown names are an error."""
    params = dict(model.named_parameters(remove_duplicate=False))
    unknown = [k for k in sd if k not in params]
    if unknown:
        raise KeyError(f"update_weights: {len(unknown)} unknown tensor name(s), e.g. {unknown[:3]}; "
                       "expected HF names like 'model.layers.0.mlp.up_proj.weight'")
    covered = set()
    for name, t in sd.items():
        p = params[name]
        if tuple(p.shape) != tuple(t.shape):
            raise ValueError(f"update_weights: {name} has shape {tuple(t.shape)}, the model expects {tuple(p.shape)}")
        p.data.copy_(t.to(device=p.device, dtype=p.dtype))
        covered.add(id(p))
    missing = [n for n, p in params.items() if id(p) not in covered]
    if missing:
        raise KeyError(f"update_weights: {len(missing)} parameter(s) missing from the state dict, e.g. {missing[:3]}")


# ================================================================================================ vLLM


class VLLMRolloutEngine(_EngineBase):
    """vLLM engine (tensor parallel, prefix caching, optional sleep mode) behind the same API."""

    backend = "vllm"
    WORKER_EXTENSION = "actors.vllm_ext.RLFHWorkerExtension"

    def __init__(self, cfg: RLFHConfig | dict, engine_index: int = 0, **llm_kwargs):
        super().__init__(cfg, engine_index)
        vllm = require_vllm()
        self._vllm = vllm
        self.on_gpu = pick_device().type == "cuda" or self.cfg.vllm_tensor_parallel_size > 1
        from transformers import AutoConfig
        max_pos = int(getattr(AutoConfig.from_pretrained(self.model_path), "max_position_embeddings", 4096) or 4096)
        self.max_model_len = min(max_pos, max(2048, self.cfg.prompt_max_len + self.cfg.generate_max_len))
        dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[self.cfg.dtype]
        kwargs = dict(
            model=self.model_path, tokenizer=self.model_path, dtype=dtype,
            tensor_parallel_size=self.cfg.vllm_tensor_parallel_size,
            seed=self.cfg.seed + engine_index, enable_prefix_caching=True,
            max_model_len=self.max_model_len, worker_extension_cls=self.WORKER_EXTENSION,
            enforce_eager=not self.on_gpu,
        )
        if self.on_gpu:
            kwargs["gpu_memory_utilization"] = self.cfg.vllm_gpu_memory_utilization
            kwargs["enable_sleep_mode"] = self.cfg.vllm_enable_sleep
            if self.cfg.vllm_tensor_parallel_size > 1:
                kwargs["distributed_executor_backend"] = "ray"
        kwargs.update(llm_kwargs)
        t0 = time.time()
        self.llm = vllm.LLM(**kwargs)
        self.asleep = False
        self._awake_tags = set(self._ALL_TAGS)
        self.sleep_enabled = bool(kwargs.get("enable_sleep_mode"))
        log.info("vllm rollout engine %d ready in %.1fs (%s)", engine_index, time.time() - t0,
                 {k: v for k, v in kwargs.items() if k not in ("model", "tokenizer")})

    def _params(self, n_requests: int, max_new_tokens: int, temperature: float, top_p: float,
                seed: Optional[int]):
        SP = self._vllm.SamplingParams
        common = dict(max_tokens=max_new_tokens, temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                      top_k=0 if temperature > 0 else -1, skip_special_tokens=True, n=1)
        common = {k: v for k, v in common.items() if not (k == "top_k" and v == 0)}
        if seed is None:
            return SP(**common)
        return [SP(**common, seed=int(seed) * 1_000_003 + i) for i in range(n_requests)]

    def generate(self, prompts: list[str], n: int, max_new_tokens: int, temperature: float, top_p: float,
                 seed: Optional[int] = None, share: int = 1) -> list[RolloutSample]:
        """``n`` samples per prompt, prompt-major (each sample its own request: prefix caching shares the prompt).

        ``share`` is accepted for API parity with the HF engine (vLLM manages its own threads)."""
        self._check_gen_args(n, max_new_tokens, temperature, top_p)
        self._ensure_awake()
        t0 = time.time()
        enc = self.encode_prompts(prompts, max_len=min(self.cfg.prompt_max_len, self.max_model_len - max_new_tokens))
        flat = [(pi, ids) for pi, ids in enumerate(enc) for _ in range(n)]
        outs = self.llm.generate([{"prompt_token_ids": ids} for _, ids in flat],
                                 self._params(len(flat), max_new_tokens, temperature, top_p, seed), use_tqdm=False)
        samples = []
        for (pi, ids), o in zip(flat, outs):
            c = o.outputs[0]
            by_eos = c.finish_reason == "stop"
            gen = list(c.token_ids)
            if by_eos and getattr(c, "stop_reason", None) is None and (not gen or gen[-1] not in self.eos_ids):
                gen.append(self.eos_ids[0])  # keep the EOS like HF does (it gets an action-mask slot)
            samples.append(self.make_sample(pi, ids, gen, finished_by_eos=by_eos))
        self.stats["generated_tokens"] += sum(len(s.response_token_ids) for s in samples)
        self.stats["generate_s"] += time.time() - t0
        self.stats["calls"] += 1
        if self.sleep_enabled:
            self.sleep()
        return samples

    def chat(self, messages_batch: list[list[dict]], max_new_tokens: int = 256) -> list[str]:
        self._ensure_awake()
        prompts = [self.render_chat(m) for m in messages_batch]
        enc = self.encode_prompts(prompts, max_len=self.max_model_len - max_new_tokens)
        outs = self.llm.generate([{"prompt_token_ids": ids} for ids in enc],
                                 self._params(len(enc), max_new_tokens, 0.0, 1.0, None), use_tqdm=False)
        return [self.reply_text(o.outputs[0].token_ids) for o in outs]

    def logprobs(self, batch: Batch) -> torch.Tensor:
        """Response log-probs under the engine's weights [B, R] via vLLM prompt log-probs."""
        self._ensure_awake()
        R = response_length(batch)
        seqs = []
        for i in range(batch["sequences"].shape[0]):
            m = batch["attention_mask"][i].bool()
            seqs.append(batch["sequences"][i][m].tolist())
        sp = self._vllm.SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)
        outs = self.llm.generate([{"prompt_token_ids": s} for s in seqs], sp, use_tqdm=False)
        out = torch.zeros((len(seqs), R), dtype=torch.float32)
        for i, (s, o) in enumerate(zip(seqs, outs)):
            n_resp = int(batch["action_mask"][i].sum())
            p_len = len(s) - n_resp
            for j in range(n_resp):
                entry = o.prompt_logprobs[p_len + j]
                out[i, j] = float(entry[s[p_len + j]].logprob)
        return out

    # ---------------------------------------------------------------- weights
    _ALL_TAGS = ("weights", "kv_cache")

    def _ensure_awake(self, tags: Optional[list[str]] = None) -> None:
        """Wake the parts named by ``tags`` (all when None) that are asleep."""
        if not self.asleep:
            return
        want = set(tags or self._ALL_TAGS)
        missing = sorted(want - self._awake_tags)
        if missing:
            self.llm.wake_up(missing)
            self._awake_tags |= set(missing)
        if self._awake_tags >= set(self._ALL_TAGS):
            self.asleep = False

    def sleep(self, level: int = 1) -> bool:
        """Free GPU memory between rollouts (level 1: weights to CPU, KV cache dropped). No-op unless
        VLLM_ENABLE_SLEEP is on."""
        if self.sleep_enabled and not self.asleep:
            self.llm.sleep(level=level)
            self.asleep = True
            self._awake_tags = set()
        return self.asleep

    def wake_up(self) -> bool:
        self._ensure_awake()
        return True

    def _after_load(self, version: Optional[int]) -> int:
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        return self._next_version(version)

    def update_weights(self, state_dict_or_ref: Any, version: Optional[int] = None) -> int:
        """Load HF-named weights from a dict / Ray ObjectRef into every worker (CPU or GPU)."""
        sd = _resolve_state(state_dict_or_ref)
        t0 = time.time()
        self._ensure_awake(["weights"])
        from safetensors.torch import save as st_save
        seen, flat = set(), {}
        for k, t in sd.items():  # tied weights share storage: safetensors wants each storage once
            t = t.detach().to("cpu").contiguous()
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
            if key not in seen:
                seen.add(key)
                flat[k] = t
        blob = st_save(flat)
        self.llm.collective_rpc("rlfh_load_weights", args=(blob,))
        del blob
        v = self._after_load(version)
        log.info("vllm engine %d: loaded %d tensors (version %d) in %.2fs", self.engine_index, len(sd), v,
                 time.time() - t0)
        return v

    def device_uuid(self) -> list[str]:
        return self.llm.collective_rpc("rlfh_device_uuid")

    def shutdown(self) -> bool:
        """Stop vLLM's engine-core and worker processes now (instead of at interpreter exit)."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        return True

    def init_weight_group(self, master_addr: str, master_port: int, rank_offset: int, world_size: int) -> bool:
        """Every worker joins the NCCL group of policy rank 0 at rank ``rank_offset + tp_rank``."""
        self.llm.collective_rpc("rlfh_init_weight_group", args=(master_addr, master_port, rank_offset, world_size))
        return True

    def receive_weights_nccl(self, metas: list, version: Optional[int] = None) -> int:
        """Receive every tensor in ``metas`` order by NCCL broadcast from policy rank 0, load it."""
        self._ensure_awake(["weights"])
        self.llm.collective_rpc("rlfh_receive_nccl", args=(metas,))
        return self._after_load(version)

    def update_weights_ipc(self, handles_by_uuid: dict, version: Optional[int] = None, final: bool = True) -> int:
        """Load a bucket of weights from CUDA IPC handles (colocated policy on the same GPU)."""
        self._ensure_awake(["weights"])
        self.llm.collective_rpc("rlfh_receive_ipc", args=(handles_by_uuid,))
        if final:
            return self._after_load(version)
        return self._version


# ================================================================================================ factory


def make_rollout_engine(cfg: RLFHConfig, engine_index: int = 0, backend: Optional[str] = None, **kw):
    """In-process engine for ``backend`` (default: resolved from the config)."""
    backend = backend or resolve_rollout_backend(cfg, gpu_available=torch.cuda.is_available())
    if backend == "vllm":
        return VLLMRolloutEngine(cfg, engine_index, **kw)
    if backend == "hf":
        return HFRolloutEngine(cfg, engine_index)
    raise ValueError(f"unknown rollout backend {backend!r}; ROLLOUT_BACKEND must be hf, vllm or auto")


def generate_on_engines(engines: Sequence[Any], prompts: list[str], n: int, max_new_tokens: int,
                        temperature: float, top_p: float, seed: Optional[int] = None, *,
                        timeout: float) -> list[RolloutSample]:
    """Shard ``prompts`` over Ray engine handles (contiguous blocks), generate in parallel, merge prompt-major.

    ``prompt_index`` of every returned sample indexes the full ``prompts`` list. ``timeout``: seconds the
    engines may take (the run's ACTOR_TIMEOUT_S, ``actors.calls.timeout_s(cfg)``).
    """
    if not engines:
        raise ValueError("generate_on_engines: no rollout engines")
    k = min(len(engines), len(prompts))
    base, rem = divmod(len(prompts), k)
    refs, offsets, start = [], [], 0
    for i in range(k):
        size = base + (1 if i < rem else 0)
        part = prompts[start:start + size]
        s = None if seed is None else seed + 7919 * i
        refs.append(engines[i].generate.remote(part, n, max_new_tokens, temperature, top_p, s, share=k))
        offsets.append(start)
        start += size
    out: list[RolloutSample] = []
    for off, res in zip(offsets, calls.get(refs, "rollout generate", timeout)):
        for smp in res:
            smp.prompt_index += off
            out.append(smp)
    return out
