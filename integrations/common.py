"""Shared by the integrations: a :class:`RewardClient` configured like the rest of rlfh."""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional

from reward_service.client import RewardClient

#: The environment variables the integrations read (meaning and defaults as in ``rlfh config``).
CLIENT_ENV = ("REWARD_URL", "REWARD_API_TOKEN", "REWARD_TIMEOUT_S", "REWARD_MAX_RETRIES", "MAX_BATCH_ITEMS")


def client_from_env(url: Optional[str] = None, environ: Optional[Mapping[str, str]] = None,
                    **overrides: Any) -> RewardClient:
    """A RewardClient from ``REWARD_URL``, ``REWARD_API_TOKEN``, ``REWARD_TIMEOUT_S``, ``REWARD_MAX_RETRIES`` and
    ``MAX_BATCH_ITEMS`` (batch size), read and validated by :class:`core.config.RLFHConfig`.

    Only those variables are read, so a trainer's unrelated environment (its own ``MODEL_PATH``...) cannot
    break the reward function. ``url`` and keyword ``overrides`` (``timeout_s``, ``max_retries``,
    ``batch_size``, ``token``) win over the environment. Raises ``ValueError`` when no URL is given.
    """
    from core.config import RLFHConfig

    env = os.environ if environ is None else environ
    cfg = RLFHConfig.load(environ={k: env[k] for k in CLIENT_ENV if env.get(k)})
    url = url or cfg.reward_url
    if not url:
        raise ValueError("no reward service URL: set REWARD_URL (e.g. http://127.0.0.1:8000) or pass url=")
    kw: dict[str, Any] = {"token": cfg.reward_api_token or None, "timeout_s": cfg.reward_timeout_s,
                          "max_retries": cfg.reward_max_retries, "batch_size": cfg.max_batch_items}
    kw.update({k: v for k, v in overrides.items() if v is not None})
    return RewardClient(url, **kw)


def label_text(label: Any) -> Optional[str]:
    """A dataset label as ``/get_reward`` takes it: None, a gold-answer string, or a JSON object string."""
    if label is None or isinstance(label, str):
        return label
    if isinstance(label, Mapping):
        return json.dumps(dict(label))
    return str(label)


def materials_list(value: Any) -> list[str]:
    """A dataset's evidence column as the service's ``materials`` list (None / one string / a list of them)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    return [str(v) for v in value if str(v).strip()]

