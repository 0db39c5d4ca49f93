"""`rlfh eval`: generate answers for a model on a QA split, grade them, write the run folder.

Output folder (``--out DIR``):

- ``answers.jsonl``: one record per item: uid, question, gold, answer, the gold grader's
  grade / reason / hedged / abstained / f1, answer length, and the training verifier's
  statement stats for that answer.
- ``summary.json``: the run's settings, SimpleQA metrics with 95% bootstrap CIs,
  abstention and length, the verifier's statement metrics, timings.

Two judges, reported separately:

1. the gold-answer grader (:mod:`core.grader`): primary, independent of training;
2. the training verifier (``verifier_service.core.Verifier``): the same judge the rewards
   came from, so it is *not* independent -- a model can learn to please it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from core.data import load_items, question_hash
from core.grader import (CORRECT, GRADE_SCOPES, GRADES, INCORRECT, NOT_ATTEMPTED, detect_abstention,
                                grade_answer)
from core.model_loader import load_causal_lm, load_tokenizer, resolve_model_path
from core.prompts import ABSTAIN_TEXT, PROMPT_ONLY_SYSTEMS, SYSTEM_PROMPTS, render_prompt
from core.questions import question_type
from core.verify_schema import LABELS as VERIFIER_LABELS
from core.verify_schema import MAX_RESPONSE_CHARS, VerifyRequest
from evaluation.answer_cache import answers_cache_path, greedy_answers, model_key, weight_stamps
from evaluation.generate import (EVAL_BATCH_SIZE, EVAL_DTYPES, Generation, GenerationStats, generate_greedy,
                                 inference_precision, weights_dtype)
from evaluation.knowledge import sample_known_rates
from evaluation.stats import bootstrap_ci, bootstrap_mean_ci, outcome_metrics
from verifier_service.core import Verifier
from verifier_service.text import grounded_share

log = logging.getLogger(__name__)

SYSTEMS = tuple(SYSTEM_PROMPTS)  # the named system prompts
MODES = ("closed", "evidence")


@dataclass
class EvalConfig:
    model: str
    data: str = "halueval:test"
    mode: str = "closed"
    out: str = "runs/eval"
    limit: int = 0
    batch_size: int = EVAL_BATCH_SIZE
    max_new_tokens: int = 40
    system: str = "default"
    dtype: str = "fp32"
    name: str = ""
    verifier: bool = True
    n_boot: int = 2000
    seed: int = 0
    progress: bool = True
    reuse: bool = False
    threads: int = 0
    confidence: str = "auto"
    knowledge_samples: int = 0
    knowledge_temperature: float = 0.7
    abstain_threshold: float = 0.0
    abstain_text: str = ABSTAIN_TEXT
    abstain_model: str = ""
    grounding_gate: bool = False
    answers_from: str = ""
    grade_scope: str = "whole"
    extra: dict[str, Any] = field(default_factory=dict)

    def wants_confidence(self) -> bool:
        """Score each answer's mean token log-prob ('auto': closed book only, where it is cheap)."""
        return self.confidence == "on" or (self.confidence == "auto" and self.mode == "closed")

    def check(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.system not in SYSTEMS:
            raise ValueError(f"--system must be one of {', '.join(SYSTEMS)}, got {self.system!r}")
        if self.grade_scope not in GRADE_SCOPES:
            raise ValueError(f"--grade-scope must be one of {', '.join(GRADE_SCOPES)}, got {self.grade_scope!r}")
        if self.limit < 0:
            raise ValueError(f"--limit must be >= 0 (0: all items), got {self.limit}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.threads < 0:
            raise ValueError(f"--threads must be >= 0 (0: auto), got {self.threads}")
        if self.confidence not in ("auto", "on", "off"):
            raise ValueError(f"--confidence must be auto, on or off, got {self.confidence!r}")
        if self.knowledge_samples < 0:
            raise ValueError(f"--knowledge-samples must be >= 0 (0: off), got {self.knowledge_samples}")
        if self.knowledge_samples and not (0 < self.knowledge_temperature <= 2):
            raise ValueError(f"--knowledge-temperature must be in (0, 2], got {self.knowledge_temperature}")
        if not (0.0 <= self.abstain_threshold <= 1.0):
            raise ValueError(f"--abstain-threshold must be in [0, 1] (0: off, the model's greedy reply decides; 1: "
                             f"score P(abstain) but answer everything), got {self.abstain_threshold}")
        if self.abstain_threshold and not self.abstain_text.strip():
            raise ValueError("--abstain-text must not be empty with --abstain-threshold; give the model's abstention "
                             "reply, e.g. \"I don't know.\"")
        if self.abstain_model and not self.abstain_threshold:
            raise ValueError("--abstain-model needs --abstain-threshold (the probability it scores is compared with "
                             "that threshold)")
        if self.grounding_gate and self.mode != "evidence":
            raise ValueError("--grounding-gate needs --mode evidence: it checks answers against the item's passages, "
                             "and closed-book prompts have none")
        if self.grounding_gate and not self.abstain_text.strip():
            raise ValueError("--abstain-text must not be empty with --grounding-gate (the reply it gives instead)")
        if self.answers_from and (self.abstain_threshold or self.knowledge_samples):
            raise ValueError("--answers-from re-uses a plain run's greedy answers; it cannot be combined with "
                             "--abstain-threshold or --knowledge-samples, which need their own generation")
        if self.dtype not in EVAL_DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(EVAL_DTYPES)}, got {self.dtype!r}")


def busy_cores(window_s: float = 0.5) -> float:
    """Cores kept busy by other processes right now (``actors.base.other_load``; 0.0 when unknown)."""
    from actors.base import other_load
    return other_load(window_s)


def pick_threads(requested: int = 0) -> int:
    """Torch CPU threads for generation. ``requested > 0`` wins.

    Auto (0): every core on an idle machine, but ONE thread when other processes keep most of a core busy
    (the trainer's rule, ``actors.base.BUSY_THRESHOLD``). On a shared 2-core machine, two OpenMP threads that
    are descheduled in turn wait for each other at every op, so one is faster there while another job trains
    (docs/PERFORMANCE.md, "CPU threads on a busy machine").
    """
    if requested > 0:
        return requested
    from actors.base import BUSY_THRESHOLD
    cores = os.cpu_count() or 1
    return 1 if cores <= 1 or busy_cores() > BUSY_THRESHOLD else cores


def subsample(items: list, limit: int) -> list:
    """A deterministic subset of ``limit`` items: the ones whose question hash sorts first.

    Independent of file order and the same for every model, so runs with the same
    ``--limit`` pair item by item. The subset keeps the input order.
    """
    if not limit or limit >= len(items):
        return list(items)
    ranked = sorted(range(len(items)), key=lambda i: question_hash(items[i].question))
    keep = set(ranked[:limit])
    return [it for i, it in enumerate(items) if i in keep]


def pair_key(question: str) -> str:
    """The key ``rlfh compare`` pairs items on (normalised question hash)."""
    return question_hash(question)[:20]


def default_name(model: str, system: str) -> str:
    stem = Path(model).name if ("/" in model or Path(model).exists()) else model
    if stem == "final" and "/" in model:
        stem = Path(model).parent.name + "/final"
    return stem + (f" +{system} prompt" if system in PROMPT_ONLY_SYSTEMS.values() else "")


def verifier_stats(res) -> dict[str, Any]:
    """Per-answer statement stats from a VerifyResult."""
    counts = res.label_counts()
    n = sum(counts.values())
    good = counts["Correct"] + counts["Hedged correct"]
    return {"num_statements": n, "labels": counts, "abstained": bool(res.abstained),
            "fact_precision": (good / n) if n else None,
            "num_unaligned": int(res.num_unaligned), "num_fallback": int(res.num_fallback)}


def summarise(records: list[dict[str, Any]], n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Metrics of one run from its answer records (used by ``rlfh eval`` and ``rlfh compare``)."""
    grades = [r["grade"] for r in records]
    m = outcome_metrics(grades)
    ci = bootstrap_ci(grades, n_boot=n_boot, seed=seed)
    words = [r["answer_words"] for r in records]
    abst = [1.0 if r["reason"] in ("abstain", "empty") else 0.0 for r in records]
    hedged = [1.0 if r["hedged"] and r["grade"] != NOT_ATTEMPTED else 0.0 for r in records]
    trunc = [1.0 if r.get("truncated") else 0.0 for r in records]
    out: dict[str, Any] = {
        "n": len(records),
        "counts": {g: sum(1 for x in grades if x == g) for g in GRADES},
        "gold": {k: {"value": v, "ci95": list(ci[k])} for k, v in m.items()},
        "abstain_rate": {"value": float(np.mean(abst)), "ci95": list(bootstrap_mean_ci(abst, n_boot, seed=seed))},
        "hedged_attempt_rate": float(np.mean(hedged)),
        "hedged_correct": sum(1 for r in records if r["hedged"] and r["grade"] == CORRECT),
        "hedged_incorrect": sum(1 for r in records if r["hedged"] and r["grade"] == INCORRECT),
        "mean_answer_words": {"value": float(np.mean(words)),
                              "ci95": list(bootstrap_mean_ci(words, n_boot, seed=seed))},
        "truncated_rate": float(np.mean(trunc)),
        "reasons": {},
    }
    for r in records:
        out["reasons"][r["reason"]] = out["reasons"].get(r["reason"], 0) + 1
    if all("grade_lenient" in r for r in records):
        lg = [r["grade_lenient"] for r in records]
        lm = outcome_metrics(lg)
        out["lenient"] = {"correct": lm["correct"], "incorrect": lm["incorrect"],
                          "differ": sum(a != b for a, b in zip(grades, lg))}
    vs = [r["verifier"] for r in records if r.get("verifier")]
    if vs:
        tot = {lab: sum(v["labels"][lab] for v in vs) for lab in VERIFIER_LABELS}
        n_st = sum(tot.values())
        precs = [v["fact_precision"] for v in vs if v["fact_precision"] is not None]
        out["verifier"] = {
            "judge": "the training verifier (not independent of training)",
            "answers": len(vs),
            "statements_per_answer": n_st / len(vs),
            # informativeness next to precision: a reply can raise its precision by saying less
            "supported_statements_per_answer": (tot["Correct"] + tot["Hedged correct"]) / len(vs),
            "label_share": {lab: (tot[lab] / n_st if n_st else 0.0) for lab in VERIFIER_LABELS},
            "fact_precision": ((tot["Correct"] + tot["Hedged correct"]) / n_st) if n_st else None,
            "fact_precision_mean_per_answer": float(np.mean(precs)) if precs else None,
            "fact_precision_ci95": list(bootstrap_mean_ci(precs, n_boot, seed=seed)) if precs else None,
            "abstain_rate": float(np.mean([1.0 if v["abstained"] else 0.0 for v in vs])),
            "unaligned": sum(v.get("num_unaligned", 0) for v in vs),
            "fallback": sum(v.get("num_fallback", 0) for v in vs),
        }
    return out


def _model_fingerprint(path: str) -> str:
    """A short id of the weights (a hash of :func:`evaluation.answer_cache.weight_stamps`: file names, sizes,
    mtimes) so reports say what was evaluated and ``--reuse`` notices a re-trained folder."""
    return hashlib.sha256("|".join(weight_stamps(Path(path))).encode()).hexdigest()[:12]


def run_eval(cfg: EvalConfig) -> dict[str, Any]:
    """Generate, grade, verify, write ``answers.jsonl`` + ``summary.json``; return the summary.

    In order: the items (:func:`_eval_items`); a previous run's summary when ``--reuse`` finds one for the same
    weights and settings; the model's answers and what else it is asked per item (:func:`_model_outputs`); the
    grounding gate (evidence mode); the gold grades; the verifier's statistics (:func:`_verify_all`); one record
    per answer (:func:`_answer_records`); the summary (:func:`_eval_summary`).
    """
    cfg.check()
    t_start = time.perf_counter()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    items = _eval_items(cfg)
    model_dir = resolve_model_path(cfg.model)
    name = cfg.name or default_name(cfg.model, cfg.system)
    if cfg.reuse:
        old = reusable_summary(cfg, model_dir, name)
        if old is not None:
            log.info("eval %s: reusing %s (same model weights and settings)", name, out / "summary.json")
            return old
    log.info("eval %s (%s) on %s: %d items, mode=%s, system=%s", name, model_dir, cfg.data, len(items), cfg.mode,
             cfg.system)

    mo = _model_outputs(cfg, model_dir, items, name)
    gens = mo.gens
    grounded: list[Optional[float]] = [None] * len(items)
    ungated: list[Optional[str]] = [None] * len(items)
    if cfg.mode == "evidence":
        grounded = [grounded_share(g.text, it.question, it.knowledge_text) for g, it in zip(gens, items)]
    if cfg.grounding_gate:
        gens, ungated = apply_grounding_gate(gens, items, grounded, cfg.abstain_text, mo.tok)
        log.info("eval %s: the grounding gate declined %d of %d answers (open questions whose answer adds no "
                 "word from the passage)", name, sum(u is not None for u in ungated), len(items))
    scope = cfg.grade_scope
    grades = [grade_answer(g.text, it.right_answer, it.question, scope=scope) for g, it in zip(gens, items)]
    lenient = [grade_answer(g.text, it.right_answer, it.question, strict=False, scope=scope).grade
               for g, it in zip(gens, items)]

    vstats: list[Optional[dict]] = [None] * len(items)
    t_ver = 0.0
    verifier_identity = None
    if cfg.verifier:
        t0 = time.perf_counter()
        vstats, verifier_identity = _verify_all(items, gens, cfg.progress)
        t_ver = time.perf_counter() - t0

    records = _answer_records(items, gens, grades, lenient, vstats, mo, grounded, ungated, scope)
    with open(out / "answers.jsonl", "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    summary = _eval_summary(cfg, name, model_dir, records, mo, verifier_identity, verify_s=t_ver, t_start=t_start)
    with open(out / "summary.json", "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2, default=_json_default)
    return summary


def _eval_items(cfg: EvalConfig) -> list:
    """The items of ``--data`` (``--limit`` of them, :func:`subsample`); ``ValueError`` when one has no gold
    answer (the grader needs one per item)."""
    items = subsample(load_items(cfg.data), cfg.limit)
    missing = [i for i, it in enumerate(items) if not (it.right_answer or "").strip()]
    if missing:
        raise ValueError(f"--data {cfg.data}: {len(missing)} item(s) have no 'right_answer' (first: item "
                         f"{missing[0]}, question {items[missing[0]].question[:60]!r}); the gold grader needs one "
                         "per item")
    return items


@dataclass
class _ModelOutputs:
    """What the evaluated model gives for the items (each list: one entry per item, None where not asked)."""

    tok: Any                              # the model's tokenizer (the grounding gate counts its tokens)
    gens: list                            # evaluation.generate.Generation per item
    gstats: Any                           # evaluation.generate.GenerationStats of the answers
    answers_source: str                   # "computed", "cache" / "shipped" (evaluation.answer_cache), "run"
    p_abstain: list[Optional[float]]      # P(abstain text | prompt), with --abstain-threshold
    confidence: list[Optional[float]]     # mean token log-prob of the answer (cfg.wants_confidence())
    known: list[Optional[float]]          # share of sampled answers graded right (--knowledge-samples)
    threads: int
    confidence_s: float
    knowledge_s: float


def _model_outputs(cfg: EvalConfig, model_dir: str, items: list, name: str) -> _ModelOutputs:
    """Load the model and take from it: the answers (a training run's with ``--answers-from``, thresholded on
    P(abstain) with ``--abstain-threshold``, else greedy and cached), then each answer's confidence and each
    question's known rate where asked; the model is freed after."""
    import torch

    threads = pick_threads(cfg.threads)
    torch.set_num_threads(threads)
    if not cfg.progress:   # transformers draws its own "Loading weights" bar
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    tok = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir, dtype=weights_dtype(cfg.dtype)).eval()
    prompts = eval_prompts(cfg, tok, items)
    p_abstain: list[Optional[float]] = [None] * len(items)
    answers_source = "computed"   # or "cache" / "shipped" (evaluation.answer_cache) / "run" (--answers-from)
    with inference_precision(model, cfg.dtype):
        if cfg.answers_from:
            gens, gstats = answers_of_run(cfg, model_dir, items)
            answers_source = "run"
        elif cfg.abstain_threshold:
            gens, gstats, p_abstain = _generate_with_abstain_threshold(model, tok, prompts, cfg, name)
        else:   # greedy answers, cached; --reuse takes cached ones, or shipped ones (the embedded base model)
            gens, gstats, answers_source = greedy_answers(
                model, tok, items, prompts, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size,
                model_name=model_key(cfg.model, model_dir), dtype=ANSWER_NUMERICS[cfg.dtype],
                progress=cfg.progress, desc=f"{name} [{cfg.mode}]", read=cfg.reuse)
        confidence: list[Optional[float]] = [None] * len(items)
        t_conf = 0.0
        if cfg.wants_confidence():
            from evaluation.confidence import SCORE_BATCH_SIZE, answer_confidence   # imports torch
            t0 = time.perf_counter()
            confidence = answer_confidence(model, tok, prompts, [g.text for g in gens],
                                           batch_size=min(cfg.batch_size, SCORE_BATCH_SIZE))
            t_conf = time.perf_counter() - t0
        known: list[Optional[float]] = [None] * len(items)
        t_know = 0.0
        if cfg.knowledge_samples:
            t0 = time.perf_counter()
            known = sample_known_rates(model, tok, prompts, [it.right_answer for it in items],
                                       [it.question for it in items], k=cfg.knowledge_samples,
                                       max_new_tokens=cfg.max_new_tokens, temperature=cfg.knowledge_temperature,
                                       seed=cfg.seed, batch_size=cfg.batch_size, progress=cfg.progress,
                                       desc=f"{name} [{cfg.mode}] knowledge x{cfg.knowledge_samples}")
            t_know = time.perf_counter() - t0
    del model
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return _ModelOutputs(tok=tok, gens=gens, gstats=gstats, answers_source=answers_source, p_abstain=p_abstain,
                         confidence=confidence, known=known, threads=threads, confidence_s=t_conf,
                         knowledge_s=t_know)


def _answer_records(items: list, gens: list, grades: list, lenient: list[str], vstats: list[Optional[dict]],
                    mo: _ModelOutputs, grounded: list[Optional[float]], ungated: list[Optional[str]],
                    scope: str) -> list[dict[str, Any]]:
    """One ``answers.jsonl`` record per item: the answer, its grades (strict and lenient), the verifier's
    statistics and what the model gave beside the answer."""
    records = []
    for it, g, gr, vs, conf, lg, kn, pa, gs, ug in zip(items, gens, grades, vstats, mo.confidence, lenient, mo.known,
                                                      mo.p_abstain, grounded, ungated):
        records.append({
            "uid": it.uid, "key": pair_key(it.question), "question": it.question, "gold": it.right_answer,
            "answer": g.text, "grade": gr.grade, "grade_lenient": lg, "reason": gr.reason, "hedged": gr.hedged,
            "abstained": gr.abstained, "f1": round(gr.f1, 4), "answer_words": len(g.text.split()),
            "new_tokens": g.new_tokens, "prompt_tokens": g.prompt_tokens, "truncated": g.truncated,
            "verifier": vs, "qtype": question_type(it.question), "grade_scope": scope,
            "confidence": None if conf is None or math.isnan(conf) else round(conf, 5),
            "known_rate": kn, "p_abstain": None if pa is None else float(f"{pa:.6g}"),
            "grounded_share": None if gs is None else round(gs, 4), "ungated_answer": ug,
        })
    return records


def _eval_summary(cfg: EvalConfig, name: str, model_dir: str, records: list[dict[str, Any]], mo: _ModelOutputs,
                  verifier_identity, *, verify_s: float, t_start: float) -> dict[str, Any]:
    """``summary.json``: what was evaluated and how (model, its fingerprint, data, settings), the metrics over
    ``records`` (:func:`summarise`) and the timings."""
    gstats = mo.gstats
    return {
        "name": name, "model": cfg.model, "model_dir": model_dir, "model_fingerprint": _model_fingerprint(model_dir),
        "data": cfg.data, "mode": cfg.mode, "system": cfg.system, "system_prompt": system_prompt(cfg),
        "limit": cfg.limit,
        "max_new_tokens": cfg.max_new_tokens, "batch_size": cfg.batch_size, "dtype": cfg.dtype,
        "confidence": cfg.wants_confidence(),
        "knowledge_samples": cfg.knowledge_samples,
        "knowledge_temperature": cfg.knowledge_temperature if cfg.knowledge_samples else None,
        "abstain_threshold": cfg.abstain_threshold, "abstain_text": cfg.abstain_text if cfg.abstain_threshold else None,
        "abstain_model": cfg.abstain_model or None,
        "abstain_model_fingerprint": _model_fingerprint(resolve_model_path(cfg.abstain_model))
        if cfg.abstain_model else None,
        "grounding_gate": cfg.grounding_gate, "answers_from": cfg.answers_from or None, "grade_scope": cfg.grade_scope,
        "verifier_identity": verifier_identity,
        "metrics": summarise(records, cfg.n_boot, cfg.seed),
        "timing": {"answers": mo.answers_source, "generate_s": round(gstats.seconds, 2),
                   "new_tokens": gstats.new_tokens, "tokens_per_s": round(gstats.tokens_per_s, 1),
                   "threads": mo.threads, "verify_s": round(verify_s, 2), "confidence_s": round(mo.confidence_s, 2),
                   "knowledge_s": round(mo.knowledge_s, 2), "total_s": round(time.perf_counter() - t_start, 2)},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **cfg.extra,
    }


def _generate_with_abstain_threshold(model, tok, prompts: list[str], cfg: EvalConfig, name: str):
    """Decline where the model's own P(abstain text | prompt) exceeds ``cfg.abstain_threshold``; elsewhere answer
    greedily with the abstention's first token blocked, so the model's decision is the threshold's, not greedy
    rounding's. With ``cfg.abstain_model`` that model's probability decides and ``model`` answers. Returns
    (generations, stats, P(abstain) per prompt)."""
    from evaluation.confidence import SCORE_BATCH_SIZE, abstain_probability

    t0 = time.perf_counter()
    gate = model
    if cfg.abstain_model:   # another model decides (e.g. a refusal-trained copy gating the model users deploy)
        gate_dir = resolve_model_path(cfg.abstain_model)
        if load_tokenizer(gate_dir).get_vocab() != tok.get_vocab():
            raise ValueError(f"--abstain-model {cfg.abstain_model}: its tokenizer differs from --model's; the "
                             "gate must share the evaluated model's tokenizer (same base model)")
        gate = load_causal_lm(gate_dir, dtype=weights_dtype(cfg.dtype)).eval()
        if cfg.dtype == "autocast":
            gate.requires_grad_(True)   # see inference_precision: autocast caches the casts of trainable weights
    p_abstain = abstain_probability(gate, tok, prompts, cfg.abstain_text,
                                    batch_size=min(cfg.batch_size, SCORE_BATCH_SIZE))
    if gate is not model:
        del gate
    t_p = time.perf_counter() - t0
    answer_idx = [i for i, p in enumerate(p_abstain) if p <= cfg.abstain_threshold]
    first_id = tok(cfg.abstain_text, add_special_tokens=False)["input_ids"][:1]
    sub, gstats = generate_greedy(model, tok, [prompts[i] for i in answer_idx], batch_size=cfg.batch_size,
                                  max_new_tokens=cfg.max_new_tokens, progress=cfg.progress,
                                  desc=f"{name} [{cfg.mode}, abstain > {cfg.abstain_threshold:g}]",
                                  suppress_first_ids=first_id)
    gens = [declined(tok, cfg.abstain_text, len(tok(p, add_special_tokens=False)["input_ids"])) for p in prompts]
    for i, g in zip(answer_idx, sub):
        gens[i] = g
    log.info("eval %s: P(%r) > %g on %d of %d prompts (declined); %.1f s to score them", name, cfg.abstain_text,
             cfg.abstain_threshold, len(prompts) - len(answer_idx), len(prompts), t_p)
    stats = GenerationStats(seconds=gstats.seconds + t_p, new_tokens=gstats.new_tokens,
                            prompt_tokens=gstats.prompt_tokens)
    return gens, stats, p_abstain


def declined(tok, abstain_text: str, prompt_tokens: int):
    """The generation recorded where a gate declines: the abstention text, counted in ``tok``'s tokens."""
    return Generation(text=abstain_text, prompt_tokens=prompt_tokens,
                      new_tokens=len(tok(abstain_text, add_special_tokens=False)["input_ids"]), truncated=False)


def apply_grounding_gate(gens: list, items: list, grounded: list[Optional[float]], abstain_text: str, tok
                         ) -> tuple[list, list[Optional[str]]]:
    """Decline (reply ``abstain_text``) where an open question's answer adds no word that is in its passage.

    ``grounded[i]`` is :func:`verifier_service.text.grounded_share` of answer i: None when the answer adds no
    content word to the question, 0.0 when none of the words it adds is in the passage. Either way, for an
    open question the passage did not give the model its answer. Yes / no and either-or questions are never
    declined: their right answer adds nothing to the question. Answers that already abstain are left alone.
    On the base model's answers to 200 dev questions with their passage (the answers the rule was designed on) it
    declined 17, of which 15 were wrong (2026-11-23, the gold grader of that day); `rlfh eval --model
    smollm2-135m-instruct --data halueval:dev --mode evidence --limit 200 --grounding-gate --out OUT` measures it
    again.
    Returns (generations, the replaced answer per item or None).
    """

    out, ungated = list(gens), [None] * len(gens)
    for i, (g, it, share) in enumerate(zip(gens, items, grounded)):
        if question_type(it.question) == "open" and not share and not detect_abstention(g.text):
            ungated[i] = g.text
            out[i] = declined(tok, abstain_text, g.prompt_tokens)
    return out, ungated


def system_prompt(cfg: EvalConfig) -> str:
    """The system prompt ``--system`` names."""
    return SYSTEM_PROMPTS[cfg.system]


def eval_prompts(cfg: EvalConfig, tok, items: list) -> list[str]:
    """The chat prompts a run of ``cfg`` asks ``items`` with (its prompt mode and system prompt)."""
    system = system_prompt(cfg)
    return [render_prompt(tok, it.question, it.knowledge_text, cfg.mode, system=system) for it in items]


#: ``--dtype`` -> the numerics named in the greedy answers' cache key (:func:`evaluation.answer_cache.answers_cache_path`)
ANSWER_NUMERICS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "autocast": "float32+autocast"}


