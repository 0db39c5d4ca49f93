"""Knowledge-boundary probing: how often the base model answers each training question right (TruthRL-style).

The model answers every closed-book question ``k`` times by sampling; the gold grader counts the right ones.
A question's share of right samples ``p`` is what the model *knows* about it, and it is the quantity a ternary
reward (right +1, wrong -1, declined ``price``) prices: answering pays in expectation exactly when
``2p - 1 > price``, i.e. ``p > (1 + price) / 2`` (:func:`answer_threshold`). The warm start's ``probed`` mode
declines below that threshold, so RL starts at the policy its reward prefers instead of one that declines at
random or by the greedy answer's single grade (which, on a yes/no question the model gets right half the time,
is a coin flip).

Probing is a one-off cost per (model, questions, k, temperature): the result is cached as JSONL under
``$RLFH_CACHE_DIR/probe/`` and re-used by every later warm start with the same settings. Its sampling seed is
fixed (:data:`PROBE_SEED`), not the run's: the probe measures the base model, so every seed's warm start shares
one probe. The embedded model's probe of ``make train``'s questions ships with the code (:data:`SHIPPED_DIR`,
how it was made in its README): the same file the cache would hold, found by the same key, so a fresh clone
skips the one-off cost (minutes on a CPU: docs/PERFORMANCE.md, "The warm start's measurements of the base model")
unless asked to recompute it. The warm start's other measurement of the base model, its greedy answer to every
training question (:func:`evaluation.answer_cache.greedy_answers`), is cached and shipped the same way.
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

from baselines.common import grade_all
from core.assets import cache_dir
from core.grader import CORRECT, GRADER_VERSION
from evaluation.answer_cache import SHIPPED_DIR, cached_or_shipped, read_rows, write_rows
from evaluation.generate import eval_engine

log = logging.getLogger("baselines.probe")

BUCKETS = ("never", "sometimes", "known")
PROBE_SEED = 0


@dataclass
class Probe:
    uid: str
    question: str
    right: int       # samples the gold grader accepted
    samples: int     # k

    @property
    def p(self) -> float:
        return self.right / self.samples if self.samples else 0.0

    @property
    def bucket(self) -> str:
        """never (0 of k right) | sometimes (fewer than half) | known (at least half)."""
        return bucket_of(self.right, self.samples)


def bucket_of(right: int, samples: int) -> str:
    if right <= 0:
        return "never"
    return "known" if 2 * right >= samples else "sometimes"


def answer_threshold(price: float) -> float:
    """The right-answer rate above which answering beats declining under a ternary reward.

    Right +1, wrong -1, declined ``price`` (in [-1, 1)): answering is worth ``2p - 1`` in expectation, so it
    pays when ``p > (1 + price) / 2``. ``price=-0.5`` gives 0.25.
    """
    if not -1.0 <= price < 1.0:
        raise ValueError(f"the abstention price must be in [-1, 1), got {price}")
    return (1.0 + price) / 2.0


def bucket_counts(probes: Sequence[Probe]) -> dict[str, int]:
    return {b: sum(pr.bucket == b for pr in probes) for b in BUCKETS}


def cache_path(model: str, prompts: Sequence[str], k: int, temperature: float, max_new_tokens: int,
               seed: int, cache_root: Optional[Path] = None, dtype: str = "fp32", batch_size: int = 32) -> Path:
    """``$RLFH_CACHE_DIR/probe/<hash>.jsonl``; the hash covers the model, every prompt, the sampling settings
    (the sampler's dtype and rows per call where they are not fp32 / 32: those change the samples) and the gold
    grader's version (a grader fix re-probes)."""
    if cache_root is None:
        cache_root = cache_dir()
    key = [model, list(prompts), k, temperature, max_new_tokens, seed, GRADER_VERSION]
    if (dtype, batch_size) != ("fp32", 32):
        key += [dtype, batch_size]
    h = hashlib.sha256(json.dumps(key).encode())
    return Path(cache_root) / "probe" / f"{h.hexdigest()[:20]}.jsonl"


def load_cached(path: Path, uids: Sequence[str]) -> Optional[list[Probe]]:
    """The cached probes for exactly ``uids`` (in that order), or None when the file is missing or differs."""
    return read_rows(path, uids, _probe_of, "probe")


def _probe_of(row: dict) -> Probe:
    return Probe(row["uid"], row["question"], int(row["right"]), int(row["samples"]))


def probe_questions(model, tokenizer, items: Sequence, prompts: Sequence[str], *, k: int, temperature: float,
                    max_new_tokens: int, seed: int, model_name: str, batch_size: int = 32,
                    progress: bool = True, cache_root: Optional[Path] = None,
                    dtype: str = "fp32", shipped_root: Optional[Path] = SHIPPED_DIR) -> tuple[list[Probe], str]:
    """Sample ``k`` answers per prompt and count the gold grader's right ones.

    Args:
        items: N items with ``uid``, ``question``, ``right_answer``; prompts: N closed-book prompts.
        model_name: what names the model in the cache key (:func:`evaluation.answer_cache.model_key`).
        batch_size: rows per sampling call (``batch_size // k`` prompts x ``k`` samples).
        dtype: ``fp32`` samples with ``model`` as it is; ``bf16`` with a bfloat16 copy (what the trainer's
            rollout engines sample with on a CPU with native bf16, ROLLOUT_DTYPE=auto; faster there:
            docs/PERFORMANCE.md, "The warm start's measurements of the base model").
        shipped_root: where shipped probes are looked up after the cache (None: never; compute instead).
    Returns:
        (N probes in input order, where they came from: ``"cache"``, ``"shipped"`` or ``"computed"``).
    """
    if k < 1:
        raise ValueError(f"probe samples must be >= 1, got {k}")
    if len(items) != len(prompts):
        raise ValueError(f"probe_questions: {len(items)} items, {len(prompts)} prompts (need one each)")
    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"probe dtype must be 'fp32' or 'bf16', got {dtype!r}")
    path = cache_path(model_name, prompts, k, temperature, max_new_tokens, seed, cache_root, dtype, batch_size)
    uids = [it.uid for it in items]
    found, source = cached_or_shipped(path, shipped_root, uids, _probe_of, "probe")
    if found is not None:
        return found, source
    from tqdm import tqdm
    # the rollout engine's sampler (KV buffer; the k samples of a prompt share one prefill), as RL samples
    per_call = max(1, batch_size // k)
    if dtype == "bf16":   # a copy: the caller trains the fp32 model afterwards

        import torch
        model = copy.deepcopy(model).to(torch.bfloat16).eval()
    engine = eval_engine(model, tokenizer, per_call * k, 1024)
    probes = []
    with tqdm(total=len(prompts), desc="probe", unit="q", disable=not progress, dynamic_ncols=True) as bar:
        for start in range(0, len(prompts), per_call):
            chunk = list(prompts[start:start + per_call])
            samples = engine.generate(chunk, n=k, max_new_tokens=max_new_tokens, temperature=temperature, top_p=1.0,
                                      seed=seed + start)
            for j, it in enumerate(items[start:start + per_call]):
                answers = [s.response_text.strip() for s in samples[j * k:(j + 1) * k]]
                grades = grade_all([it] * len(answers), answers)
                probes.append(Probe(it.uid, it.question, sum(g.grade == CORRECT for g in grades), k))
            bar.update(len(chunk))
    write_rows(path, [asdict(pr) for pr in probes])
    log.info("probe: %d questions x %d samples -> %s (%s)", len(probes), k, path, bucket_counts(probes))
    return probes, "computed"
