"""`rlfh bench drift`: what bf16 rollouts cost in accuracy and buy in speed, against fp32, on this machine.

Loads the model twice (fp32, and bf16 weights as the HF rollout engine holds them with ROLLOUT_DTYPE=auto on a
CPU with native bf16), samples ``--samples`` answers per prompt with the fp32 model, and prints:

* the per-token log-prob drift ``|log p_bf16 - log p_fp32|`` on those answers (mean, median, p99, max) and
  the per-sequence drift (sum over the answer's tokens), i.e. how far the sampling distribution of a bf16
  rollout engine is from the fp32 policy that trains on its samples;
* greedy answers: how many are identical in bf16 and fp32 (why `rlfh eval` stays fp32 by default);
* generation speed of both (same prompts, same engine code), tokens/s.

``actors.rollout.BF16_LOGPROB_DRIFT`` holds the numbers measured here; tests assert bf16 rollouts stay within
twice them.
"""
from __future__ import annotations

import argparse
import time

from core.config import RLFHConfig
from core.data import load_halueval
from core.model_loader import load_causal_lm, load_tokenizer, resolve_model_path
from core.prompts import render_prompt


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("drift", help="bf16 vs fp32 rollouts: log-prob drift, greedy agreement, tokens/s.",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=16, help="Dev-split questions (default 16).")
    p.add_argument("--samples", type=int, default=2, help="Sampled answers per prompt for the drift (default 2).")
    p.add_argument("--max-new-tokens", type=int, default=48, help="Tokens per answer (default 48).")
    p.add_argument("--mode", choices=["closed", "evidence"], default="closed", help="Prompt mode (default closed).")
    p.add_argument("--model", default="smollm2-135m-instruct", help="Model (default: the embedded one).")
    p.add_argument("--threads", type=int, default=0, help="Torch threads (0: CPU_THREADS rule, auto).")
    p.set_defaults(func=_cmd)


def measure(model: str, n_prompts: int, n_samples: int, max_new_tokens: int, mode: str = "closed",
            threads: int = 0) -> dict:
    """The numbers ``rlfh bench drift`` prints (see the module docstring)."""
    import torch

    # torch: kept lazy, this module is on `rlfh --help`'s import path
    from actors.base import phase_threads, response_logprobs, set_threads
    from actors.rollout import HFRolloutEngine
    from actors.types import make_batch
    cfg = RLFHConfig(model_path=model, rollout_backend="hf", micro_rollout_batch_size=16, rollout_dtype="fp32",
                     cpu_threads=threads)
    set_threads(phase_threads(cfg))
    path = resolve_model_path(model)
    tok = load_tokenizer(path)
    items = load_halueval("dev")[:n_prompts]
    prompts = [render_prompt(tok, it.question, it.knowledge_text, mode) for it in items]
    e32 = HFRolloutEngine(cfg, tokenizer=tok)
    m16 = load_causal_lm(path, dtype="bf16").requires_grad_(False)
    e16 = HFRolloutEngine(cfg, model=m16, tokenizer=tok)
    out: dict = {"threads": torch.get_num_threads(), "prompts": len(prompts), "mode": mode}
    greedy = {}
    for name, eng in (("fp32", e32), ("bf16", e16)):
        eng.generate(prompts[:2], 1, 4, 0.0, 1.0)  # warm-up
        t0 = time.perf_counter()
        greedy[name] = eng.generate(prompts, 1, max_new_tokens, 0.0, 1.0)
        dt = time.perf_counter() - t0
        n = sum(len(s.response_token_ids) for s in greedy[name])
        out[f"{name}_tok_s"] = n / dt
    out["greedy_identical"] = sum(a.response_token_ids == b.response_token_ids
                                  for a, b in zip(greedy["fp32"], greedy["bf16"]))
    sampled = e32.generate(prompts, n_samples, max_new_tokens, 1.0, 1.0, seed=3)
    batch = make_batch(sampled, tok.pad_token_id)
    mask = batch["action_mask"]
    with torch.no_grad():
        lp32 = response_logprobs(e32.model, batch, cfg, torch.device("cpu"))
        lp16 = response_logprobs(m16, batch, cfg, torch.device("cpu"))
        lpac = response_logprobs(e32.model, batch, cfg, torch.device("cpu"), autocast=torch.bfloat16)
    for prefix, lp in (("", lp16), ("autocast_", lpac)):
        d = (lp - lp32)[mask].abs()
        out.update({f"{prefix}mean": float(d.mean()), f"{prefix}median": float(d.median()),
                    f"{prefix}p99": float(d.quantile(0.99)), f"{prefix}max": float(d.max()),
                    f"{prefix}seq_mean": float(((lp - lp32) * mask).sum(1).abs().mean())})
    out["tokens"] = int(mask.sum())
    out.update(_gradient_agreement(e32.model, batch, cfg))
    return out


