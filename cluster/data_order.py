"""The training prompts and the order the steps take them in.

The order is a pure function of the seed and the epoch (:func:`epoch_order`), and where training stands in it is
two numbers of the trainer state (``epoch``, ``index``), so a resumed run takes exactly the batches the
uninterrupted run would have taken.
"""
from __future__ import annotations

import logging

import numpy as np

from cluster.checkpoint import TrainerState
from core.config import ConfigError, RLFHConfig
from core.data import QAItem, balance_question_types, load_items

log = logging.getLogger(__name__)


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
