"""One typed config: every setting, its environment variable, CLI flag, type, default and help.

The settings are defined in :mod:`core.settings`, one class per role, as verl groups its config: the model
(:class:`ModelSettings`), the rollout, the policy and the critic, the reward (the service's, defined once in
:mod:`core.reward_settings`, and the trainer's), the verifier, the services, the placement, the evaluation, the
trainer's run; then the sections read from the environment only (every process's, scripts/train.sh's and
scripts/demo.sh's). :class:`RLFHConfig` composes them all, flat (``cfg.actor_lr``); :class:`ServiceSettings` is the
section the verifier and reward services read. This module is their public face: import settings from here.

``scripts/train.sh``, ``rlfh train``, ``rlfh serve``, the Helm chart's ConfigMap and the RayService's Serve config
all read names from here. Environment variables use the RLFH paper's names (``MODEL_PATH``, ``VERIFICATION_MAP``,
``ACTOR_LR``...).

Precedence: CLI flag > environment variable > recipe > default. A recipe is a named file of settings in
``recipes/`` (``recipes/main.toml``: what ``make train`` runs; the loader is :mod:`core.recipes`), chosen with
``--recipe NAME`` or ``RECIPE=NAME``; ``rlfh config --recipe NAME`` prints every value and where it came from.

A bad value raises :class:`ConfigError` naming the variable, its flag and what it accepts, e.g.::

    ConfigError: GRANULARITY (--granularity) = 'tokens': must be one of token, sentence, response
"""
from __future__ import annotations

import json
from typing import Optional

from core.errors import ConfigError
from core.recipes import (NO_RECIPE, RECIPE_DIRS, RECIPE_ENV, RECIPE_META_KEYS, add_recipe_arg,
                          available_recipes, read_recipe, recipe_label, recipe_name, recipe_path)
from core.reward_settings import DEFAULT_INFORMATIVE_MAP, DEFAULT_VERIFICATION_MAP
from core.settings.base import NODE_RESOURCE_PATTERN, ROLES, Settings, ordered_fields, setting
from core.settings.environment import DemoSettings, LauncherSettings, ProcessSettings
from core.settings.evaluation import EvaluationSettings
from core.settings.model import EMBEDDED_MODEL, ModelPathSettings, ModelSettings
from core.settings.names import (RENAMED_SETTINGS, SECRET_ENVS, doc_of, env_name, field_of_env, flag_name,
                                 has_flag, masked_value, positive_int, redact_url, refuse_renamed, renamed_message,
                                 role_of, setting_label)
from core.settings.placement import PlacementSettings
from core.settings.policy import CriticSettings, PolicySettings
from core.settings.reward import (ServiceRewardSettings, TrainerRewardSettings, parse_informative_map,
                                  parse_verification_map, reward_setting, reward_type)
from core.settings.rlfh_config import RLFHConfig
from core.settings.rollout import EMBEDDED_DATA, RolloutSettings
from core.settings.service import REWARD_FIELDS, ServeSettings, ServiceSettings
from core.settings.trainer import TrainerSettings
from core.settings.verifier import VerifierSettings

__all__ = [
    "ConfigError", "Settings", "setting", "RLFHConfig", "ServiceSettings", "ProcessSettings", "LauncherSettings",
    "DemoSettings", "ModelPathSettings", "ModelSettings", "RolloutSettings", "PolicySettings", "CriticSettings",
    "ServiceRewardSettings", "TrainerRewardSettings", "VerifierSettings", "ServeSettings", "PlacementSettings",
    "EvaluationSettings", "TrainerSettings", "ROLES", "ROLE_CLASSES", "ordered_fields", "describe_settings",
    "env_name", "field_of_env", "flag_name", "has_flag", "setting_label", "role_of", "doc_of", "RENAMED_SETTINGS",
    "refuse_renamed", "renamed_message", "SECRET_ENVS", "masked_value", "redact_url", "positive_int",
    "NODE_RESOURCE_PATTERN", "EMBEDDED_MODEL", "EMBEDDED_DATA", "REWARD_FIELDS", "DEFAULT_VERIFICATION_MAP",
    "DEFAULT_INFORMATIVE_MAP", "parse_verification_map", "parse_informative_map", "reward_type", "reward_setting",
    "RECIPE_ENV", "NO_RECIPE", "RECIPE_DIRS", "RECIPE_META_KEYS", "available_recipes", "recipe_path",
    "recipe_label", "read_recipe", "recipe_name", "add_recipe_arg",
]

#: The class that declares each role's settings, in :data:`ROLES` order (the service-side and trainer-side
#: reward settings are two classes of one role; the model path is the model role's part the services read).
ROLE_CLASSES: dict[str, tuple[type[Settings], ...]] = {
    "model": (ModelPathSettings, ModelSettings), "rollout": (RolloutSettings,),
    "policy": (PolicySettings,), "critic": (CriticSettings,),
    "reward": (ServiceRewardSettings, TrainerRewardSettings), "verifier": (VerifierSettings,),
    "service": (ServeSettings,), "placement": (PlacementSettings,), "evaluation": (EvaluationSettings,),
    "trainer": (TrainerSettings,), "process": (ProcessSettings,), "launcher": (LauncherSettings,),
    "demo": (DemoSettings,),
}


def describe_settings() -> list[dict[str, str]]:
    """Rows for ``rlfh config`` (table, env and json formats), by role."""
    rows = []
    for name, info in ordered_fields(RLFHConfig):
        d = info.default
        rows.append({
            "env": env_name(name), "flag": flag_name(name) if has_flag(name) else "",
            "role": role_of(name),
            "type": ("float or empty" if info.annotation == Optional[float]
                     else getattr(info.annotation, "__name__", str(info.annotation)).replace("typing.", "")),
            "default": json.dumps(d) if isinstance(d, dict) else "" if d is None else str(d),
            "help": info.description or "",
        })
    return rows
