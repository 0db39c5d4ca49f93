"""Evaluation settings: the dev evaluation in the training loop, and what it decides (early stop, the final
model, snapshots for `rlfh select`)."""
from __future__ import annotations

from typing import Literal, Optional

from core.settings.base import Settings, setting


class EvaluationSettings(Settings):
    """The in-loop dev evaluation and the choices made from it."""

    ROLE = "evaluation"

    dev_eval_step: int = setting(
        0, "Every N steps (and once before the first) the policy answers DEV_EVAL_SIZE dev questions greedily and "
        "the metrics get their shares. 0: off.", env="DEV_EVAL_STEP", ge=0,
        doc="metrics.jsonl, TensorBoard and the run summary get correct / incorrect / declined shares, accuracy on "
        "attempted answers and the declined share per question type (yes/no, two-option, open), so a run that "
        "learns nothing or declines at random shows it within a few steps.")
    dev_eval_data: str = setting(
        "halueval:dev", "Questions of the in-loop dev evaluation (never the test split): 'halueval:dev' or a JSONL "
        "path with question, knowledge and right_answer.", env="DEV_EVAL_DATA", min_length=1)
    dev_eval_size: int = setting(
        64, "Dev questions per in-loop evaluation (the same ones every time, chosen by question hash).",
        env="DEV_EVAL_SIZE", ge=1)
    dev_eval_type_share: float = setting(
        0.0, "Pick the dev questions so yes/no and two-option ones are at least this share each, weighed back to "
        "the natural mix in the dev score. 0: plain.", env="DEV_EVAL_TYPE_SHARE", ge=0, lt=0.5,
        doc="E.g. 0.25: 16 of each in 64 instead of the ~8 in all the natural mix gives, so FINAL_MODEL=best sees "
        "what a step does to those types. 0: the first DEV_EVAL_SIZE questions by hash, plain mean.")
    dev_eval_modes: Literal["closed", "evidence", "closed+evidence"] = setting(
        "closed", "Prompt modes of the in-loop dev evaluation; the dev score is the mean of the modes' ternary "
        "outcome scores.", env="DEV_EVAL_MODES",
        doc="The dev score is what early stopping and FINAL_MODEL=best read.")
    dev_select_max_incorrect: Optional[float] = setting(
        None, "How FINAL_MODEL=best and EARLY_STOP_PATIENCE rank dev evaluations. Empty: by the dev score. A share: "
        "most right answers among those at most this often wrong.", env="DEV_SELECT_MAX_INCORRECT", gt=0, le=1,
        doc="A share, e.g. 0.25, ranks by the gate's own terms: the most right answers (closed book and "
        "DEV_EVAL_MODES' others, at the natural question-type mix) among the evaluations whose closed-book "
        "incorrect share is at most this; the ternary score's price for declining otherwise decides how many right "
        "answers it gives up for fewer wrong ones.")
    dev_eval_max_len: int = setting(40, "New tokens per greedy dev answer.", env="DEV_EVAL_MAX_LEN", ge=1)
    early_stop_patience: int = setting(
        0, "Stop when this many in-loop dev evaluations in a row ranked below the best one (a tie does not count). "
        "Needs DEV_EVAL_STEP. 0: off.", env="EARLY_STOP_PATIENCE", ge=0,
        doc="Ranked by the dev score (the ternary outcome OUTCOME_CORRECT / ABSTAIN_OUTCOME_REWARD / OUTCOME_WRONG "
        "of the greedy answers, averaged over DEV_EVAL_MODES), or as DEV_SELECT_MAX_INCORRECT ranks them.")
    final_model: Literal["last", "best"] = setting(
        "last", "What SAVE_PATH/final holds: 'last' (the policy after the last step) or 'best' (at the best in-loop "
        "dev evaluation; needs DEV_EVAL_STEP).", env="FINAL_MODEL",
        doc="'best' ranks the evaluations by the dev score, or as DEV_SELECT_MAX_INCORRECT ranks them.")
    snapshot_step: int = setting(
        0, "Export the policy's weights to SAVE_PATH/snapshots/step_N every N steps and keep them all, for `rlfh "
        "select` (0: off).", env="SNAPSHOT_STEP", ge=0,
        doc="A snapshot is an HF folder only, no optimizer state: about a quarter of a checkpoint. `rlfh select` "
        "chooses the step on dev data.")
