"""Which node each part of a run may go on: the ``*_NODE_RESOURCE`` settings as Ray custom resources.

A node offers a custom resource when it starts (``ray start --resources='{"rlfh_train": 1}'``; the Helm chart's
worker groups set it from their ``nodeResource``). A role whose setting names it asks for
:data:`NODE_RESOURCE_PER_ACTOR` of it per actor (policy, critic, reference, rollout: in their placement-group
bundles, :mod:`actors.group`) or per replica (verifier and reward: in their Serve ``ray_actor_options``,
:mod:`reward_service.app`), so Ray can only put it on such a node, and puts it back on one after a node is lost.

A name no live node offers would leave a placement group or a replica pending for ever: :func:`check_node_resources`
raises a ConfigError naming the setting first. Here, in core, because the reward service (below the actors in the
import layers) checks its own setting too.
"""
from __future__ import annotations

import logging
import time
from typing import Optional, Sequence

from core.config import ConfigError, setting_label

log = logging.getLogger(__name__)

#: role -> the setting naming the Ray custom resource its node must have.
NODE_RESOURCE_SETTINGS = {"policy": "actor_node_resource", "critic": "critic_node_resource",
                          "reference": "ref_node_resource", "rollout": "rollout_node_resource"}
#: How much of its node's custom resource each actor's bundle asks for: a node offers 1 (``ray start
#: --resources='{"rlfh_train": 1}'``), so up to 1000 actors fit on it; the CPUs and GPUs are what limit them.
NODE_RESOURCE_PER_ACTOR = 0.001


def node_resource_setting(role: str) -> Optional[str]:
    """The setting (field name) of ``role``'s node resource: a model role, or ``service`` (verifier + reward)."""
    return "service_node_resource" if role == "service" else NODE_RESOURCE_SETTINGS.get(role)


def node_resource(cfg, role: str) -> str:
    """The Ray custom resource ``role``'s node must offer ("" : any node)."""
    field = node_resource_setting(role)
    return getattr(cfg, field, "") if field else ""


def check_node_resources(cfg, roles: Sequence[str], resources: Optional[dict] = None) -> None:
    """ConfigError when a role of ``roles`` (``service``: the reward service's replicas) names a node resource
    that no live node of the Ray cluster offers (``resources``: ``ray.cluster_resources()`` by default). Ray
    would keep such a placement group or replica pending for ever; this says which setting to fix instead."""
    wanted = {}
    for role in roles:
        if node_resource(cfg, role):
            wanted.setdefault(node_resource(cfg, role), []).append(node_resource_setting(role))
    if not wanted:
        return
    if resources is None:
        import ray
        resources = ray.cluster_resources()
    missing = [(name, fields) for name, fields in wanted.items() if resources.get(name, 0) <= 0]
    if missing:
        have = sorted(k for k in resources if k not in ("CPU", "GPU", "memory", "object_store_memory")
                      and not k.startswith("node:") and not k.startswith("accelerator_type:"))
        lines = [f"{' and '.join(setting_label(f) for f in fields)} = {name!r}: no live node of the Ray cluster "
                 f"offers this resource" for name, fields in missing]
        raise ConfigError("; ".join(lines) + f" (the nodes offer: {', '.join(have) or 'no custom resources'}). "
                          "Start a node with it (`ray start --resources='{\"NAME\": 1}'`; on KubeRay the "
                          "worker group's nodeResource), or clear the setting to place the role on any node.")


def missing_node_resources(cfg, roles: Sequence[str]) -> list[str]:
    """The node resources ``roles`` name that no live node offers now (empty: every one is there)."""
    import ray
    res = ray.cluster_resources()
    return sorted({node_resource(cfg, r) for r in roles} - {""} - {k for k, v in res.items() if v > 0})


def wait_for_node_resources(cfg, roles: Sequence[str], timeout_s: float, poll_s: float = 1.0) -> float:
    """Wait until a live node offers every resource ``roles`` name (a lost node came back, or another with its
    resource joined); returns the seconds waited. After ``timeout_s`` the ConfigError of
    :func:`check_node_resources` says which is still missing."""
    t0 = time.monotonic()
    missing = missing_node_resources(cfg, roles)
    if missing:
        log.warning("waiting up to %.0fs for a node that offers %s (the one that did is gone)", timeout_s,
                    ", ".join(missing))
    while missing and time.monotonic() - t0 < timeout_s:
        time.sleep(poll_s)
        missing = missing_node_resources(cfg, roles)
    check_node_resources(cfg, roles)
    return time.monotonic() - t0
