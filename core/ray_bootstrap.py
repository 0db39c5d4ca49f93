"""Start an embedded local Ray, or join an existing cluster, and shut it down cleanly.

``RAY_ADDRESS`` empty (the default) starts a private local Ray for this process:

- **loopback only**: GCS, raylet, worker gRPC ports, the dashboard agent / metrics
  agent and the runtime-env agent all listen on 127.0.0.1 (Ray 2.60 has no bind
  option; the node IP decides, and ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes it
  the loopback address, as Ray does on macOS and Windows). The dashboard is on
  ``127.0.0.1:DASHBOARD_PORT`` (a free port when that one is taken);
- **Ray token auth on** (Ray 2.60's default when ``RAY_AUTH_MODE`` is unset: it creates
  ``~/.ray/auth_token`` once, mode 600 in ``~/.ray``): every gRPC call and the
  dashboard's HTTP API (job submission included) need that token, so another
  local user cannot run code as this one. ``RAY_AUTH_MODE=disabled`` in the
  environment turns it off (tests on loopback do that), with a warning;
- usage stats off, and a runtime env that tells every worker to run on CPU when
  the machine has no GPU (``DS_ACCELERATOR=cpu``...).

``RAY_ADDRESS=auto`` or ``ray://host:10001`` / ``host:6379`` joins a running
cluster (KubeRay, ``ray start``); it is never shut down from here.

When Ray is already initialised in this process (tests do that), it is reused
and left running on :meth:`RayHandle.shutdown`.

Never calls ``ray stop``: that would kill every Ray on the machine.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Optional

from core.config import ProcessSettings
from core.ports import free_port, port_is_free  # noqa: F401 (re-exported: callers import them from here too)

log = logging.getLogger(__name__)

# Env vars every worker of an embedded CPU cluster gets (and this process too).
CPU_WORKER_ENV = {
    "DS_ACCELERATOR": "cpu",
    "TOKENIZERS_PARALLELISM": "false",
    "CUDA_VISIBLE_DEVICES": "",
}
LOCAL_RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # the node IP of a cluster that cannot grow is the loopback address, so every Ray port binds there
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # Serve gives its HTTP proxy 3 readiness checks of 5 s, then kills it and `serve.start` fails. On a laptop
    # whose cores are busy (another run beside this one) the proxy's start-up imports take longer than that:
    # seen 2026-11-29, 2 cores, the train.sh test beside `make train`. The processes of this Ray read it.
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "30",
}
#: Where Ray 2.60 keeps the token of a local cluster (created by the first ``ray.init`` with auth on).
RAY_TOKEN_FILE = os.path.join(os.path.expanduser("~"), ".ray", "auth_token")


@dataclass
class RayHandle:
    """What :func:`start_ray` did; :meth:`shutdown` undoes only that."""

    address: str
    dashboard_url: Optional[str]
    started_here: bool
    num_cpus: float = 0.0
    num_gpus: float = 0.0
    env_vars: dict = field(default_factory=dict)

    def shutdown(self) -> None:
        import ray
        if self.started_here and ray.is_initialized():
            log.info("shutting down the embedded Ray")
            ray.shutdown()


def has_gpu() -> bool:
    """True when this process can see a CUDA device (never imports CUDA eagerly when torch is missing)."""
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def worker_env(cfg) -> dict[str, str]:
    """Env vars for every Ray worker: CPU settings when no GPU is requested or visible."""
    wants_gpu = any(getattr(cfg, k) > 0 for k in (
        "actor_num_gpus_per_node", "critic_num_gpus_per_node", "ref_num_gpus_per_node"))
    env: dict[str, str] = {}
    if not wants_gpu and not has_gpu():
        env.update(CPU_WORKER_ENV)
        # Ray gives each fractional-CPU actor OMP_NUM_THREADS=1. Keep it: the driver runs different actors
        # concurrently, and on a small shared CPU box one thread per actor is several times faster than
        # oversubscribed OpenMP threads (docs/PERFORMANCE.md, "CPU threads on a busy machine").
    cache = ProcessSettings.load().cache_dir       # a process setting: the workers must use this process's folder
    if cache:
        env["RLFH_CACHE_DIR"] = cache
    return env


def start_ray(cfg, num_cpus: Optional[float] = None, include_dashboard: Optional[bool] = None) -> RayHandle:
    """Join ``cfg.ray_address`` or start an embedded Ray; returns a handle to shut it down.

    ``num_cpus``: logical CPUs of the embedded cluster (default: enough for every actor and Serve replica
    the config asks for, at least the machine's core count; Ray only uses them for placement).
    ``include_dashboard``: default True for a run, tests pass False.
    """
    import ray

    if ray.is_initialized():
        ctx = ray.get_runtime_context()
        log.info("reusing the Ray already initialised in this process (%s)", ctx.gcs_address)
        return RayHandle(address=ctx.gcs_address, dashboard_url=None, started_here=False)

    env_vars = worker_env(cfg)
    for k, v in env_vars.items():
        os.environ.setdefault(k, v)

    if cfg.ray_address:
        log.info("joining the Ray cluster at %s", cfg.ray_address)
        ctx = ray.init(address=cfg.ray_address, runtime_env={"env_vars": env_vars}, log_to_driver=True)
        url = _dashboard_url(ctx)
        if url:
            log.info("Ray dashboard: %s", url)
        res = ray.cluster_resources()
        return RayHandle(address=cfg.ray_address, dashboard_url=url, started_here=True,
                         num_cpus=res.get("CPU", 0), num_gpus=res.get("GPU", 0), env_vars=env_vars)

    # Embedded local cluster: loopback only, Ray token auth on (unless RAY_AUTH_MODE says otherwise), no usage stats.
    for k, v in LOCAL_RAY_ENV.items():
        os.environ.setdefault(k, v)
    _bind_loopback()
    auth = os.environ.get("RAY_AUTH_MODE", "").lower()
    if auth == "disabled":
        log.warning("RAY_AUTH_MODE=disabled: Ray token auth is off, so any local user can reach this cluster's "
                    "ports (and submit jobs through the dashboard API). Unset it to turn auth back on.")
    else:
        log.info("Ray token auth is on (token in %s)", os.environ.get("RAY_AUTH_TOKEN_PATH") or RAY_TOKEN_FILE)
    if num_cpus is None:
        num_cpus = max(os.cpu_count() or 1, math.ceil(_cpus_needed(cfg)))
    if include_dashboard is None:
        include_dashboard = True
    # address="local": always a new embedded cluster. Without it ray.init() joins a cluster that `ray start` left
    # on this machine (and then refuses num_cpus); RAY_ADDRESS is the way to join one on purpose.
    kwargs = dict(address="local", num_cpus=num_cpus, include_dashboard=include_dashboard,
                  runtime_env={"env_vars": env_vars}, log_to_driver=True)
    if include_dashboard:
        port = cfg.dashboard_port
        if not port_is_free(port):
            new = free_port()
            log.warning("DASHBOARD_PORT %d is taken on this machine; the dashboard uses %d instead", port, new)
            port = new
        kwargs.update(dashboard_host="127.0.0.1", dashboard_port=port)
    ctx = ray.init(**kwargs)
    url = _dashboard_url(ctx)
    if url:
        log.info("Ray dashboard: %s", url)
    return RayHandle(address=ctx.address_info.get("gcs_address", ""), dashboard_url=url, started_here=True,
                     num_cpus=num_cpus, env_vars=env_vars)


def _bind_loopback() -> None:
    """Make the embedded cluster's node IP the loopback address (so every Ray port binds 127.0.0.1).

    Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when it is imported; Ray may already be imported in this
    process, so its constant is set too (child processes read the environment variable).
    """
    if os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0").lower() in ("1", "true"):
        return      # the user asked for a reachable node IP
    try:
        from ray._private import ray_constants
        ray_constants.ENABLE_RAY_CLUSTER = False
    except Exception as e:  # pragma: no cover - a Ray without that constant: ports bind where Ray decides
        log.warning("could not bind the embedded Ray to loopback (%s); its ports follow Ray's defaults", e)


def _dashboard_url(ctx) -> Optional[str]:
    url = getattr(ctx, "dashboard_url", None)
    if not url:
        return None
    return url if url.startswith("http") else f"http://{url}"


def _cpus_needed(cfg) -> float:
    """Logical CPUs every actor and Serve replica of ``cfg`` reserves, plus headroom for Serve's proxy."""
    n_actors = cfg.actor_num_nodes + cfg.vllm_num_engines
    if cfg.advantage_estimator == "gae":
        n_actors += cfg.critic_num_nodes
    if cfg.kl_coef > 0:
        n_actors += cfg.ref_num_nodes
    services = cfg.verifier_num_cpus * max(cfg.verifier_replicas, cfg.max_replicas) \
        + cfg.reward_num_cpus * max(cfg.reward_replicas, cfg.max_replicas)
    return n_actors * cfg.num_cpus_per_actor + services + 1.0
