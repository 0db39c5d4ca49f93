"""``RLFHConfig``: every setting of the project, composed of the role classes, with the checks that span roles and
the values derived from several settings."""
from __future__ import annotations

import math
import os
from typing import Any

from pydantic import model_validator

from core.settings.environment import DemoSettings, LauncherSettings, ProcessSettings
from core.settings.evaluation import EvaluationSettings
from core.settings.model import ModelSettings
from core.settings.placement import PlacementSettings
from core.settings.policy import CriticSettings, PolicySettings
from core.settings.reward import TrainerRewardSettings
from core.settings.rollout import RolloutSettings
from core.settings.service import ServiceSettings
from core.settings.trainer import TrainerSettings


class RLFHConfig(ServiceSettings, ProcessSettings, LauncherSettings, DemoSettings, ModelSettings, RolloutSettings,
                 PolicySettings, CriticSettings, TrainerRewardSettings, PlacementSettings, EvaluationSettings,
                 TrainerSettings):
    """Every setting of the project, flat (``cfg.actor_lr``): the service section, the process settings,
    scripts/train.sh's and demo.sh's own, and the trainer's roles. ``PolicySettings.of(cfg)`` is one role's view."""

    @model_validator(mode="after")
    def _cross_checks(self):
        gated = ("HELDOUT_LIMIT", self.heldout_limit) if self.heldout_gate == "selective" else \
            ("HELDOUT_EVIDENCE_LIMIT", self.heldout_evidence_limit)
        if gated[1] == 0:
            raise ValueError(f"HELDOUT_GATE={self.heldout_gate} judges the questions {gated[0]} counts: set "
                             f"{gated[0]} >= 1 (0 skips that half of the held-out report)")
        group_est = {"grpo", "rloo", "dr_grpo"}
        if self.advantage_estimator in group_est and self.n_samples_per_prompt < 2:
            raise ValueError(
                f"ADVANTAGE_ESTIMATOR={self.advantage_estimator} compares samples of a prompt: "
                "set N_SAMPLES_PER_PROMPT >= 2")
        if not self.outcome_wrong <= self.abstain_outcome_reward <= self.outcome_correct:
            raise ValueError(
                f"OUTCOME_WRONG={self.outcome_wrong} <= ABSTAIN_OUTCOME_REWARD={self.abstain_outcome_reward} <= "
                f"OUTCOME_CORRECT={self.outcome_correct} must hold: an abstention is worth less than a right answer "
                "and more than a wrong one")
        if self.abstain_outcome_reward_evidence is not None and not (
                math.isfinite(self.abstain_outcome_reward_evidence)
                and self.outcome_wrong <= self.abstain_outcome_reward_evidence <= self.outcome_correct):
            raise ValueError(
                f"ABSTAIN_OUTCOME_REWARD_EVIDENCE={self.abstain_outcome_reward_evidence} must be a finite number "
                f"between OUTCOME_WRONG={self.outcome_wrong} and OUTCOME_CORRECT={self.outcome_correct} (or empty: "
                "the same as ABSTAIN_OUTCOME_REWARD)")
        if self.outcome_reward == "none" and self.token_reward_weight == 0 and not self.caution_reward:
            raise ValueError("TOKEN_REWARD_WEIGHT=0 with OUTCOME_REWARD=none leaves no reward at all; set "
                             "OUTCOME_REWARD=ternary or a positive TOKEN_REWARD_WEIGHT")
        if self.outcome_token != "last" and self.outcome_reward != "ternary":
            raise ValueError(f"OUTCOME_TOKEN={self.outcome_token} places the outcome reward of OUTCOME_REWARD=ternary, "
                             "which is off; set OUTCOME_REWARD=ternary or OUTCOME_TOKEN=last")
        if self.token_reward_cap is not None and (self.caution_reward or self.token_reward_weight == 0):
            raise ValueError(f"TOKEN_REWARD_CAP={self.token_reward_cap} caps the verifier's token-level rewards, which "
                             "are not used (CAUTION_REWARD replaces them, or TOKEN_REWARD_WEIGHT=0); unset it")
        if self.abstain_target_rate is not None and self.outcome_reward != "ternary":
            raise ValueError(f"ABSTAIN_TARGET_RATE={self.abstain_target_rate} adapts the abstention reward of "
                             "OUTCOME_REWARD=ternary, which is off; set OUTCOME_REWARD=ternary or unset it")
        if self.abstain_outcome_reward_mode == "answer-mean" and self.outcome_reward != "ternary":
            raise ValueError("ABSTAIN_OUTCOME_REWARD_MODE=answer-mean sets the abstention reward of "
                             "OUTCOME_REWARD=ternary each step, which is off; set OUTCOME_REWARD=ternary or "
                             "ABSTAIN_OUTCOME_REWARD_MODE=fixed")
        if (self.early_stop_patience or self.final_model == "best") and not self.dev_eval_step:
            raise ValueError(
                f"EARLY_STOP_PATIENCE={self.early_stop_patience} / FINAL_MODEL={self.final_model} read the in-loop "
                "dev evaluation, which is off (DEV_EVAL_STEP=0); set DEV_EVAL_STEP (e.g. 4) or turn them off")
        if not self.system_prompt.strip():
            raise ValueError("SYSTEM_PROMPT is blank; use 'default', 'may-abstain', 'grounded' or a prompt text")
        if self.abstain_samples >= self.n_samples_per_prompt:
            raise ValueError(
                f"ABSTAIN_SAMPLES={self.abstain_samples} must be smaller than N_SAMPLES_PER_PROMPT="
                f"{self.n_samples_per_prompt}: each prompt needs sampled answers to weigh the abstention against")
        return self

    # ------------------------------------------------------------------ helpers
    @property
    def effective_ckpt_path(self) -> str:
        return self.ckpt_path or os.path.join(self.save_path, "checkpoints")

    @property
    def effective_critic_pretrain(self) -> str:
        return self.critic_pretrain or self.model_path

    @property
    def effective_loss_agg(self) -> str:
        """LOSS_AGG, or the estimator's own aggregation when it is empty (Dr.GRPO: no length normalisation)."""
        if self.loss_agg is not None:
            return self.loss_agg
        return "seq-mean-token-sum-norm" if self.advantage_estimator == "dr_grpo" else "token-mean"

    def policy_loss_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``core.core_algos.policy_loss`` this config asks for (besides ``eps_clip``)."""
        return {"eps_clip_high": self.eps_clip_high, "loss_agg": self.effective_loss_agg,
                "norm_length": self.generate_max_len}
