"""`rlfh baseline rtuning|dpo`: the baselines RL must beat. No torch at import time."""
from __future__ import annotations

import argparse
import sys

from baselines import dpo, rtuning, warmstart
from baselines.common import BaselineError
from core.prompts import ABSTAIN_TEXT   # a constant of a dependency-free module

DESCRIPTION = """\
Train a baseline the RL must beat (issue 9), on the model's own graded answers, and save a HF folder
that `rlfh eval --model OUT` loads:

  rtuning  refusal-aware SFT (R-Tuning): the base model answers each training question greedily; the gold
           grader keeps its right answers as targets and replaces wrong ones by "I don't know."; SFT on
           those targets (loss on response tokens only).
  dpo      DPO on self-sampled factuality pairs (F-DPO / Mask-DPO family): k sampled answers per question,
           graded; pairs ordered correct > abstain ("I don't know.") > wrong; DPO against the frozen base.

Both use the trainer's prompt (core.prompts) and plain torch AdamW (CPU is fine). Train on
halueval:train, evaluate on halueval:dev, never tune on test.
"""


def _common(p: argparse.ArgumentParser, limit: int, epochs: int, lr: float, batch: int) -> None:
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="Base model: 'smollm2-135m-instruct' (embedded) or a HF folder. Default: the embedded one.")
    p.add_argument("--data", default="halueval:train",
                   help="Training questions with gold answers: 'halueval:train' (default) or 'halueval:dev', or a "
                        "JSONL file with question, knowledge and right_answer. halueval:test is refused.")
    p.add_argument("--limit", type=int, default=limit,
                   help=f"Use the first N questions (0: all; the train split has ~8,000). Default {limit}.")
    p.add_argument("--type-share", type=float, default=0.0,
                   help="Pick the --limit questions so that yes/no and two-option questions (where a small model "
                        "is often right) make up at least this share each, distinct questions, not repeats "
                        "(e.g. 0.25; the data is ~85%% open questions, on which self-labelling gives almost only "
                        "abstention targets). Default 0: the first --limit questions.")
    p.add_argument("--mode", choices=["closed", "evidence", "mixed"], default="closed",
                   help="Prompt: closed (question only), evidence (the item's passages in the prompt) or mixed "
                        "(each question closed or evidence by a stable hash). Default closed.")
    p.add_argument("--evidence-share", type=float, default=0.5,
                   help="With --mode mixed: the share of questions given the evidence prompt. Default 0.5.")
    p.add_argument("--system", default="default",
                   help="System prompt: 'default' (the trainer's), 'may-abstain' or a literal text. Default: default.")
    p.add_argument("--abstain-text", default=ABSTAIN_TEXT,
                   help="The abstention response (the trainer's ABSTAIN_TEXT default). Default: \"I don't know.\"")
    p.add_argument("--out", required=True, help="Output folder: the HF model, baseline.json and the training data.")
    p.add_argument("--overwrite", action="store_true", help="Write into --out even when it is not empty.")
    p.add_argument("--epochs", type=int, default=epochs, help=f"Passes over the training examples. Default {epochs}.")
    p.add_argument("--lr", type=float, default=lr, help=f"AdamW learning rate (constant). Default {lr:g}.")
    p.add_argument("--batch-size", type=int, default=batch,
                   help=f"Examples (pairs for dpo) per optimizer step. Default {batch}.")
    p.add_argument("--micro-batch-size", type=int, default=4,
                   help="Examples per forward/backward (gradients are accumulated up to --batch-size). Default 4.")
    p.add_argument("--max-norm", type=float, default=1.0, help="Gradient-norm clip. Default 1.0.")
    p.add_argument("--max-new-tokens", type=int, default=40,
                   help="Answer length cap when the base model answers (rlfh eval's default). Default 40.")
    p.add_argument("--gen-batch-size", type=int, default=16, help="Sequences per generate call. Default 16.")
    p.add_argument("--seed", type=int, default=0, help="Seed for sampling and shuffling. Default 0.")
    p.add_argument("--threads", type=int, default=0,
                   help="Torch CPU threads (0: all cores; 1 on a busy shared machine). Default 0.")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="Hide progress bars.")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Adds `rlfh baseline` and its commands rtuning, dpo and warmstart."""
    p = sub.add_parser("baseline", help="Train a baseline the RL must beat: R-Tuning (refusal-aware SFT) or DPO on "
                                        "self-sampled factuality pairs.",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    bsub = p.add_subparsers(dest="baseline", metavar="BASELINE")
    _add_rtuning(bsub)
    _add_dpo(bsub)
    _add_warmstart(bsub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1] if not getattr(args, "baseline", None) else 0)


def _add_rtuning(bsub: argparse._SubParsersAction) -> None:
    """`rlfh baseline rtuning`: the common arguments only."""
    r = bsub.add_parser("rtuning", help="Refusal-aware SFT on self-labelled data (R-Tuning).",
                        description="R-Tuning: greedy answers of the base model, graded against the gold answer; "
                                    "right ones kept, wrong ones replaced by the abstention text; SFT on those "
                                    "targets (response-token loss).")
    _common(r, limit=400, epochs=2, lr=2e-5, batch=8)
    r.set_defaults(func=_run("rtuning"))


def _add_dpo(bsub: argparse._SubParsersAction) -> None:
    """`rlfh baseline dpo`: the common arguments, then sampling and the DPO loss's."""
    d = bsub.add_parser("dpo", help="DPO on self-sampled, gold-graded pairs (correct > abstain > wrong).",
                        description="DPO: k sampled answers per question, graded against the gold answer; pairs "
                                    "ordered correct > abstain > wrong; DPO loss against the frozen base model.")
    _common(d, limit=100, epochs=1, lr=5e-6, batch=8)
    d.add_argument("--samples", type=int, default=4, help="Sampled answers per question (k >= 2). Default 4.")
    d.add_argument("--temperature", type=float, default=0.7, help="Sampling temperature. Default 0.7.")
    d.add_argument("--top-p", type=float, default=1.0, help="Nucleus sampling threshold in (0, 1]. Default 1.0.")
    d.add_argument("--beta", type=float, default=0.1,
                   help="DPO beta (strength of the pull toward the reference). Default 0.1.")
    d.add_argument("--label-smoothing", type=float, default=0.0,
                   help="Conservative DPO: probability that a preference label is wrong, in [0, 0.5). Default 0.")
    d.add_argument("--pairs-per-question", type=int, default=3,
                   help="Cap on pairs per question, taken round-robin over correct>wrong, correct>abstain, "
                        "abstain>wrong (0: all). Default 3.")
    d.set_defaults(func=_run("dpo"))


