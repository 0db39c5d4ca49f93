"""Reward settings: the reward service's (defined once in :mod:`core.reward_settings`, adopted here with an
environment variable and a flag) and the ones the trainer adds on top (the outcome reward, abstention, weights)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import field_validator

from core.reward_settings import DEFAULT_INFORMATIVE_MAP, DEFAULT_VERIFICATION_MAP, RewardSettings
from core.settings.base import Settings, parse_score_map, setting
from core.verify_schema import INFO_SCORES, LABELS


def reward_type(name: str) -> Any:
    """The type of reward setting ``name``, constraints included, as :class:`RewardSettings` declares it."""
    info = RewardSettings.model_fields[name]
    return Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation


def reward_setting(name: str, env: str, help: str = "") -> Any:
    """The config field of reward setting ``name``, read from environment variable ``env``: its default from
    :class:`RewardSettings`, and its description there as the help (or, when that is long, ``help`` and the
    description as the reference)."""
    info = RewardSettings.model_fields[name]
    return setting(info.default, help or info.description, env=env, doc=info.description if help else "")


def parse_verification_map(value: Any) -> dict[str, float]:
    """Parse and check a VERIFICATION_MAP (JSON object or dict). Missing labels keep their default."""
    return parse_score_map(value, DEFAULT_VERIFICATION_MAP, LABELS, "labels")


def parse_informative_map(value: Any) -> dict[str, float]:
    """Parse and check an INFORMATIVE_MAP: keys "1".."5" (ints accepted). Missing scores keep their default."""
    return parse_score_map(value, DEFAULT_INFORMATIVE_MAP, tuple(str(s) for s in INFO_SCORES),
                           "informativeness scores")


class ServiceRewardSettings(Settings):
    """The reward service's settings: how a verdict becomes token rewards. Type (constraints included), default and
    description come from :class:`core.reward_settings.RewardSettings`, the one definition; only the environment
    variable is said here. The annotation is a call, evaluated by pydantic when it builds the class."""

    ROLE = "reward"

    granularity: reward_type("granularity") = reward_setting("granularity", env="GRANULARITY")
    placement: reward_type("placement") = reward_setting("placement", env="REWARD_PLACEMENT")
    reward_formula: reward_type("reward_formula") = reward_setting(
        "reward_formula", env="REWARD_FORMULA",
        help="'paper': truth reward scaled by |informativeness| (the RLFH paper's coupling); 'additive': truth "
        "reward alone, informativeness only in the sentence term.")
    verification_map: reward_type("verification_map") = reward_setting("verification_map", env="VERIFICATION_MAP")
    informative_map: reward_type("informative_map") = reward_setting("informative_map", env="INFORMATIVE_MAP")
    info_weight: reward_type("info_weight") = reward_setting("info_weight", env="INFO_WEIGHT")
    truth_weight: reward_type("truth_weight") = reward_setting("truth_weight", env="TRUTH_WEIGHT")
    truth_confidence: reward_type("truth_confidence") = reward_setting(
        "truth_confidence", env="TRUTH_CONFIDENCE",
        help="How much the verifier's per-statement confidence scales the truth reward, in [0, 1] (0: ignored, "
        "the paper's reward; 1: proportional).")
    reward_epsilon: reward_type("reward_epsilon") = reward_setting(
        "reward_epsilon", env="REWARD_EPSILON",
        help="Floor of a sentence's summed informativeness inside the log (the paper's epsilon; it uses -0.9).")
    reward_mu: reward_type("reward_mu") = reward_setting("reward_mu", env="REWARD_MU")
    reward_clip: reward_type("reward_clip") = reward_setting(
        "reward_clip", env="REWARD_CLIP",
        help="Per-token clip |r| <= this of the verifier's token rewards, applied once, by the reward service.")
    abstain_token_reward: reward_type("abstain_token_reward") = reward_setting(
        "abstain_token_reward", env="ABSTAIN_TOKEN_REWARD",
        help="Token-level reward of an abstention, on its last token (the outcome reward's is "
        "ABSTAIN_OUTCOME_REWARD).")
    empty_reward: reward_type("empty_reward") = reward_setting(
        "empty_reward", env="EMPTY_REWARD",
        help="Reward of a reply that neither abstains nor makes a checkable statement (added to its Vague "
        "penalties).")
    reward_tokenizer: str = setting(
        "", "Tokenizer the reward service uses when a caller sends no token offsets (empty: MODEL_PATH).",
        env="REWARD_TOKENIZER")

    @field_validator("verification_map", mode="before")
    @classmethod
    def _vmap(cls, v):
        return parse_verification_map(v)

    @field_validator("informative_map", mode="before")
    @classmethod
    def _imap(cls, v):
        return parse_informative_map(v)


class TrainerRewardSettings(Settings):
    """The rewards the trainer adds to the service's token rewards: the ternary outcome reward, what an abstention
    earns and how that is adapted, and the token rewards' weight and cap."""

    ROLE = "reward"

    outcome_reward: Literal["none", "ternary"] = setting(
        "none", "Outcome reward added to the token rewards: 'ternary' (TruthRL): OUTCOME_CORRECT, "
        "ABSTAIN_OUTCOME_REWARD or OUTCOME_WRONG per reply. 'none': token rewards alone.", env="OUTCOME_REWARD",
        doc="'ternary' (TruthRL, arXiv 2509.25760) puts on each response's last token (OUTCOME_TOKEN) "
        "OUTCOME_CORRECT when the reply is right, ABSTAIN_OUTCOME_REWARD to an abstention and OUTCOME_WRONG to "
        "anything else, so a group prefers abstaining exactly where the model's answers are mostly wrong.")
    outcome_grader: Literal["gold", "verifier"] = setting(
        "gold", "What grades a reply right / abstained / wrong for OUTCOME_REWARD: 'gold' (the gold-answer grader) or "
        "'verifier' (every statement Correct or Hedged correct).", env="OUTCOME_GRADER",
        doc="'gold' is the grader of `rlfh eval` against the item's right_answer (containment, yes/no and choice "
        "rules); items without a gold answer fall back to the verifier. 'verifier' is strict: a right answer with "
        "one unsupported side remark counts as wrong.")
    grade_scope: Literal["whole", "first-sentence"] = setting(
        "whole", "What the gold grader reads (training, dev evaluation, held-out report): 'whole' (the reply) or "
        "'first-sentence' (a grounded reply's answer sentence).", env="GRADE_SCOPE",
        doc="'first-sentence' is for SYSTEM_PROMPT=grounded: the justification cannot make a wrong answer right by "
        "naming more entities.")
    outcome_token: Literal["last", "graded-end"] = setting(
        "last", "OUTCOME_REWARD=ternary: the token the outcome reward lands on: 'last' (the reply's) or "
        "'graded-end' (the last of the part the gold grader read).", env="OUTCOME_TOKEN",
        doc="'last': every token's return carries it (a response-level outcome). 'graded-end': with "
        "GRADE_SCOPE=first-sentence the answer sentence's end (with 'whole' the same as 'last'), so the "
        "justification after the answer is rewarded by its own statements only, and with GAMMA < 1 the answer "
        "sentence's return is mostly its own label and the outcome, not the number of supported sentences that "
        "follow it.")
    outcome_correct: float = setting(1.0, "OUTCOME_REWARD=ternary: reward of a correct response.",
                                     env="OUTCOME_CORRECT")
    outcome_wrong: float = setting(-1.0, "OUTCOME_REWARD=ternary: reward of a wrong (not abstaining) response.",
                                   env="OUTCOME_WRONG")
    # the outcome reward of an abstention: ABSTAIN_OUTCOME_REWARD*, and the rate controller ABSTAIN_TARGET_RATE*
    # (ABSTAIN_TOKEN_REWARD, a reward service setting, is the token-level reward of an abstention)
    abstain_outcome_reward: float = setting(
        0.0, "OUTCOME_REWARD=ternary: reward of an abstention on a closed-book prompt, between OUTCOME_WRONG and "
        "OUTCOME_CORRECT.", env="ABSTAIN_OUTCOME_REWARD",
        doc="Answering pays when p * OUTCOME_CORRECT + (1 - p) * OUTCOME_WRONG > ABSTAIN_OUTCOME_REWARD (p: how "
        "often the model is right on that question), so -0.5 with +1/-1 keeps answers that are right more than a "
        "quarter of the time. The value every step uses with ABSTAIN_OUTCOME_REWARD_MODE=fixed, where "
        "ABSTAIN_TARGET_RATE's controller starts otherwise. On a prompt with its passage: "
        "ABSTAIN_OUTCOME_REWARD_EVIDENCE.")
    abstain_outcome_reward_evidence: Optional[float] = setting(
        None, "OUTCOME_REWARD=ternary: reward of an abstention on a prompt that carries its passage. Empty: "
        "ABSTAIN_OUTCOME_REWARD.", env="ABSTAIN_OUTCOME_REWARD_EVIDENCE",
        doc="Applies with PROMPT_MODE=evidence, or to the evidence share of mixed. With the passage the model is "
        "right more often than closed book, so an abstention reward that teaches closed-book caution seldom pays "
        "there; a higher value here asks the model to decline where the passage did not help it.")
    abstain_outcome_reward_mode: Literal["fixed", "answer-mean"] = setting(
        "fixed", "OUTCOME_REWARD=ternary: each step's abstention reward: 'fixed' (ABSTAIN_OUTCOME_REWARD) or "
        "'answer-mean' (the step's mean answer reward + ABSTAIN_OUTCOME_REWARD_MARGIN).",
        env="ABSTAIN_OUTCOME_REWARD_MODE",
        doc="fixed: ABSTAIN_OUTCOME_REWARD (or the ABSTAIN_TARGET_RATE controller when that is set). answer-mean: "
        "the mean outcome reward of the step's own closed-book answers (declines and injected candidates excluded) "
        "plus ABSTAIN_OUTCOME_REWARD_MARGIN, so the batch's advantages do not push abstention up or down on every "
        "question alike, only where a question's answers are worse (decline) or better (answer) than the policy's "
        "answers in general (core_algos.answer_mean_abstain_reward). With ABSTAIN_TARGET_RATE as well, the "
        "controller moves the margin instead of the reward (starting from ABSTAIN_OUTCOME_REWARD_MARGIN): the batch "
        "mean takes the fast common part, the controller the slow drift of the level.")
    abstain_outcome_reward_margin: float = setting(
        0.0, "ABSTAIN_OUTCOME_REWARD_MODE=answer-mean: added to the mean answer reward (> 0 leans toward "
        "declining); with ABSTAIN_TARGET_RATE, where the adapted margin starts.",
        env="ABSTAIN_OUTCOME_REWARD_MARGIN")
    abstain_target_rate: Optional[float] = setting(
        None, "OUTCOME_REWARD=ternary: hold the share of closed-book replies that decline near this rate by adapting "
        "the abstention reward each step. Empty: off.", env="ABSTAIN_TARGET_RATE", ge=0, le=1,
        doc="Dual ascent: the reward falls by ABSTAIN_TARGET_RATE_STEP x (rate - target), starting from "
        "ABSTAIN_OUTCOME_REWARD, kept inside (OUTCOME_WRONG, OUTCOME_CORRECT). With a fixed reward abstention "
        "drifts up or down on every question alike; holding the rate leaves RL the part that differs between "
        "questions (decline where the answers are wrong). Empty: the fixed ABSTAIN_OUTCOME_REWARD.")
    abstain_target_rate_step: float = setting(
        1.0, "ABSTAIN_TARGET_RATE: how far the abstention reward (answer-mean: the margin) moves per unit of rate "
        "error per step.", env="ABSTAIN_TARGET_RATE_STEP", ge=0)
    token_reward_weight: float = setting(
        1.0, "Weight of the verifier's token-level rewards in the total reward (0 with OUTCOME_REWARD=ternary: "
        "TruthRL's pure outcome reward).", env="TOKEN_REWARD_WEIGHT", ge=0)
    token_reward_cap: Optional[float] = setting(
        None, "The most a reply's positive token-level rewards (x TOKEN_REWARD_WEIGHT) add up to; negative ones "
        "always count. Empty: no cap.", env="TOKEN_REWARD_CAP", ge=0,
        doc="In token order, positive rewards past that sum are cut. A reply earns about +1 for every supported "
        "statement, so with the passage in the prompt copying passage sentences can outscore answering the "
        "question; capped, statements past the first few earn nothing more.")
    caution_reward: bool = setting(
        False, "Caution reward: correct = 1, and an abstention = 1 when no sample of its prompt is correct.",
        env="CAUTION_REWARD")
