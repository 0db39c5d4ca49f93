"""The single-controller PPO driver: one Python process orchestrates every Ray actor group.

Read it top to bottom; one PPO step is, as data::

    prompts (question, evidence, gold answer)        core.data + core.prompts.render_prompt
      -> rollout engines: n samples per prompt        token ids, text, per-token character offsets
      -> reward function (default: the reward service over HTTP, verifier behind it)
                                                      token rewards aligned by the engines' offsets
      -> reference / policy / critic forwards         ref log-probs, old log-probs, values   [B, R]
      -> KL_t = kl(old, ref);  r_t = token reward - kl_coef * KL_t  (clipped once, by the reward service)
      -> [caution reward] [outcome-variance filter]  advantages (GAE / group) [FSPO flip]
      -> PPO epochs: critic (always), policy (after FREEZING_ACTOR_STEPS)
      -> weight sync policy -> rollout engines
      -> metrics (Ray / Prometheus, TensorBoard, metrics.jsonl), checkpoint every SAVE_STEP

The math lives in :mod:`core.core_algos`, experience assembly in
:mod:`cluster.experience`, checkpoints in :mod:`cluster.checkpoint`. The
reward function is pluggable (``Trainer(cfg, reward_fn=...)``): the reward
service is the default; :class:`cluster.experience.KeywordReward` is an
in-process one for tests and demos.

A batch whose rewards cannot be had (the reward service is down after the
client's bounded retries) is skipped and counted (``rlfh_skipped_batches_total``,
progress bar, summary); it is never trained on as zero reward. After
:data:`MAX_CONSECUTIVE_SKIPS` skipped batches in a row the run stops with a
clear error (a checkpoint is written first).

An actor that dies or hangs does not stop or hang the run: the actor groups are restarted from the last
checkpoint and the steps after it are redone, at most ``MAX_ACTOR_RESTARTS`` times between two checkpoints
(past that the run stops with :class:`ActorGroupsFailed`). How the failed actor is named, the restart and the
log rewind are :mod:`cluster.recovery`'s; the loop only hands the failure over (:meth:`Trainer._recover`).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import signal
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from cluster.checkpoint import TrainerState, latest_checkpoint, load_checkpoint, save_checkpoint
from cluster.experience import (KeywordReward, SelfJudge, ServiceReward, SkipCounter, fetch_rewards, gold_outcomes,
                                label_mix, inject_abstentions, reward_items, rewards_to_tensors)
from cluster.recovery import ActorGroupsFailed, ActorRecovery, rewind_jsonl, set_aside_old_logs
from cluster.train_report import PHASES, format_mix, plot_curves, print_summary, read_dev, read_metrics
from core import metrics
from core.config import ConfigError, RLFHConfig
from core.data import QAItem, load_items

log = logging.getLogger(__name__)

MAX_CONSECUTIVE_SKIPS = 5
__all__ = ["Trainer", "TrainResult", "train", "load_prompts", "epoch_order", "KeywordReward", "PHASES",
           "ActorGroupsFailed"]


# --------------------------------------------------------------------------------------
# prompts and data order
# --------------------------------------------------------------------------------------

def load_prompts(cfg: RLFHConfig) -> list[QAItem]:
    """Training prompts from PROMPT_DATA (at most MAX_SAMPLES). Refuses HaluEval's held-out test split."""
    spec = cfg.prompt_data.strip()
    if spec.startswith("halueval"):
        split = spec.partition(":")[2] or "all"
        if split in ("test", "all"):
            raise ConfigError(
                f"PROMPT_DATA (--prompt-data) = {spec!r}: "
                + ("the test split" if split == "test" else "'all' includes the test split, which")
                + " is held out for evaluation and is never trained on; use halueval:train (or halueval:dev)")
    items = load_items(spec, limit=cfg.max_samples)
    if cfg.type_balance:
        from core.data import balance_question_types
        n0 = len(items)
        items = balance_question_types(items, cfg.type_balance)
        log.info("TYPE_BALANCE=%g: %d prompts -> %d (yes/no and two-option questions repeated)", cfg.type_balance,
                 n0, len(items))
    if len(items) < cfg.rollout_batch_size:
        raise ConfigError(f"PROMPT_DATA (--prompt-data) = {spec!r} has {len(items)} prompts (MAX_SAMPLES="
                          f"{cfg.max_samples}), fewer than ROLLOUT_BATCH_SIZE={cfg.rollout_batch_size}; "
                          "lower ROLLOUT_BATCH_SIZE or give more prompts")
    return items


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled prompt order of one epoch (a pure function of seed and epoch: resumable)."""
    return np.random.default_rng([int(seed), int(epoch)]).permutation(n)


def plan_steps(cfg: RLFHConfig, n_prompts: int) -> tuple[int, int]:
    """``(steps_per_epoch, total_steps)``: full batches only; MAX_STEPS caps the total when > 0."""
    per_epoch = n_prompts // cfg.rollout_batch_size
    total = per_epoch * cfg.num_episodes
    if cfg.max_steps:
        total = min(total, cfg.max_steps)
    return per_epoch, total


def next_prompt_indices(state: TrainerState, n_prompts: int, batch: int, seed: int) -> list[int]:
    """Dataset indices of the next batch; advances ``state.epoch`` / ``state.index`` in place."""
    if state.index + batch > n_prompts:  # the tail that does not fill a batch is dropped
        state.epoch += 1
        state.index = 0
    idx = epoch_order(n_prompts, seed, state.epoch)[state.index:state.index + batch]
    state.index += batch
    return [int(i) for i in idx]


# --------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------

class PhaseTimer:
    """Wall time per phase of one step: ``with timer("generate"): ...``."""

    def __init__(self):
        self.times: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.times[phase] = self.times.get(phase, 0.0) + time.perf_counter() - t0


def _mean_dicts(dicts: Sequence[dict]) -> dict[str, float]:
    """Mean of the numeric values of per-rank metric dicts."""
    out: dict[str, list[float]] = {}
    for d in dicts:
        for k, v in (d or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(k, []).append(float(v))
    return {k: sum(v) / len(v) for k, v in out.items()}


def _gather_timed(launched: dict[str, list], timer: PhaseTimer, timeout: float,
                  serial: bool = False) -> dict[str, torch.Tensor]:
    """Wait for concurrently launched per-rank calls; each phase's time runs from launch to its last rank's
    answer (phases overlap, so their times add up to more than the wall time). ``serial``: the phases run one
    after another in one process (the colocated layout), so each one's time runs from the previous phase's end.
    Returns ``{phase: [B, ...]}``."""
    from actors import calls
    t0 = start = time.perf_counter()
    deadline = time.monotonic() + timeout
    owner = {ref: phase for phase, refs in launched.items() for ref in refs}
    left = {phase: len(refs) for phase, refs in launched.items()}
    pending = list(owner)
    while pending:
        # on a timeout the error names the phases still waited for (policy_forward, reference, critic)
        done, pending = calls.wait_any(pending, deadline, ", ".join(sorted({owner[r] for r in pending})), timeout)
        for ref in done:
            phase = owner[ref]
            left[phase] -= 1
            if left[phase] == 0:
                now = time.perf_counter()
                timer.times[phase] = timer.times.get(phase, 0.0) + now - start
                start = now if serial else t0
    return {phase: torch.cat(calls.get(refs, phase, timeout), 0) for phase, refs in launched.items()}


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    from core.core_algos import masked_mean
    return float(masked_mean(x, mask))


@dataclass
class TrainResult:
    """What a run did (the summary table is printed from this and metrics.jsonl)."""

    completed: bool
    state: TrainerState
    history: list[dict] = field(default_factory=list)
    model_dir: Optional[str] = None
    checkpoint: Optional[str] = None
    wall_time_s: float = 0.0
    curves_png: Optional[str] = None
    dashboard_url: Optional[str] = None
    resumed_from: Optional[str] = None
    steps_this_run: int = 0


class _StopRequest:
    """First Ctrl-C: finish the current step, save, stop. Second Ctrl-C: abort at once."""

    def __init__(self):
        self.requested = False
        self._old = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._old = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True
            log.warning("Ctrl-C: finishing this step, then saving a checkpoint (Ctrl-C again to abort now)")
        signal.signal(signal.SIGINT, handler)

    def uninstall(self) -> None:
        if self._old is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._old)
            self._old = None


# --------------------------------------------------------------------------------------
# the trainer
# --------------------------------------------------------------------------------------

def check_abstain_text(cfg: RLFHConfig) -> None:
    """ConfigError unless the abstention candidate (ABSTAIN_TEXT, used when ABSTAIN_SAMPLES > 0) reads as an
    abstention to the verifier. Checked here, not in the config: the config sits below the verifier."""
    from verifier_service.text import is_abstention_text
    if cfg.abstain_samples and not is_abstention_text(cfg.abstain_text):
        raise ConfigError(f"ABSTAIN_TEXT={cfg.abstain_text!r} (--abstain-text) does not read as an abstention to the "
                          "verifier (it would be graded as an answer); use e.g. \"I don't know.\"")


class Trainer:
    """PPO over Ray actor groups, driven from this process.

    Args:
        cfg: the run's settings.
        reward_fn: ``items -> results`` (see :class:`cluster.experience.RewardFn`); None: the reward service
            (REWARD_URL, or deployed here on the current Ray).
        groups: already created :class:`actors.group.Groups` (tests reuse them; they are not shut down here).
        ray_num_cpus / include_dashboard: for the embedded Ray (ignored when Ray is up or RAY_ADDRESS is set).
        show_progress: tqdm bar and the summary table.
    """

    def __init__(self, cfg: RLFHConfig, reward_fn: Optional[Callable] = None, groups=None, *,
                 ray_num_cpus: Optional[float] = None, include_dashboard: Optional[bool] = None,
                 show_progress: bool = True):
        check_abstain_text(cfg)
        self.cfg = cfg
        self._t_created = time.time()
        self.reward_fn = reward_fn
        self.groups = groups
        self._own_groups = groups is None
        self._ray_num_cpus = ray_num_cpus
        self._include_dashboard = include_dashboard
        self.show_progress = show_progress
        self.save_path = Path(cfg.save_path)
        self.metrics_path = self.save_path / "metrics.jsonl"
        self.skips = SkipCounter()
        self.state = TrainerState()
        self.history: list[dict] = []
        self.ray = None
        self._deployed_service = False
        self._service_reward: Optional[ServiceReward] = None
        self._tb = None
        self.resumed_from: Optional[str] = None
        self.last_checkpoint: Optional[str] = None
        self._saved_step = -1
        self._self_judge: Optional[SelfJudge] = None   # VERIFIER_BACKEND=self: the verifier replicas' engines
        self.dev_eval = None               # cluster.dev_eval.DevEvaluator when DEV_EVAL_STEP > 0
        self.stopped_early = False         # EARLY_STOP_PATIENCE ended the run
        self.recovery = ActorRecovery(cfg)  # actor failures: restarts from the last checkpoint (MAX_ACTOR_RESTARTS)

    # ------------------------------------------------------------------ setup
    def setup(self) -> "Trainer":
        cfg = self.cfg
        from core.model_loader import load_tokenizer
        from core.ray_bootstrap import start_ray

        self.prompts = load_prompts(cfg)
        self.steps_per_epoch, self.total_steps = plan_steps(cfg, len(self.prompts))
        log.info("%d training prompts from %s: %d steps per epoch, %d steps planned", len(self.prompts),
                 cfg.prompt_data, self.steps_per_epoch, self.total_steps)
        self.tokenizer = load_tokenizer(cfg.model_path)
        self.pad_id = int(self.tokenizer.pad_token_id)
        # the abstention candidate's response tokens: the text, then the end-of-turn token the model emits
        self.abstain_ids = (self.tokenizer.encode(cfg.abstain_text, add_special_tokens=False)
                            + [int(self.tokenizer.eos_token_id)])
        self.save_path.mkdir(parents=True, exist_ok=True)

        self.ray = start_ray(cfg, num_cpus=self._ray_num_cpus, include_dashboard=self._include_dashboard)
        # VERIFIER_BACKEND=self: the verifier replicas judge with the rollout engines, so those come up first
        judge_needs_engines = self.reward_fn is None and not cfg.reward_url and cfg.verifier_backend == "self"
        if not judge_needs_engines:
            self._connect_rewards()
        if self.groups is None:
            from actors.group import create_groups
            t0 = time.time()
            self.groups = create_groups(cfg)
            log.info("actor groups up in %.0fs", time.time() - t0)
        if judge_needs_engines:
            self._self_judge = SelfJudge(self.groups.rollout)
            self._connect_rewards(verifier_factory=self._self_judge)
        self._resume()
        for name in ignored_by_layout(cfg, getattr(self.groups, "layout", "")):
            log.warning("%s=%s is ignored by the %s layout (MODEL_LAYOUT; one process holds every role on one "
                        "node); use MODEL_LAYOUT=separate for it to take effect", name.upper(),
                        getattr(cfg, name), self.groups.layout)
        if cfg.dev_eval_step:
            from cluster.dev_eval import DevEvaluator
            self.dev_eval = DevEvaluator(cfg, self.tokenizer)
            log.info("in-loop dev evaluation every %d steps: %d questions of %s (%s), greedy", cfg.dev_eval_step,
                     len(self.dev_eval.items), cfg.dev_eval_data, cfg.dev_eval_modes)
        if self.reuses_train_logprobs:
            log.info("one policy update per rollout and no reference (KL_COEF=0): the update's own log-probs "
                     "serve as the old log-probs, so the policy forward before it is skipped")
        self._open_tensorboard()
        return self

    def _open_tensorboard(self) -> None:
        """TensorBoard writer; after a resume, events of the steps after the checkpoint are purged (redone)."""
        if not self.cfg.use_tensorboard:
            return
        from torch.utils.tensorboard import SummaryWriter
        if self._tb is not None:
            self._tb.close()
        self._tb = SummaryWriter(str(self.save_path / "tensorboard"),
                                 purge_step=self.state.step + 1 if self.state.step else None)

    @property
    def reuses_train_logprobs(self) -> bool:
        """True when the old log-probs need no forward of their own: a single update per rollout (one epoch,
        the whole rollout in one optimizer step) leaves the policy unchanged until that update computes them,
        and without a reference nothing else (the KL term) needs them before it."""
        cfg = self.cfg
        return (self.groups is not None and self.groups.reference is None and cfg.max_epochs == 1
                and cfg.rollout_batch_size * cfg.n_samples_per_prompt <= cfg.train_batch_size)

    def _connect_rewards(self, verifier_factory=None) -> None:
        """The reward function: REWARD_URL's service, or one deployed on this Ray (``verifier_factory``: see
        :func:`reward_service.app.deploy`). Nothing to do when the caller passed a ``reward_fn``."""
        if self.reward_fn is not None:
            return
        url = self.cfg.reward_url or self._deploy_reward_service(verifier_factory)
        self._service_reward = ServiceReward(url, self.cfg)
        self._service_reward.client.wait_ready(timeout_s=120.0)
        self.reward_fn = self._service_reward
        log.info("rewards from the reward service at %s", url)

    def _redeploy_self_judge(self, groups) -> None:
        """After an actor-group restart: the same app, its verifier replicas handed the new rollout engines."""
        from ray import serve

        from reward_service.app import APP_NAME, build_app
        self._self_judge = SelfJudge(groups.rollout)
        serve.run(build_app(self.cfg, self._self_judge), name=APP_NAME, route_prefix="/", blocking=False)

    def _deploy_reward_service(self, verifier_factory=None) -> str:
        from core.ray_bootstrap import free_port, port_is_free
        from reward_service.app import deploy
        port = self.cfg.serve_port
        if not port_is_free(port, self.cfg.serve_host if self.cfg.serve_host not in ("0.0.0.0", "::") else "127.0.0.1"):
            new = free_port()
            log.warning("SERVE_PORT %d is taken on this machine; the reward service uses %d instead", port, new)
            port = new
        url = deploy(self.cfg, host=self.cfg.serve_host, port=port, verifier_factory=verifier_factory)
        self._deployed_service = True
        return url

    def _resume(self) -> None:
        """Continue from the latest checkpoint in CKPT_PATH (same step, same data position), if any."""
        ckpt = latest_checkpoint(self.cfg.effective_ckpt_path)
        if ckpt is None:
            set_aside_old_logs(self._step_logs)   # a fresh run in an old SAVE_PATH: start new logs
            return
        self.state = load_checkpoint(ckpt, self.groups)
        self.skips.total = self.state.skipped_batches
        self.resumed_from = str(ckpt)
        self.last_checkpoint = str(ckpt)
        self._saved_step = self.state.step
        # the engines generate with the restored policy
        from actors.weight_sync import sync_weights
        sync_weights(self.groups.policy, self.groups.rollout)
        self._rewind_logs(self.state.step)
        log.info("resuming at step %d (epoch %d, prompt %d of the shuffled order) from %s",
                 self.state.step, self.state.epoch, self.state.index, ckpt)

    @property
    def _step_logs(self) -> tuple[Path, Path]:
        """The logs with one line per step (or per sample of a step): rewound when steps are redone."""
        return self.metrics_path, self.save_path / "samples.jsonl"

    @property
    def actor_restarts(self) -> int:
        """Actor-group restarts in this process (all of them)."""
        return self.recovery.budget.total

    def _rewind_logs(self, step: int) -> None:
        """Drop the lines of the steps after ``step`` from the step logs (those steps are redone); the history
        becomes what metrics.jsonl keeps (:func:`cluster.recovery.rewind_jsonl`)."""
        metrics_log, *others = self._step_logs
        self.history = sorted(rewind_jsonl(metrics_log, step), key=lambda r: r.get("step", 0))
        for path in others:
            rewind_jsonl(path, step)

    def _recover(self, err: BaseException) -> None:
        """An actor died or hung: go on from the last checkpoint with new actor groups
        (:meth:`cluster.recovery.ActorRecovery.restart`), or stop with :class:`ActorGroupsFailed` once
        MAX_ACTOR_RESTARTS restarts since the last checkpoint are used up."""
        t0 = time.monotonic()
        on_new_groups = self._redeploy_self_judge if self._self_judge is not None else None
        groups, self.groups = self.groups, None    # restart() kills them, whatever happens
        try:
            self.groups, self.state = self.recovery.restart(err, groups, self.state.step, on_new_groups)
        except ActorGroupsFailed as e:
            self._rewind_logs(e.resume_step)    # the logs end where the rerun resumes (later steps are redone)
            raise
        self._own_groups = True
        self.skips.total = self.state.skipped_batches
        self.skips.consecutive = 0
        self._saved_step = self.state.step
        self._rewind_logs(self.state.step)
        self._open_tensorboard()
        log.warning("actor groups restarted in %.0fs; training goes on at step %d", time.monotonic() - t0,
                    self.state.step)

    # ------------------------------------------------------------------ the loop
    def fit(self) -> TrainResult:
        from actors import calls
        cfg = self.cfg
        t_start = time.time()
        wall_before = self.state.wall_time_s
        start_step = self.state.step
        stop = _StopRequest()
        stop.install()
        bar = None
        completed = False
        try:
            if self.show_progress:
                from tqdm.auto import tqdm
                bar = tqdm(total=self.total_steps, initial=min(start_step, self.total_steps), desc="rlfh train",
                           unit="step", dynamic_ncols=True)
            if self.dev_eval is not None and self.state.step == 0:
                self._log_dev(self._evaluate_dev())   # the starting point, before any update
            while self.state.step < self.total_steps and not stop.requested:
                try:
                    row = self.step()
                    if self.dev_eval is not None and (self.state.step % cfg.dev_eval_step == 0
                                                      or self.state.step == self.total_steps):
                        dev = self._evaluate_dev()
                        row.update(dev)
                        self._log_dev(dev)
                    self.state.wall_time_s = wall_before + time.time() - t_start
                    self._log(row)
                    if cfg.save_step and self.state.step % cfg.save_step == 0:
                        self.save()
                    if cfg.snapshot_step and self.state.step % cfg.snapshot_step == 0:
                        self.snapshot()
                except Exception as e:
                    if not calls.is_actor_failure(e):
                        raise
                    self._recover(e)    # back to the last checkpoint with new actors, or ActorGroupsFailed
                    wall_before, t_start = self.state.wall_time_s, time.time()
                    if bar is not None:
                        bar.n = min(self.state.step, self.total_steps)
                        bar.refresh()
                    continue
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix_str(self._postfix(row), refresh=True)
                if self.dev_eval is not None and self.dev_eval.should_stop():
                    log.warning("early stop at step %d: %d dev evaluation(s) in a row below the best, dev score %.3f "
                                "at step %d (EARLY_STOP_PATIENCE=%d)", self.state.step, self.dev_eval.evals_since_best,
                                self.dev_eval.best_score, self.dev_eval.best_step, cfg.early_stop_patience)
                    self.stopped_early = True
                    break
                if self.skips.consecutive >= MAX_CONSECUTIVE_SKIPS:
                    self.save()
                    raise RuntimeError(
                        f"{self.skips.consecutive} batches in a row skipped: the reward service is unavailable "
                        f"({self.skips.last_error}). Checkpoint saved at step {self.state.step}; fix the service "
                        "(REWARD_URL / `rlfh serve`) and rerun to resume.")
            completed = self.state.step >= self.total_steps or self.stopped_early
        except KeyboardInterrupt:
            log.warning("aborted by a second Ctrl-C: no checkpoint written for the current step")
            raise
        finally:
            stop.uninstall()
            if bar is not None:
                bar.close()
        self.state.wall_time_s = wall_before + time.time() - t_start
        ran = self.state.step - start_step
        if ran > 0 and self._saved_step != self.state.step:  # end of run, or Ctrl-C
            self.save()
        model_dir = self._export_final() if completed else None
        return self._report(completed, model_dir, ran, time.time() - t_start)

    def step(self) -> dict[str, Any]:
        """One PPO step on the next batch of prompts. Returns its metrics record."""
        cfg = self.cfg
        state = self.state
        prompt_idx = next_prompt_indices(state, len(self.prompts), cfg.rollout_batch_size, cfg.seed)
        state.step += 1
        step = state.step
        timer = PhaseTimer()
        t0 = time.perf_counter()
        row: dict[str, Any] = {"step": step, "epoch": state.epoch, "data_index": state.index,
                               "prompts": prompt_idx}

        exp = self.make_experience([self.prompts[i] for i in prompt_idx], step, timer, row)
        if exp is not None:
            row.update(self.train_on(exp, step, timer))
        state.samples_seen += cfg.rollout_batch_size * cfg.n_samples_per_prompt
        state.skipped_batches = self.skips.total
        row["skipped"] = exp is None
        row["skipped_batches"] = self.skips.total
        row["actor_restarts"] = self.actor_restarts
        for p in PHASES:
            row[f"time/{p}"] = round(timer.times.get(p, 0.0), 4)
        row["time/total"] = round(time.perf_counter() - t0, 4)
        return row

    # ------------------------------------------------------------------ experience
    def make_experience(self, prompts: list[QAItem], step: int, timer: PhaseTimer,
                        row: dict[str, Any]) -> Optional[dict[str, torch.Tensor]]:
        """Rollout -> rewards -> forwards -> shaped rewards -> advantages. None when the batch is skipped."""
        from actors import calls
        from actors.rollout import generate_on_engines
        from actors.types import make_batch
        from core import core_algos as algo
        from core.prompts import prompt_mode_for, render_prompt, resolve_system
        cfg, g = self.cfg, self.groups
        n = cfg.n_samples_per_prompt
        system = resolve_system(cfg.system_prompt)
        modes = [prompt_mode_for(p.question, cfg.prompt_mode, cfg.evidence_share) for p in prompts]

        # 1. rollout: n samples per prompt, prompt-major
        with timer("generate"):
            texts = [render_prompt(self.tokenizer, p.question, p.knowledge_text, m, system=system)
                     for p, m in zip(prompts, modes)]
            samples = generate_on_engines(g.rollout, texts, n, cfg.generate_max_len, cfg.temperature, cfg.top_p,
                                          seed=cfg.seed * 100_003 + step, timeout=calls.timeout_s(cfg))
            samples, injected = inject_abstentions(samples, n, cfg.abstain_samples, self.abstain_ids,
                                                   self.tokenizer)
            batch = make_batch(samples, self.pad_id)
        mask = batch["action_mask"]
        n_tokens = int(mask.sum())
        row["rollout_digest"] = hashlib.sha1(batch["sequences"].numpy().tobytes()).hexdigest()[:16]
        row["rollout_tokens"] = n_tokens
        row["rollout_tokens_per_s"] = n_tokens / max(timer.times["generate"], 1e-9)
        row["response_length"] = n_tokens / len(samples)
        row["truncated_rate"] = sum(s.finish_reason == "length" for s in samples) / len(samples)

        # 2. rewards: token rewards aligned by the engines' own character offsets
        with timer("reward"):
            results = fetch_rewards(self.reward_fn, reward_items(samples, prompts), self.skips)
        if results is None:
            return None
        token_rewards, label_signs = rewards_to_tensors(results, mask)
        scores = torch.tensor([float(r.score) for r in results])
        is_correct = torch.tensor([bool(r.is_correct) for r in results])
        abstained = torch.tensor([bool(r.abstained) for r in results])
        sampled = ~injected  # the model's own answers (rates below describe the policy, not the candidates)
        mix, n_statements = label_mix(results)
        row.update({"score_mean": float(scores[sampled].mean()),
                    "correct_rate": float(is_correct[sampled].float().mean()),
                    "abstain_rate": float(abstained[sampled].float().mean()),
                    "injected_abstentions": int(injected.sum()),
                    "statements_per_response": n_statements / max(1, int(sampled.sum())),
                    "cached_rate": sum(bool(getattr(r, "cached", False)) for r in results) / len(results),
                    **{f"label_share/{k}": v for k, v in mix.items()}})
        if cfg.prompt_mode == "mixed":  # the two halves learn different things: show them apart
            for m in ("closed", "evidence"):
                sel = torch.tensor([modes[s.prompt_index] == m for s in samples]) & sampled
                if bool(sel.any()):
                    row[f"score_mean/{m}"] = float(scores[sel].mean())
                    row[f"correct_rate/{m}"] = float(is_correct[sel].float().mean())
                    row[f"abstain_rate/{m}"] = float(abstained[sel].float().mean())
        if cfg.log_samples:
            self._log_samples(step, prompts, modes, samples, results, injected)
        caution = algo.caution_rewards(is_correct, abstained, n) if cfg.caution_reward else None
        outcome = None
        if cfg.outcome_reward == "ternary":  # right > abstain > wrong, on each response's last token
            o_correct, o_abst = ((is_correct, abstained) if cfg.outcome_judge == "verifier"
                                 else gold_outcomes(samples, prompts, is_correct, abstained))
            row["gold_correct_rate"] = float(o_correct[sampled].float().mean())
            row["gold_abstain_rate"] = float(o_abst[sampled].float().mean())
            if cfg.prompt_mode == "mixed":
                for m in ("closed", "evidence"):
                    sel = torch.tensor([modes[s.prompt_index] == m for s in samples]) & sampled
                    if bool(sel.any()):
                        row[f"gold_correct_rate/{m}"] = float(o_correct[sel].float().mean())
                        row[f"gold_abstain_rate/{m}"] = float(o_abst[sel].float().mean())
            closed = torch.tensor([modes[s.prompt_index] == "closed" for s in samples])   # [N] no passage
            self._rollout_rates_by_type(row, prompts, samples, o_correct, o_abst,
                                        sampled & closed if bool(closed.any()) else sampled)
            abstain_value: float | torch.Tensor = self._abstain_price(row, o_correct, o_abst, sampled, closed)
            if cfg.outcome_abstain_evidence is not None:  # per prompt mode: evidence prompts get their own price
                abstain_value = torch.where(~closed, cfg.outcome_abstain_evidence, abstain_value)
            outcome = algo.ternary_outcome_rewards(o_correct, o_abst, cfg.outcome_correct, abstain_value,
                                                   cfg.outcome_wrong)

        # 3. forwards: reference log-probs, values, old log-probs; different actors, so they run concurrently.
        # With one policy update per rollout and no KL term the old log-probs are the very log-probs the
        # update computes (same weights), so that forward is skipped and the update uses its own, detached.
        # Concurrent actors split the CPU threads (``share``; CPU_THREADS).
        want = [p for p, on in (("policy_forward", not self.reuses_train_logprobs),
                                ("reference", g.reference is not None), ("critic", g.critic is not None)) if on]
        share = max(1, len(want))
        launched = {}
        if "policy_forward" in want:
            launched["policy_forward"] = g.policy.dispatch_async("logprobs", batch, share=share)
        if "reference" in want:
            launched["reference"] = g.reference.dispatch_async("logprobs", batch, share=share)
        if "critic" in want:
            launched["critic"] = g.critic.dispatch_async("values", batch, share=share)
        fwd = _gather_timed(launched, timer, calls.timeout_s(cfg), serial=getattr(g, "layout", "") == "colocated")
        old_logprobs, ref_logprobs, values = fwd.get("policy_forward"), fwd.get("reference"), fwd.get("critic")

        # 4. the reward the policy trains on, composed in one pure function: verifier token rewards x
        # TOKEN_REWARD_WEIGHT (or the caution reward), + the outcome reward on the last token, - KL_COEF * KL_t
        # (REWARD_CLIP was applied where the token rewards were made, by the reward service; not again here)
        kl = None
        if g.reference is not None:
            kl = algo.kl_penalty(old_logprobs, ref_logprobs, cfg.kl_estimator)
            kl = torch.where(mask, kl, torch.zeros(()))
        rewards, reward_totals = algo.compose_rewards(token_rewards, mask, token_weight=cfg.token_reward_weight,
                                                      caution=caution, outcome=outcome, kl=kl,
                                                      kl_coef=cfg.kl_coef)
        if kl is None:
            kl = torch.zeros(mask.shape, dtype=torch.float32)
        row["reward_mean"] = float(reward_totals[sampled].mean())
        # the policy's own samples only: their mean log-ratio estimates KL(policy || reference); an injected
        # "I don't know." was not sampled from the policy, and once RL makes declining less likely than the
        # reference does its log-ratio is negative (W40's curve went below 0 from step 2), so it is logged apart
        row["kl"] = _masked_mean(kl, mask & sampled[:, None])
        if bool(injected.any()):
            row["kl_injected"] = _masked_mean(kl, mask & injected[:, None])
        row["return_mean"] = float(rewards.sum(dim=1).mean())

        # 5. optional: drop prompts whose samples all scored alike (no learning signal)
        keep = algo.filter_by_outcome_variance(reward_totals, n, cfg.filter_variance)
        row["kept_fraction"] = float(keep.float().mean())
        if not bool(keep.any()):
            log.info("step %d: every prompt filtered out by FILTER_VARIANCE=%g; nothing to train on",
                     step, cfg.filter_variance)
            metrics.inc("rlfh_skipped_batches_total", 1, {"reason": "filtered"})
            return {}
        if not bool(keep.all()):
            batch = {k: v[keep] for k, v in batch.items()}
            rewards, mask, label_signs = rewards[keep], mask[keep], label_signs[keep]
            old_logprobs = old_logprobs[keep] if old_logprobs is not None else None
            values = values[keep] if values is not None else None

        # 6. advantages (GAE with the critic, or a group estimator), optional FSPO sign flip
        advantages, returns = algo.compute_advantages(
            cfg.advantage_estimator, rewards, mask, values=values, n_samples_per_prompt=n, gamma=cfg.gamma,
            lambd=cfg.lambd)
        if cfg.advantage_whiten and cfg.advantage_estimator == "gae":   # the peers' default; off unless asked
            advantages = algo.masked_whiten(advantages, mask)
        if cfg.fspo:
            advantages = algo.fspo_flip(advantages, label_signs)
        row["advantage_mean"] = _masked_mean(advantages, mask)
        row["advantage_abs_mean"] = _masked_mean(advantages.abs(), mask)

        exp = dict(batch, advantages=advantages, returns=returns)
        if old_logprobs is not None:
            exp["old_logprobs"] = old_logprobs
        if values is not None:
            exp["old_values"] = values
        return exp

    # ------------------------------------------------------------------ training
    def train_on(self, exp: dict[str, torch.Tensor], step: int, timer: PhaseTimer) -> dict[str, Any]:
        """PPO epochs on the critic (always) and the policy (after FREEZING_ACTOR_STEPS), then weight sync."""
        from actors import calls
        from actors.types import group_permutation
        from actors.weight_sync import sync_weights
        cfg, g = self.cfg, self.groups
        out: dict[str, Any] = {}
        if not exp:  # every prompt filtered out
            return out
        base = ("sequences", "attention_mask", "action_mask")
        policy_keys = base + ("old_logprobs", "advantages")
        critic_keys = base + ("old_values", "returns")
        train_policy = step > cfg.freezing_actor_steps
        gen = torch.Generator().manual_seed(cfg.seed * 7_919 + step)
        policy_stats, critic_stats = [], []
        with timer("train"):
            for epoch in range(cfg.max_epochs):
                B = exp["sequences"].shape[0]
                # later epochs shuffle whole prompt groups: micro batches keep running each prompt once
                perm = group_permutation(exp, gen) if epoch > 0 else torch.arange(B)
                # the critic and the policy are different actors: train them concurrently
                share = int(g.critic is not None) + int(train_policy)   # concurrent actors split the threads
                crefs = (g.critic.dispatch_async("train_step", {k: exp[k][perm] for k in critic_keys}, share=share)
                         if g.critic is not None else [])
                prefs = (g.policy.dispatch_async("train_step", {k: exp[k][perm] for k in policy_keys if k in exp},
                                                 share=share)
                         if train_policy else [])
                critic_stats += calls.get(crefs, "critic.train_step", calls.timeout_s(cfg))
                policy_stats += calls.get(prefs, "policy.train_step", calls.timeout_s(cfg))
        out.update({f"policy/{k}": v for k, v in _mean_dicts(policy_stats).items()})
        out.update({f"critic/{k}": v for k, v in _mean_dicts(critic_stats).items()})
        out["policy_trained"] = train_policy
        if train_policy:
            with timer("sync"):
                out["weights_version"] = int(sync_weights(g.policy, g.rollout))
        return out

    # ------------------------------------------------------------------ logging
    def _log_samples(self, step: int, prompts, modes, samples, results, injected) -> None:
        """Append the step's first LOG_SAMPLES sampled responses (spread over prompts) to samples.jsonl."""
        own = [i for i in range(len(samples)) if not bool(injected[i])]
        stride = max(1, len(own) // max(1, self.cfg.log_samples))
        with open(self.save_path / "samples.jsonl", "a", encoding="utf-8") as fh:
            for i in own[::stride][: self.cfg.log_samples]:
                s, r = samples[i], results[i]
                p = prompts[s.prompt_index]
                fh.write(json.dumps({"step": step, "question": p.question, "mode": modes[s.prompt_index],
                                     "gold": p.right_answer, "response": s.response_text,
                                     "score": round(float(r.score), 4), "abstained": bool(r.abstained),
                                     "labels": dict(r.label_counts)}) + "\n")

    def _log(self, row: dict[str, Any]) -> None:
        self.history.append(row)
        with open(self.metrics_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        step = row["step"]
        metrics.set_gauge("rlfh_train_step", step)
        for p in PHASES + ("total",):
            metrics.set_gauge("rlfh_step_time_seconds", row.get(f"time/{p}", 0.0), {"phase": p})
        if not row.get("skipped"):
            metrics.set_gauge("rlfh_train_kl", row.get("kl", 0.0))
            metrics.set_gauge("rlfh_train_response_length", row.get("response_length", 0.0))
            metrics.set_gauge("rlfh_rollout_tokens_per_second", row.get("rollout_tokens_per_s", 0.0))
            metrics.set_gauge("rlfh_reward_mean", row.get("reward_mean", 0.0), {"source": "train"})
            for k, v in row.items():
                if k.startswith("label_share/"):
                    metrics.set_gauge("rlfh_label_share", v, {"label": k.split("/", 1)[1], "source": "train"})
            if "policy/policy_loss" in row:
                metrics.set_gauge("rlfh_train_policy_loss", row["policy/policy_loss"])
            if "critic/value_loss" in row:
                metrics.set_gauge("rlfh_train_value_loss", row["critic/value_loss"])
        if self._tb is not None and step % self.cfg.logging_steps == 0:
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step":
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if step % self.cfg.logging_steps == 0:
            log.debug("step %d: %s", step, {k: v for k, v in row.items() if k != "prompts"})

    def _postfix(self, row: dict[str, Any]) -> str:
        if row.get("skipped"):
            return f"SKIPPED (reward service down) skipped={self.skips.total}"
        parts = [f"reward={row.get('reward_mean', 0.0):+.3f}", f"kl={row.get('kl', 0.0):.4f}",
                 f"len={row.get('response_length', 0.0):.0f}"]
        mix = {k.split('/', 1)[1]: v for k, v in row.items() if k.startswith("label_share/")}
        if mix:
            parts.append(format_mix(mix))
        parts.append(f"{row.get('time/total', 0.0):.0f}s/step")
        if self.skips.total:
            parts.append(f"skipped={self.skips.total}")
        return " ".join(parts)

    # ------------------------------------------------------------------ saving
    def save(self) -> str:
        """Checkpoint now (policy + critic HF folders, optimizer state, data position, RNG, config)."""
        self.state.skipped_batches = self.skips.total
        path = save_checkpoint(self.cfg.effective_ckpt_path, self.state, self.groups, self.cfg, self.cfg.max_ckpt_num)
        self.last_checkpoint = str(path)
        self._saved_step = self.state.step
        self.recovery.budget.checkpoint_written()
        return self.last_checkpoint

    def snapshot(self) -> str:
        """SAVE_PATH/snapshots/step_N: the policy's HF folder now (weights only; `rlfh select` candidates)."""
        out = self.save_path / "snapshots" / f"step_{self.state.step:05d}"
        _replace_dir(out, out.with_name(out.name + ".tmp"), lambda tmp: self.groups.policy.run("save_hf", str(tmp)))
        log.info("snapshot of the policy at step %d: %s", self.state.step, out)
        return str(out)

    def _abstain_price(self, row: dict[str, Any], correct: torch.Tensor, abstained: torch.Tensor,
                       sampled: torch.Tensor, closed: torch.Tensor) -> float:
        """This step's abstention reward: OUTCOME_ABSTAIN; with ABSTAIN_PRICE=answer-mean the mean outcome of
        this step's closed-book answers (+ margin); with ABSTAIN_TARGET_RATE the adaptive price -- or, with
        answer-mean, the adaptive margin -- kept in the trainer state (a resumed run goes on with it) and moved
        after use by this step's closed-book abstention rate. ``closed``: ``[N]`` bool, the sample's prompt has no
        passage."""
        cfg = self.cfg
        if cfg.abstain_price == "fixed" and cfg.abstain_target_rate is None:
            return cfg.outcome_abstain
        from core import core_algos as algo
        sel = closed & sampled if bool((closed & sampled).any()) else sampled
        margin = 0.05 * (cfg.outcome_correct - cfg.outcome_wrong)   # strictly between wrong and correct
        low, high = cfg.outcome_wrong + margin, cfg.outcome_correct - margin
        rate = float(abstained[sel].float().mean())
        if cfg.abstain_price == "answer-mean":
            offset = cfg.abstain_price_margin
            if cfg.abstain_target_rate is not None:   # the controller moves the margin; the mean moves with the batch
                offset = float(self.state.extra.get("abstain_margin", cfg.abstain_price_margin))
                span = cfg.outcome_correct - cfg.outcome_wrong
                self.state.extra["abstain_margin"] = algo.adapt_abstain_price(
                    offset, rate, cfg.abstain_target_rate, cfg.abstain_price_step, -span, span)
                row["abstain_margin"] = offset
            answered = sel & ~abstained
            rewards = torch.where(correct[answered], cfg.outcome_correct, cfg.outcome_wrong)
            row["abstain_price"] = algo.answer_mean_abstain_price(rewards, offset, low, high)
            return row["abstain_price"]
        price = float(self.state.extra.get("abstain_price", cfg.outcome_abstain))
        self.state.extra["abstain_price"] = algo.adapt_abstain_price(
            price, rate, cfg.abstain_target_rate, cfg.abstain_price_step, low, high)
        row["abstain_price"] = price
        return price

    @staticmethod
    def _rollout_rates_by_type(row: dict[str, Any], prompts: list, samples: list, correct: torch.Tensor,
                               abstained: torch.Tensor, counted: torch.Tensor) -> None:
        """Gold correct / abstain rates of the policy's own closed-book samples per question type (yes/no, choice,
        open): the quantities an abstention recipe should move apart (``rollout/abstain/TYPE``,
        ``rollout/correct/TYPE``). Closed book only: with the passage an open question is often answerable, and
        mixing the two hid how rarely the model knows an open answer by itself. ``counted``: ``[N]`` bool, the
        policy's own closed-book samples (every own sample when no prompt is closed book)."""
        from core.questions import question_type
        types = [question_type(prompts[s.prompt_index].question) for s in samples]
        for t in ("yes_no", "choice", "open"):
            sel = torch.tensor([x == t for x in types]) & counted
            if bool(sel.any()):
                row[f"rollout/abstain/{t}"] = float(abstained[sel].float().mean())
                row[f"rollout/correct/{t}"] = float(correct[sel].float().mean())

    # ------------------------------------------------------------------ in-loop dev evaluation
    def _evaluate_dev(self) -> dict[str, Any]:
        """Greedy answers of the current policy to the dev set (DEV_EVAL_*); snapshots the best for FINAL_MODEL."""
        step = self.state.step
        dev, graded = self.dev_eval.run(self.groups.rollout, step)
        if self.cfg.final_model == "best" and self.dev_eval.best_step == step:
            out = self.save_path / "snapshots" / "best"
            _replace_dir(out, out.with_name("best.tmp"), lambda tmp: self.groups.policy.run("save_hf", str(tmp)))
            (out / "dev_eval.json").write_text(json.dumps({"step": step, **dev}, indent=1))
        with open(self.save_path / "dev_answers.jsonl", "a", encoding="utf-8") as fh:
            for a in graded:
                fh.write(json.dumps({"step": step, **a.__dict__}, ensure_ascii=False) + "\n")
        return dev

    def _log_dev(self, dev: dict[str, Any]) -> None:
        """SAVE_PATH/dev_eval.jsonl (one record per evaluation), TensorBoard and the dashboard's gauges."""
        step = self.state.step
        with open(self.save_path / "dev_eval.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, **dev}) + "\n")
        for k, v in dev.items():
            if k.startswith("dev/") and "/" in k[4:]:
                mode, _, rest = k[4:].partition("/")
                metrics.set_gauge("rlfh_dev_eval", v, {"mode": mode, "metric": rest})
        if self._tb is not None:
            for k, v in dev.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def _export_final(self) -> str:
        """SAVE_PATH/final: the policy's HF folder of the last checkpoint (hard links when possible), or with
        FINAL_MODEL=best the snapshot of the best in-loop dev evaluation."""
        out = self.save_path / "final"
        src = Path(self.last_checkpoint) / "policy_hf" if self.last_checkpoint else None
        best = self.save_path / "snapshots" / "best"
        if self.cfg.final_model == "best" and (best / "config.json").is_file():
            log.info("FINAL_MODEL=best: the final model is the policy of step %s (best dev score %.3f)",
                     self.dev_eval.best_step if self.dev_eval else "?",
                     self.dev_eval.best_score if self.dev_eval and self.dev_eval.best_score is not None
                     else float("nan"))
            src = best

        def write(tmp: Path) -> None:
            if src is not None and src.is_dir():
                shutil.copytree(src, tmp, copy_function=_link_or_copy)
            else:
                self.groups.policy.run("save_hf", str(tmp))
        _replace_dir(out, self.save_path / ".final.tmp", write)
        log.info("final policy (HF format) at %s", out)
        return str(out)

    def _report(self, completed: bool, model_dir: Optional[str], ran: int, wall: float) -> TrainResult:
        rows = read_metrics(self.metrics_path) or self.history
        dev_rows = read_dev(self.save_path) if self.cfg.dev_eval_step else []
        png = plot_curves(rows, self.save_path / "training_curves.png", dev_rows)
        result = TrainResult(completed=completed, state=self.state, history=rows, model_dir=model_dir,
                             checkpoint=self.last_checkpoint, wall_time_s=self.state.wall_time_s,
                             curves_png=str(png) if png else None,
                             dashboard_url=self.ray.dashboard_url if self.ray else None,
                             resumed_from=self.resumed_from, steps_this_run=ran)
        if self.show_progress:
            print_summary(rows, {
                "steps": self.state.step, "wall_time_s": self.state.wall_time_s,
                "run_time_s": time.time() - self._t_created,
                "skipped_batches": self.skips.total, "model_dir": model_dir, "checkpoint": self.last_checkpoint,
                "dev_rows": dev_rows,
                "metrics_path": str(self.metrics_path),
                "tensorboard_dir": str(self.save_path / "tensorboard") if self.cfg.use_tensorboard else None,
                "curves_png": result.curves_png, "dashboard_url": result.dashboard_url})
        return result

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._service_reward is not None:
            self._service_reward.close()
        if self._own_groups and self.groups is not None:
            try:
                self.groups.shutdown()
            except Exception as e:  # pragma: no cover - best effort at exit
                log.warning("shutting the actor groups down failed: %s", e)
            self.groups = None
        if self._deployed_service:
            from reward_service.app import shutdown
            shutdown()
            self._deployed_service = False
        if self.ray is not None:
            self.ray.shutdown()
            self.ray = None

    def __enter__(self) -> "Trainer":
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.close()


#: Settings the colocated layout (every role in one process on one node) has no use for.
COLOCATED_IGNORES = ("vllm_num_engines", "vllm_tensor_parallel_size", "colocate_actor_ref", "colocate_all_models",
                     "critic_num_nodes", "critic_num_gpus_per_node", "ref_num_nodes", "ref_num_gpus_per_node")


def ignored_by_layout(cfg: RLFHConfig, layout: str) -> list[str]:
    """The settings in :data:`COLOCATED_IGNORES` that differ from their defaults when ``layout`` is colocated
    (the user set them, and they will do nothing); [] for other layouts."""
    if layout != "colocated":
        return []
    fields = type(cfg).model_fields
    return [n for n in COLOCATED_IGNORES if n in fields and getattr(cfg, n) != fields[n].default]


def train(cfg: RLFHConfig, reward_fn: Optional[Callable] = None, groups=None, **kwargs) -> TrainResult:
    """Set up, train to the end (or Ctrl-C), save, print the summary, tear down."""
    with Trainer(cfg, reward_fn=reward_fn, groups=groups, **kwargs) as trainer:
        return trainer.fit()


def _link_or_copy(src: str, dst: str) -> None:
    """copytree's copy function: a hard link (no extra disk for a 0.5 GB model) where the filesystem allows."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _replace_dir(out: Path, tmp: Path, write) -> None:
    """Write a folder through ``write(tmp)`` and move it to ``out`` in one rename, so a reader (or a run killed
    mid-write) never sees a half-written model folder."""
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    write(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
