"""The Ray Serve config of the verifier + reward services, generated from :class:`core.config.ServiceSettings`.

One function, :func:`serve_config`, turns a config into the Serve config that
``serve deploy`` / ``serve run`` accept and that KubeRay's RayService takes
as ``spec.serveConfigV2``: one application (import path
``reward_service.app:app_builder``) whose ``args`` carry the service settings
as environment-variable strings, plus per-deployment replicas, autoscaling and
``num_cpus``. The Helm chart (``helm/rlfh``) builds the same document from its
values; ``tests/test_helm.py`` renders the chart and checks that the two agree.

Contract with ``reward_service.app:app_builder(args)``: ``args`` maps env var
names (``GRANULARITY``, ``VERIFICATION_MAP``...) to strings, so the builder
does ``ServiceSettings.load({**os.environ, **args})``. Secrets (``REWARD_API_TOKEN``,
``MODEL_API_KEY``, ``REDIS_URL``, which may hold a password) are never put in
``args`` unless asked: a Serve config is stored in plain text (a RayService is
readable by anyone who can read the namespace), so on Kubernetes they reach
the replicas as container env vars from a Secret.

Print it::

    python -m reward_service.serve_config                      # YAML, from the environment
    GRANULARITY=sentence python -m reward_service.serve_config --format json
    python -m reward_service.serve_config --verifier-replicas 2 --max-replicas 4
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional

from core.config import SECRET_ENVS, ConfigError, ServiceSettings, env_name

APP_NAME = "rlfh-rewards"
IMPORT_PATH = "reward_service.app:app_builder"
ROUTE_PREFIX = "/"
# Names inside the app (reward_service/app.py takes them from here; this module stays import-light).
VERIFIER_DEPLOYMENT = "RLFHVerifier"
REWARD_DEPLOYMENT = "RLFHRewards"
# Routes the app serves under ROUTE_PREFIX (documentation, NOTES.txt and the chart test use them).
ROUTES = ("/v1/verify", "/v1/rewards", "/get_reward", "/healthz")

#: Settings of the service groups that only the trainer (the reward *client*) reads, or that
#: the Serve config states elsewhere (``http_options``, ``deployments``).
NOT_ARGS = ("REWARD_URL", "REWARD_TIMEOUT_S", "REWARD_MAX_RETRIES", "SERVE_HOST", "SERVE_PORT",
            "VERIFIER_REPLICAS", "REWARD_REPLICAS", "SERVE_MAX_REPLICAS", "VERIFIER_NUM_CPUS",
            "REWARD_NUM_CPUS")
#: Serve autoscaling target: queued + running requests per replica before scaling up.
TARGET_ONGOING_REQUESTS = 4
#: Requests each caller (every HTTP proxy, every deployment handle) may queue for a deployment beyond what its
#: replicas are running; more answer HTTP 503 with ``Retry-After`` at once instead of waiting in an unbounded
#: queue (the trainer-side client retries 5xx with back-off). Ray's default is -1: unbounded.
MAX_QUEUED_REQUESTS = 128
#: Seconds a refused caller is told to wait (``Retry-After`` of the 503).
BACKPRESSURE_RETRY_AFTER_S = 2
#: Requests one replica runs at once (Serve's ``max_ongoing_requests``).
MAX_ONGOING_REQUESTS = {VERIFIER_DEPLOYMENT: 16, REWARD_DEPLOYMENT: 64}
#: Seconds between a stopping replica's checks for requests still in flight (Serve's
#: ``graceful_shutdown_wait_loop_s``; its default, 2 s, is slept before the first check, so every replica took
#: 2 s to stop even when idle, and a shutdown, redeploy or scale-down with both deployments ~4 s). How long a
#: request in flight may still run is unchanged (``graceful_shutdown_timeout_s``, Serve's 20 s).
GRACEFUL_SHUTDOWN_WAIT_LOOP_S = 0.2


def backpressure_options(max_queued_requests: int = MAX_QUEUED_REQUESTS,
                         retry_after_s: int = BACKPRESSURE_RETRY_AFTER_S) -> dict[str, Any]:
    """Serve deployment options for a bounded request queue: 503 + ``Retry-After`` beyond it."""
    return {"max_queued_requests": max_queued_requests,
            "backpressure_config": {"status_code": 503, "retry_after_s": retry_after_s}}


def shutdown_options() -> dict[str, Any]:
    """Serve deployment options for stopping a replica (GRACEFUL_SHUTDOWN_WAIT_LOOP_S)."""
    return {"graceful_shutdown_wait_loop_s": GRACEFUL_SHUTDOWN_WAIT_LOOP_S}


def service_arg_envs() -> list[str]:
    """Env var names that go into the app's ``args``: the service settings (:class:`ServiceSettings`) but
    secrets and what the Serve config states elsewhere (NOT_ARGS), in definition order."""
    envs = (env_name(name) for name in ServiceSettings.model_fields)
    return [env for env in envs if env not in NOT_ARGS and env not in SECRET_ENVS]


def service_args(cfg: ServiceSettings, include_secrets: bool = False) -> dict[str, str]:
    """The app's ``args``: service settings as env-var strings (the form ``ServiceSettings.load`` reads)."""
    env = cfg.to_env()
    args = {k: env[k] for k in service_arg_envs()}
    if include_secrets:
        args.update({k: env[k] for k in SECRET_ENVS if env[k]})
    return args


