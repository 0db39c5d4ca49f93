"""Training checkpoints: save atomically, rotate, find the latest, resume.

Layout under ``CKPT_PATH`` (default ``SAVE_PATH/checkpoints``)::

    global_step_00012/
        policy_hf/            HF folder of the policy (safetensors + config + tokenizer), loadable anywhere
        critic_hf/            HF backbone + value_head.safetensors (GAE runs only)
        state/policy/...      DeepSpeed checkpoint: weights + optimizer state + engine counters
        state/critic/...      (GAE runs only)
        trainer_state.json    step, data position (epoch, index into the epoch's shuffled order), counters, the
                              abstention controller's values (TrainerState.to_dict)
        rng_state.pt          python / numpy / torch RNG states of the driver
        config.json           the run's RLFHConfig
    latest                    name of the newest complete checkpoint (one line)

A checkpoint is written into ``.tmp-global_step_N`` and renamed when complete, so
a crash mid-save never leaves a half checkpoint that resume would pick up.
At most ``MAX_CKPT_NUM`` checkpoints are kept (oldest removed first).
"""
from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from core.abstention import CARRIED_MARGIN, CARRIED_PRICE, AbstainControl

log = logging.getLogger(__name__)

PREFIX = "global_step_"
LATEST = "latest"
STATE_FILE = "trainer_state.json"
RNG_FILE = "rng_state.pt"
CONFIG_FILE = "config.json"
_NAME_RE = re.compile(rf"^{PREFIX}(\d+)$")
_COUNTERS = ("step", "epoch", "index", "skipped_batches", "samples_seen", "wall_time_s")   # TrainerState's numbers


@dataclass
class TrainerState:
    """Where training stands: ``step`` PPO steps done; the next prompt is ``order(epoch)[index]``;
    ``abstain_control``: the abstention price controller's values for the next step (OUTCOME_REWARD=ternary with
    ABSTAIN_TARGET_RATE; both values None otherwise)."""

    step: int = 0
    epoch: int = 0
    index: int = 0
    skipped_batches: int = 0
    samples_seen: int = 0
    wall_time_s: float = 0.0
    abstain_control: AbstainControl = field(default_factory=AbstainControl)

    @property
    def extra(self) -> dict[str, float]:
        """trainer_state.json's ``"extra"`` object: the controller's values by key
        (:meth:`core.abstention.AbstainControl.as_dict`; the file's format from before they were typed)."""
        return self.abstain_control.as_dict()

    def to_dict(self) -> dict[str, Any]:
        """What trainer_state.json holds: the counters, then ``"extra"``."""
        return {**{k: getattr(self, k) for k in _COUNTERS}, "extra": self.extra}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainerState":
        """From :meth:`to_dict`'s form (any checkpoint so far: ``"extra"`` has held the controller's values since
        it was added, and is absent or empty before and without one)."""
        extra = d.get("extra") or {}
        unknown = sorted(set(extra) - {CARRIED_PRICE, CARRIED_MARGIN})
        if unknown:
            log.warning("trainer state: unknown keys in \"extra\" ignored: %s", ", ".join(unknown))
        return cls(**{k: d[k] for k in _COUNTERS if k in d}, abstain_control=AbstainControl.from_dict(extra))


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:05d}"


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _NAME_RE.match(p.name)
        if m and p.is_dir() and (p / STATE_FILE).exists():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: str | Path) -> Optional[Path]:
    """The newest complete checkpoint (``latest`` pointer, else the highest step), or None."""
    root = Path(root)
    pointer = root / LATEST
    if pointer.exists():
        name = pointer.read_text().strip()
        cand = root / name
        if name and (cand / STATE_FILE).exists():
            return cand
        log.warning("%s points at %r which is not a complete checkpoint; using the newest one found", pointer, name)
    ckpts = list_checkpoints(root)
    return ckpts[-1] if ckpts else None


# --------------------------------------------------------------------------------------
# RNG state
# --------------------------------------------------------------------------------------

def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


# --------------------------------------------------------------------------------------
# save / load
# --------------------------------------------------------------------------------------

def save_checkpoint(root: str | Path, state: TrainerState, groups, cfg, max_keep: int) -> Path:
    """Write a complete checkpoint of ``groups`` (policy, critic) and ``state``; rotate; return its path.

    ``groups`` has ``.policy`` and ``.critic`` (None without a critic) actor groups whose ranks implement
    ``save_hf(dir)`` and ``save_checkpoint(dir)``.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = checkpoint_name(state.step)
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    t0 = time.time()
    groups.policy.run("save_hf", str(tmp / "policy_hf"))
    groups.policy.run("save_checkpoint", str(tmp / "state"))
    if getattr(groups, "critic", None) is not None:
        groups.critic.run("save_hf", str(tmp / "critic_hf"))
        groups.critic.run("save_checkpoint", str(tmp / "state"))
    (tmp / STATE_FILE).write_text(json.dumps(state.to_dict(), indent=2))
    torch.save(rng_state(), tmp / RNG_FILE)
    (tmp / CONFIG_FILE).write_text(cfg.model_dump_json(indent=2))
    if final.exists():  # the same step saved again (e.g. end of run right after a SAVE_STEP save)
        shutil.rmtree(final)
    os.replace(tmp, final)
    _write_latest(root, name)
    removed = rotate(root, max_keep)
    log.info("checkpoint %s saved in %.1fs%s", final, time.time() - t0,
             f" (removed {', '.join(p.name for p in removed)})" if removed else "")
    return final


def _write_latest(root: Path, name: str) -> None:
    tmp = root / f".{LATEST}.tmp-{os.getpid()}"
    tmp.write_text(name + "\n")
    os.replace(tmp, root / LATEST)


def rotate(root: str | Path, max_keep: int) -> list[Path]:
    """Delete the oldest complete checkpoints beyond ``max_keep``; returns what was removed."""
    ckpts = list_checkpoints(root)
    removed = []
    for p in ckpts[:max(0, len(ckpts) - max(1, max_keep))]:
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def load_checkpoint(path: str | Path, groups, restore_rng: bool = True) -> TrainerState:
    """Restore ``groups`` (weights + optimizer) and the driver's RNG from ``path``; return the trainer state."""
    path = Path(path)
    if not (path / STATE_FILE).exists():
        raise FileNotFoundError(f"{path} is not a checkpoint (no {STATE_FILE}); CKPT_PATH must hold "
                                f"{PREFIX}N folders written by `rlfh train`")
    state = TrainerState.from_dict(json.loads((path / STATE_FILE).read_text()))
    groups.policy.run("load_checkpoint", str(path / "state"))
    if getattr(groups, "critic", None) is not None:
        if not (path / "state" / "critic").exists():
            raise FileNotFoundError(f"{path} has no critic state but this run trains a critic "
                                    "(ADVANTAGE_ESTIMATOR=gae); resume with the estimator it was saved with")
        groups.critic.run("load_checkpoint", str(path / "state"))
    if restore_rng and (path / RNG_FILE).exists():
        set_rng_state(torch.load(path / RNG_FILE, weights_only=False))
    log.info("resumed from %s: step %d, epoch %d, index %d", path, state.step, state.epoch, state.index)
    return state


def read_state(path: str | Path) -> TrainerState:
    return TrainerState.from_dict(json.loads((Path(path) / STATE_FILE).read_text()))
