"""Every setting's names: its field, its environment variable and its flag, read from one registry that each
settings class fills when it is defined (:class:`core.settings.base.Settings`); the renamed settings and how they
are refused; the secrets and how they are printed.

The bottom of the settings package: it imports no settings class, so the recipe loader (:mod:`core.recipes`) and
the classes can both use it.
"""
from __future__ import annotations

import argparse
from typing import Any, Iterable

from core.errors import ConfigError

#: field name -> its pydantic FieldInfo (``json_schema_extra``: env, cli, role, doc), filled by every settings class.
_FIELDS: dict[str, Any] = {}

#: Settings renamed so that each concept has one family of names (issues 49 and 62): old name -> new name. An old
#: name in the environment, a recipe or a flag is refused with a ConfigError that names the new one.
RENAMED_SETTINGS: dict[str, str] = {
    "OUTCOME_ABSTAIN": "ABSTAIN_OUTCOME_REWARD",
    "OUTCOME_ABSTAIN_EVIDENCE": "ABSTAIN_OUTCOME_REWARD_EVIDENCE",
    "ABSTAIN_PRICE": "ABSTAIN_OUTCOME_REWARD_MODE",            # a mode (fixed | answer-mean), not a price
    "ABSTAIN_PRICE_MARGIN": "ABSTAIN_OUTCOME_REWARD_MARGIN",
    "ABSTAIN_PRICE_STEP": "ABSTAIN_TARGET_RATE_STEP",          # the step of ABSTAIN_TARGET_RATE's controller
    "ABSTAIN_REWARD": "ABSTAIN_TOKEN_REWARD",                  # the reward service's token-level one
    # "judge" is the trained claim judge only (VERIFIER_BACKEND=judge, CLAIM_JUDGE_*, `rlfh judge`); the language
    # model the llm and self backends prompt is LLM_* (issue 62), and who decides an outcome is its grader
    "JUDGE_TIMEOUT_S": "LLM_TIMEOUT_S",
    "JUDGE_MAX_RETRIES": "LLM_MAX_RETRIES",
    "JUDGE_MAX_RPM": "LLM_MAX_RPM",
    "JUDGE_MAX_TPM": "LLM_MAX_TPM",
    "JUDGE_MAX_IN_FLIGHT": "LLM_MAX_IN_FLIGHT",
    "JUDGE_MAX_WAIT_S": "LLM_MAX_WAIT_S",
    "JUDGE_FALLBACK_LABEL": "LLM_FALLBACK_LABEL",
    "OUTCOME_JUDGE": "OUTCOME_GRADER",                        # 'gold' (the gold-answer grader) or 'verifier'
}
#: argparse dest prefix of a refused old flag.
RENAMED_DEST = "renamed__"

#: Settings that hold secrets (REDIS_URL may carry a password). They are masked when printed
#: (``rlfh config``, ``rlfh serve``, ``rlfh submit --dry-run``) and are not put into a Serve config
#: or a job's runtime env unless asked for (``reward_service.serve_config``, ``ops.submit``).
SECRET_ENVS: tuple[str, ...] = ("REWARD_API_TOKEN", "MODEL_API_KEY", "REDIS_URL")


def register(fields: dict[str, Any]) -> None:
    """Record a settings class's fields (``Settings.__pydantic_init_subclass__`` calls it)."""
    _FIELDS.update(fields)


def _extra(field: str) -> dict[str, Any]:
    return _FIELDS[field].json_schema_extra or {}


def all_fields() -> dict[str, Any]:
    """Every registered setting: field name -> FieldInfo."""
    return dict(_FIELDS)


def env_name(field: str) -> str:
    """The environment variable of setting ``field`` (its name in capitals unless the field says otherwise)."""
    return _extra(field).get("env", field.upper())


def field_of_env(env: str) -> str:
    """The field name of the setting whose environment variable is ``env`` (KeyError when none)."""
    return {env_name(f): f for f in _FIELDS}[env]


def role_of(field: str) -> str:
    """The role (``model``, ``rollout``, ..., ``process``) of the class that declares setting ``field``."""
    return _extra(field).get("role", "general")


def doc_of(field: str) -> str:
    """Setting ``field``'s longer reference text (docs/CONFIG.md prints it; empty when the help says it all)."""
    return _extra(field).get("doc", "")


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def has_flag(field: str) -> bool:
    """False for a setting read from the environment only (``setting(..., cli=False)``)."""
    return _extra(field).get("cli", True)


def setting_label(field: str) -> str:
    """``ENV (--flag)`` as error messages name a setting; ``ENV`` alone for an environment-only one."""
    return f"{env_name(field)} ({flag_name(field)})" if has_flag(field) else env_name(field)


def renamed_fields() -> dict[str, str]:
    """RENAMED_SETTINGS as field names (old -> new): the old flags ``add_cli_args`` adds, hidden, to refuse them."""
    return {old.lower(): field_of_env(new) for old, new in RENAMED_SETTINGS.items()}


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


def positive_int(text: str) -> int:
    """argparse ``type=`` for counts that must be >= 1 (a clear usage error instead of a hang or a silent slice)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value
