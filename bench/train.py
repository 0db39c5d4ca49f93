"""`rlfh bench train`: time a few PPO steps of the configured run (the tiny embedded default without flags).

Runs the real thing (embedded Ray, the reward service over HTTP, every actor group) for ``--steps`` steps
in a throw-away SAVE_PATH (no checkpoints), with the embedded default's sizes unless flags or the
environment say otherwise (8 prompts x 2 samples x <= 48 new tokens), and prints the per-step time of
every phase (generate, reward, reference, critic, policy forward, train, sync, total) and the rollout
throughput in tokens/s. Reference, critic and policy forwards run concurrently (different actors), so
their times overlap and add up to more than the step's wall time.
Step 1 includes warm-up (first forward/backward allocations), so the table also shows the mean of the
later steps.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from core.config import EMBEDDED_MODEL, RLFHConfig, env_name

# The embedded default's sizes, as scripts/train.sh sets them for the embedded model on CPU.
EMBEDDED_SIZES = {"generate_max_len": 48}

COLUMNS = [("generate", "generate"), ("reward", "reward"), ("reference", "reference"), ("critic", "critic"),
           ("policy_forward", "policy fwd"), ("train", "train"), ("sync", "sync"), ("total", "total")]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="Per-step time breakdown of PPO steps (generate, reward, ..., sync) and "
                                     "rollout tokens/s.",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3, help="PPO steps to time (default 3).")
    p.add_argument("--json", dest="json_out", default="", help="Also write the per-step rows to this JSON file.")
    p.add_argument("--no-dashboard", action="store_true", help="Start the embedded Ray without its dashboard.")
    RLFHConfig.add_cli_args(p)
    p.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    from cluster.driver import Trainer   # torch and Ray: kept lazy, this module is on `rlfh --help`'s import path
    if args.steps < 1:
        print("--steps must be >= 1")
        return 2

    for name, value in EMBEDDED_SIZES.items():   # flag > environment > the embedded default's size
        if getattr(args, name, None) is None and not os.environ.get(env_name(name)) \
                and (args.model_path or os.environ.get("MODEL_PATH") or EMBEDDED_MODEL) == EMBEDDED_MODEL:
            setattr(args, name, value)
    base = RLFHConfig.from_args(args)
    with tempfile.TemporaryDirectory(prefix="rlfh-bench-train-") as tmp:
        cfg = base.model_copy(update={"save_path": tmp, "ckpt_path": "", "use_tensorboard": False})
        cfg = RLFHConfig(**cfg.model_dump())  # re-validate
        t0 = time.time()
        trainer = Trainer(cfg, include_dashboard=False if args.no_dashboard else None, show_progress=False)
        rows = []
        try:
            trainer.setup()
            setup_s = time.time() - t0
            for i in range(args.steps):
                row = trainer.step()
                trainer.history.append(row)
                rows.append(row)
                print(f"step {row['step']}: {row['time/total']:.1f}s"
                      + (" (SKIPPED: reward service unavailable)" if row.get("skipped") else ""), flush=True)
            rss = peak_rss(trainer)
        finally:
            trainer.close()
    print_table(rows, cfg, setup_s)
    print_rss(rss)
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"setup_s": setup_s, "rows": rows, "config": cfg.model_dump(mode="json")}, fh, indent=2)
    return 0


def _vm_hwm_mb(pid: int) -> float:
    """Peak resident set (VmHWM) of a local process in MB; 0.0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
    return 0.0


def peak_rss(trainer) -> list[tuple[str, int, float]]:
    """``(process, pid, peak RSS MB)`` of the driver, every actor rank and every rollout engine (this node)."""
    out = [("driver", os.getpid(), _vm_hwm_mb(os.getpid()))]
    g = trainer.groups
    if g is None:
        return out
    try:
        _actor_rss(g, out)
    except Exception as e:  # noqa: BLE001 - a table of what could be read beats no table
        out.append((f"(actors unreadable: {type(e).__name__})", 0, 0.0))
    return out


def _actor_rss(g, out: list) -> None:
    """One row per process: roles sharing a process (MODEL_LAYOUT=colocated) are named together."""
    import ray
    names: dict[int, list[str]] = {}
    for grp in g.groups():
        for p in grp.run("ping"):
            names.setdefault(int(p["pid"]), []).append(f"{grp.role}[{p['rank']}]")
    for i, info in enumerate(ray.get([e.info.remote() for e in g.rollout])):
        names.setdefault(int(info["pid"]), []).append(f"rollout[{i}] ({info.get('dtype', '')})")
    from actors.base import process_allocator
    for pid, roles in names.items():
        out.append((f"{' + '.join(roles)}, {process_allocator(pid)} malloc", pid, _vm_hwm_mb(pid)))


def print_rss(rss: list[tuple[str, int, float]]) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title="Peak RSS (VmHWM) per process, MB (the reward service and Ray's own daemons not included)")
    t.add_column("process")
    t.add_column("pid", justify="right")
    t.add_column("peak RSS MB", justify="right")
    for name, pid, mb in rss:
        t.add_row(name, str(pid), f"{mb:.0f}")
    t.add_row("total", "", f"{sum(mb for _, _, mb in rss):.0f}", style="bold")
    Console(width=120).print(t)


def print_table(rows: list[dict], cfg: RLFHConfig, setup_s: float) -> None:
    from rich.console import Console
    from rich.table import Table

    from actors.base import cpu_summary
    title = (f"PPO step time (s): {cfg.rollout_batch_size} prompts x {cfg.n_samples_per_prompt} samples x "
             f"<= {cfg.generate_max_len} tokens, {cfg.advantage_estimator}, model {cfg.model_path}; "
             f"setup {setup_s:.0f}s; {cpu_summary()}")
    t = Table(title=title)
    t.add_column("step")
    for _, name in COLUMNS:
        t.add_column(name, justify="right")
    t.add_column("tokens", justify="right")
    t.add_column("rollout tok/s", justify="right")
    t.add_column("train threads", justify="right")

    def add(label: str, rs: list[dict], style: str = ""):
        if not rs:
            return
        vals = [sum(r.get(f"time/{k}", 0.0) for r in rs) / len(rs) for k, _ in COLUMNS]
        toks = sum(r.get("rollout_tokens", 0) for r in rs) / len(rs)
        gen = sum(r.get("time/generate", 0.0) for r in rs)
        tps = sum(r.get("rollout_tokens", 0) for r in rs) / gen if gen else 0.0
        thr = [r["policy/train_threads"] for r in rs if "policy/train_threads" in r]
        t.add_row(label, *[f"{v:.2f}" for v in vals], f"{toks:.0f}", f"{tps:.1f}",
                  f"{sum(thr) / len(thr):.1f}" if thr else "-", style=style)

    for r in rows:
        add(str(r["step"]) + (" (skipped)" if r.get("skipped") else ""), [r])
    add("mean", rows, "bold")
    if len(rows) > 1:
        add("mean (steps 2+)", rows[1:], "bold")
    Console(width=170).print(t)
