"""Which model roles a run needs besides the policy: a critic (GAE only) and a reference (KL_COEF > 0 only).

Both the group builder (:mod:`actors.group`) and the colocated actor (:mod:`actors.colocated`, which hosts every
role in one process) ask; here, below both, so neither imports the other for it.
"""
from __future__ import annotations

from core.config import RLFHConfig


def needs_critic(cfg: RLFHConfig) -> bool:
    return cfg.advantage_estimator == "gae"


def needs_reference(cfg: RLFHConfig) -> bool:
    return cfg.kl_coef > 0
