"""Checks of a run's settings that need more than the config can see: the verifier's reading of the abstention
text (the config sits below the verifier), and the settings the chosen actor layout ignores (the layout is
resolved when the actor groups start).
"""
from __future__ import annotations

import logging

from core.config import ConfigError, RLFHConfig
from verifier_service.text import is_abstention_text

log = logging.getLogger(__name__)

#: Settings the colocated layout (every role in one process on one node) has no use for.
COLOCATED_IGNORES = ("vllm_num_engines", "vllm_tensor_parallel_size", "colocate_actor_ref", "colocate_all_models",
                     "critic_num_nodes", "critic_num_gpus_per_node", "ref_num_nodes", "ref_num_gpus_per_node")


def check_abstain_text(cfg: RLFHConfig) -> None:
    """ConfigError unless the abstention candidate (ABSTAIN_TEXT, used when ABSTAIN_SAMPLES > 0) reads as an
    abstention to the verifier."""
    if cfg.abstain_samples and not is_abstention_text(cfg.abstain_text):
        raise ConfigError(f"ABSTAIN_TEXT={cfg.abstain_text!r} (--abstain-text) does not read as an abstention to the "
                          "verifier (it would be graded as an answer); use e.g. \"I don't know.\"")


def ignored_by_layout(cfg: RLFHConfig, layout: str) -> list[str]:
    """The settings in :data:`COLOCATED_IGNORES` that differ from their defaults when ``layout`` is colocated
    (the user set them, and they will do nothing); [] for other layouts."""
    if layout != "colocated":
        return []
    fields = type(cfg).model_fields
    return [n for n in COLOCATED_IGNORES if n in fields and getattr(cfg, n) != fields[n].default]


def warn_ignored_by_layout(cfg: RLFHConfig, layout: str) -> None:
    """A warning for each setting :func:`ignored_by_layout` finds."""
    for name in ignored_by_layout(cfg, layout):
        log.warning("%s=%s is ignored by the %s layout (MODEL_LAYOUT; one process holds every role on one node); "
                    "use MODEL_LAYOUT=separate for it to take effect", name.upper(), getattr(cfg, name), layout)
