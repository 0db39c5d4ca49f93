"""Guards for the optional GPU extras: a clear ImportError naming the extra to install."""
from __future__ import annotations

import importlib
import importlib.util

VLLM_HINT = ("the vllm backend needs vLLM: pip install 'rlfh[vllm]' on a GPU machine, "
             "or set ROLLOUT_BACKEND=hf")
FLASH_ATTN_HINT = ("flash attention needs flash-attn: pip install 'rlfh[flash-attn]' on a GPU machine, "
                   "or leave the attention implementation at 'sdpa'")


def vllm_available() -> bool:
    """True when ``import vllm`` would find the package (does not import it)."""
    return importlib.util.find_spec("vllm") is not None


def require_vllm():
    """Import and return the ``vllm`` module, or raise ImportError with the install hint."""
    try:
        return importlib.import_module("vllm")
    except ImportError as e:
        raise ImportError(f"{VLLM_HINT} (import failed: {e})") from e


def require_flash_attn():
    """Import and return ``flash_attn``, or raise ImportError with the install hint."""
    try:
        return importlib.import_module("flash_attn")
    except ImportError as e:
        raise ImportError(f"{FLASH_ATTN_HINT} (import failed: {e})") from e


def attn_implementation(name: str = "sdpa") -> str:
    """Validate an attention implementation name; 'flash_attention_2' needs the flash-attn extra."""
    if name in ("flash_attention_2", "flash_attn", "flash-attn"):
        require_flash_attn()
        return "flash_attention_2"
    if name not in ("sdpa", "eager"):
        raise ValueError(f"attention implementation must be sdpa, eager or flash_attention_2, got {name!r}")
    return name
