"""`rlfh bench judge`: statements per second of one verifier replica, rules against the trained claim judge.

One in-process :class:`verifier_service.core.Verifier` per backend (what a Serve verifier replica runs),
on the embedded policy's real answers (the hand-labelled set's 206 answers, with their passages), verified in
calls of ``--batch`` answers (the reward service sends a step's misses in chunks like that), at each
``--threads`` torch thread count. Prints statements/s, answers/s and ms per answer; the first call of each
backend is a warm-up (model load) and is not timed.

For the verifier's share of a whole RL step (generation, rewards, updates), time real steps with each backend:
``VERIFIER_BACKEND=judge rlfh bench train`` and compare the reward column with the total.
"""
from __future__ import annotations

import argparse
import json
import platform
import time

from bench.real import DEFAULT_PATH, load_real
from core.config import RLFHConfig, positive_int
from core.help_text import plain_doc
from core.verify_schema import VerifyRequest
from verifier_service.core import Verifier


def measure(backend: str, threads: int, batch: int, repeats: int, cfg=None) -> dict:
    import torch

    cfg = cfg or RLFHConfig.load()
    answers = load_real(DEFAULT_PATH)
    reqs = [VerifyRequest(question=a.question, response=a.answer, materials=list(a.knowledge)) for a in answers]
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ver = Verifier(cfg, backend=backend)
        ver.verify_many(reqs[:batch])           # warm-up: model load, tokenizer, first allocations
        n_st = n_ans = 0
        t0 = time.perf_counter()
        for _ in range(repeats):
            for s in range(0, len(reqs), batch):
                res = ver.verify_many(reqs[s:s + batch])
                n_st += sum(r.num_statements for r in res)
                n_ans += len(res)
        dt = time.perf_counter() - t0
    finally:
        torch.set_num_threads(old)
    return {"backend": backend, "threads": threads, "batch": batch, "answers": n_ans, "statements": n_st,
            "seconds": round(dt, 3), "statements_per_s": round(n_st / dt, 1), "answers_per_s": round(n_ans / dt, 1),
            "ms_per_answer": round(1000 * dt / max(1, n_ans), 2)}


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    rows = [measure(b, t, args.batch, args.repeats) for b in args.backends for t in args.threads]
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor()) if platform.system() == "Linux" else platform.processor()
    t = Table(title=f"One verifier replica on real policy answers ({cpu})")
    for c in ("backend", "threads", "batch", "answers", "statements", "statements/s", "answers/s", "ms/answer"):
        t.add_column(c, justify="left" if c == "backend" else "right")
    for r in rows:
        t.add_row(r["backend"], str(r["threads"]), str(r["batch"]), str(r["answers"]), str(r["statements"]),
                  f"{r['statements_per_s']:.1f}", f"{r['answers_per_s']:.1f}", f"{r['ms_per_answer']:.2f}")
    Console().print(t)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"cpu": cpu, "rows": rows}, fh, indent=1)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("judge", help="Statements/s of one verifier replica: the rules vs the trained claim judge.",
                       description=plain_doc(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", nargs="+", default=["evidence", "judge"], choices=["evidence", "judge"],
                   help="Backends to time (default: evidence judge).")
    p.add_argument("--threads", type=positive_int, nargs="+", default=[1, 2],
                   help="Torch thread counts to time each backend at (default: 1 2).")
    p.add_argument("--batch", type=positive_int, default=32, help="Answers per verify call (default 32).")
    p.add_argument("--repeats", type=positive_int, default=1, help="Passes over the 206 answers (default 1).")
    p.add_argument("--json", default=None, metavar="OUT", help="Also write the rows to this JSON file.")
    p.set_defaults(func=_run)
