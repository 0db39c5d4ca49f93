"""Trainer settings: the run itself (output folder, length, seed), its checkpoints, logs and fault handling."""
from __future__ import annotations

from core.settings.base import Settings, setting


class TrainerSettings(Settings):
    """Where a run writes, how long it runs, how often it saves and logs, and how it survives a lost actor."""

    ROLE = "trainer"

    save_path: str = setting("runs/rlfh", "Output folder: final model, checkpoints/, metrics, plots.",
                             env="SAVE_PATH")
    ckpt_path: str = setting("", "Checkpoint folder to save into and resume from (empty: SAVE_PATH/checkpoints).",
                             env="CKPT_PATH")
    seed: int = setting(42, "Random seed (data order, sampling, init).", env="SEED")
    num_episodes: int = setting(1, "Passes over the prompt data.", env="NUM_EPISODES", ge=1)
    max_steps: int = setting(0, "Stop after this many PPO steps (0: run all episodes).", env="MAX_STEPS", ge=0)
    save_step: int = setting(0, "Checkpoint every N steps (0: only at the end and on Ctrl-C).", env="SAVE_STEP",
                             ge=0)
    max_ckpt_num: int = setting(3, "Keep at most this many checkpoints.", env="MAX_CKPT_NUM", ge=1)
    logging_steps: int = setting(1, "Log metrics every N steps.", env="LOGGING_STEPS", ge=1)
    log_samples: int = setting(
        4, "Rollouts per step written to SAVE_PATH/samples.jsonl (question, prompt mode, response, reward, labels). "
        "0: none.", env="LOG_SAMPLES", ge=0)
    use_tensorboard: bool = setting(True, "Write TensorBoard events under SAVE_PATH/tensorboard.",
                                    env="USE_TENSORBOARD")
    actor_timeout_s: float = setting(
        1800.0, "Longest the driver waits on one actor call, seconds; then, as when an actor dies, the actor groups "
        "restart from the last checkpoint.", env="ACTOR_TIMEOUT_S", gt=0,
        doc="An actor call: generate, forward, train step, weight sync, save. An actor that dies is noticed at once; "
        "one that hangs, after this long. Either way the actor groups are restarted from the last checkpoint "
        "(MAX_ACTOR_RESTARTS).")
    max_actor_restarts: int = setting(
        2, "Times the driver restarts the actor groups from the last checkpoint after an actor died or hung. 0: stop "
        "at the first failure.", env="MAX_ACTOR_RESTARTS", ge=0,
        doc="After that many it stops with an error; the count starts again once a new checkpoint is saved.")
