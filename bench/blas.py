"""`rlfh bench blas`: what MKL_VENDOR_SHIM buys on this CPU, measured in fresh processes with and without it.

Torch's fp32 products go to Intel MKL, which on an AMD CPU takes slower code paths unless the vendor shim
(core/cpu_blas.py) is preloaded. Preloading acts when a process loads torch, so each measurement runs in its own
child process, the two variants alternating ``--repeats`` times so that machine noise hits both. A child times:

- fp32 products in the embedded model's shapes (a decode step's 48 rows and a training micro batch's 512, the
  MLP's and the 49,152-row LM head's), GFLOP/s;
- one training micro batch of the warm start's kind: the response log-probs of ``--rows`` dev prompts with their
  gold answers (the trainer's forward) and the backward of their mean NLL, seconds;
- greedy decoding of ``--rows`` dev prompts, ``--max-new-tokens`` tokens at most (the rollout engine's
  kv-buffer loop, as `rlfh eval`), tokens/s.

Prints a table: the median of each measurement per variant and the speed-up. On an Intel CPU (or where torch has
no MKL) the shim changes nothing and the bench says so.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from baselines.common import encode_example, eos_id, load_model
from baselines.rtuning import sft_step_loss
from core.cpu_blas import preload_value
from core.data import load_halueval
from core.prompts import render_prompt

SHAPES = ((48, 576, 1536), (48, 576, 49152), (512, 576, 1536), (512, 1536, 576))


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("blas", help="fp32 products, a training micro batch and greedy decoding with and without "
                                    "MKL_VENDOR_SHIM (AMD CPUs).",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=2, help="Child processes per variant, alternating (default 2).")
    p.add_argument("--rows", type=int, default=8, help="Dev prompts in the training micro batch and the decode "
                                                       "batch (default 8).")
    p.add_argument("--max-new-tokens", type=int, default=40, help="Decode length at most (default 40, make train's "
                                                                  "GENERATE_MAX_LEN).")
    p.add_argument("--threads", type=int, default=2, help="Torch intra-op threads in each child (default 2).")
    p.add_argument("--model", default="smollm2-135m-instruct", help="Model (default: the embedded one).")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd)


def child(model: str, rows: int, max_new_tokens: int, threads: int) -> dict:
    """One variant's measurements in this process (whatever LD_PRELOAD it was started with)."""
    import torch

    from actors.decode import sample   # torch: kept lazy, this module is on `rlfh --help`'s import path
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    out: dict = {"matmul": {}}
    for m, k, n in SHAPES:
        a, w = torch.randn(m, k), torch.randn(n, k)
        for _ in range(3):
            torch.nn.functional.linear(a, w)
        reps = max(5, int(4e10 / (2 * m * k * n)))
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.nn.functional.linear(a, w)
        out["matmul"][f"{m}x{k}x{n}"] = 2 * m * k * n * reps / (time.perf_counter() - t0) / 1e9
    _, lm, tok = load_model(model)
    items = load_halueval("dev")[:rows]
    prompts = [render_prompt(tok, it.question, it.knowledge_text, "closed") for it in items]
    eos = eos_id(lm, tok)
    examples = [encode_example(tok, p, it.right_answer, eos) for p, it in zip(prompts, items)]
    loss_fn = sft_step_loss(tok.pad_token_id)
    lm.train()
    times = []
    for i in range(4):   # the first is a warm-up
        t0 = time.perf_counter()
        loss, _ = loss_fn(lm, examples, 1.0)
        loss.backward()
        lm.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    out["train_s"] = statistics.median(times[1:])
    lm.eval()
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    with torch.no_grad():
        sample(lm, ids[:2], n=1, max_new_tokens=4, temperature=0.0, top_p=1.0, eos_ids=[eos], pad_id=tok.pad_token_id)
        t0 = time.perf_counter()
        gen = sample(lm, ids, n=1, max_new_tokens=max_new_tokens, temperature=0.0, top_p=1.0, eos_ids=[eos],
                     pad_id=tok.pad_token_id)
        dt = time.perf_counter() - t0
    out["decode_tok_s"] = sum(len(g) for g in gen) / dt
    return out


def measure(repeats: int = 2, rows: int = 8, max_new_tokens: int = 40, threads: int = 2,
            model: str = "smollm2-135m-instruct") -> dict:
    """``{"shim": path or "", "why": str, "runs": {"MKL default": [child dicts], "vendor shim": [...]}}``."""
    if min(repeats, rows, max_new_tokens, threads) < 1:
        raise ValueError("--repeats, --rows, --max-new-tokens and --threads must be >= 1")
    base_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    shim, why = preload_value("auto", current="")
    variants = {"MKL default": base_env}
    if shim:
        variants["vendor shim"] = {**base_env, "LD_PRELOAD": shim}
    runs: dict = {name: [] for name in variants}
    cmd = [sys.executable, "-m", "bench.blas", "--child", "--rows", str(rows), "--max-new-tokens",
           str(max_new_tokens), "--threads", str(threads), "--model", model]
    for r in range(repeats):
        for name, env in variants.items():
            print(f"bench blas: {name}, run {r + 1}/{repeats}", file=sys.stderr, flush=True)
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
            if res.returncode != 0:
                raise RuntimeError(f"the {name} child failed (exit {res.returncode}): {res.stderr.strip()[-800:]}")
            runs[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
    return {"shim": shim, "why": why, "runs": runs}


def rows_of(res: dict) -> list[tuple[str, list[float]]]:
    """``(measurement, [median per variant])``, the variants in ``res["runs"]`` order."""
    names = list(res["runs"])
    first = res["runs"][names[0]][0]
    keys = [(f"fp32 product {s}, GFLOP/s", ("matmul", s)) for s in first["matmul"]]
    keys += [("training micro batch (fwd + bwd), s", ("train_s",)), ("greedy decode, tokens/s", ("decode_tok_s",))]
    out = []
    for label, path in keys:
        meds = []
        for n in names:
            vals = [run[path[0]][path[1]] if len(path) == 2 else run[path[0]] for run in res["runs"][n]]
            meds.append(statistics.median(vals))
        out.append((label, meds))
    return out


def print_table(res: dict) -> None:
    names = list(res["runs"])
    print(res["why"])
    head = "| measurement | " + " | ".join(names) + (" | speed-up |" if len(names) > 1 else " |")
    print(head + "\n|" + "---|" * (head.count("|") - 1))
    for label, meds in rows_of(res):
        cells = [f"{v:.3f}" if label.endswith(", s") else f"{v:.1f}" for v in meds]
        if len(meds) > 1:
            gain = meds[0] / meds[1] if label.endswith(", s") else meds[1] / meds[0]
            cells.append(f"{gain:.2f}x")
        print(f"| {label} | " + " | ".join(cells) + " |")


def _cmd(args: argparse.Namespace) -> int:
    if args.child:
        print(json.dumps(child(args.model, args.rows, args.max_new_tokens, args.threads)))
        return 0
    try:
        res = measure(args.repeats, args.rows, args.max_new_tokens, args.threads, args.model)
    except (ValueError, RuntimeError) as e:
        print(f"rlfh bench blas: {e}")
        return 2
    print_table(res)
    return 0


if __name__ == "__main__":   # the child processes: `python -m bench.blas --child ...` (no CLI, Ray or services)
    parser = argparse.ArgumentParser(prog="python -m bench.blas")
    add_parser(parser.add_subparsers())
    raise SystemExit(_cmd(parser.parse_args(["blas", *sys.argv[1:]])))
