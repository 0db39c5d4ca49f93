"""`rlfh bench sft`: seconds per warm-start SFT step training every layer or only the last N, in one run.

Runs :func:`baselines.common.train_loop` (the loop `rlfh baseline warmstart` trains with: AdamW, gradient
clipping, length-aware micro batches of ``--micro-batch-size`` rows and 256 tokens a row) on closed-book dev
prompts whose targets are the gold answers, once per ``--train-layers`` value (the warm start's
WARM_START_TRAIN_LAYERS; 0: every layer), the values alternating ``--repeats`` times so that machine noise hits
each. Each call loads the model afresh and trains ``--steps`` optimizer steps of ``--batch-size`` examples.

Prints per value: trainable parameters, seconds per step (median and best) and the speed-up over the first
value. The frozen layers below get no gradient and the backward stops at the lowest trained layer; the forward is
unchanged, so the saving is at most the backward's share of the step (about two thirds).
"""
from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sft", help="Warm-start SFT seconds per step by --train-layers (WARM_START_TRAIN_LAYERS).",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-layers", default="0,15",
                   help="Comma-separated values, each timed: train the last N transformer layers (0: all). Default "
                        "0,15: every layer against make train's value.")
    p.add_argument("--steps", type=int, default=6, help="Optimizer steps per timed call (default 6).")
    p.add_argument("--batch-size", type=int, default=8, help="Examples per step (default 8, as make train).")
    p.add_argument("--micro-batch-size", type=int, default=8, help="Rows per forward (default 8, as make train).")
    p.add_argument("--repeats", type=int, default=2, help="Timed calls per value, alternating (default 2).")
    p.add_argument("--model", default="smollm2-135m-instruct", help="Model (default: the embedded one).")
    p.add_argument("--threads", type=int, default=0, help="Torch threads (0: all cores).")
    p.set_defaults(func=_cmd)


def parse_layers(spec: str) -> list[int]:
    """``"0,15"`` -> ``[0, 15]``; a clear error naming the option for anything else."""
    try:
        values = [int(v) for v in spec.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--train-layers {spec!r}: give comma-separated whole numbers, e.g. 0,15") from None
    if not values or min(values) < 0:
        raise ValueError(f"--train-layers {spec!r}: give one or more numbers >= 0, e.g. 0,15")
    return values


def measure(model: str = "smollm2-135m-instruct", train_layers: tuple[int, ...] = (0, 15), steps: int = 6,
            batch_size: int = 8, micro_batch_size: int = 8, repeats: int = 2, threads: int = 0) -> dict:
    """``{"threads", "examples", "tokens_per_example", "runs": {n: {"trainable", "s_per_step": [...]}}}``."""
    import statistics

    import torch

    from baselines.common import (encode_example, eos_id, load_model, set_threads,
                                  train_last_layers, train_loop)
    from baselines.rtuning import sft_step_loss
    from core.data import load_halueval
    from core.model_loader import load_tokenizer, resolve_model_path
    from core.prompts import render_prompt
    if min(steps, batch_size, micro_batch_size, repeats) < 1:
        raise ValueError("--steps, --batch-size, --micro-batch-size and --repeats must be >= 1")
    set_threads(threads)
    tok = load_tokenizer(resolve_model_path(model))
    items = load_halueval("dev")[:steps * batch_size]
    prompts = [render_prompt(tok, it.question, it.knowledge_text, "closed") for it in items]
    out: dict = {"threads": torch.get_num_threads(), "examples": len(items),
                 "runs": {n: {"s_per_step": []} for n in train_layers}}
    for _ in range(repeats):
        for n in train_layers:
            _, lm, tok = load_model(model)
            out["runs"][n]["trainable"] = train_last_layers(lm, n)
            examples = [encode_example(tok, p, it.right_answer, eos_id(lm, tok)) for p, it in zip(prompts, items)]
            out["tokens_per_example"] = sum(len(e.prompt_token_ids) + len(e.response_token_ids)
                                            for e in examples) / len(examples)
            hist = train_loop(lm, examples, sft_step_loss(tok.pad_token_id), epochs=1, lr=1e-5,
                              batch_size=batch_size, micro_batch_size=micro_batch_size, seed=0, progress=True,
                              desc=f"bench sft (train layers {n or 'all'})", token_budget=micro_batch_size * 256,
                              autocast=True)
            out["runs"][n]["s_per_step"].append(hist.seconds / len(hist.losses))
    for r in out["runs"].values():
        r["median"], r["best"] = statistics.median(r["s_per_step"]), min(r["s_per_step"])
    return out


def print_table(res: dict) -> None:
    from actors.base import cpu_summary
    runs = res["runs"]
    first = runs[next(iter(runs))]["median"]
    print(f"\n{res['examples']} closed-book dev examples ({res['tokens_per_example']:.0f} tokens each on average), "
          f"{res['threads']} threads; {cpu_summary()}")
    print("| trained layers | trainable params | s/step (median) | s/step (best) | speed-up |")
    print("|---|---|---|---|---|")
    for n, r in runs.items():
        print(f"| {n or 'all'} | {r['trainable'] / 1e6:.1f}M | {r['median']:.2f} | {r['best']:.2f} | "
              f"{first / r['median']:.2f}x |")


def _cmd(args: argparse.Namespace) -> int:
    from baselines.common import BaselineError
    try:
        res = measure(args.model, tuple(parse_layers(args.train_layers)), args.steps, args.batch_size,
                      args.micro_batch_size, args.repeats, args.threads)
    except (ValueError, BaselineError) as e:   # BaselineError: more layers than the model has, ...
        print(f"rlfh bench sft: {e}")
        return 2
    print_table(res)
    return 0