def cached_answers_name(cfg: EvalConfig) -> str:
    """The file a ``--reuse`` run of ``cfg`` looks its greedy answers up by, in ``$RLFH_CACHE_DIR/answers/`` and
    then :data:`evaluation.answer_cache.SHIPPED_DIR`: from the data and the tokenizer alone (no weights loaded)."""
    model_dir = resolve_model_path(cfg.model)
    prompts = eval_prompts(cfg, load_tokenizer(model_dir), subsample(load_items(cfg.data), cfg.limit))
    return answers_cache_path(model_key(cfg.model, model_dir), prompts, cfg.max_new_tokens, cfg.batch_size,
                              ANSWER_NUMERICS[cfg.dtype], Path(".")).name


def _answer_settings(cfg: EvalConfig, model_dir: str) -> dict[str, Any]:
    """The summary fields that decide which greedy answers a run has (what --answers-from and --reuse match)."""
    return {"model_fingerprint": _model_fingerprint(model_dir), "data": cfg.data, "mode": cfg.mode,
            "system": cfg.system, "limit": cfg.limit, "max_new_tokens": cfg.max_new_tokens, "dtype": cfg.dtype}


def answers_of_run(cfg: EvalConfig, model_dir: str, items: list):
    """The greedy answers of an earlier plain ``rlfh eval`` run (``cfg.answers_from``) of the same model,
    data, mode, system prompt and length cap, in ``items`` order, so a gate can be evaluated without
    generating again. Raises ValueError naming the setting that differs."""

    src = Path(cfg.answers_from)
    sp, ap = src / "summary.json", src / "answers.jsonl"
    if not (sp.exists() and ap.exists()):
        raise ValueError(f"--answers-from {src}: no summary.json / answers.jsonl there (give the --out of an "
                         "earlier `rlfh eval` run)")
    old = json.loads(sp.read_text(encoding="utf-8"))
    for k, v in _answer_settings(cfg, model_dir).items():
        if old.get(k) != v:
            raise ValueError(f"--answers-from {src}: its {k} is {old.get(k)!r}, this run's is {v!r}; re-use only a "
                             "run of the same model and settings")
    for k in ("abstain_threshold", "grounding_gate", "answers_from"):
        if old.get(k):
            raise ValueError(f"--answers-from {src}: that run used {k}={old[k]!r}; re-use a plain run's answers")
    by_key = {}
    with open(ap, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            by_key[r["key"]] = r
    missing = [it.question for it in items if pair_key(it.question) not in by_key]
    if missing:
        raise ValueError(f"--answers-from {src}: {len(missing)} question(s) of {cfg.data} are not in it (first: "
                         f"{missing[0][:60]!r})")
    recs = [by_key[pair_key(it.question)] for it in items]
    gens = [Generation(text=r["answer"], prompt_tokens=r["prompt_tokens"], new_tokens=r["new_tokens"],
                       truncated=r["truncated"]) for r in recs]
    return gens, GenerationStats(seconds=0.0, new_tokens=sum(g.new_tokens for g in gens),
                                 prompt_tokens=sum(g.prompt_tokens for g in gens))


def reusable_summary(cfg: EvalConfig, model_dir: str, name: str) -> Optional[dict[str, Any]]:
    """The existing summary in ``cfg.out`` when it was made with the same weights and settings, else None."""
    sp, ap = Path(cfg.out) / "summary.json", Path(cfg.out) / "answers.jsonl"
    if not (sp.exists() and ap.exists()):
        return None
    try:
        old = json.loads(sp.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None
    want = {**_answer_settings(cfg, model_dir), "batch_size": cfg.batch_size, "confidence": cfg.wants_confidence(),
            "knowledge_samples": cfg.knowledge_samples, "abstain_threshold": cfg.abstain_threshold,
            "abstain_text": cfg.abstain_text if cfg.abstain_threshold else None,
            "abstain_model_fingerprint": _model_fingerprint(resolve_model_path(cfg.abstain_model))
            if cfg.abstain_model else None, "grounding_gate": cfg.grounding_gate, "grade_scope": cfg.grade_scope}
    # summaries from before --knowledge-samples / --abstain-threshold existed
    for k, v in (("knowledge_samples", 0), ("abstain_threshold", 0.0), ("abstain_text", None),
                 ("abstain_model_fingerprint", None), ("grounding_gate", False), ("grade_scope", "whole")):
        old.setdefault(k, v)
    if any(old.get(k) != v for k, v in want.items()) or (old.get("verifier_identity") is None) == cfg.verifier:
        return None
    if cfg.verifier and old.get("verifier_identity") != _verifier_identity():
        return None  # the verifier changed since: its statement metrics would be stale
    if old.get("name") != name:
        old["name"] = name
        sp.write_text(json.dumps(old, indent=2, default=_json_default), encoding="utf-8")
    old["reused"] = True
    return old


def _json_default(o):
    if isinstance(o, float) and math.isnan(o):
        return None
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return str(o)


def _verifier_identity() -> dict:
    """What the training verifier (as configured now) would record as its identity."""
    return Verifier().cache_identity()


def _verify_all(items, gens, progress: bool) -> tuple[list[dict], dict]:
    """Run the training verifier (its configured backend, ``evidence`` by default) over every answer."""
    from tqdm import tqdm

    ver = Verifier()
    reqs = [VerifyRequest(question=it.question, response=g.text[:MAX_RESPONSE_CHARS], materials=it.knowledge,
                          gold_answer=it.right_answer) for it, g in zip(items, gens)]
    out: list[dict] = []
    step = 32
    for i in tqdm(range(0, len(reqs), step), desc="verify", unit="batch", disable=not progress,
                  dynamic_ncols=True):
        out += [verifier_stats(r) for r in ver.verify_many(reqs[i:i + step])]
    return out, ver.cache_identity()


# ----------------------------------------------------------------------------- printing

def pct(v: Optional[float]) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    x = 100 * v
    return f"{0.0 if abs(x) < 0.05 else x:.1f}"  # no "-0.0" from float noise


def fmt_ci(entry: dict) -> str:
    lo, hi = entry["ci95"]
    return f"{pct(entry['value'])} [{pct(lo)}, {pct(hi)}]"


def print_summary(summary: dict[str, Any], console=None) -> None:
    from rich.console import Console
    from rich.table import Table
    m = summary["metrics"]
    t = Table(title=f"rlfh eval: {summary['name']} | {summary['data']} | mode={summary['mode']} | "
                    f"n={m['n']} (95% bootstrap CI, %)")
    t.add_column("metric")
    t.add_column("value", justify="right")
    labels = {"correct": "correct", "incorrect": "incorrect (hallucinated)", "not_attempted": "not attempted",
              "accuracy_given_attempted": "correct given attempted", "f_score": "F-score (SimpleQA)"}
    for k, lab in labels.items():
        t.add_row(lab, fmt_ci(m["gold"][k]))
    t.add_row("abstention rate", fmt_ci(m["abstain_rate"]))
    mw = m["mean_answer_words"]
    t.add_row("mean answer length (words)", f"{mw['value']:.1f} [{mw['ci95'][0]:.1f}, {mw['ci95'][1]:.1f}]")
    t.add_row("hedged answers: correct / incorrect", f"{m['hedged_correct']} / {m['hedged_incorrect']}")
    v = m.get("verifier")
    if v:
        t.add_section()
        t.add_row("[italic]training verifier (not independent)[/italic]", "")
        t.add_row("statements per answer", f"{v['statements_per_answer']:.2f}")
        if "supported_statements_per_answer" in v:   # summaries from before it was counted have no such field
            t.add_row("supported statements per answer", f"{v['supported_statements_per_answer']:.2f}")
        t.add_row("fact precision", pct(v["fact_precision"]))
        t.add_row("label share C / HC / V / HW / W",
                  " / ".join(pct(v["label_share"][lab]) for lab in VERIFIER_LABELS))
    tm = summary["timing"]
    t.caption = (f"generate {tm['generate_s']:.0f}s ({tm['tokens_per_s']:.0f} tok/s), verify {tm['verify_s']:.0f}s")
    (console or Console(width=120)).print(t)
