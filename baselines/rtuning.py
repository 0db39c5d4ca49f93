"""R-Tuning baseline (refusal-aware SFT on self-labelled data, Zhang et al. 2024).

1. The base model answers every training question greedily with the trainer's prompt.
2. The gold grader labels each answer: right answers are kept as SFT targets; wrong ones (and the model's own
   abstentions or empty answers) are replaced by the abstention text ("I don't know.").
3. Supervised fine-tuning on those targets, loss on the response tokens only (token mean), AdamW.
4. The result is saved as a HF folder that ``rlfh eval --model OUT`` loads.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Sequence

from baselines.common import (BaselineError, DEFAULT_ABSTAIN_TEXT, check_sft_args, encode_example, eos_id,
                              fmt_loss, grade_all, load_model, load_questions, prepare_out, print_summary,
                              render_prompts, response_logprobs, save_model, set_seed, set_threads, train_loop,
                              write_jsonl)
from core.grader import CORRECT, INCORRECT
from evaluation.generate import generate_greedy

log = logging.getLogger("baselines.rtuning")


@dataclass
class SFTTarget:
    """One refusal-aware SFT example."""
    uid: str
    question: str
    prompt: str
    target: str        # what the model is trained to say
    source: str        # "right" (its own answer kept) | "wrong" | "abstained" (both replaced by the abstention)
    answer: str        # the base model's own answer
    grade_reason: str  # the grader rule that decided


def rtuning_targets(items: Sequence, prompts: Sequence[str], answers: Sequence[str], grades: Sequence,
                    abstain_text: str = DEFAULT_ABSTAIN_TEXT) -> list[SFTTarget]:
    """R-Tuning targets: the model's answer where the gold grader says ``correct``, else ``abstain_text``.

    Args:
        items: N items (``question``, ``uid``); prompts: their N prompt texts; answers: the model's N answers;
        grades: N :class:`core.grader.Grade` (``grade`` in correct / incorrect / not_attempted).
        abstain_text: the abstention target (non-empty).
    Returns:
        N :class:`SFTTarget` in input order.
    """
    if not (abstain_text or "").strip():
        raise BaselineError("--abstain-text must not be empty")
    n = len(items)
    if not (len(prompts) == len(answers) == len(grades) == n):
        raise ValueError(f"rtuning_targets: {n} items, {len(prompts)} prompts, {len(answers)} answers, "
                         f"{len(grades)} grades (need one of each per item)")
    out = []
    for it, p, a, g in zip(items, prompts, answers, grades):
        if g.grade == CORRECT:
            out.append(SFTTarget(it.uid, it.question, p, a, "right", a, g.reason))
        else:
            src = "wrong" if g.grade == INCORRECT else "abstained"
            out.append(SFTTarget(it.uid, it.question, p, abstain_text, src, a, g.reason))
    return out


def sft_step_loss(pad_id: int):
    """``step_loss`` for :func:`baselines.common.train_loop`: mean NLL over the micro batch's response tokens,
    times ``weight`` (the micro batch's share of the step's response tokens with :func:`response_tokens` as
    ``weight_of``: the step's loss is then the mean NLL over all of its response tokens)."""
    from core.core_algos import masked_mean   # torch: kept lazy, this module is on `rlfh --help`'s import path

    def fn(model, samples, weight):
        lp, mask = response_logprobs(model, samples, pad_id)
        nll = -masked_mean(lp, mask)
        return nll * weight, {"nll": float(nll.detach())}
    return fn


def response_tokens(example) -> int:
    """What an SFT example weighs in its step's loss: its response tokens (EOS included)."""
    return len(example.response_token_ids)


def sft_on_targets(model, tok, targets: Sequence, args, desc: str, **loop_kwargs):
    """One SFT pass (``args.epochs``) on ``targets`` (each with ``prompt`` and ``target``): the response tokens
    and EOS are the loss; AdamW with the command's size / rate options. Returns the :class:`TrainHistory`."""
    eos = eos_id(model, tok)
    examples = [encode_example(tok, t.prompt, t.target, eos) for t in targets]
    return train_loop(model, examples, sft_step_loss(tok.pad_token_id), epochs=args.epochs, lr=args.lr,
                      batch_size=args.batch_size, micro_batch_size=args.micro_batch_size, seed=args.seed,
                      max_norm=args.max_norm, progress=args.progress, desc=desc, weight_of=response_tokens,
                      **loop_kwargs)


def run(args) -> int:
    t_start = time.perf_counter()
    check_sft_args(args)
    items = load_questions(args.data, args.limit, args.type_share)
    out = prepare_out(args.out, args.overwrite)
    threads = set_threads(args.threads)
    set_seed(args.seed)
    log.info("R-Tuning: %d questions from %s, mode %s, %d torch threads", len(items), args.data, args.mode, threads)
    path, model, tok = load_model(args.model)
    model.eval()
    prompts = render_prompts(tok, items, args.mode, args.system, args.evidence_share)

    log.info("step 1/3: the base model answers %d questions (greedy, <= %d tokens)", len(items), args.max_new_tokens)
    t0 = time.perf_counter()
    gens, gstats = generate_greedy(model, tok, prompts, batch_size=args.gen_batch_size,
                                   max_new_tokens=args.max_new_tokens, progress=args.progress, desc="answer")
    answers = [g.text for g in gens]
    t_gen = time.perf_counter() - t0

    log.info("step 2/3: grading against the gold answers and building targets")
    grades = grade_all(items, answers)
    targets = rtuning_targets(items, prompts, answers, grades, args.abstain_text)
    counts = {k: sum(t.source == k for t in targets) for k in ("right", "wrong", "abstained")}
    log.info("targets: %d right answers kept, %d wrong -> %r, %d own abstentions/empty -> %r",
             counts["right"], counts["wrong"], args.abstain_text, counts["abstained"], args.abstain_text)
    write_jsonl(out / "targets.jsonl", [asdict(t) for t in targets])

    log.info("step 3/3: SFT, %d epochs x %d examples, lr %g, batch %d", args.epochs, len(targets), args.lr,
             args.batch_size)
    hist = sft_on_targets(model, tok, targets, args, "sft")
    meta = {"baseline": "rtuning", "base_model": args.model, "base_path": path, "data": args.data,
            "questions": len(items), "type_share": args.type_share, "mode": args.mode, "system": args.system,
            "abstain_text": args.abstain_text,
            "targets": counts, "epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size,
            "seed": args.seed, "max_new_tokens": args.max_new_tokens, "loss_first": hist.first,
            "loss_last": hist.last, "losses": hist.losses, "seconds": {"generate": t_gen, "train": hist.seconds}}
    save_model(model, tok, out, meta)
    total = time.perf_counter() - t_start
    n = max(1, len(targets))
    print_summary("R-Tuning baseline", [
        ("questions", str(len(items))),
        ("right (answer kept)", f"{counts['right']} ({100 * counts['right'] / n:.1f}%)"),
        ("wrong -> abstain", f"{counts['wrong']} ({100 * counts['wrong'] / n:.1f}%)"),
        ("own abstention/empty -> abstain", f"{counts['abstained']} ({100 * counts['abstained'] / n:.1f}%)"),
        ("optimizer steps", str(len(hist.losses))),
        ("loss first / last", f"{fmt_loss(hist.first)} / {fmt_loss(hist.last)}"),
        ("answer time", f"{t_gen:.0f}s ({gstats.tokens_per_s:.0f} tok/s)"),
        ("train time", f"{hist.seconds:.0f}s"),
        ("total time", f"{total:.0f}s"),
        ("saved", str(out)),
    ])
    return 0