def _gradient_agreement(model, batch, cfg) -> dict:
    """TRAIN_AUTOCAST=bf16 against fp32 on one backward of ``sum(log p)`` over ``batch``: the cosine of the two
    full gradients, their norm ratio, and the forward+backward time of each."""
    import torch

    from actors.base import autocast_context, causal_lm_response_logprobs
    grads, secs = {}, {}
    model.requires_grad_(True)
    for name, dtype in (("fp32", None), ("autocast", torch.bfloat16)):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        with autocast_context(dtype, torch.device("cpu")):
            lp = causal_lm_response_logprobs(model, batch, cfg.temperature)
        (lp * batch["action_mask"]).sum().backward()
        secs[name] = time.perf_counter() - t0
        grads[name] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    model.requires_grad_(False)
    g32, gac = grads["fp32"].double(), grads["autocast"].double()
    return {"grad_cosine": float(torch.nn.functional.cosine_similarity(g32, gac, dim=0)),
            "grad_norm_ratio": float(gac.norm() / g32.norm()),
            "fwd_bwd_fp32_s": secs["fp32"], "fwd_bwd_autocast_s": secs["autocast"]}


def _cmd(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    if args.prompts < 1 or args.samples < 1 or args.max_new_tokens < 1:
        print("--prompts, --samples and --max-new-tokens must be >= 1")
        return 2
    r = measure(args.model, args.prompts, args.samples, args.max_new_tokens, args.mode, args.threads)
    t = Table(title=f"bf16 vs fp32 rollouts: {r['prompts']} {r['mode']} prompts, {args.samples} samples each, "
                    f"<= {args.max_new_tokens} tokens, {r['threads']} thread(s)")
    t.add_column("measure")
    t.add_column("bf16 weights (ROLLOUT_DTYPE)", justify="right")
    t.add_column("fp32 weights, bf16 autocast (TRAIN_AUTOCAST)", justify="right")
    for label, key, fmt in (("token |dlogp| mean (nats)", "mean", ".4f"), ("token |dlogp| median", "median", ".4f"),
                            ("token |dlogp| p99", "p99", ".4f"), ("token |dlogp| max", "max", ".4f"),
                            ("sequence |sum dlogp| mean", "seq_mean", ".3f")):
        t.add_row(label, format(r[key], fmt), format(r[f"autocast_{key}"], fmt))
    t.add_row("tokens compared", str(r["tokens"]), str(r["tokens"]))
    t.add_row("gradient cosine with fp32 (d sum log p)", "", f"{r['grad_cosine']:.4f}")
    t.add_row("gradient norm / fp32's", "", f"{r['grad_norm_ratio']:.4f}")
    t.add_row("forward+backward s (fp32 -> autocast)", "",
              f"{r['fwd_bwd_fp32_s']:.2f} -> {r['fwd_bwd_autocast_s']:.2f}")
    t.add_row("greedy answers identical", f"{r['greedy_identical']} / {r['prompts']}", "")
    t.add_row("generate tok/s (fp32 -> bf16)", f"{r['fp32_tok_s']:.1f} -> {r['bf16_tok_s']:.1f}", "")
    Console(width=120).print(t)
    return 0