def _add_warmstart(bsub: argparse._SubParsersAction) -> None:
    """`rlfh baseline warmstart`: the common arguments, then the targets', the probe's and training's."""
    w = bsub.add_parser("warmstart", help="Abstention-prior warm start for RL: SFT on the model's own answers with "
                                          "\"I don't know.\" on a random share of closed-book questions, on wrong answers or where "
                                          "a probe says answering does not pay.",
                        description="The RL recipe's first stage (baselines/warmstart.py): the base model answers "
                                    "each question greedily; a seeded random share of the closed-book questions "
                                    "(independent of the gold answer, which is never read) gets the abstention "
                                    "as its target, the rest keep the model's own answer; one SFT epoch. The model "
                                    "learns that it may decline, not when: RL learns when. Cached: the same "
                                    "settings re-use --out.")
    _common(w, limit=320, epochs=1, lr=2e-5, batch=8)
    _warmstart_target_args(w)
    _warmstart_probe_args(w)
    _warmstart_training_args(w)
    w.set_defaults(func=_run("warmstart"))


def _warmstart_target_args(w: argparse.ArgumentParser) -> None:
    """Which targets the warm start trains on: --abstain-share, --abstain-share-evidence, --abstain-where,
    --support, --support-answers."""
    w.add_argument("--abstain-share", type=float, default=0.5,
                   help="Share of closed-book questions whose target is the abstention (random, by a seeded hash "
                        "of the question). Default 0.5.")
    w.add_argument("--abstain-share-evidence", type=float, default=0.0,
                   help="The same for questions asked with their evidence passage. Default 0: with the passage "
                        "the model keeps its own answers.")
    w.add_argument("--abstain-where", choices=["random", "wrong", "probed"], default="random",
                   help="random (default): the abstention targets ignore correctness (no gold answer read); the "
                        "model learns only that it may decline. wrong: only answers the gold grader marks wrong "
                        "may become the abstention (each with probability --abstain-share), right ones are kept, "
                        "as in R-Tuning: the warm start then already leans toward declining where it is wrong. "
                        "probed: --probe-samples answers per closed-book question are sampled and graded "
                        "(cached under $RLFH_CACHE_DIR/probe); a question gets the abstention exactly when its "
                        "right-sample rate is below (1 + --abstain-price) / 2, where answering stops paying under "
                        "the ternary reward (--abstain-share then applies to nothing closed-book).")
    w.add_argument("--support", action="store_true",
                   help="The grounded reply format (WARM_START=grounded): every answer asked with its passage is "
                        "kept and its first sentence is followed by the passage sentence sharing the most words "
                        "with it, verbatim, so the model learns to give the answer, then the fact behind it.")
    w.add_argument("--support-answers", choices=["own", "right", "gold"], default="own",
                   help="With --support: the answer sentence each target starts with. own (default): the model's "
                        "greedy answer (no gold answer read). right: the same, but the targets of answers the gold "
                        "grader rejects (answer sentence only) are dropped: fine-tuning on the model's own right "
                        "answers. gold: the data set's right answer (supervised); the support sentence is chosen "
                        "the same way for each.")


