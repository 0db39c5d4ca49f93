"""`rlfh bench gen`: tokens/s of the HF rollout engine's two sampling loops, on the same prompts, in one run.

Times :class:`actors.rollout.HFRolloutEngine` ``generate`` (the call a training step makes, and `rlfh eval`'s
greedy answers) with ``HF_DECODE_LOOP=kv-buffer`` (actors/decode.py) and ``HF_DECODE_LOOP=generate``
(transformers' ``model.generate``), alternating the two ``--repeats`` times so that machine noise hits both,
and prints per loop: seconds per call and generated tokens/s (median and best), the prompt tokens, and for
greedy decoding (``--temperature 0``) how many answers the two loops agree on token for token.

``--precision``: ``autocast`` is what a colocated training step samples with on a CPU with native bf16 (fp32
weights, bf16 matmuls under ``torch.autocast``); ``fp32`` is `rlfh eval`'s default; ``bf16`` holds bf16 weights
(a separate rollout engine with ROLLOUT_DTYPE=bf16).

The defaults are the training bench's rollout: 8 closed-book dev prompts x 4 samples x <= 48 tokens, T=1.
"""
from __future__ import annotations

import argparse

LOOPS = ("kv-buffer", "generate")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gen", help="Rollout tokens/s: the kv-buffer loop vs model.generate, same prompts.",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=8, help="Dev-split questions (default 8).")
    p.add_argument("--n", type=int, default=4, help="Samples per prompt (default 4).")
    p.add_argument("--max-new-tokens", type=int, default=48, help="Tokens per answer at most (default 48).")
    p.add_argument("--temperature", type=float, default=1.0, help="0: greedy, as `rlfh eval` (default 1.0).")
    p.add_argument("--mode", choices=["closed", "evidence"], default="closed",
                   help="Prompt mode: evidence prompts carry the passage and are 2-4x longer (default closed).")
    p.add_argument("--precision", choices=["autocast", "fp32", "bf16"], default="autocast",
                   help="autocast: fp32 weights, bf16 matmuls (the colocated training rollout); fp32: `rlfh eval`; "
                        "bf16: bf16 weights (default autocast).")
    p.add_argument("--batch", type=int, default=32,
                   help="Rows per micro batch, MICRO_ROLLOUT_BATCH_SIZE (default 32: the whole default rollout).")
    p.add_argument("--repeats", type=int, default=3, help="Timed calls per loop, alternating (default 3).")
    p.add_argument("--model", default="smollm2-135m-instruct", help="Model (default: the embedded one).")
    p.add_argument("--threads", type=int, default=0, help="Torch threads (0: CPU_THREADS rule, auto).")
    p.set_defaults(func=_cmd)


def measure(model: str = "smollm2-135m-instruct", n_prompts: int = 8, n: int = 4, max_new_tokens: int = 48,
            temperature: float = 1.0, mode: str = "closed", precision: str = "autocast", batch: int = 32,
            repeats: int = 3, threads: int = 0, progress: bool = True) -> dict:
    """The numbers ``rlfh bench gen`` prints: ``{loop: {"seconds": [...], "tokens": [...]}, ...}``."""
    import statistics
    import time

    import torch
    from tqdm import tqdm

    from actors.base import phase_threads, set_threads
    from actors.rollout import HFRolloutEngine
    from core.config import RLFHConfig
    from core.data import load_halueval
    from core.model_loader import load_causal_lm, load_tokenizer, resolve_model_path
    from core.prompts import render_prompt
    if min(n_prompts, n, max_new_tokens, batch, repeats) < 1:
        raise ValueError("--prompts, --n, --max-new-tokens, --batch and --repeats must be >= 1")
    path = resolve_model_path(model)
    tok = load_tokenizer(path)
    items = load_halueval("dev")[:n_prompts]
    prompts = [render_prompt(tok, it.question, it.knowledge_text, mode) for it in items]
    lm = load_causal_lm(path, dtype="bf16" if precision == "bf16" else "fp32")
    lm.requires_grad_(precision == "autocast")   # as the policy's module: autocast caches its weights' casts
    engines = {loop: HFRolloutEngine(RLFHConfig(model_path=model, rollout_backend="hf", hf_decode_loop=loop,
                                                micro_rollout_batch_size=batch, cpu_threads=threads),
                                     model=lm, tokenizer=tok, autocast="bf16" if precision == "autocast" else None)
               for loop in LOOPS}
    set_threads(phase_threads(engines[LOOPS[0]].cfg))
    out: dict = {"threads": torch.get_num_threads(), "prompts": len(prompts), "n": n, "mode": mode,
                 "precision": precision, "batch": batch, "temperature": temperature,
                 "prompt_tokens": sum(len(p) for p in engines[LOOPS[0]].encode_prompts(prompts)),
                 **{loop: {"seconds": [], "tokens": []} for loop in LOOPS}}
    for eng in engines.values():
        eng.generate(prompts[:2], 1, 4, 0.0, 1.0)   # warm-up: first-call allocations
    answers: dict = {}
    bar = tqdm(total=repeats * len(LOOPS), desc="bench gen", disable=not progress, dynamic_ncols=True)
    for r in range(repeats):
        for loop, eng in engines.items():
            t0 = time.perf_counter()
            samples = eng.generate(prompts, n, max_new_tokens, temperature, 1.0, seed=r)
            out[loop]["seconds"].append(time.perf_counter() - t0)
            out[loop]["tokens"].append(sum(len(s.response_token_ids) for s in samples))
            answers[loop] = [s.response_token_ids for s in samples]
            bar.update(1)
    bar.close()
    for loop in LOOPS:
        rates = [t / s for t, s in zip(out[loop]["tokens"], out[loop]["seconds"])]
        out[loop]["tok_s_median"] = statistics.median(rates)
        out[loop]["tok_s_best"] = max(rates)
        out[loop]["s_median"] = statistics.median(out[loop]["seconds"])
    if temperature == 0:
        a, b = answers[LOOPS[0]], answers[LOOPS[1]]
        out["greedy_identical"] = sum(x == y for x, y in zip(a, b))
        out["greedy_total"] = len(a)
    return out


def print_table(res: dict) -> None:
    from actors.base import cpu_summary
    print(f"\n{res['prompts']} {res['mode']} prompts ({res['prompt_tokens']} prompt tokens) x {res['n']} samples, "
          f"T={res['temperature']}, {res['precision']}, micro batch {res['batch']}, {res['threads']} threads; "
          f"{cpu_summary()}")
    print("| loop | s/call (median) | tokens/call | tok/s (median) | tok/s (best) |")
    print("|---|---|---|---|---|")
    for loop in LOOPS:
        r = res[loop]
        print(f"| {loop} | {r['s_median']:.2f} | {round(sum(r['tokens']) / len(r['tokens']))} | "
              f"{r['tok_s_median']:.1f} | {r['tok_s_best']:.1f} |")
    ratio = res[LOOPS[0]]["tok_s_median"] / res[LOOPS[1]]["tok_s_median"]
    print(f"\nkv-buffer / generate: {ratio:.2f}x tokens/s (medians)")
    if "greedy_identical" in res:
        print(f"greedy answers identical token for token: {res['greedy_identical']}/{res['greedy_total']}")


def _cmd(args: argparse.Namespace) -> int:
    try:
        res = measure(args.model, args.prompts, args.n, args.max_new_tokens, args.temperature, args.mode,
                      args.precision, args.batch, args.repeats, args.threads)
    except ValueError as e:
        print(f"rlfh bench gen: {e}")
        return 2
    print_table(res)
    return 0
