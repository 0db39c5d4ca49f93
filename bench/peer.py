"""`rlfh bench peer`: TRL's GRPOTrainer and rlfh's trainer on the same model, prompts and sizes, in one run.

Both train the same model (fp32) on the same closed-book HaluEval prompts (the same rendered chat-template
text), ``--prompts`` x ``--samples`` completions of <= ``--max-new-tokens`` tokens per step, GRPO, no KL term,
learning rate ``--lr``, one optimizer update per rollout, with the same instant in-process reward (the word
``--word`` in the answer), so the comparison is the training loop itself: generation, log-probs, update,
weight sync. Prints the seconds per step of each (every step, the mean of steps 2+) and the ratio rlfh / TRL.

TRL is a benchmark-only dependency, never a runtime one: ``make bench-peer`` installs it (into
``.venv-peer``, a separate environment) and runs this bench there. rlfh's side runs with its defaults for the
machine (CPU_THREADS, ROLLOUT_DTYPE and TRAIN_AUTOCAST auto); set those environment variables to compare other
settings.
"""
from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from typing import Any

from core.config import RLFHConfig
from core.data import load_items
from core.model_loader import load_tokenizer, resolve_model_path
from core.prompts import render_prompt
from reward_service.schemas import ItemReward

TRL_HINT = ("TRL is not installed in this environment: run `make bench-peer` (installs TRL into .venv-peer, "
            "separate from the runtime environment, and runs this bench there)")


class KeywordReward:
    """In-process reward: ``value`` on every token that overlaps an occurrence of ``word``.

    Matching is case-insensitive on whole words of the response text; token positions come from the
    items' ``token_offsets`` (the same alignment contract as the service). Tokens of a matched word get
    label sign +1 (as a "Correct" statement), so FSPO runs work with it too. A response containing the
    word counts as correct.
    """

    def __init__(self, word: str, value: float = 1.0):
        if not word.strip():
            raise ValueError("KeywordReward: word must be a non-empty string")
        self.word = word.strip()
        self.value = float(value)
        self._re = re.compile(r"(?<!\w)" + re.escape(self.word) + r"(?!\w)", re.IGNORECASE)

    def __call__(self, items: list[dict[str, Any]]) -> list[ItemReward]:
        out = []
        for it in items:
            spans = [m.span() for m in self._re.finditer(it["response"])]
            offsets = it["token_offsets"]
            rewards = [0.0] * len(offsets)
            signs = [0] * len(offsets)
            for s, e in spans:
                for t, (a, b) in enumerate(offsets):
                    if a < e and b > s:  # token overlaps the word
                        rewards[t] = self.value
                        signs[t] = 1
            out.append(ItemReward(token_rewards=rewards, token_label_signs=signs, score=float(sum(rewards)),
                                  is_correct=bool(spans), abstained=False, label_counts={"Correct": len(spans)},
                                  num_statements=len(spans), num_unaligned=0, num_tokens=len(offsets)))
        return out



def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("peer", help="TRL GRPOTrainer vs rlfh on the same batch: seconds per step and the ratio.",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4, help="Training steps for each trainer (default 4).")
    p.add_argument("--prompts", type=int, default=8, help="Prompts per step (default 8).")
    p.add_argument("--samples", type=int, default=4, help="Completions per prompt (default 4).")
    p.add_argument("--max-new-tokens", type=int, default=48, help="Completion length cap (default 48).")
    p.add_argument("--lr", type=float, default=1e-6, help="Learning rate (default 1e-6).")
    p.add_argument("--word", default="the", help="Reward: 1 per completion containing this word (default 'the').")
    p.add_argument("--model", default="smollm2-135m-instruct", help="Model (default: the embedded one).")
    p.add_argument("--only", choices=["both", "trl", "rlfh"], default="both", help="Run one side only.")
    p.set_defaults(func=_cmd)


def word_pattern(word: str):
    """The reward's test: ``word`` as a whole word, any case (compiled regex)."""
    return re.compile(r"(?<!\w)" + re.escape(word) + r"(?!\w)", re.IGNORECASE)


def word_reward(word: str):
    """A TRL reward function: 1.0 for each completion (text or chat messages) that contains ``word``, else 0.0."""
    pat = word_pattern(word)

    def reward(completions, **kw):
        return [1.0 if pat.search(c if isinstance(c, str) else c[-1]["content"]) else 0.0 for c in completions]
    return reward


def trl_step_timer(times: list[float]):
    """A TRL ``TrainerCallback`` that appends each optimizer step's seconds to ``times`` (after a CUDA sync when
    a GPU is in use, so the step's kernels are counted) and prints them."""
    import torch
    from transformers import TrainerCallback

    def sync():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            sync()
            times.append(time.perf_counter() - self.t0)
            print(f"trl step {len(times)}: {times[-1]:.2f}s", flush=True)
    return Timer()


