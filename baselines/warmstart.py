"""Abstention-prior warm start: teach the model THAT it may decline, not WHEN (the RL recipe's first stage).

A 135M instruct model never samples "I don't know." by itself, so on-policy RL has no abstention to weigh;
injecting one off-policy candidate per group (ABSTAIN_SAMPLES=1) gives it a huge advantage in every all-wrong group
and abstention spreads at random: in three closed-book runs that did so (2026-11-23, GRPO, 16-20 steps), no
checkpoint declined significantly more selectively than declining as many questions at random (e.g. 53 of 100
dev questions declined at step 10, 3 right answers kept where random declining keeps 4.2); ``rlfh select
RUN_DIR`` measures this for a run. This warm start makes abstention an ordinary on-policy action instead:

1. The base model answers every training question greedily with the trainer's prompt.
2. Closed-book questions get the abstention text as their target with probability ``abstain_share``, chosen
   at random by a seeded hash of the question and **independently of whether the answer is right** (no gold
   answer is read: the warm start knows nothing about what the model knows). The rest, and every question
   asked with its evidence passage (``abstain_share_evidence``, default 0), keep the model's own answer.
3. One epoch of SFT on those targets (loss on the response tokens).

The result declines about ``abstain_share`` of closed-book questions *at random*; RL with a correctness
reward then has to learn where declining pays.

``--abstain-where wrong`` (R-Tuning) replaces only answers the gold grader marks wrong, each with probability
``abstain_share``. ``--abstain-where probed`` (TruthRL's knowledge boundary, :mod:`baselines.probe`) samples k
answers per closed-book question and declines exactly where the right-sample rate is below the rate at which
answering pays under the trainer's ternary reward, ``(1 + price) / 2``: the warm start is then the policy the RL
reward prefers, as far as k samples can tell, and RL (with a KL anchor to it) refines it.

``--support`` (WARM_START=grounded, the grounded recipe's format) keeps every answer asked with its passage and
appends to its first sentence the passage sentence that shares the most words with it, verbatim: the model learns
to write the answer, then the fact behind it, from its own answers (no gold answer is read); RL then learns which
answers the passage supports.

`rlfh eval` of the warm start alone is the row that shows what RL added. Results are cached: the same settings
re-use the saved folder.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

from baselines.common import (SFT_LOOP_VERSION, BaselineError, DEFAULT_ABSTAIN_TEXT, check_positive, check_sft_args,
                              fmt_loss, grade_all, load_model, load_questions, prepare_out, print_summary, save_model,
                              set_seed, set_threads, train_last_layers, write_jsonl)
from baselines.probe import PROBE_SEED, answer_threshold, bucket_counts, cache_path, probe_questions
from baselines.rtuning import sft_on_targets
from core.grader import CORRECT, GRADER_VERSION
from core.model_loader import load_tokenizer, resolve_model_path
from core.prompts import prompt_mode_for, render_prompt, resolve_system
from evaluation.answer_cache import SHIPPED_DIR, answers_cache_path, greedy_answers, model_key
from verifier_service.text import content_words, split_sentences, stem

log = logging.getLogger("baselines.warmstart")

CACHE_KEYS = ("model", "data", "limit", "type_share", "mode", "evidence_share", "system", "abstain_text",
              "abstain_share", "abstain_share_evidence", "abstain_where", "epochs", "lr", "batch_size", "seed",
              "max_new_tokens", "probe_samples", "probe_temperature", "abstain_price", "probe_dtype",
              "probe_batch_size", "train_layers", "support", "support_answers")


@dataclass
class WarmTarget:
    uid: str
    question: str
    prompt_mode: str   # closed | evidence
    prompt: str
    target: str        # what the model is trained to say
    source: str        # "own" (its greedy answer) | "own+support" (its answer, then a passage sentence) | "abstain"
    answer: str        # the base model's own greedy answer
    probe_right: Optional[int] = None   # --abstain-where probed: right samples of the probe's k (closed book)


def abstains(question: str, share: float, seed: int) -> bool:
    """Whether ``question`` gets the abstention target: a seeded hash in [0, 1) below ``share``.

    Independent of the answer and of the gold label by construction: it reads the question text only.
    """
    if share <= 0:
        return False
    h = hashlib.sha256(f"warmstart:{seed}:{question}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2 ** 64 < share


def with_support(answer: str, question: str, passage: str) -> str:
    """A grounded reply made from the model's own ``answer``: its first sentence, then the sentence of ``passage``
    that shares the most content words with it, verbatim (the question's own words do not count: most passage
    sentences repeat them; a tie goes to the earlier sentence). The first sentence alone where no passage sentence
    shares a word with it or the passage is that sentence already. An answer made of the question's words only
    (a two-option question's choice) is matched on all its words."""
    spans = split_sentences(answer)
    first = spans[0].text if spans else answer.strip()
    asked = {stem(w) for w in content_words(question)}
    said = ({stem(w) for w in content_words(first)} - asked) or {stem(w) for w in content_words(first)}
    best, best_score = None, 0
    for s in split_sentences(passage):
        score = len(said & {stem(w) for w in content_words(s.text)})
        if score > best_score:
            best, best_score = s.text, score
    if best is None or best.strip().lower() == first.strip().lower():
        return first
    return f"{first} {best}"


def grounded_targets(items: Sequence, targets: list[WarmTarget], answers: str = "own") -> list[WarmTarget]:
    """``targets`` in the grounded format (``--support``): each question asked with its passage gets an answer
    sentence followed by the passage sentence behind it (:func:`with_support`). ``answers`` picks the answer sentence:

    - ``own``: the model's greedy answer (no gold answer is read);
    - ``right``: the same, but only where the gold grader accepts the answer sentence; a wrong answer's target is
      dropped (``source`` "dropped": kept in targets.jsonl, not trained on). Rejection-sampling fine-tuning on the
      model's own right answers: the gold outcome RL is rewarded by, applied once offline;
    - ``gold``: the data set's right answer as the answer sentence (supervised), its support chosen the same way.
    """
    if answers not in SUPPORT_ANSWERS:
        raise BaselineError(f"--support-answers must be one of {', '.join(SUPPORT_ANSWERS)}, got {answers!r}")
    right = None
    if answers == "right":
        right = [g.grade == CORRECT for g in grade_all(items, [t.answer for t in targets], scope="first-sentence")]
    for i, (it, t) in enumerate(zip(items, targets)):
        if t.source != "own" or t.prompt_mode != "evidence":
            continue
        if answers == "gold":
            gold = it.right_answer.strip()
            sentence = gold if gold.endswith((".", "!", "?")) else gold + "."
            t.target, t.source = with_support(sentence, it.question, it.knowledge_text), "gold+support"
        elif right is not None and not right[i]:
            t.source = "dropped"
        else:
            t.target, t.source = with_support(t.answer, it.question, it.knowledge_text), "own+support"
    return targets


def warmstart_targets(items: Sequence, prompts: Sequence[str], modes: Sequence[str], answers: Sequence[str],
                      abstain_share: float, abstain_share_evidence: float, seed: int,
                      abstain_text: str = DEFAULT_ABSTAIN_TEXT,
                      right: Optional[Sequence[bool]] = None,
                      decline: Optional[Sequence[bool]] = None) -> list[WarmTarget]:
    """One :class:`WarmTarget` per item, in input order.

    Args:
        items: N items (``question``, ``uid``); prompts, modes ("closed" | "evidence"), answers: N each.
        abstain_share / abstain_share_evidence: share of closed / evidence questions whose target is
            ``abstain_text`` (chosen by :func:`abstains`); the others keep the model's own answer.
        right: None (``--abstain-where random``: the choice ignores correctness), or N booleans, the gold
            grade of each answer (``--abstain-where wrong``: only wrong answers may be replaced, each with
            probability ``abstain_share``; right answers are always kept, as in R-Tuning).
        decline: None, or N booleans (``--abstain-where probed``): a closed-book question gets the abstention
            iff its entry is True (the probe's right-sample rate is below the answer threshold); the shares
            then apply to evidence questions only.
    """
    n = len(items)
    if not (len(prompts) == len(modes) == len(answers) == n) or any(
            x is not None and len(x) != n for x in (right, decline)):
        raise ValueError(f"warmstart_targets: {n} items, {len(prompts)} prompts, {len(modes)} modes, "
                         f"{len(answers)} answers{'' if right is None else f', {len(right)} grades'} (need one "
                         "of each per item)")
    out = []
    for i, (it, p, m, a) in enumerate(zip(items, prompts, modes, answers)):
        share = abstain_share_evidence if m == "evidence" else abstain_share
        if right is not None and right[i] and a.strip():
            share = 0.0
        if decline is not None and m != "evidence":
            declined = decline[i]
        else:
            declined = abstains(it.question, share, seed)
        if declined or not a.strip():
            out.append(WarmTarget(it.uid, it.question, m, p, abstain_text, "abstain", a))
        else:
            out.append(WarmTarget(it.uid, it.question, m, p, a, "own", a))
    return out


def _probe_summary(probes: dict, args) -> dict:
    return {"samples": args.probe_samples, "temperature": args.probe_temperature, "dtype": probe_dtype(args),
            "batch_size": probe_batch_size(args),
            "threshold": answer_threshold(args.abstain_price), "buckets": bucket_counts(list(probes.values()))}


PROBE_KEYS = ("probe_samples", "probe_temperature", "abstain_price", "probe_dtype", "probe_batch_size")
#: probe settings added later: compared only when they differ from these (so older caches stay valid)
PROBE_DEFAULTS = {"probe_dtype": "fp32", "probe_batch_size": 32}
#: settings left out of the cache key at these values, so warm starts cached before the setting existed still match
KEY_DEFAULTS = {"train_layers": 0, "support": False, "support_answers": "own"}
#: --support-answers: which answer sentence a grounded target starts with
SUPPORT_ANSWERS = ("own", "right", "gold")


def probe_dtype(args) -> str:
    """--probe-dtype resolved: ``auto`` is bf16 on a CPU with native bf16 (the rollout engines' ROLLOUT_DTYPE=auto
    rule: RL samples in bf16 there), else fp32."""
    if args.probe_dtype != "auto":
        return args.probe_dtype
    from actors.base import cpu_has_fast_bf16   # torch: kept lazy, this module is on `rlfh --help`'s import path
    import torch
    return "bf16" if not torch.cuda.is_available() and cpu_has_fast_bf16() else "fp32"


def probe_batch_size(args) -> int:
    """Rows per probe sampling call: --probe-batch-size, or --gen-batch-size when 0."""
    return int(getattr(args, "probe_batch_size", 0) or args.gen_batch_size)


def settings_of(args) -> dict:
    """What the cache compares; the probe's settings only where they matter (--abstain-where probed), and the gold
    grader's version where its grades choose the targets (wrong, probed)."""
    resolved = {"probe_dtype": probe_dtype(args) if args.abstain_where == "probed" else "fp32",
                "probe_batch_size": probe_batch_size(args), "train_layers": getattr(args, "train_layers", 0)}
    out = {k: resolved.get(k, getattr(args, k, None)) for k in CACHE_KEYS
           if args.abstain_where == "probed" or k not in PROBE_KEYS}
    for k, default in {**PROBE_DEFAULTS, **KEY_DEFAULTS}.items():
        if out.get(k) == default:
            del out[k]
    if args.abstain_where != "random" or out.get("support_answers") == "right":
        out["grader"] = GRADER_VERSION
    out["sft_loop"] = SFT_LOOP_VERSION   # a warm start trained by an older loop is made again
    return out


def cached(out: Path, settings: dict) -> bool:
    """True when ``out`` already holds a warm start made with exactly ``settings``."""
    meta = out / "baseline.json"
    if not (meta.is_file() and (out / "config.json").is_file()):
        return False
    try:
        return json.loads(meta.read_text()).get("settings") == json.loads(json.dumps(settings, default=str))
    except (OSError, ValueError):
        return False


def closed_book_prompts(tok, items: Sequence, modes: Sequence[str], system) -> tuple[list[int], list[str]]:
    """What the probe samples: the closed-book questions (indices into ``items``) and their closed-book prompts."""
    closed = [i for i, m in enumerate(modes) if m != "evidence"]
    return closed, [render_prompt(tok, items[i].question, items[i].knowledge_text, "closed", system=system)
                    for i in closed]


def cache_file_names(args) -> dict[str, str]:
    """The names of the cache files :func:`run` looks up for ``args`` (shipped ones have the same names):
    ``{"answers": ..., "probe": ...}``, from the tokenizer alone: no model weights are loaded, nothing is sampled.
    The answers' key assumes fp32 weights (how ``rlfh baseline`` loads a model)."""
    path = resolve_model_path(args.model)
    tok = load_tokenizer(path)
    items = load_questions(args.data, args.limit, args.type_share)
    modes = [prompt_mode_for(it.question, args.mode, args.evidence_share) for it in items]
    system = resolve_system(args.system)
    prompts = [render_prompt(tok, it.question, it.knowledge_text, m, system=system) for it, m in zip(items, modes)]
    _, closed = closed_book_prompts(tok, items, modes, system)
    key = model_key(args.model, path)
    return {"answers": answers_cache_path(key, prompts, args.max_new_tokens, args.gen_batch_size, "float32",
                                          Path(".")).name,
            "probe": cache_path(key, closed, args.probe_samples, args.probe_temperature, args.max_new_tokens,
                                PROBE_SEED, Path("."), probe_dtype(args), probe_batch_size(args)).name}


def run(args) -> int:
    """`rlfh baseline warmstart`: check the arguments, re-use a cached warm start with the same settings, else
    answer every question with the base model (:func:`_base_answers`), grade them (``--abstain-where wrong``) or
    probe them (``--abstain-where probed``, :func:`_probe`), choose the targets (:func:`_choose_targets`), SFT on
    them and save the model, then print the summary (:func:`_print_warmstart_summary`)."""
    t_start = time.perf_counter()
    _check_args(args)
    settings = settings_of(args)
    out_path = Path(args.out)
    if getattr(args, "reuse", True) and cached(out_path, settings):
        log.info("warm start: re-using %s (made with the same settings)", out_path)
        print(f"warm start: re-using {out_path} (same settings; delete it to rebuild)")
        return 0
    items = load_questions(args.data, args.limit, args.type_share)
    # a folder holding an older warm start (other settings) is rebuilt in place; anything else needs --overwrite
    older = (out_path / "baseline.json").is_file() and \
        json.loads((out_path / "baseline.json").read_text()).get("baseline") == "warmstart"
    out = prepare_out(args.out, args.overwrite or older)
    threads = set_threads(args.threads)
    set_seed(args.seed)
    log.info("warm start: %d questions from %s, mode %s, abstain share %.2f (closed) / %.2f (evidence), "
             "%d torch threads", len(items), args.data, args.mode, args.abstain_share,
             args.abstain_share_evidence, threads)
    path, model, tok = load_model(args.model)
    model.eval()
    system = resolve_system(args.system)
    modes = [prompt_mode_for(it.question, args.mode, args.evidence_share) for it in items]
    prompts = [render_prompt(tok, it.question, it.knowledge_text, m, system=system) for it, m in zip(items, modes)]

    answers, answers_source, t_gen = _base_answers(args, model, tok, path, items, prompts)
    right = None
    if args.abstain_where == "wrong":   # R-Tuning-style: the gold grader decides which answers may be replaced
        right = [g.grade == CORRECT for g in grade_all(items, answers)]
        log.info("gold grader: %d of %d answers right (always kept)", sum(right), len(right))
    decline, probes, probe_source, t_probe = None, {}, None, 0.0
    if args.abstain_where == "probed":   # TruthRL-style: decline where answering does not pay at the price
        decline, probes, probe_source, t_probe = _probe(args, model, tok, path, items, modes, system)
    targets, trained_on, counts = _choose_targets(args, items, prompts, modes, answers, right, decline, probes)
    write_jsonl(out / "targets.jsonl", [asdict(t) for t in targets])

    log.info("step 2/2: SFT, %d epochs x %d examples, lr %g, batch %d", args.epochs, len(trained_on), args.lr,
             args.batch_size)
    trainable = train_last_layers(model, args.train_layers)
    if args.train_layers:
        log.info("--train-layers %d: the last %d transformer layers trained, the embeddings and the layers below "
                 "frozen: %.1fM parameters", args.train_layers, args.train_layers, trainable / 1e6)
    hist = sft_on_targets(model, tok, trained_on, args, "warm start", token_budget=args.micro_batch_size * 256,
                          autocast=True)
    meta = {"baseline": "warmstart", "base_model": args.model, "base_path": path, "settings": settings,
            "targets": counts, "probe": _probe_summary(probes, args) if probes else None,
            "loss_first": hist.first, "loss_last": hist.last, "losses": hist.losses,
            "probe_source": probe_source, "answers_source": answers_source, "trainable_params": trainable,
            "micro_batches": hist.micro_batches, "tokens_computed": hist.tokens,
            "seconds": {"generate": t_gen, "probe": t_probe, "train": hist.seconds}}
    save_model(model, tok, out, json.loads(json.dumps(meta, default=str)))
    _print_warmstart_summary(args, items, counts, meta, hist, out, time.perf_counter() - t_start)
    return 0


def _check_args(args) -> None:
    """BaselineError for a warm start setting out of range or without the setting it needs."""
    check_sft_args(args)
    check_positive("--train-layers", args.train_layers, allow_zero=True)
    for name in ("abstain_share", "abstain_share_evidence"):
        v = getattr(args, name)
        if not 0.0 <= v <= 1.0:
            raise BaselineError(f"--{name.replace('_', '-')} must be in [0, 1], got {v}")
    if getattr(args, "support_answers", "own") != "own" and not getattr(args, "support", False):
        raise BaselineError(f"--support-answers {args.support_answers} needs --support (it picks the answer sentence "
                            "of the grounded format's targets): add --support, or drop --support-answers")
    if args.abstain_where == "probed":
        if args.probe_samples < 1:
            raise BaselineError(f"--probe-samples must be >= 1 (answers sampled per question), got "
                                f"{args.probe_samples}")
        if getattr(args, "probe_batch_size", 0) < 0:
            raise BaselineError(f"--probe-batch-size must be >= 0 (rows per sampling call; 0: --gen-batch-size), "
                                f"got {args.probe_batch_size}")
        if not args.probe_temperature > 0:
            raise BaselineError(f"--probe-temperature must be > 0 (the probe samples), got {args.probe_temperature}")
        if not -1.0 <= args.abstain_price < 1.0:
            raise BaselineError(f"--abstain-price must be in [-1, 1) (the trainer's ABSTAIN_OUTCOME_REWARD), got "
                                f"{args.abstain_price}")


def _base_answers(args, model, tok, path: str, items: Sequence, prompts: list[str]) -> tuple[list[str], str, float]:
    """Step 1: the base model's greedy answer to every prompt (cached, or shipped unless --recompute-probe).
    Returns (answers, where they came from, seconds)."""
    log.info("step 1/2: the base model answers %d questions (greedy, <= %d tokens)", len(items), args.max_new_tokens)
    t0 = time.perf_counter()
    recompute = getattr(args, "recompute_probe", False)
    gens, _, answers_source = greedy_answers(
        model, tok, items, prompts, max_new_tokens=args.max_new_tokens, batch_size=args.gen_batch_size,
        model_name=model_key(args.model, path), dtype="float32", progress=args.progress,
        shipped_root=None if recompute else SHIPPED_DIR)
    answers = [g.text for g in gens]
    t_gen = time.perf_counter() - t0
    if answers_source == "shipped":
        print(f"answers: using the shipped greedy answers of this model to these questions ({SHIPPED_DIR}; "
              "--recompute-probe makes them again)")
    return answers, answers_source, t_gen


def _probe(args, model, tok, path: str, items: Sequence, modes: Sequence[str], system):
    """``--abstain-where probed``: sample the closed-book questions (:mod:`baselines.probe`) and decline where the
    right-sample rate is below the answer threshold at ``--abstain-price``. Returns (decline per item, probe per
    uid, where the probe came from, seconds)."""
    recompute = getattr(args, "recompute_probe", False)
    closed, closed_prompts = closed_book_prompts(tok, items, modes, system)
    t_probe = time.perf_counter()
    found, probe_source = probe_questions(
        model, tok, [items[i] for i in closed], closed_prompts, k=args.probe_samples,
        temperature=args.probe_temperature, max_new_tokens=args.max_new_tokens, seed=PROBE_SEED,
        model_name=model_key(args.model, path), batch_size=probe_batch_size(args), progress=args.progress,
        dtype=probe_dtype(args), shipped_root=None if recompute else SHIPPED_DIR)
    t_probe = time.perf_counter() - t_probe
    if probe_source == "shipped":
        print(f"probe: using the shipped probe of this model and these questions ({SHIPPED_DIR}; "
              "--recompute-probe samples it again)")
    probes = {items[i].uid: pr for i, pr in zip(closed, found)}
    threshold = answer_threshold(args.abstain_price)
    decline = [(it.uid in probes and probes[it.uid].p < threshold) for it in items]
    how = (probe_source if probe_source != "computed"
           else f"{args.probe_samples} samples at T {args.probe_temperature}")
    log.info("probe (%s): %s of %d closed-book questions; declining where the right rate < %.3f "
             "(price %g): %d", how, bucket_counts(found), len(found), threshold, args.abstain_price, sum(decline))
    return decline, probes, probe_source, t_probe


def _choose_targets(args, items: Sequence, prompts: Sequence[str], modes: Sequence[str], answers: Sequence[str],
                    right: Optional[list[bool]], decline: Optional[list[bool]], probes: dict):
    """The SFT targets (:func:`warmstart_targets`, in the grounded format with --support), those trained on (not
    dropped), and their counts per prompt mode and source. BaselineError where every target was dropped."""
    targets = warmstart_targets(items, prompts, modes, answers, args.abstain_share, args.abstain_share_evidence,
                                args.seed, args.abstain_text, right, decline)
    if getattr(args, "support", False):   # the grounded format: the answer, then the passage sentence behind it
        targets = grounded_targets(items, targets, getattr(args, "support_answers", "own"))
    trained_on = [t for t in targets if t.source != "dropped"]
    if not trained_on:
        raise BaselineError("warm start: every target was dropped (--support-answers right and no answer the gold "
                            "grader accepts): raise --limit, or use --support-answers own")
    for t in targets:
        if t.uid in probes:
            t.probe_right = probes[t.uid].right
    counts = {f"{m}/{s}": sum(t.prompt_mode == m and t.source == s for t in targets)
              for m in ("closed", "evidence")
              for s in ("own", "abstain", *(("own+support", "gold+support", "dropped")
                                             if getattr(args, "support", False) else ()))}
    return targets, trained_on, counts


def _print_warmstart_summary(args, items: Sequence, counts: dict[str, int], meta: dict, hist, out: Path,
                             total: float) -> None:
    """The closing table: targets, probe buckets, optimizer steps, losses, times, where the model was saved."""
    probe_source, t_gen, answers_source = meta["probe_source"], meta["seconds"]["generate"], meta["answers_source"]
    t_probe = meta["seconds"]["probe"]
    title = "Warm start (grounded format)" if getattr(args, "support", False) else "Warm start (abstention prior)"
    print_summary(title, [
        ("questions", str(len(items))),
        *[(f"{k} targets", str(v)) for k, v in counts.items() if v],
        *([("probe never / sometimes / known", " / ".join(str(v) for v in meta["probe"]["buckets"].values()))]
          if meta["probe"] is not None else []),
        ("optimizer steps", str(len(hist.losses))),
        ("micro batches / tokens computed", f"{hist.micro_batches} / {hist.tokens:,} (padding included)"),
        ("loss first / last", f"{fmt_loss(hist.first)} / {fmt_loss(hist.last)}"),
        *([("probe time", f"{t_probe:.0f}s ({probe_source})")] if probe_source else []),
        ("answer time", f"{t_gen:.0f}s ({answers_source})"),
        ("train time", f"{hist.seconds:.0f}s"),
        ("total time", f"{total:.0f}s"),
        ("saved", str(out)),
    ])
