"""`rlfh bench sft`: seconds per warm-start SFT step by trained layers and by micro-batch packing, in one run.

Runs :func:`baselines.common.train_loop` (the loop `rlfh baseline warmstart` trains with: AdamW, gradient
clipping, token-weighted micro batches of at most ``--micro-batch-size`` rows) on dev prompts whose targets are
the gold answers, ``--evidence-share`` of them with the passage (make train's mix), once per pair of a
``--train-layers`` value (the warm start's WARM_START_TRAIN_LAYERS; 0: every layer) and a ``--token-budget``
value (0: each step's examples in consecutive micro batches, padded to their longest prompt; > 0: cut by least
padding under that many tokens a micro batch, the warm start's 8 x 256), the pairs alternating ``--repeats``
times so that machine noise hits each. Each call loads the model afresh and trains ``--steps`` optimizer steps
of ``--batch-size`` examples.

Prints per pair: trainable parameters, micro batches, tokens computed per step (padding included), seconds per
step (median and best) and the speed-up over the first pair. Frozen layers get no gradient and the backward
stops at the lowest trained layer; the forward is unchanged, so that saving is at most the backward's share of
the step (about two thirds). Packing saves in proportion to the padding it drops.
"""
from __future__ import annotations

import argparse
import statistics

from baselines.common import (BaselineError, encode_example, eos_id, load_model, set_threads, train_last_layers,
                              train_loop)
from baselines.rtuning import response_tokens, sft_step_loss
from core.data import load_halueval
from core.model_loader import load_tokenizer, resolve_model_path
from core.prompts import prompt_mode_for, render_prompt


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sft", help="Warm-start SFT seconds per step by --train-layers (WARM_START_TRAIN_LAYERS) and "
                                   "--token-budget.",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-layers", default="0",
                   help="Comma-separated values, each timed: train the last N transformer layers (0: all, make "
                        "train's value). Default 0.")
    p.add_argument("--token-budget", default="0,2048",
                   help="Comma-separated values, each timed: 0 pads each step's micro batches to their longest "
                        "prompt (the warm start before commit fc76e72); N > 0 cuts them by least padding, at most N "
                        "tokens each (the warm start: 2048). Default 0,2048.")
    p.add_argument("--evidence-share", type=float, default=0.15,
                   help="Share of the prompts with the passage (default 0.15, as make train's warm start).")
    p.add_argument("--steps", type=int, default=6, help="Optimizer steps per timed call (default 6).")
    p.add_argument("--batch-size", type=int, default=8, help="Examples per step (default 8, as make train).")
    p.add_argument("--micro-batch-size", type=int, default=8, help="Rows per forward (default 8, as make train).")
    p.add_argument("--repeats", type=int, default=2, help="Timed calls per value, alternating (default 2).")
    p.add_argument("--model", default="smollm2-135m-instruct", help="Model (default: the embedded one).")
    p.add_argument("--threads", type=int, default=0, help="Torch threads (0: all cores).")
    p.set_defaults(func=_cmd)


def parse_layers(spec: str, option: str = "--train-layers", example: str = "0,15") -> list[int]:
    """``"0,15"`` -> ``[0, 15]``; a clear error naming the option for anything else."""
    try:
        values = [int(v) for v in spec.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{option} {spec!r}: give comma-separated whole numbers, e.g. {example}") from None
    if not values or min(values) < 0:
        raise ValueError(f"{option} {spec!r}: give one or more numbers >= 0, e.g. {example}")
    return values


def measure(model: str = "smollm2-135m-instruct", train_layers: tuple[int, ...] = (0,),
            token_budgets: tuple[int, ...] = (0, 2048), evidence_share: float = 0.15, steps: int = 6,
            batch_size: int = 8, micro_batch_size: int = 8, repeats: int = 2, threads: int = 0) -> dict:
    """``{"threads", "examples", "evidence", "tokens_per_example", "runs": {(layers, budget): {"trainable",
    "micro_batches", "tokens_per_step", "s_per_step": [...], "median", "best"}}}``."""
    import torch

    if min(steps, batch_size, micro_batch_size, repeats) < 1:
        raise ValueError("--steps, --batch-size, --micro-batch-size and --repeats must be >= 1")
    if not 0.0 <= evidence_share <= 1.0:
        raise ValueError(f"--evidence-share must be in [0, 1], got {evidence_share}")
    set_threads(threads)
    tok = load_tokenizer(resolve_model_path(model))
    items = load_halueval("dev")[:steps * batch_size]
    modes = [prompt_mode_for(it.question, "mixed", evidence_share) for it in items]
    prompts = [render_prompt(tok, it.question, it.knowledge_text, m) for it, m in zip(items, modes)]
    pairs = [(n, b) for n in train_layers for b in token_budgets]
    out: dict = {"threads": torch.get_num_threads(), "examples": len(items),
                 "evidence": sum(m == "evidence" for m in modes), "runs": {p: {"s_per_step": []} for p in pairs}}
    for _ in range(repeats):
        for n, budget in pairs:
            _, lm, tok = load_model(model)
            run = out["runs"][(n, budget)]
            run["trainable"] = train_last_layers(lm, n)
            examples = [encode_example(tok, p, it.right_answer, eos_id(lm, tok)) for p, it in zip(prompts, items)]
            out["tokens_per_example"] = sum(len(e.prompt_token_ids) + len(e.response_token_ids)
                                            for e in examples) / len(examples)
            hist = train_loop(lm, examples, sft_step_loss(tok.pad_token_id), epochs=1, lr=1e-5,
                              batch_size=batch_size, micro_batch_size=micro_batch_size, seed=0, progress=True,
                              desc=f"bench sft (layers {n or 'all'}, budget {budget})", token_budget=budget,
                              autocast=True, weight_of=response_tokens)
            run["s_per_step"].append(hist.seconds / len(hist.losses))
            run["micro_batches"], run["tokens_per_step"] = hist.micro_batches, hist.tokens / len(hist.losses)
    for r in out["runs"].values():
        r["median"], r["best"] = statistics.median(r["s_per_step"]), min(r["s_per_step"])
    return out


def print_table(res: dict) -> None:
    from actors.base import cpu_summary   # torch: kept lazy, this module is on `rlfh --help`'s import path
    runs = res["runs"]
    first = runs[next(iter(runs))]["median"]
    print(f"\n{res['examples']} dev examples, {res['evidence']} with the passage "
          f"({res['tokens_per_example']:.0f} tokens each on average), {res['threads']} threads; {cpu_summary()}")
    print("| trained layers | token budget | trainable params | micro batches | tokens a step (padded) | "
          "s/step (median) | s/step (best) | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for (n, budget), r in runs.items():
        print(f"| {n or 'all'} | {budget or 'none (padded)'} | {r['trainable'] / 1e6:.1f}M | {r['micro_batches']} | "
              f"{r['tokens_per_step']:.0f} | {r['median']:.2f} | {r['best']:.2f} | {first / r['median']:.2f}x |")


def _cmd(args: argparse.Namespace) -> int:
    try:
        res = measure(args.model, tuple(parse_layers(args.train_layers)),
                      tuple(parse_layers(args.token_budget, "--token-budget", "0,2048")), args.evidence_share,
                      args.steps, args.batch_size, args.micro_batch_size, args.repeats, args.threads)
    except (ValueError, BaselineError) as e:   # BaselineError: more layers than the model has, ...
        print(f"rlfh bench sft: {e}")
        return 2
    print_table(res)
    return 0