def _prompts(model: str, n: int) -> list[str]:
    tok = load_tokenizer(model)
    return [render_prompt(tok, it.question, mode="closed") for it in load_items("halueval:train", limit=n)]


def run_trl(args, prompts: list[str]) -> list[float]:
    """Seconds per optimizer step of TRL's GRPOTrainer (generation included)."""
    try:
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as e:
        raise SystemExit(f"{TRL_HINT} ({e})") from None
    reward = word_reward(args.word)
    times: list[float] = []

    n = len(prompts) * args.samples
    data = Dataset.from_list([{"prompt": p} for p in prompts] * max(1, args.steps))
    with tempfile.TemporaryDirectory(prefix="rlfh-bench-peer-") as tmp:
        cfg = GRPOConfig(output_dir=tmp, per_device_train_batch_size=n, gradient_accumulation_steps=1,
                         num_generations=args.samples, max_completion_length=args.max_new_tokens, beta=0.0,
                         learning_rate=args.lr, max_steps=args.steps, temperature=1.0, use_cpu=True,
                         bf16=False, report_to=[], save_strategy="no", logging_steps=1, seed=1,
                         num_iterations=1, shuffle_dataset=False)
        trainer = GRPOTrainer(model=resolve_model_path(args.model), reward_funcs=reward, args=cfg,
                              train_dataset=data, callbacks=[trl_step_timer(times)])
        trainer.train()
    return times


def run_rlfh(args, n_prompts: int) -> list[float]:
    """Seconds per step of rlfh's Trainer (embedded Ray, every actor, weight sync) on the same sizes."""
    from cluster.driver import Trainer   # torch and Ray: kept lazy, this module is on `rlfh --help`'s import path
    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rlfh-bench-peer-") as tmp:
        cfg = RLFHConfig.load(
            save_path=tmp, ckpt_path="", use_tensorboard=False, model_path=args.model, prompt_data="halueval:train",
            max_samples=n_prompts, num_episodes=args.steps, rollout_batch_size=n_prompts,   # TRL's prompts
            n_samples_per_prompt=args.samples, train_batch_size=n_prompts * args.samples,
            generate_max_len=args.max_new_tokens, advantage_estimator="grpo", kl_coef=0.0, actor_lr=args.lr,
            prompt_mode="closed", abstain_samples=0, log_samples=0, max_steps=args.steps, rollout_backend="hf")
        trainer = Trainer(cfg, reward_fn=KeywordReward(args.word), include_dashboard=False, show_progress=False)
        try:
            trainer.setup()
            for _ in range(args.steps):
                row = trainer.step()
                times.append(float(row["time/total"]))
                print(f"rlfh step {len(times)}: {times[-1]:.1f}s (generate {row.get('time/generate', 0):.1f}s, "
                      f"train {row.get('time/train', 0):.1f}s, sync {row.get('time/sync', 0):.1f}s)", flush=True)
        finally:
            trainer.close()
    return times


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _cmd(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    if min(args.steps, args.prompts, args.samples, args.max_new_tokens) < 1:
        print("--steps, --prompts, --samples and --max-new-tokens must be >= 1")
        return 2
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    prompts = _prompts(args.model, args.prompts)
    res: dict[str, list[float]] = {}
    if args.only in ("both", "trl"):
        res["TRL GRPOTrainer"] = run_trl(args, prompts)
    if args.only in ("both", "rlfh"):
        res["rlfh"] = run_rlfh(args, len(prompts))
    from actors.base import cpu_summary
    t = Table(title=f"s/step: {args.model}, {args.prompts} prompts x {args.samples} samples x <= "
                    f"{args.max_new_tokens} tokens, GRPO, no KL, lr {args.lr:g}, one update per rollout; "
                    f"{cpu_summary()}")
    t.add_column("trainer")
    for i in range(args.steps):
        t.add_column(f"step {i + 1}", justify="right")
    t.add_column("mean (steps 2+)", justify="right", style="bold")
    for name, xs in res.items():
        t.add_row(name, *[f"{x:.1f}" for x in xs] + [""] * (args.steps - len(xs)), f"{_mean(xs[1:] or xs):.1f}")
    Console(width=150).print(t)
    if len(res) == 2:
        a, b = _mean(res["rlfh"][1:] or res["rlfh"]), _mean(res["TRL GRPOTrainer"][1:] or res["TRL GRPOTrainer"])
        print(f"rlfh / TRL step time: {a / b:.2f}x (target <= 0.5x)")
    return 0
