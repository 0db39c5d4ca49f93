"""DPO baseline on self-sampled factuality pairs (the F-DPO / Mask-DPO family).

1. The base model samples ``k`` answers per training question (temperature ~0.7, the trainer's prompt).
2. The gold grader labels each sample correct / wrong (the model's own abstentions and empty answers are left
   out); the abstention text ("I don't know.") is the middle tier.
3. Preference pairs follow the order correct > abstain > wrong: ``correct > wrong``, ``correct > abstain`` and
   ``abstain > wrong``, at most ``--pairs-per-question`` per question, drawn round-robin over the three kinds.
4. DPO (:func:`core.core_algos.dpo_loss`) against the frozen base model as reference (its log-probs are
   computed once before training, so only one model is in memory), AdamW; saved as a HF folder.
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import asdict, dataclass
from typing import Sequence

from baselines.common import (BaselineError, DEFAULT_ABSTAIN_TEXT, check_positive, check_sft_args, encode_example,
                              eos_id, fmt_loss, grade_all, load_model, load_questions, prepare_out, print_summary,
                              render_prompts, sample_answers, save_model, sequence_logprobs, set_seed,
                              set_threads, train_loop, write_jsonl)
from core.grader import CORRECT, INCORRECT

log = logging.getLogger("baselines.dpo")

PAIR_KINDS = ("correct>wrong", "correct>abstain", "abstain>wrong")


@dataclass
class PreferencePair:
    uid: str
    prompt: str
    chosen: str
    rejected: str
    kind: str  # one of PAIR_KINDS


def dpo_pairs(uid: str, prompt: str, answers: Sequence[str], grades: Sequence, abstain_text: str = DEFAULT_ABSTAIN_TEXT,
              max_pairs: int = 0, seed: int = 0) -> list[PreferencePair]:
    """Preference pairs of one question from its graded samples, ordered correct > abstain > wrong.

    Duplicate answer texts count once. Samples graded ``not_attempted`` (the model's own abstentions, empty
    answers) are not used: the abstention tier is ``abstain_text``. Every ``correct > wrong``,
    ``correct > abstain`` and ``abstain > wrong`` pair is a candidate; with ``max_pairs > 0`` at most that
    many are kept, taken round-robin over the three kinds (each kind shuffled with ``seed``), so one kind
    cannot crowd out the others.

    Args:
        uid, prompt: the question's id and prompt text.
        answers: the k sampled answers; grades: their k :class:`core.grader.Grade`.
        abstain_text: the abstention response (non-empty).
        max_pairs: cap per question (0: all).
        seed: shuffling seed (combined with ``uid``: stable per question).
    Returns:
        the pairs, kinds in :data:`PAIR_KINDS` order within each round.
    """
    if not (abstain_text or "").strip():
        raise BaselineError("--abstain-text must not be empty")
    if len(answers) != len(grades):
        raise ValueError(f"dpo_pairs: {len(answers)} answers but {len(grades)} grades")
    right, wrong = [], []
    for a, g in zip(answers, grades):
        if g.grade == CORRECT and a not in right:
            right.append(a)
        elif g.grade == INCORRECT and a not in wrong:
            wrong.append(a)
    by_kind = {
        "correct>wrong": [(c, w) for c in right for w in wrong],
        "correct>abstain": [(c, abstain_text) for c in right],
        "abstain>wrong": [(abstain_text, w) for w in wrong],
    }
    rng = random.Random(f"{seed}:{uid}")
    for v in by_kind.values():
        rng.shuffle(v)
    out: list[PreferencePair] = []
    depth = max((len(v) for v in by_kind.values()), default=0)
    for i in range(depth):
        for kind in PAIR_KINDS:
            if i < len(by_kind[kind]):
                c, r = by_kind[kind][i]
                out.append(PreferencePair(uid, prompt, c, r, kind))
    return out[:max_pairs] if max_pairs > 0 else out


@dataclass
class _Example:
    chosen: object     # RolloutSample
    rejected: object   # RolloutSample
    ref_chosen: float
    ref_rejected: float


def dpo_step_loss(pad_id: int, beta: float, label_smoothing: float):
    """``step_loss`` for :func:`baselines.common.train_loop`: DPO on a micro batch of pairs (chosen and
    rejected in one forward), times ``weight``."""
    import torch
    from core.core_algos import dpo_loss

    def fn(model, examples, weight):
        b = len(examples)
        logps = sequence_logprobs(model, [e.chosen for e in examples] + [e.rejected for e in examples], pad_id)
        ref_c = torch.tensor([e.ref_chosen for e in examples], dtype=torch.float32, device=logps.device)
        ref_r = torch.tensor([e.ref_rejected for e in examples], dtype=torch.float32, device=logps.device)
        loss, metrics = dpo_loss(logps[:b], logps[b:], ref_c, ref_r, beta, label_smoothing=label_smoothing)
        return loss * weight, metrics
    return fn


def reference_logprobs(model, samples: Sequence, pad_id: int, batch_size: int, progress: bool) -> list[float]:
    """Sequence log-probs of ``samples`` under the (frozen, not yet trained) model."""
    import torch
    from tqdm import tqdm
    out: list[float] = []
    model.eval()
    with torch.no_grad():
        for i in tqdm(range(0, len(samples), batch_size), desc="reference", unit="batch", disable=not progress,
                      dynamic_ncols=True):
            out.extend(sequence_logprobs(model, samples[i:i + batch_size], pad_id).tolist())
    return out


def run(args) -> int:
    t_start = time.perf_counter()
    _check_dpo_args(args)
    items = load_questions(args.data, args.limit, args.type_share)
    out = prepare_out(args.out, args.overwrite)
    threads = set_threads(args.threads)
    set_seed(args.seed)
    log.info("DPO: %d questions from %s, mode %s, %d samples each at T=%g, %d torch threads", len(items), args.data,
             args.mode, args.samples, args.temperature, threads)
    path, model, tok = load_model(args.model)
    model.eval()
    prompts = render_prompts(tok, items, args.mode, args.system, args.evidence_share)

    log.info("step 1/4: sampling %d x %d answers", len(items), args.samples)
    t0 = time.perf_counter()
    samples = sample_answers(model, tok, prompts, args.samples, args.temperature, args.top_p, args.max_new_tokens,
                             args.gen_batch_size, progress=args.progress)
    t_gen = time.perf_counter() - t0

    log.info("step 2/4: grading and building pairs (correct > abstain > wrong)")
    pairs, counts = _graded_pairs(items, prompts, samples, args, out)

    log.info("step 3/4: reference log-probs of %d pairs under the frozen base model", len(pairs))
    t0 = time.perf_counter()
    examples = _reference_examples(model, tok, pairs, args)
    t_ref = time.perf_counter() - t0

    log.info("step 4/4: DPO, %d epochs x %d pairs, beta %g, lr %g, batch %d", args.epochs, len(pairs), args.beta,
             args.lr, args.batch_size)
    hist = train_loop(model, examples, dpo_step_loss(tok.pad_token_id, args.beta, args.label_smoothing),
                      epochs=args.epochs, lr=args.lr, batch_size=args.batch_size,
                      micro_batch_size=args.micro_batch_size, seed=args.seed, max_norm=args.max_norm,
                      progress=args.progress, desc="dpo")
    kinds = {k: sum(x.kind == k for x in pairs) for k in PAIR_KINDS}
    n_right, n_wrong, n_other = counts
    meta = {"baseline": "dpo", "base_model": args.model, "base_path": path, "data": args.data,
            "questions": len(items), "mode": args.mode, "system": args.system, "abstain_text": args.abstain_text,
            "samples_per_question": args.samples, "temperature": args.temperature, "top_p": args.top_p,
            "sample_grades": {"correct": n_right, "wrong": n_wrong, "abstained_or_empty": n_other},
            "pairs": kinds, "beta": args.beta, "label_smoothing": args.label_smoothing, "epochs": args.epochs,
            "lr": args.lr, "batch_size": args.batch_size, "seed": args.seed, "max_new_tokens": args.max_new_tokens,
            "loss_first": hist.first, "loss_last": hist.last, "losses": hist.losses, "step_metrics": hist.metrics,
            "seconds": {"sample": t_gen, "reference": t_ref, "train": hist.seconds}}
    save_model(model, tok, out, meta)
    _print_dpo_summary(len(items), args.samples, counts, kinds, hist, (t_gen, t_ref, hist.seconds),
                       time.perf_counter() - t_start, out)
    return 0


def _check_dpo_args(args) -> None:
    """DPO's own options (besides :func:`check_sft_args`): :class:`BaselineError` naming the first bad one."""
    check_sft_args(args)
    for name in ("beta", "temperature"):
        check_positive("--" + name, getattr(args, name))
    check_positive("--pairs-per-question", args.pairs_per_question, allow_zero=True)
    if args.samples < 2:
        raise BaselineError(f"--samples must be >= 2 (pairs need at least two answers per question), got {args.samples}")
    if not 0 < args.top_p <= 1:
        raise BaselineError(f"--top-p must be in (0, 1], got {args.top_p}")
    if not 0 <= args.label_smoothing < 0.5:
        raise BaselineError(f"--label-smoothing must be in [0, 0.5), got {args.label_smoothing}")


