"""``rlfh serve``: run the reward + verifier services (Ray Serve) until Ctrl-C.

Light imports only at module level (argparse, config): Ray is imported when the command runs.
"""
from __future__ import annotations

import argparse
import logging
import signal

from cluster.config import RLFHConfig, env_name, flag_name, redact_url

log = logging.getLogger(__name__)

_EXTRA_FIELDS = ("model_path", "ray_address", "dashboard_port")
#: Settings of the service group that only the trainer-side reward client reads (not the service).
_CLIENT_FIELDS = ("reward_url", "reward_timeout_s", "reward_max_retries")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="Run the reward service (verifier + token rewards, Ray Serve, HTTP) until Ctrl-C.",
        description="Start the RLFH reward service on Ray Serve: a verifier deployment and a reward deployment "
                    "behind one HTTP ingress (POST /v1/rewards, POST /v1/verify, POST /get_reward for OpenRLHF, "
                    "GET /healthz, GET /v1/stats, OpenAPI at /docs). Runs on an embedded local Ray, or joins "
                    "RAY_ADDRESS. Verification results are cached in Redis when REDIS_URL is set (shared by all "
                    "replicas), in memory otherwise. Every flag is also an environment variable.",
        epilog="Example: rlfh serve --serve-port 8000 --redis-url redis://127.0.0.1:6379/0 --reward-replicas 2")
    RLFHConfig.add_cli_args(p, groups={"service", "reward", "verifier"}, exclude=_CLIENT_FIELDS)
    g = p.add_argument_group("cluster settings")
    for name in _EXTRA_FIELDS:
        info = RLFHConfig.model_fields[name]
        g.add_argument(flag_name(name), dest=name, default=None, metavar=env_name(name),
                       help=f"{info.description} [env {env_name(name)}; default: {info.default}]")
    g.add_argument("--no-dashboard", action="store_true",
                   help="Start the embedded Ray without its dashboard (ignored when joining RAY_ADDRESS).")
    g.add_argument("--num-cpus", type=float, default=None,
                   help="Logical CPUs of the embedded Ray (default: the machine's cores, or what the replicas "
                        "need if more).")
    p.set_defaults(func=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    cfg = RLFHConfig.from_args(args)
    import time

    import ray
    from ray import serve

    from cluster.ray_bootstrap import start_ray
    from reward_service.app import deploy

    # an embedded Ray gets the local defaults (no token auth, no usage stats) from start_ray
    handle = start_ray(cfg, num_cpus=args.num_cpus, include_dashboard=not args.no_dashboard)
    try:
        url = deploy(cfg, cfg.serve_host, cfg.serve_port)
        print(f"RLFH reward service: {url}")
        print(f"  rewards   POST {url}/v1/rewards")
        print(f"  verify    POST {url}/v1/verify")
        print(f"  OpenRLHF  POST {url}/get_reward")
        print(f"  health    GET  {url}/healthz   stats GET {url}/v1/stats")
        print(f"  API docs  {url}/docs")
        if handle.dashboard_url:
            print(f"  Ray dashboard {handle.dashboard_url}")
        print(f"  cache: {'Redis ' + redact_url(cfg.redis_url) if cfg.redis_url else 'in-process LRU (no REDIS_URL)'}; "
              f"auth: {'bearer token' if cfg.reward_api_token else 'none'}")
        print("Ctrl-C to stop.", flush=True)
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        print("stopping ...", flush=True)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not cut the clean shutdown short
        try:
            serve.shutdown()
        finally:
            if ray.is_initialized():
                handle.shutdown()
    return 0
