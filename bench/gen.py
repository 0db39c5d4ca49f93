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

``--ceiling`` (default on) also times what no sampling loop can beat: every linear layer of the model (the
projections of each block and the LM head) applied once to ``--batch`` rows, i.e. the matmuls of one decode step
and nothing else, with the weights in fp32, in bf16, and as int8 with per-channel scales (torch's weight-only
int8 kernel). ``--batch`` rows / that time is the tokens/s ceiling of a decode step in that format on this CPU.
"""
from __future__ import annotations

import argparse
import statistics
import time

from core.config import RLFHConfig
from core.data import load_halueval
from core.model_loader import load_causal_lm, load_tokenizer, resolve_model_path
from core.prompts import render_prompt

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
    p.add_argument("--ceiling", action=argparse.BooleanOptionalAction, default=True,
                   help="Also time one decode step's matmuls alone in fp32 / bf16 / int8 weights: the tokens/s "
                        "ceiling per weight format (default on; --no-ceiling skips it).")
    p.set_defaults(func=_cmd)


def measure(model: str = "smollm2-135m-instruct", n_prompts: int = 8, n: int = 4, max_new_tokens: int = 48,
            temperature: float = 1.0, mode: str = "closed", precision: str = "autocast", batch: int = 32,
            repeats: int = 3, threads: int = 0, progress: bool = True, ceiling: bool = False) -> dict:
    """The numbers ``rlfh bench gen`` prints: ``{loop: {"seconds": [...], "tokens": [...]}, ...}``; with
    ``ceiling`` also ``"ceiling"``: :func:`matmul_ceiling` of the same loaded model at ``batch`` rows."""
    import torch
    from tqdm import tqdm

    # torch: kept lazy, this module is on `rlfh --help`'s import path
    from actors.base import phase_threads, set_threads
    from actors.rollout import HFRolloutEngine
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
    if ceiling:
        out["ceiling"] = matmul_ceiling(lm, batch)
    return out


#: Weight formats :func:`matmul_ceiling` times.
CEILING_FORMATS = ("fp32", "bf16", "int8-weight")


def matmul_ceiling(lm, rows: int, formats=CEILING_FORMATS, repeats: int = 3) -> dict:
    """One decode step's matmuls and nothing else: each ``nn.Linear`` of ``lm`` applied once to ``rows`` rows.

    Per weight format the best of ``repeats`` passes: ``{format: {"ms": step ms, "tok_s": rows / step}}``, plus
    ``"layers"`` (how many linears) and ``"gflop"`` (per step). bf16 multiplies bf16 rows by bf16 weights;
    ``int8-weight`` keeps fp32 rows and int8 weights with one fp32 scale per output channel
    (``torch.ops.aten._weight_int8pack_mm``). Formats this torch build cannot run are left out.
    """
    import torch
    import torch.nn.functional as F
    weights = [m.weight.detach().float() for m in lm.modules() if isinstance(m, torch.nn.Linear)]
    if not weights:
        raise ValueError("matmul_ceiling: the model has no nn.Linear layers")
    out: dict = {"layers": len(weights), "rows": rows,
                 "gflop": 2 * rows * sum(w.numel() for w in weights) / 1e9}

    def convert(fmt):
        if fmt == "fp32":
            return [(w, None) for w in weights], lambda x, w, s: F.linear(x, w)
        if fmt == "bf16":
            return [(w.bfloat16(), None) for w in weights], lambda x, w, s: F.linear(x.bfloat16(), w)
        scales = [w.abs().amax(1).clamp(min=1e-12) / 127 for w in weights]
        q = [(torch.round(w / sc[:, None]).to(torch.int8), sc) for w, sc in zip(weights, scales)]
        return q, lambda x, w, s: torch.ops.aten._weight_int8pack_mm(x, w, s)

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for fmt in formats:
            try:
                packed, mm = convert(fmt)
                xs = {w.shape[1]: torch.randn(rows, w.shape[1], generator=g) for w in weights}
                best = float("inf")
                for _ in range(repeats + 1):   # the first pass warms up
                    t0 = time.perf_counter()
                    for w, sc in packed:
                        mm(xs[w.shape[1]], w, sc)
                    best = min(best, time.perf_counter() - t0)
                out[fmt] = {"ms": best * 1e3, "tok_s": rows / best}
            except (RuntimeError, NotImplementedError) as e:   # a kernel this build lacks
                out[fmt] = {"error": str(e).splitlines()[0][:120]}
            finally:
                packed = None
    return out


def print_ceiling(res: dict) -> None:
    print(f"\nMatmul ceiling: the {res['layers']} linear layers once at {res['rows']} rows "
          f"({res['gflop']:.2f} GFLOP, one decode step's matmuls and nothing else)")
    print("| weights | ms/step | GFLOP/s | tok/s ceiling |")
    print("|---|---|---|---|")
    for fmt in CEILING_FORMATS:
        r = res.get(fmt)
        if r is None:
            continue
        if "error" in r:
            print(f"| {fmt} | - | - | not available: {r['error']} |")
        else:
            print(f"| {fmt} | {r['ms']:.1f} | {res['gflop'] / r['ms'] * 1e3:.0f} | {r['tok_s']:.0f} |")


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
                      args.precision, args.batch, args.repeats, args.threads, ceiling=args.ceiling)
    except ValueError as e:
        print(f"rlfh bench gen: {e}")
        return 2
    print_table(res)
    if "ceiling" in res:
        print_ceiling(res["ceiling"])
    return 0