def _graded_pairs(items, prompts: list[str], samples: list[list[str]], args,
                  out) -> tuple[list[PreferencePair], tuple[int, int, int]]:
    """Grade every sample with the gold grader and build each question's preference pairs (:func:`dpo_pairs`);
    both written to ``out`` (``samples.jsonl``, ``pairs.jsonl``). Returns the pairs and the sample counts
    ``(correct, wrong, abstained or empty)``; :class:`BaselineError` when there is no pair."""
    pairs: list[PreferencePair] = []
    graded_rows = []
    n_right = n_wrong = n_other = 0
    for it, p, answers in zip(items, prompts, samples):
        grades = grade_all([it] * len(answers), answers)
        n_right += sum(g.grade == CORRECT for g in grades)
        n_wrong += sum(g.grade == INCORRECT for g in grades)
        n_other += sum(g.grade not in (CORRECT, INCORRECT) for g in grades)
        graded_rows.append({"uid": it.uid, "question": it.question, "gold": it.right_answer,
                            "samples": [{"answer": a, "grade": g.grade, "reason": g.reason}
                                        for a, g in zip(answers, grades)]})
        pairs.extend(dpo_pairs(it.uid, p, answers, grades, args.abstain_text, args.pairs_per_question, args.seed))
    write_jsonl(out / "samples.jsonl", graded_rows)
    write_jsonl(out / "pairs.jsonl", [asdict(x) for x in pairs])
    kinds = {k: sum(x.kind == k for x in pairs) for k in PAIR_KINDS}
    log.info("samples: %d correct, %d wrong, %d abstained/empty; pairs: %s", n_right, n_wrong, n_other, kinds)
    if not pairs:
        raise BaselineError("no preference pairs: every sample was an abstention or empty; raise --samples, "
                            "--temperature or --limit")
    return pairs, (n_right, n_wrong, n_other)