def scaling_options(replicas: int, max_replicas: int) -> dict[str, Any]:
    """Serve deployment options for ``replicas`` (``VERIFIER_REPLICAS`` / ``REWARD_REPLICAS``) and
    ``max_replicas`` (``SERVE_MAX_REPLICAS``): ``{"num_replicas": n}`` when autoscaling is off (0), else an
    ``autoscaling_config`` from ``replicas`` to ``max_replicas``. Used by this Serve config and by
    :func:`reward_service.app.build_app`, so ``rlfh serve`` and a RayService scale the same way.
    """
    if max_replicas <= 0:
        return {"num_replicas": replicas}
    if max_replicas < replicas:
        raise ConfigError(
            f"SERVE_MAX_REPLICAS (--max-replicas) = {max_replicas}: must be >= the deployment's minimum "
            f"replicas ({replicas}) or 0 to turn autoscaling off")
    return {"autoscaling_config": {"min_replicas": replicas, "max_replicas": max_replicas,
                                   "target_ongoing_requests": TARGET_ONGOING_REQUESTS}}


def _deployment(name: str, replicas: int, num_cpus: float, max_replicas: int,
                node_resource: str = "") -> dict[str, Any]:
    # SERVICE_NODE_RESOURCE: the config's ray_actor_options replace the code's, so the resource is asked for here too
    on_node = {"resources": {node_resource: 0.001}} if node_resource else {}
    return {"name": name, **scaling_options(replicas, max_replicas),
            "ray_actor_options": {"num_cpus": num_cpus, **on_node},
            "max_ongoing_requests": MAX_ONGOING_REQUESTS[name], **backpressure_options(), **shutdown_options()}


def serve_config(cfg: ServiceSettings, *, include_secrets: bool = False, route_prefix: str = ROUTE_PREFIX,
                 app_name: str = APP_NAME) -> dict[str, Any]:
    """The Serve config (``serve deploy`` schema / RayService ``serveConfigV2``) for ``cfg``.

    ``include_secrets`` adds REWARD_API_TOKEN / MODEL_API_KEY / REDIS_URL to ``args`` (only for a
    local ``serve run``; on Kubernetes they come from a Secret).
    """
    if not route_prefix.startswith("/"):
        raise ConfigError(f"route_prefix = {route_prefix!r}: must start with '/' (e.g. '/' or '/rlfh')")
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": cfg.serve_host, "port": cfg.serve_port},
        "applications": [{
            "name": app_name,
            "route_prefix": route_prefix,
            "import_path": IMPORT_PATH,
            "args": service_args(cfg, include_secrets=include_secrets),
            "deployments": [
                _deployment(VERIFIER_DEPLOYMENT, cfg.verifier_replicas, cfg.verifier_num_cpus, cfg.max_replicas,
                            cfg.service_node_resource),
                _deployment(REWARD_DEPLOYMENT, cfg.reward_replicas, cfg.reward_num_cpus, cfg.max_replicas,
                            cfg.service_node_resource),
            ],
        }],
    }


def to_yaml(doc: dict[str, Any]) -> str:
    import yaml
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)


def build_parser(parser: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(
        prog="python -m reward_service.serve_config",
        description="Print the Ray Serve config (serve deploy / RayService serveConfigV2) of the verifier + "
                    "reward services, from the environment and the flags below (flag > env var > default).")
    p.add_argument("--format", choices=["yaml", "json"], default="yaml", help="Output format (default yaml).")
    p.add_argument("--route-prefix", default=ROUTE_PREFIX,
                   help=f"HTTP route prefix of the app (default {ROUTE_PREFIX!r}: POST /v1/rewards).")
    p.add_argument("--include-secrets", action="store_true",
                   help="Also put REWARD_API_TOKEN / MODEL_API_KEY / REDIS_URL in args (local use only: a Serve "
                        "config is stored in plain text).")
    ServiceSettings.add_cli_args(p)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = ServiceSettings.from_args(args)
        doc = serve_config(cfg, include_secrets=args.include_secrets, route_prefix=args.route_prefix)
    except ConfigError as e:
        print(f"serve_config: {e}", file=sys.stderr)
        return 2
    print(json.dumps(doc, indent=2) if args.format == "json" else to_yaml(doc), end="" if args.format == "yaml"
          else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
