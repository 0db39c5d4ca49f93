"""Train and evaluate the claim judge (`rlfh judge train | eval`).

Training: :func:`verifier_service.judge_data.build_training_set` -> one pass of AdamW over the adapters and the
head of :class:`verifier_service.judge_model.ClaimJudge` (binary cross-entropy, linear warm-up then
linear decay), micro batches sorted by length inside each shuffled window (less padding). The result is
saved as a folder (``adapter.safetensors`` + ``judge.json``) keyed by a hash of the data and training
settings, under ``$RLFH_CACHE_DIR/judge/<key>/``, like the warm start; ``--out`` writes it elsewhere (the
shipped judge is ``verifier_service/judge_weights/``).

Evaluation (:func:`heldout_tables`), on data the judge never trains on: HaluEval-QA **test** questions
(right vs hallucinated answer, with and without the gold answer), the held-out 10% of HaluEval dialogue
and summarization (whole responses: a response is judged hallucinated when its least supported
statement is below 0.5), balanced accuracy on each.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional, Sequence

import torch

from core.assets import cache_dir, file_lock
from core.data import load_halueval
from verifier_service import judge_data as D
from verifier_service import judge_model as M
from verifier_service.judge_settings import DataSettings, TrainSettings
from verifier_service import text as T
from verifier_service.retrieval import MaterialIndex

log = logging.getLogger(__name__)


def build_key(data: DataSettings, train: TrainSettings, base: str) -> str:
    blob = json.dumps({"data": asdict(data), "train": {k: v for k, v in asdict(train).items() if k != "threads"},
                       "base": base, "format": M.FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pairs_of(examples: Sequence[D.Example]) -> list[tuple[str, str]]:
    """The judge's (a, b) texts for each example (evidence retrieved once per distinct materials)."""
    idx_cache: dict[tuple, MaterialIndex] = {}
    out = []
    for ex in examples:
        idx = idx_cache.get(ex.inp.materials)
        if idx is None:
            idx = idx_cache[ex.inp.materials] = MaterialIndex(list(ex.inp.materials))
            if len(idx_cache) > 512:
                idx_cache.clear()
        out.append(M.pair_texts(ex.inp, M.select_evidence(ex.inp, idx)))
    return out