def _reference_examples(model, tok, pairs: list[PreferencePair], args) -> list[_Example]:
    """The pairs as training examples: chosen and rejected encoded, with their sequence log-probs under the
    frozen base model (computed once, so only one model is in memory)."""
    eos = eos_id(model, tok)
    chosen = [encode_example(tok, x.prompt, x.chosen, eos) for x in pairs]
    rejected = [encode_example(tok, x.prompt, x.rejected, eos) for x in pairs]
    ref = reference_logprobs(model, chosen + rejected, tok.pad_token_id, args.micro_batch_size * 2, args.progress)
    return [_Example(c, r, ref[i], ref[len(pairs) + i]) for i, (c, r) in enumerate(zip(chosen, rejected))]


def _print_dpo_summary(n_items: int, n_samples: int, counts: tuple[int, int, int], kinds: dict, hist,
                       seconds: tuple[float, float, float], total_s: float, out) -> None:
    """The run's summary table: samples by grade, pairs by kind, loss and pair accuracy, times."""
    n_right, n_wrong, n_other = counts
    t_gen, t_ref, t_train = seconds
    acc_first = hist.metrics[0].get("accuracy", float("nan")) if hist.metrics else float("nan")
    acc_last = hist.metrics[-1].get("accuracy", float("nan")) if hist.metrics else float("nan")
    n_total = n_items * n_samples
    print_summary("DPO baseline (self-sampled factuality pairs)", [
        ("questions x samples", f"{n_items} x {n_samples}"),
        ("samples correct / wrong / abstain+empty",
         f"{n_right} / {n_wrong} / {n_other} ({100 * n_right / max(1, n_total):.1f}% correct)"),
        ("pairs correct>wrong", str(kinds["correct>wrong"])),
        ("pairs correct>abstain", str(kinds["correct>abstain"])),
        ("pairs abstain>wrong", str(kinds["abstain>wrong"])),
        ("optimizer steps", str(len(hist.losses))),
        ("loss first / last", f"{fmt_loss(hist.first)} / {fmt_loss(hist.last)}"),
        ("pair accuracy first / last step", f"{acc_first:.2f} / {acc_last:.2f}"),
        ("sample / reference / train time", f"{t_gen:.0f}s / {t_ref:.0f}s / {t_train:.0f}s"),
        ("total time", f"{total_s:.0f}s"),
        ("saved", str(out)),
    ])
