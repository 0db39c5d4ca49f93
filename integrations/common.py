"""Shared by the TRL and verl integrations: a dataset's evidence column as the service's ``materials``.

Their client comes from :func:`reward_service.client.client_from_env` (configured like the rest of rlfh).
"""
from __future__ import annotations

from typing import Any


def materials_list(value: Any) -> list[str]:
    """A dataset's evidence column as the service's ``materials`` list (None / one string / a list of them)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    return [str(v) for v in value if str(v).strip()]
