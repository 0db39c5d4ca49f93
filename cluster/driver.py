"""The single-controller PPO driver: one Python process orchestrates every Ray actor group.

One PPO step (:meth:`Trainer.step`) calls the named parts of :mod:`cluster.experience_maker` and
:mod:`cluster.ppo_update` in order::

    generate   prompts (question, passage, gold answer) -> n samples per prompt      Rollout
    score      the reward function (default: the reward service over HTTP)          Scores [N, R]
               token rewards aligned by the engines' own character offsets
    judge      OUTCOME_REWARD=ternary: right / declined / wrong, the abstention price  Outcomes
    forward    old log-probs, reference log-probs, values (concurrent actors)       Forwards [N, R]
    compose    r_t = token reward + outcome on the last token - KL_COEF * KL_t      Rewards [N, R]
    estimate   [outcome-variance filter] advantages (GAE / group) [FSPO flip]       Experience [B, R]
    update     PPO epochs: critic (always), policy (after FREEZING_ACTOR_STEPS)     UpdateResult
    sync       policy weights -> rollout engines, when the update trained the policy

The parts' records decide what happens next; the step's metrics record is made from them (:mod:`cluster.step_metrics`)
and goes to metrics.jsonl (:mod:`cluster.run_log`), with a checkpoint every SAVE_STEP. The math is
:mod:`core.core_algos`' and the abstention policy :mod:`core.abstention`'s. The reward function is pluggable
(``Trainer(cfg, reward_fn=...)``): the reward service is the default (:mod:`cluster.services`); tests plug in an
in-process one (``tests/doubles.py``).

A batch whose rewards cannot be had (the reward service is down after the client's bounded retries) is skipped
and counted, never trained on as zero reward; after :data:`MAX_CONSECUTIVE_SKIPS` in a row the run saves a
checkpoint and stops with a clear error.

An actor that dies or hangs does not stop or hang the run: the actor groups are restarted from the last
checkpoint and the steps after it are redone, at most ``MAX_ACTOR_RESTARTS`` times between two checkpoints
(past that the run stops with :class:`ActorGroupsFailed`). How the failed actor is named, the restart and the
log rewind are :mod:`cluster.recovery`'s; the loop only hands the failure over (:meth:`Trainer._recover`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from tqdm.auto import tqdm

from actors import calls
from actors.group import create_groups
from actors.weight_sync import sync_weights
from cluster import experience_maker as maker
from cluster import step_metrics
from cluster.checkpoint import TrainerState, latest_checkpoint, load_checkpoint, save_checkpoint
from cluster.data_order import load_prompts, next_prompt_indices, plan_steps
from cluster.dev_eval import DevEvaluator
from cluster.experience import SkipCounter
from cluster.model_export import export_final, save_policy
from cluster.phase_timer import PhaseTimer
from cluster.ppo_update import sync, update
from cluster.recovery import ActorGroupsFailed, ActorRecovery
from cluster.run_log import RunLog, progress_postfix
from cluster.services import RewardSource
from cluster.setup_checks import check_abstain_text, warn_ignored_by_layout
from cluster.stop_request import StopRequest
from cluster.train_report import PHASES, plot_curves, print_summary, read_dev, read_metrics
from core.config import RLFHConfig
from core.model_loader import load_tokenizer
from core.ray_bootstrap import start_ray

log = logging.getLogger(__name__)

MAX_CONSECUTIVE_SKIPS = 5
__all__ = ["Trainer", "TrainResult", "train", "PHASES", "ActorGroupsFailed", "MAX_CONSECUTIVE_SKIPS"]


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
        self.reward_source = RewardSource(cfg, reward_fn)   # the reward function, and the service behind it
        self.groups = groups
        self._own_groups = groups is None
        self._ray_args = {"num_cpus": ray_num_cpus, "include_dashboard": include_dashboard}
        self.show_progress = show_progress
        self.save_path = Path(cfg.save_path)
        self.run_log = RunLog(cfg, self.save_path)
        self.skips = SkipCounter()
        self.state = TrainerState()
        self.history: list[dict] = []
        self.ray = None
        self.resumed_from: Optional[str] = None
        self.last_checkpoint: Optional[str] = None
        self._saved_step = -1
        self.dev_eval: Optional[DevEvaluator] = None   # DEV_EVAL_STEP > 0
        self.stopped_early = False                     # EARLY_STOP_PATIENCE ended the run
        self.recovery = ActorRecovery(cfg)  # actor failures: restarts from the last checkpoint (MAX_ACTOR_RESTARTS)
        self._t_created = time.time()
        self._clock = (0.0, self._t_created)   # (state.wall_time_s, time.time()) when this process took over

    # ------------------------------------------------------------------ setup
    def setup(self) -> "Trainer":
        cfg = self.cfg
        self.prompts = load_prompts(cfg)
        self.steps_per_epoch, self.total_steps = plan_steps(cfg, len(self.prompts))
        log.info("%d training prompts from %s: %d steps per epoch, %d steps planned", len(self.prompts),
                 cfg.prompt_data, self.steps_per_epoch, self.total_steps)
        self.tokenizer = load_tokenizer(cfg.model_path)
        # the abstention candidate's response tokens: the text, then the end-of-turn token the model emits
        self.abstain_ids = (self.tokenizer.encode(cfg.abstain_text, add_special_tokens=False)
                            + [int(self.tokenizer.eos_token_id)])
        self.save_path.mkdir(parents=True, exist_ok=True)
        self.ray = start_ray(cfg, **self._ray_args)
        judge_needs_engines = self.reward_source.judge_needs_engines   # VERIFIER_BACKEND=self: engines come up first
        if not judge_needs_engines:
            self.reward_source.connect()
        if self.groups is None:
            t0 = time.time()
            self.groups = create_groups(cfg)
            log.info("actor groups up in %.0fs", time.time() - t0)
        if judge_needs_engines:
            self.reward_source.connect(rollout_engines=self.groups.rollout)
        self._resume()
        warn_ignored_by_layout(cfg, getattr(self.groups, "layout", ""))
        if cfg.dev_eval_step:
            self.dev_eval = DevEvaluator(cfg, self.tokenizer)
        if self.reuses_train_logprobs:
            log.info("one policy update per rollout and no reference (KL_COEF=0): the update's own log-probs "
                     "serve as the old log-probs, so the policy forward before it is skipped")
        self.run_log.open_tensorboard(self.state.step)
        return self

    @property
    def reuses_train_logprobs(self) -> bool:
        """True when the old log-probs need no forward of their own: a single update per rollout (one epoch,
        the whole rollout in one optimizer step) leaves the policy unchanged until that update computes them,
        and without a reference nothing else (the KL term) needs them before it."""
        cfg = self.cfg
        return (self.groups is not None and self.groups.reference is None and cfg.max_epochs == 1
                and cfg.rollout_batch_size * cfg.n_samples_per_prompt <= cfg.train_batch_size)

    @property
    def actor_restarts(self) -> int:
        """Actor-group restarts in this process (all of them)."""
        return self.recovery.budget.total

    def _resume(self) -> None:
        """Continue from the latest checkpoint in CKPT_PATH (same step, same data position), if any."""
        ckpt = latest_checkpoint(self.cfg.effective_ckpt_path)
        if ckpt is None:
            self.run_log.start_fresh()   # a fresh run in an old SAVE_PATH: start new logs
            return
        self.state = load_checkpoint(ckpt, self.groups)
        self.skips.total = self.state.skipped_batches
        self.resumed_from = self.last_checkpoint = str(ckpt)
        self._saved_step = self.state.step
        sync_weights(self.groups.policy, self.groups.rollout)   # the engines generate with the restored policy
        self._rewind_logs(self.state.step)
        log.info("resuming at step %d (epoch %d, prompt %d of the shuffled order) from %s",
                 self.state.step, self.state.epoch, self.state.index, ckpt)

    def _rewind_logs(self, step: int) -> None:
        """The step logs lose the steps after ``step`` (they are redone); the history is what metrics.jsonl keeps."""
        self.history = self.run_log.rewind(step)

    def _recover(self, err: BaseException) -> None:
        """An actor died or hung: go on from the last checkpoint with new actor groups
        (:meth:`cluster.recovery.ActorRecovery.restart`), or stop with :class:`ActorGroupsFailed` once
        MAX_ACTOR_RESTARTS restarts since the last checkpoint are used up."""
        t0 = time.monotonic()
        on_new_groups = self.reward_source.on_new_groups if self.reward_source.self_judge is not None else None
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
        self.run_log.open_tensorboard(self.state.step)
        self._clock = (self.state.wall_time_s, time.time())
        log.warning("actor groups restarted in %.0fs; training goes on at step %d", time.monotonic() - t0,
                    self.state.step)

    # ------------------------------------------------------------------ the loop
    def fit(self, stop_after_s: Optional[float] = None) -> TrainResult:
        """Train to the planned step (or an early stop, or Ctrl-C), save, export the final model, report.
        ``stop_after_s``: stop as Ctrl-C does (finish the step, save) once this many seconds have passed."""
        start_step = self.state.step
        deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
        self._clock = (self.state.wall_time_s, time.time())
        stop = StopRequest()
        stop.install()
        bar = (tqdm(total=self.total_steps, initial=min(start_step, self.total_steps), desc="rlfh train",
                    unit="step", dynamic_ncols=True) if self.show_progress else None)
        completed = False
        try:
            if self.dev_eval is not None and self.state.step == 0:
                self._evaluate_dev()   # the starting point, before any update
            while (self.state.step < self.total_steps and not stop.requested
                   and (deadline is None or time.monotonic() < deadline) and self._train_one(bar)):
                pass
            completed = self.state.step >= self.total_steps or self.stopped_early
        except KeyboardInterrupt:
            log.warning("aborted by a second Ctrl-C: no checkpoint written for the current step")
            raise
        finally:
            stop.uninstall()
            if bar is not None:
                bar.close()
        self._tick_clock()
        ran = self.state.step - start_step
        if ran > 0 and self._saved_step != self.state.step:  # end of run, or Ctrl-C
            self.save()
        model_dir = (export_final(self.save_path, self.groups, self.last_checkpoint, self.cfg.final_model == "best",
                                  self.dev_eval) if completed else None)
        return self._report(completed, model_dir, ran)

    def _train_one(self, bar) -> bool:
        """One step with its dev evaluation, log line and checkpoint; an actor failure goes to recovery. Returns
        False when the run stops early."""
        cfg = self.cfg
        try:
            row = self.step()
            if self.dev_eval is not None and (self.state.step % cfg.dev_eval_step == 0
                                              or self.state.step == self.total_steps):
                row.update(self._evaluate_dev())
            self._tick_clock()
            self.history.append(row)
            self.run_log.write_row(row)
            if cfg.save_step and self.state.step % cfg.save_step == 0:
                self.save()
            if cfg.snapshot_step and self.state.step % cfg.snapshot_step == 0:
                self.snapshot()
        except Exception as e:
            if not calls.is_actor_failure(e):
                raise
            self._recover(e)    # back to the last checkpoint with new actors, or ActorGroupsFailed
            if bar is not None:
                bar.n = min(self.state.step, self.total_steps)
                bar.refresh()
            return True
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(progress_postfix(row, self.skips.total), refresh=True)
        if self.dev_eval is not None and self.dev_eval.should_stop():
            log.warning(self.dev_eval.stop_message(self.state.step))
            self.stopped_early = True
            return False
        if self.skips.consecutive >= MAX_CONSECUTIVE_SKIPS:
            self.save()
            raise RuntimeError(
                f"{self.skips.consecutive} batches in a row skipped: the reward service is unavailable "
                f"({self.skips.last_error}). Checkpoint saved at step {self.state.step}; fix the service "
                "(REWARD_URL / `rlfh serve`) and rerun to resume.")
        return True

    def step(self) -> dict[str, Any]:
        """One PPO step on the next batch of prompts: generate, score, compose, estimate advantages, update, sync.
        Each part returns a typed record, and what happens next is decided from the records; the metrics record
        is made from them (:mod:`cluster.step_metrics`), returned and only written."""
        cfg, g, state = self.cfg, self.groups, self.state
        prompt_idx = next_prompt_indices(state, len(self.prompts), cfg.rollout_batch_size, cfg.seed)
        state.step += 1
        step, timer, t0 = state.step, PhaseTimer(), time.perf_counter()
        row: dict[str, Any] = {"step": step, "epoch": state.epoch, "data_index": state.index, "prompts": prompt_idx}
        by_mode = cfg.prompt_mode == "mixed"   # the two halves learn different things: show them apart

        with timer("generate"):
            rollout = maker.generate(cfg, g.rollout, self.tokenizer, [self.prompts[i] for i in prompt_idx], step,
                                     self.abstain_ids)
        row.update(step_metrics.rollout_metrics(rollout, timer.times["generate"]))
        with timer("reward"):
            scores = maker.score(self.reward_source.reward_fn, rollout, self.skips)
        if scores is not None:
            row.update(step_metrics.score_metrics(rollout, scores, by_mode))
            if cfg.log_samples:
                self.run_log.write_samples(step, rollout, scores)
            outcomes = maker.judge_outcomes(cfg, rollout, scores, state.abstain_control)
            if outcomes is not None:
                state.abstain_control = outcomes.price.carried   # the abstention price controller (resumable)
                row.update(step_metrics.outcome_metrics(rollout, outcomes, by_mode))
            fwd = maker.forward(g, rollout.batch, timer, calls.timeout_s(cfg),
                                need_old_logprobs=not self.reuses_train_logprobs)
            rewards = maker.compose(cfg, rollout, scores, outcomes, fwd)
            row.update(step_metrics.reward_metrics(rollout, rewards))
            keep = maker.keep_mask(cfg, rewards)   # FILTER_VARIANCE: prompts whose samples all scored alike go
            row["kept_fraction"] = float(keep.float().mean())
            exp = maker.estimate_advantages(cfg, rollout, scores, fwd, rewards, keep, step)
            if exp is not None:
                row.update(step_metrics.advantage_metrics(exp))
                result = update(cfg, g, exp, step, timer)
                row.update(step_metrics.update_metrics(result))
                if result.policy_trained:
                    row["weights_version"] = sync(g, timer)

        state.samples_seen += cfg.rollout_batch_size * cfg.n_samples_per_prompt
        state.skipped_batches = self.skips.total
        row.update({"skipped": scores is None, "skipped_batches": self.skips.total,
                    "actor_restarts": self.actor_restarts})
        row.update({f"time/{p}": round(timer.times.get(p, 0.0), 4) for p in PHASES})
        row["time/total"] = round(time.perf_counter() - t0, 4)
        return row

    def _tick_clock(self) -> None:
        """The run's wall time so far (over every process that ran it) into the state."""
        base, since = self._clock
        self.state.wall_time_s = base + time.time() - since

    def _evaluate_dev(self) -> dict[str, Any]:
        """The in-loop dev evaluation of the current policy (:meth:`DevEvaluator.evaluate`), logged."""
        dev = self.dev_eval.evaluate(self.groups, self.state.step, self.save_path)
        self.run_log.write_dev(self.state.step, dev)
        return dev

    # ------------------------------------------------------------------ saving, the report, teardown
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
        out = save_policy(self.groups, self.save_path / "snapshots" / f"step_{self.state.step:05d}")
        log.info("snapshot of the policy at step %d: %s", self.state.step, out)
        return str(out)

    def _report(self, completed: bool, model_dir: Optional[str], ran: int) -> TrainResult:
        rows = read_metrics(self.run_log.metrics_path) or self.history
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
                "dev_rows": dev_rows, "metrics_path": str(self.run_log.metrics_path),
                "tensorboard_dir": str(self.save_path / "tensorboard") if self.cfg.use_tensorboard else None,
                "curves_png": result.curves_png, "dashboard_url": result.dashboard_url})
        return result

    def close(self) -> None:
        self.run_log.close()
        self.reward_source.close_client()
        if self._own_groups and self.groups is not None:
            try:
                self.groups.shutdown()
            except Exception as e:  # pragma: no cover - best effort at exit
                log.warning("shutting the actor groups down failed: %s", e)
            self.groups = None
        self.reward_source.shutdown_service()
        if self.ray is not None:
            self.ray.shutdown()
            self.ray = None

    def __enter__(self) -> "Trainer":
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.close()


def train(cfg: RLFHConfig, reward_fn: Optional[Callable] = None, groups=None, **kwargs) -> TrainResult:
    """Set up, train to the end (or Ctrl-C), save, print the summary, tear down."""
    with Trainer(cfg, reward_fn=reward_fn, groups=groups, **kwargs) as trainer:
        return trainer.fit()
