"""Rollout settings: the prompts, how many samples of each, how they are sampled, and the engines that sample."""
from __future__ import annotations

from typing import Literal

from core.prompts import ABSTAIN_TEXT
from core.settings.base import Settings, setting

EMBEDDED_DATA = "halueval:train"


class RolloutSettings(Settings):
    """What a PPO step samples: the training prompts, the rollout batch, sampling, abstention candidates, engines."""

    ROLE = "rollout"

    # ---------------------------------------------------------------- prompts
    prompt_data: str = setting(
        EMBEDDED_DATA, "Training prompts: 'halueval:train|dev|test' (embedded HaluEval-QA split) or a JSONL path "
        "with question, knowledge and optional right_answer.", env="PROMPT_DATA")
    max_samples: int = setting(100_000, "Use at most this many training prompts.", env="MAX_SAMPLES", ge=1)
    prompt_max_len: int = setting(512, "Prompt length cap in tokens (longer prompts are left-truncated).",
                                  env="PROMPT_MAX_LEN", ge=8)
    generate_max_len: int = setting(64, "Maximum new tokens per rollout.", env="GENERATE_MAX_LEN", ge=1)
    prompt_mode: Literal["closed", "evidence", "mixed"] = setting(
        "closed", "Prompt template: 'closed' (question only), 'evidence' (knowledge in the prompt) or 'mixed' "
        "(EVIDENCE_SHARE of the questions with it, fixed per question).", env="PROMPT_MODE",
        doc="'mixed' asks each question one way, fixed per question: the model learns to answer from evidence when "
        "it has it and to abstain when it does not.")
    evidence_share: float = setting(
        0.5, "PROMPT_MODE=mixed: share of the questions asked with their evidence (fixed per question by a stable "
        "hash); the rest are asked closed book.", env="EVIDENCE_SHARE", ge=0, le=1,
        doc="Closed-book prompts are much shorter than evidence prompts, so a smaller share sees more questions per "
        "minute.")
    type_balance: float = setting(
        0.0, "Minimum share of each closed-form question type (yes/no, two-option \"A or B\") in the training "
        "prompts; rarer types are repeated (0: the data as given).", env="TYPE_BALANCE", ge=0, lt=0.5,
        doc="Types come from the question text only. Without closed-form questions to contrast with, open "
        "questions a small model rarely knows can teach it to abstain everywhere.")
    system_prompt: str = setting(
        "default", "System prompt of the rollouts: 'default', 'may-abstain', 'grounded', 'grounded-may-abstain' or "
        "any literal text. Evaluate with the same (`rlfh eval --system`).", env="SYSTEM_PROMPT", min_length=1,
        doc="'may-abstain' tells the model it may answer \"I don't know\" (without it, abstentions are rare and RL "
        "has few to reinforce); 'grounded': answer from the passage in one sentence, then the passage's facts that "
        "support it; 'grounded-may-abstain': grounded, told it may decline.")

    # ---------------------------------------------------------------- the rollout batch and sampling
    rollout_batch_size: int = setting(8, "Prompts per PPO step.", env="ROLLOUT_BATCH_SIZE", ge=1)
    n_samples_per_prompt: int = setting(2, "Rollouts per prompt.", env="N_SAMPLES_PER_PROMPT", ge=1)
    micro_rollout_batch_size: int = setting(
        32, "Sequences per generate/log-prob forward (per rank).", env="MICRO_ROLLOUT_BATCH_SIZE", ge=1,
        doc="Decoding streams every weight once per step for the whole micro batch, so more rows give more "
        "tokens/s (docs/PERFORMANCE.md, \"Micro batch sizes\").")
    temperature: float = setting(1.0, "Sampling temperature of rollouts.", env="TEMPERATURE", gt=0)
    top_p: float = setting(1.0, "Nucleus sampling top-p of rollouts.", env="TOP_P", gt=0, le=1)
    abstain_samples: int = setting(
        0, "Abstention candidates per prompt: this many of its N_SAMPLES_PER_PROMPT samples are ABSTAIN_TEXT, "
        "weighed against the model's own answers. 0: off.", env="ABSTAIN_SAMPLES", ge=0,
        doc="The group's advantages then weigh abstaining against the model's own answers. A model that rarely "
        "abstains by itself gives on-policy RL no abstention to reinforce; 1 is enough. 0: pure on-policy.")
    abstain_text: str = setting(
        ABSTAIN_TEXT, "The abstention candidate's text (the trainer checks at start-up that the verifier reads it as "
        "an abstention).", env="ABSTAIN_TEXT", min_length=1)

    # ---------------------------------------------------------------- the engines
    rollout_backend: Literal["auto", "hf", "vllm"] = setting(
        "auto", "Rollout engine: hf (transformers generate), vllm, or auto (vllm when importable and on GPU).",
        env="ROLLOUT_BACKEND")
    vllm_num_engines: int = setting(
        1, "Rollout engines, vllm or hf (the name is the RLFH launch script's).", env="VLLM_NUM_ENGINES", ge=1)
    vllm_tensor_parallel_size: int = setting(1, "Tensor parallel size per vLLM engine.",
                                             env="VLLM_TENSOR_PARALLEL_SIZE", ge=1)
    vllm_gpu_memory_utilization: float = setting(0.5, "vLLM GPU memory share.", env="VLLM_GPU_MEMORY_UTILIZATION",
                                                 gt=0, le=1)
    vllm_enable_sleep: bool = setting(False, "vLLM sleep mode between rollouts (frees GPU memory for training).",
                                      env="VLLM_ENABLE_SLEEP")
    rollout_dtype: Literal["auto", "fp32", "bf16", "fp16"] = setting(
        "auto", "Weights dtype of the hf rollout engines (sampling only; training log-probs use DTYPE). auto: bf16 "
        "on a CPU with native bf16, else DTYPE.", env="ROLLOUT_DTYPE",
        doc="Native bf16: AVX512-BF16 / AMX. `rlfh bench drift` prints its log-prob drift from fp32.")
    hf_decode_loop: Literal["auto", "kv-buffer", "graph", "generate"] = setting(
        "auto", "Sampling loop of the hf engine: kv-buffer (actors/decode.py), graph (kv-buffer in a CUDA graph), "
        "generate (model.generate); auto: kv-buffer where the model allows.", env="HF_DECODE_LOOP",
        doc="Used by training rollouts, `rlfh eval` and the self verifier. kv-buffer: the model's own forward with a "
        "preallocated KV buffer, grouped-query decode attention, inverse-CDF sampling and finished rows dropped "
        "(faster than model.generate: `rlfh bench gen`, docs/PERFORMANCE.md). graph: the kv-buffer loop with the "
        "same shapes at every step (finished rows are not dropped, the loop's state stays on the device), captured "
        "once per micro batch into a CUDA graph and replayed on a GPU, where the per-step kernel launches otherwise "
        "bound decoding (eager on a CPU; docs/PERFORMANCE.md). generate: transformers' model.generate. auto: "
        "kv-buffer unless the model needs what it does not implement (sliding-window attention, logit "
        "soft-capping).")
    hf_decode_compile: bool = setting(
        False, "HF_DECODE_LOOP=graph: torch.compile the decode step's forward before the CUDA graph records it.",
        env="HF_DECODE_COMPILE",
        doc="Fused elementwise kernels: fewer, larger launches. Costs one compile per batch shape (the KV capacity "
        "is rounded up to a multiple of 64 so that micro batches share shapes); off until a GPU run has measured "
        "it.")
