"""Policy and critic settings: the advantage estimator and the PPO loss, the optimizer and its batches, and what of
each model is trained."""
from __future__ import annotations

from typing import Literal, Optional

from core.settings.base import Settings, setting


class PolicySettings(Settings):
    """How the policy is updated: advantages, KL, the clipped loss, the optimizer and its batches."""

    ROLE = "policy"

    # ---------------------------------------------------------------- advantages and loss
    advantage_estimator: Literal["gae", "reinforce_plus_plus", "grpo", "rloo", "dr_grpo"] = setting(
        "gae", "Advantage estimator: gae (PPO with critic), reinforce_plus_plus, grpo, rloo, dr_grpo.",
        env="ADVANTAGE_ESTIMATOR")
    kl_coef: float = setting(0.05, "KL penalty coefficient (per token, to the reference).", env="KL_COEF", ge=0)
    kl_estimator: Literal["k1", "k2", "k3"] = setting("k1", "KL estimator: k1, k2 or k3.", env="KL_ESTIMATOR")
    gamma: float = setting(1.0, "Discount.", env="GAMMA", ge=0, le=1)
    lambd: float = setting(0.95, "GAE lambda.", env="LAMBD", ge=0, le=1)
    eps_clip: float = setting(0.2, "PPO policy ratio clip.", env="EPS_CLIP", gt=0)
    eps_clip_high: Optional[float] = setting(
        None, "Upper PPO ratio clip (DAPO's clip-higher: [1 - EPS_CLIP, 1 + EPS_CLIP_HIGH]). Empty: EPS_CLIP.",
        env="EPS_CLIP_HIGH", gt=0)
    loss_agg: Optional[Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]] = setting(
        None, "How the policy loss is reduced over tokens. Empty: seq-mean-token-sum-norm for "
        "ADVANTAGE_ESTIMATOR=dr_grpo, token-mean otherwise.", env="LOSS_AGG",
        doc="token-mean: every token weighs the same; seq-mean-token-mean: each response's token mean, then the mean "
        "over responses (original GRPO); seq-mean-token-sum-norm: each response's token sum divided by the constant "
        "GENERATE_MAX_LEN (Dr.GRPO, no length normalisation). The mean is over all of an optimizer step's tokens "
        "(responses) on a rank, not a mean of micro-batch means.")
    advantage_whiten: bool = setting(
        False, "ADVANTAGE_ESTIMATOR=gae: whiten the advantages over the batch's valid tokens before the policy "
        "loss.", env="ADVANTAGE_WHITEN",
        doc="Subtracts the mean and divides by the std. verl and OpenRLHF whiten GAE advantages by default; this "
        "trainer does not unless asked. The group estimators normalise per prompt already.")
    fspo: bool = setting(False, "FSPO: flip a token's advantage sign by its statement's label.", env="FSPO")
    filter_variance: float = setting(
        0.0, "Drop prompts whose samples' total rewards have std below this (0: keep all).", env="FILTER_VARIANCE",
        ge=0)

    # ---------------------------------------------------------------- optimisation
    actor_lr: float = setting(1e-6, "Policy learning rate.", env="ACTOR_LR", gt=0)
    actor_train_layers: int = setting(
        0, "Train only the policy's last N transformer layers (as CRITIC_TRAIN_LAYERS). 0: train all.",
        env="ACTOR_TRAIN_LAYERS", ge=0,
        doc="The embeddings (and an LM head tied to them) and the layers below keep the weights MODEL_PATH loaded. "
        "The backward stops at the lowest trained layer and the frozen part has no gradients or AdamW moments (what "
        "it saves: docs/PERFORMANCE.md, \"Trained layers of the policy and the critic\").")
    train_batch_size: int = setting(16, "Samples per optimizer step (global).", env="TRAIN_BATCH_SIZE", ge=1)
    micro_train_batch_size: int = setting(
        8, "Samples per forward/backward (per rank).", env="MICRO_TRAIN_BATCH_SIZE", ge=1,
        doc="With SHARE_PROMPT_FORWARD a micro batch runs each of its prompts once, so larger micro batches share "
        "more, up to a point (the sizes measured: docs/PERFORMANCE.md, \"Micro batch sizes\").")
    max_epochs: int = setting(1, "PPO epochs over each rollout batch.", env="MAX_EPOCHS", ge=1)
    max_norm: float = setting(1.0, "Gradient clipping norm.", env="MAX_NORM", gt=0)
    freezing_actor_steps: int = setting(0, "Train only the critic for the first N steps.",
                                        env="FREEZING_ACTOR_STEPS", ge=0)


class CriticSettings(Settings):
    """The critic of ADVANTAGE_ESTIMATOR=gae: its backbone, learning rate, trained layers and value clip."""

    ROLE = "critic"

    critic_pretrain: str = setting("", "Critic backbone (empty: same as MODEL_PATH).", env="CRITIC_PRETRAIN")
    critic_lr: float = setting(9e-6, "Critic learning rate.", env="CRITIC_LR", gt=0)
    critic_train_layers: int = setting(
        0, "Train only the critic's last N transformer layers (and the value head). 0: train all.",
        env="CRITIC_TRAIN_LAYERS", ge=0,
        doc="The embeddings and the layers below stay at their initial weights. Saves the frozen part's gradients "
        "and AdamW moments (12 bytes a parameter in fp32) and its backward pass; in the colocated layout, when the "
        "critic and the reference start from the same weights (CRITIC_PRETRAIN empty, ZERO_STAGE < 3), the frozen "
        "part IS the reference's (one copy in memory). What it saves: docs/PERFORMANCE.md, \"Trained layers of the "
        "policy and the critic\".")
    value_clip: float = setting(0.2, "Critic value clip.", env="VALUE_CLIP", gt=0)