def _warmstart_probe_args(w: argparse.ArgumentParser) -> None:
    """The probe of --abstain-where probed and the shipped answers: --probe-samples, --probe-temperature,
    --probe-dtype, --probe-batch-size, --recompute-probe, --abstain-price."""
    w.add_argument("--probe-samples", type=int, default=8,
                   help="With --abstain-where probed: answers sampled per question. Default 8.")
    w.add_argument("--probe-temperature", type=float, default=0.7,
                   help="With --abstain-where probed: their temperature (the trainer's TEMPERATURE). Default 0.7.")
    w.add_argument("--probe-dtype", choices=["fp32", "bf16", "auto"], default="fp32",
                   help="With --abstain-where probed: the weights the probe samples with. fp32 (default): the "
                        "model as loaded; bf16: a bfloat16 copy; auto: bf16 on a CPU with native bf16 "
                        "(AVX512-BF16 / AMX), the dtype the trainer's rollout engines sample with there "
                        "(ROLLOUT_DTYPE=auto), else fp32.")
    w.add_argument("--probe-batch-size", type=int, default=0,
                   help="With --abstain-where probed: rows per sampling call (prompts x --probe-samples). "
                        "Default 0: --gen-batch-size.")
    w.add_argument("--recompute-probe", action="store_true",
                   help="Make the base model's greedy answers (and with --abstain-where probed its probe) even "
                        "where shipped ones match (the embedded model on make train's questions ships both in "
                        "evaluation/shipped/; see the README there). Files in $RLFH_CACHE_DIR/answers and "
                        "$RLFH_CACHE_DIR/probe are still re-used.")
    w.add_argument("--abstain-price", type=float, default=-0.5,
                   help="With --abstain-where probed: the reward of declining in the RL that follows "
                        "(ABSTAIN_OUTCOME_REWARD; right +1, wrong -1), which sets the threshold. Default -0.5 "
                        "(decline below 25%% right).")


def _warmstart_training_args(w: argparse.ArgumentParser) -> None:
    """Training and the cache: --train-layers, --no-reuse."""
    w.add_argument("--train-layers", type=int, default=0,
                   help="Train only the last N transformer layers: the input embeddings (and an LM head tied to "
                        "them) and the layers below stay frozen, and the backward stops at the lowest trained "
                        "layer (half the layers: an SFT step about a third cheaper, `rlfh bench sft`). Default 0: "
                        "every parameter is trained.")
    w.add_argument("--no-reuse", dest="reuse", action="store_false",
                   help="Rebuild even when --out holds a warm start made with the same settings.")


def _run(name: str):
    def func(args) -> int:
        try:
            return {"rtuning": rtuning, "warmstart": warmstart, "dpo": dpo}[name].run(args)
        except BaselineError as e:
            print(f"rlfh baseline {name}: {e}", file=sys.stderr)
            return 2
    return func
