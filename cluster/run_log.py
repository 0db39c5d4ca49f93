"""What a run writes as it goes, under SAVE_PATH: metrics.jsonl (one record per step), samples.jsonl (a few
sampled responses per step), dev_eval.jsonl (one record per in-loop dev evaluation), TensorBoard events and the
dashboard's gauges.

When steps are redone (after an actor-group restart, or a resume from a checkpoint) the lines of the steps after
the checkpoint go first (:meth:`RunLog.rewind`), so each file holds every step once.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster.recovery import rewind_jsonl, set_aside_old_logs
from cluster.samples_log import sample_record
from cluster.train_report import PHASES, format_mix
from core import metrics
from core.config import RLFHConfig

if TYPE_CHECKING:
    from cluster.experience_maker import Rollout, Scores

log = logging.getLogger(__name__)


class RunLog:
    """The run's logs under ``save_path`` (SAVE_PATH)."""

    def __init__(self, cfg: RLFHConfig, save_path: Path):
        self.cfg = cfg
        self.save_path = Path(save_path)
        self.metrics_path = self.save_path / "metrics.jsonl"
        self.samples_path = self.save_path / "samples.jsonl"
        self._tb = None

    @property
    def step_logs(self) -> tuple[Path, Path]:
        """The logs with one line per step (or per sample of a step): rewound when steps are redone."""
        return self.metrics_path, self.samples_path

    def start_fresh(self) -> None:
        """A fresh run in an old SAVE_PATH: the old step logs are renamed aside and new ones start."""
        set_aside_old_logs(self.step_logs)

    def rewind(self, step: int) -> list[dict]:
        """Drop the lines of the steps after ``step`` from the step logs (those steps are redone); returns the
        records metrics.jsonl keeps, by step (:func:`cluster.recovery.rewind_jsonl`)."""
        metrics_log, *others = self.step_logs
        history = sorted(rewind_jsonl(metrics_log, step), key=lambda r: r.get("step", 0))
        for path in others:
            rewind_jsonl(path, step)
        return history

    def open_tensorboard(self, step: int) -> None:
        """TensorBoard writer (USE_TENSORBOARD); events of the steps after ``step`` are purged (they are redone)."""
        if not self.cfg.use_tensorboard:
            return
        # slow to import (it loads protobuf and TensorBoard's TensorFlow stub): only when the run writes events
        from torch.utils.tensorboard import SummaryWriter
        self.close()
        self._tb = SummaryWriter(str(self.save_path / "tensorboard"), purge_step=step + 1 if step else None)

    def write_row(self, row: dict[str, Any]) -> None:
        """One step's record: metrics.jsonl, the dashboard's gauges, TensorBoard every LOGGING_STEPS steps."""
        with open(self.metrics_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        step = row["step"]
        set_step_gauges(row)
        if self._tb is not None and step % self.cfg.logging_steps == 0:
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step":
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if step % self.cfg.logging_steps == 0:
            log.debug("step %d: %s", step, {k: v for k, v in row.items() if k != "prompts"})

    def write_samples(self, step: int, rollout: "Rollout", scores: "Scores") -> None:
        """The step's first LOG_SAMPLES sampled responses (spread over prompts) to samples.jsonl, with their tokens'
        rewards and the verifier's statements (:func:`cluster.samples_log.sample_record`; `rlfh show` renders them)."""
        own = [i for i in range(len(rollout.samples)) if not bool(rollout.injected[i])]
        stride = max(1, len(own) // max(1, self.cfg.log_samples))
        with open(self.samples_path, "a", encoding="utf-8") as fh:
            for i in own[::stride][: self.cfg.log_samples]:
                s = rollout.samples[i]
                fh.write(json.dumps(sample_record(step, rollout.prompts[s.prompt_index],
                                                  rollout.modes[s.prompt_index], s, scores.results[i])) + "\n")

    def write_dev(self, step: int, dev: dict[str, Any]) -> None:
        """One in-loop dev evaluation: dev_eval.jsonl, TensorBoard and the dashboard's gauges."""
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

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def set_step_gauges(row: dict[str, Any]) -> None:
    """The dashboard's gauges of one step's record (Ray / Prometheus)."""
    metrics.set_gauge("rlfh_train_step", row["step"])
    for p in PHASES + ("total",):
        metrics.set_gauge("rlfh_step_time_seconds", row.get(f"time/{p}", 0.0), {"phase": p})
    if row.get("skipped"):
        return
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


def progress_postfix(row: dict[str, Any], skipped_total: int) -> str:
    """The progress bar's text after a step: reward, KL, length, label mix, seconds per step, skipped batches."""
    if row.get("skipped"):
        return f"SKIPPED (reward service down) skipped={skipped_total}"
    parts = [f"reward={row.get('reward_mean', 0.0):+.3f}", f"kl={row.get('kl', 0.0):.4f}",
             f"len={row.get('response_length', 0.0):.0f}"]
    mix = {k.split('/', 1)[1]: v for k, v in row.items() if k.startswith("label_share/")}
    if mix:
        parts.append(format_mix(mix))
    parts.append(f"{row.get('time/total', 0.0):.0f}s/step")
    if skipped_total:
        parts.append(f"skipped={skipped_total}")
    return " ".join(parts)