def train_judge(examples: Sequence[D.Example], base_path: str, s: TrainSettings, data_key: str = "",
                progress: bool = True) -> tuple[M.ClaimJudge, object, dict]:
    """One pass over ``examples``; returns (judge in eval mode, tokenizer, training metrics)."""
    from tqdm import tqdm
    torch.manual_seed(s.seed)
    if s.threads:
        torch.set_num_threads(s.threads)
    enc, tok = M.load_base(base_path)
    judge = M.ClaimJudge(enc, M.JudgeSpec(rank=s.rank, alpha=s.alpha, data_key=data_key))
    examples = list(examples)[:s.max_examples] if s.max_examples else list(examples)
    if not examples:
        raise ValueError("the judge's training set is empty: check the data settings (--qa-items etc.)")
    t0 = time.perf_counter()
    pairs = pairs_of(examples)
    labels = [float(ex.label) for ex in examples]
    # shuffled windows of 32 batches, each window sorted by length: less padding, still mixed sources
    rng = random.Random(s.seed)
    win = s.batch_size * 32
    batches = []
    for _ in range(s.epochs):
        order = list(range(len(examples)))
        rng.shuffle(order)
        epoch = []
        for w in range(0, len(order), win):
            chunk = sorted(order[w:w + win], key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
            epoch += [chunk[b:b + s.batch_size] for b in range(0, len(chunk), s.batch_size)]
        rng.shuffle(epoch)
        batches += epoch
    params = [p for p in judge.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=s.lr, weight_decay=0.0)
    total = len(batches)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: min(1.0, (k + 1) / max(1, s.warmup_steps)) * max(0.05, 1 - k / max(1, total)))
    judge.train()
    losses = []
    bar = tqdm(batches, desc="judge train", unit="batch", disable=not progress)
    for chunk in bar:
        batch = M.encode(tok, [pairs[i] for i in chunk], judge.spec.max_tokens)
        y = torch.tensor([labels[i] for i in chunk])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(judge(**batch), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    judge.eval()
    by_source: dict[str, int] = {}
    for ex in examples:
        by_source[ex.source] = by_source.get(ex.source, 0) + 1
    metrics = {"examples": len(examples), "by_source": by_source, "steps": total,
               "final_loss": round(sum(losses[-50:]) / max(1, len(losses[-50:])), 4),
               "train_seconds": round(time.perf_counter() - t0, 1),
               "trained_params": sum(p.numel() for p in params)}
    return judge, tok, metrics


def calibrate_threshold(judge, tok, examples: Optional[Sequence[D.Example]] = None) -> tuple[float, float]:
    """The P(supported) cut-off (0.05 .. 0.95 in steps of 0.05) with the highest accuracy on ``examples``
    (default: the hand-labelled facts of the **tune** part, with and without gold; never the held-out third),
    and that accuracy. A judge trained on a mix of sources is not calibrated for the policy's own answers."""
    examples = list(examples) if examples is not None else D.hand_examples("tune")
    if not examples:
        return 0.5, float("nan")
    probs = M.predict(judge, tok, pairs_of(examples))
    best = (0.0, 0.5)
    for k in range(1, 20):
        thr = k / 20
        acc = sum((p >= thr) == bool(ex.label) for ex, p in zip(examples, probs)) / len(examples)
        # ties go to the cut-off nearest 0.5
        if acc > best[0] + 1e-12 or (abs(acc - best[0]) <= 1e-12 and abs(thr - 0.5) < abs(best[1] - 0.5)):
            best = (acc, thr)
    return best[1], round(best[0], 4)


def balanced_accuracy(scores_pos: Sequence[float], scores_neg: Sequence[float], thr: float = 0.5) -> float:
    """Mean of the right share of supported (score >= thr) and of hallucinated (score < thr) items."""
    if not scores_pos or not scores_neg:
        return float("nan")
    tpr = sum(s >= thr for s in scores_pos) / len(scores_pos)
    tnr = sum(s < thr for s in scores_neg) / len(scores_neg)
    return (tpr + tnr) / 2


def response_scores(judge, tok, inputs: Sequence[M.JudgeInput]) -> list[float]:
    """A response's score: the least supported of its sentences (a hallucinated response has at least one)."""
    flat, owner = [], []
    for r, inp in enumerate(inputs):
        sents = [s.text for s in T.split_sentences(inp.statement)] or [inp.statement]
        for s in sents:
            flat.append(M.JudgeInput(s, s, inp.question, inp.materials, inp.gold))
            owner.append(r)
    probs = M.predict(judge, tok, pairs_of([D.Example(x, 0, "") for x in flat]))
    out = [1.0] * len(inputs)
    for r, p in zip(owner, probs):
        out[r] = min(out[r], p)
    return out


def heldout_tables(judge, tok, n_qa: int = 300, n_dialogue: int = 200, n_summary: int = 100) -> dict[str, dict]:
    """Balanced accuracy of the judge on held-out HaluEval pairs (see the module docstring)."""
    rows: dict[str, dict] = {}
    test = load_halueval("test")[:n_qa]
    for with_gold in (False, True):
        pos = [M.JudgeInput(it.right_answer, it.right_answer, it.question, tuple(it.knowledge),
                            it.right_answer if with_gold else None) for it in test]
        neg = [M.JudgeInput(it.hallucinated_answer, it.hallucinated_answer, it.question, tuple(it.knowledge),
                            it.right_answer if with_gold else None) for it in test]
        sp, sn = response_scores(judge, tok, pos), response_scores(judge, tok, neg)
        rows[f"qa test ({'with' if with_gold else 'no'} gold)"] = {"pairs": len(test),
                                                                    "bal_acc": balanced_accuracy(sp, sn)}
    dia = D.dialogue_items("heldout", n_dialogue)
    sp = response_scores(judge, tok, [r for r, _ in dia])
    sn = response_scores(judge, tok, [w for _, w in dia])
    rows["dialogue held-out"] = {"pairs": len(dia), "bal_acc": balanced_accuracy(sp, sn)}
    summ = D.summary_items("heldout", n_summary)
    q = "Summarize the document."
    sp = response_scores(judge, tok, [M.JudgeInput(r, r, q, (doc,)) for doc, r, _ in summ])
    sn = response_scores(judge, tok, [M.JudgeInput(h, h, q, (doc,)) for doc, _, h in summ])
    rows["summarization held-out"] = {"pairs": len(summ), "bal_acc": balanced_accuracy(sp, sn)}
    return rows


def default_out(key: str) -> Path:
    return cache_dir() / "judge" / key


def build_judge(data: DataSettings, train: TrainSettings, base_path: str, out: Optional[Path] = None,
                force: bool = False, progress: bool = True) -> Path:
    """Train the judge once for these settings (cached by :func:`build_key`); returns its folder."""
    key = build_key(data, train, Path(base_path).name)
    out = out or default_out(key)
    if not force and (out / "judge.json").exists() and \
            json.loads((out / "judge.json").read_text())["spec"].get("data_key") == key:
        log.info("judge for key %s already built at %s", key, out)
        return out
    with file_lock(cache_dir() / "locks" / f"judge-{key}.lock"):
        t0 = time.perf_counter()
        examples = D.build_training_set(data)
        log.info("judge training set: %d examples (%.0f s to build)", len(examples), time.perf_counter() - t0)
        judge, tok, metrics = train_judge(examples, base_path, train, data_key=key, progress=progress)
        metrics["threshold"], metrics["tune_accuracy"] = calibrate_threshold(judge, tok)
        metrics["build_seconds"] = round(time.perf_counter() - t0, 1)
        M.save_judge(judge, out, metrics)
    return out
