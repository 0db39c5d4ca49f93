"""The reward settings, each defined once: name, type, default, constraint and description (issue 13).

:class:`RewardSettings` is the one definition. Everything else about a reward setting is derived from it:

- :class:`RewardOverrides` (the ``overrides`` of ``POST /v1/rewards``) is generated from its fields: every field
  optional, strict JSON types, numbers finite with ``|x| <= MAX_SETTING_ABS``, the same constraints and
  descriptions, so the OpenAPI schema documents exactly what the validator accepts;
- ``core.config.RLFHConfig`` takes each reward field's type, default and help from here
  (``reward_type`` / ``reward_setting`` there) and only adds the environment variable and the CLI flag;
- ``reward_service.token_rewards`` computes with a :class:`RewardSettings` instance.

Light on purpose (pydantic, ``core.errors`` and ``core.verify_schema`` only): ``core.config`` imports it, so it must not
import cluster, actors or torch.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping, Optional, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, create_model

from core.errors import ConfigError
from core.verify_schema import INFO_SCORES, LABELS

# Truthfulness reward per statement label. A wrong statement costs twice what a right one earns (a careful reader
# ranks fewer wrong statements before more right ones: `rlfh bench reward-order`, docs/REWARD.md), and hedging a
# wrong fact is punished less than asserting it (the behaviour we want the model to learn at its knowledge
# boundary).
DEFAULT_VERIFICATION_MAP: dict[str, float] = {
    "Correct": 1.0,
    "Hedged correct": 0.5,
    "Vague": -0.2,
    "Hedged wrong": -1.0,
    "Wrong": -2.0,
}
# Informativeness reward per 1-5 score: uninformative filler is slightly
# negative so that "say nothing" is not free.
DEFAULT_INFORMATIVE_MAP: dict[str, float] = {"1": -0.5, "2": -0.2, "3": 0.0, "4": 0.2, "5": 0.4}

GRANULARITIES = ("token", "sentence", "response")
#: How a statement's truthfulness reward reads its informativeness: ``additive`` keeps them apart (r_truth =
#: V[label]), ``paper`` is the RLFH paper's coupling (r_truth = V[label] * |I[info]|: a true statement that does
#: not bear on the question earns little).
REWARD_FORMULAS = ("additive", "paper")
PLACEMENTS = ("end", "spread")
LabelName = Literal[LABELS]                                    # "Correct", ..., "Wrong"
InfoScore = Literal[tuple(str(s) for s in INFO_SCORES)]        # "1".."5"

#: Largest magnitude of a reward setting sent per request: products and sums of such settings over the
#: longest response stay far inside float64, so a reward can never overflow to Infinity (which JSON cannot carry).
MAX_SETTING_ABS = 1e6

#: A reward setting on the wire: a JSON number (strict: "1" or true is refused, not converted), finite,
#: |x| <= MAX_SETTING_ABS.
RewardNumber = Annotated[float, Strict(), Field(allow_inf_nan=False, ge=-MAX_SETTING_ABS, le=MAX_SETTING_ABS)]


class RewardInputError(ValueError):
    """Bad reward input. ``field`` is a dotted path relative to the item (e.g. ``token_offsets.3``)."""

    def __init__(self, field: str, message: str, fix: str = ""):
        self.field = field
        self.message = message
        self.fix = fix
        super().__init__(f"{field}: {message}" + (f" ({fix})" if fix else ""))


class RewardSettings(BaseModel):
    """The reward-shaping knobs; see :mod:`reward_service.token_rewards` for the formula they enter.

    Immutable: a per-request variant is a validated copy (:meth:`with_overrides`). A bad value raises
    :class:`RewardInputError` naming the setting.
    """

    # frozen: the service's settings are shared by every request. strict (a string or a bool is not a number)
    # and allow_inf_nan=False (every number, map values included, is finite) are model-level rules, not field
    # constraints, so RLFHConfig, which copies only the field constraints, still parses environment strings
    # and keeps its own finiteness check and messages.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    granularity: Literal[GRANULARITIES] = Field(
        "token", description="Where rewards land: per statement (token), per sentence, or one per response.")
    placement: Literal[PLACEMENTS] = Field(
        "end", description="Within a span: 'end' puts the reward on its last token (as in the paper), 'spread' "
        "splits it evenly over the span's tokens.")
    reward_formula: Literal[REWARD_FORMULAS] = Field(
        "additive", description="'paper': r_truth = TRUTH_WEIGHT * VERIFICATION_MAP[label] * |INFORMATIVE_MAP[info]| "
        "(the RLFH paper's coupling: truth paid by how much the statement does for the question); 'additive': "
        "r_truth = TRUTH_WEIGHT * VERIFICATION_MAP[label], informativeness only in the sentence term.")
    verification_map: dict[LabelName, float] = Field(
        DEFAULT_VERIFICATION_MAP, description="JSON object: truthfulness reward per label "
        "(Correct, Hedged correct, Vague, Hedged wrong, Wrong).")
    informative_map: dict[InfoScore, float] = Field(
        DEFAULT_INFORMATIVE_MAP, description="JSON object: informativeness reward per score \"1\"..\"5\".")
    info_weight: float = Field(0.5, description="Weight of the informativeness reward.")
    truth_weight: float = Field(1.0, description="Weight of the truthfulness reward.")
    truth_confidence: float = Field(
        0.1, ge=0.0, le=1.0,
        description="How much the verifier's per-statement confidence (0..1) scales the truthfulness reward: "
        "r_truth = TRUTH_WEIGHT * VERIFICATION_MAP[label] * ((1 - c) + c * confidence), c = this, in [0, 1]. "
        "0: confidence ignored (the paper's reward); 1: reward proportional to confidence. The sign of a label's "
        "reward never flips; two answers with the same labels are told apart by the confidence (the default "
        "0.1 breaks most ties between one-answer responses of `rlfh bench verifier`).")
    reward_epsilon: float = Field(
        0.0, description="Floor of a sentence's summed informativeness inside the log (the paper's epsilon; it "
        "uses -0.9): r_info = INFO_WEIGHT * log(max(epsilon, sum of INFORMATIVE_MAP scores) + mu).")
    reward_mu: float = Field(
        1.0, description="Shift inside the informativeness log (the paper's mu = 1); epsilon + mu must be > 0.")
    reward_clip: float = Field(
        5.0, gt=0,
        description="Per-token reward clip |r| <= this, applied once, by the reward service, to the verifier's "
        "token rewards (TOKEN_REWARD_WEIGHT, the outcome reward and the KL penalty come after it, unclipped).")
    abstain_token_reward: float = Field(
        0.0, description="Token-level reward for an abstention (\"I don't know\"), placed on its last token (the "
        "trainer's ternary outcome reward has its own, ABSTAIN_OUTCOME_REWARD).")
    empty_reward: float = Field(
        -1.0, description="Reward for a response that does not abstain and makes no checkable statement (none, "
        "or only Vague ones such as \"Sure, the answer is\"); added to the Vague penalties, so filler never beats "
        "abstaining.")

    def __init__(self, **values: Any):
        # pydantic's ValidationError becomes the RewardInputError every caller handles (the service: a 422
        # naming the field; from_config: a ConfigError); the checks that span fields follow.
        try:
            super().__init__(**values)
        except ValidationError as e:
            raise input_error(e) from None
        self._check_together()

    def _check_together(self) -> None:
        for label in LABELS:
            if label not in self.verification_map:
                raise RewardInputError(f"verification_map.{label}", "missing label", f"give all of {list(LABELS)}")
        for score in INFO_SCORES:
            if str(score) not in self.informative_map:
                raise RewardInputError(f"informative_map.{score}", "missing score", "give scores 1..5")
        if self.reward_epsilon + self.reward_mu <= 0:
            raise RewardInputError(
                "reward_mu", f"reward_epsilon + reward_mu = {self.reward_epsilon + self.reward_mu:g} must be > 0 "
                "(the informativeness reward is log(max(epsilon, sum) + mu))",
                "raise reward_mu or reward_epsilon, e.g. epsilon=-0.9, mu=1 as in the paper")

    @classmethod
    def from_config(cls, cfg: Any) -> "RewardSettings":
        """From an ``RLFHConfig`` (or anything with one attribute per reward setting)."""
        try:
            return cls(**{name: getattr(cfg, name) for name in cls.model_fields})
        except RewardInputError as e:
            raise ConfigError(f"reward settings: {e}") from None

    def with_overrides(self, overrides: Optional[Mapping[str, Any]]) -> "RewardSettings":
        """A validated copy with per-request overrides applied (None values are ignored). Partial maps update
        this one's maps.

        The overrides are checked as ``POST /v1/rewards`` checks them (:class:`RewardOverrides`), so an
        unknown setting, an unknown label or score, a non-number or a non-finite number raises
        :class:`RewardInputError` with field ``overrides.<name>[.<key>]``.
        """
        if not overrides:
            return self
        given = {name: _str_keys(value) for name, value in overrides.items() if value is not None}
        try:
            checked = RewardOverrides.model_validate(given).model_dump(exclude_none=True)
        except ValidationError as e:
            raise input_error(e, prefix="overrides.") from None
        values = self.as_dict()
        for name, value in checked.items():
            values[name] = {**values[name], **value} if isinstance(value, dict) else value
        try:
            return type(self)(**values)
        except RewardInputError as e:
            raise RewardInputError("overrides." + e.field, e.message, e.fix) from None

    def as_dict(self) -> dict[str, Any]:
        """Plain values (fresh map dicts), e.g. for JSON."""
        return {name: dict(v) if isinstance(v, Mapping) else v for name, v in self}


def _str_keys(value: Any) -> Any:
    """A map's keys as strings: a Python caller's ``{5: 1.0}`` is score "5", as in RLFHConfig."""
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else value


def input_error(err: ValidationError, prefix: str = "") -> RewardInputError:
    """The first problem of a pydantic error as a :class:`RewardInputError` (``<prefix><name>[.<key>]``)."""
    e = err.errors(include_url=False)[0]
    loc = [str(p) for p in e["loc"] if p != "[key]"]       # a bad map key is reported at the key itself
    name = loc[0] if loc else "settings"
    ctx = e.get("ctx") or {}
    kind = e["type"]
    if kind == "extra_forbidden":
        message, fix = "unknown reward setting", f"settings are: {', '.join(sorted(RewardSettings.model_fields))}"
    elif kind == "literal_error":
        message, fix = f"{e['input']!r} is not allowed", f"use one of {ctx.get('expected')}"
    elif kind == "finite_number":
        message, fix = f"must be a finite number, got {e['input']!r}", "NaN and Infinity are not allowed"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        # the setting's own name in capitals, as its environment variable reads (e.g. TRUTH_CONFIDENCE)
        message = f"{name.upper()} {e['msg'].lower().replace('input should be', 'must be')}, got {e['input']!r}"
        ops = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
        fix = "send a value " + " and ".join(f"{ops.get(k, k)} {v}" for k, v in ctx.items())
    elif kind == "dict_type":
        message, fix = e["msg"], "send a JSON object of numbers, e.g. {\"Wrong\": -1.0}"
    else:
        message, fix = e["msg"].removeprefix("Value error, "), "send a finite JSON number"
    return RewardInputError(prefix + (".".join(loc) or name), message, fix)


def _wire_type(annotation: Any) -> Any:
    """The strict JSON type of a setting in a request: numbers (also map values) become :data:`RewardNumber`."""
    if annotation is float:
        return RewardNumber
    if get_origin(annotation) is dict:
        key, value = get_args(annotation)
        return dict[key, _wire_type(value)]
    return annotation


def _overrides_model() -> type[BaseModel]:
    """:class:`RewardOverrides`: every :class:`RewardSettings` field, optional (None: keep the service's value),
    with the same constraints and description, strict and closed (an unknown setting is an error)."""
    fields = {}
    for name, info in RewardSettings.model_fields.items():
        wire = Annotated[(_wire_type(info.annotation), *info.metadata)] if info.metadata else _wire_type(
            info.annotation)
        fields[name] = (Optional[wire], Field(None, description=info.description))
    return create_model(
        "RewardOverrides", __config__=ConfigDict(extra="forbid", strict=True), __module__=__name__,
        __doc__="Per-request overrides of the service's reward settings (:class:`RewardSettings`).\n\n"
                "Omitted fields keep the service's value; partial maps update the service's maps. Numbers are "
                "finite JSON numbers with ``|x| <= 1e6`` (MAX_SETTING_ABS).",
        **fields)


RewardOverrides = _overrides_model()
