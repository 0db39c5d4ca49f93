"""``rlfh serve``: run the reward + verifier services (Ray Serve) until Ctrl-C or SIGTERM (clean shutdown, exit 0).

Light imports only at module level (argparse, config): Ray is imported when the command runs.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import time

from core.config import ConfigError, RLFHConfig, ServiceSettings, env_name, flag_name, redact_url
from core.ray_bootstrap import RAY_TOKEN_FILE, start_ray
from core.reaper import start_for_this_process

log = logging.getLogger(__name__)

_EXTRA_FIELDS = ("model_path", "ray_address", "dashboard_port")
#: Settings of the service group that only the trainer-side reward client reads (not the service).
_CLIENT_FIELDS = ("reward_url", "reward_timeout_s", "reward_max_retries")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="Run the reward service (verifier + token rewards, Ray Serve, HTTP) until Ctrl-C or SIGTERM.",
        description="Start the RLFH reward service on Ray Serve: a verifier deployment and a reward deployment "
                    "behind one HTTP ingress (POST /v1/rewards, POST /v1/verify, POST /get_reward for OpenRLHF, "
                    "GET /healthz, GET /v1/stats, OpenAPI at /docs). Runs on an embedded local Ray, or joins "
                    "RAY_ADDRESS. Verification results are cached in Redis when REDIS_URL is set (shared by all "
                    "replicas), in memory otherwise. Every flag is also an environment variable.",
        epilog="Example: rlfh serve --serve-port 8000 --redis-url redis://127.0.0.1:6379/0 --reward-replicas 2")
    ServiceSettings.add_cli_args(p, groups={"service", "reward", "verifier"}, exclude=_CLIENT_FIELDS)
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


class _Terminate(Exception):
    """SIGTERM arrived (Kubernetes rolling out a new version, ``kill``, systemd): stop like Ctrl-C."""


def _on_sigterm(signum, frame):
    raise _Terminate()


def _cmd_serve(args: argparse.Namespace) -> int:
    cfg = RLFHConfig.from_args(args)     # the launcher reads RAY_ADDRESS / DASHBOARD_PORT; replicas get the section
    if cfg.verifier_backend == "self":
        raise ConfigError("VERIFIER_BACKEND=self judges with the policy's rollout engines, which only `rlfh train` "
                          "has (it hands them to the verifier replicas); serve with evidence or llm")

    import ray
    from ray import serve

    from reward_service.app import deploy   # Ray Serve and FastAPI: imported when serving, not for `rlfh --help`

    # SIGTERM shuts down like Ctrl-C: Serve's replicas and proxy stop, then the embedded Ray and all its
    # processes (dashboard, agents), so nothing is left holding ports; exit status 0.
    signal.signal(signal.SIGTERM, _on_sigterm)
    stopped_by = "Ctrl-C"
    handle = None
    try:
        # if this process is SIGKILLed (no handler can run), a watcher ends what its embedded Ray leaves behind
        start_for_this_process()
        # an embedded Ray gets the local defaults from start_ray (loopback only, Ray token auth, no usage stats)
        handle = start_ray(cfg, num_cpus=args.num_cpus, include_dashboard=not args.no_dashboard)
        # ray.init installs Ray's C++ failure handler for SIGTERM (a stack dump, then abort): take it back
        signal.signal(signal.SIGTERM, _on_sigterm)
        url = deploy(cfg, cfg.serve_host, cfg.serve_port)
        print(f"RLFH reward service: {url}")
        print(f"  rewards   POST {url}/v1/rewards")
        print(f"  verify    POST {url}/v1/verify")
        print(f"  OpenRLHF  POST {url}/get_reward")
        print(f"  health    GET  {url}/healthz   stats GET {url}/v1/stats")
        print(f"  API docs  {url}/docs")
        if handle.dashboard_url:
            tok = "off (RAY_AUTH_MODE=disabled)" if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled" \
                else f"token in {os.environ.get('RAY_AUTH_TOKEN_PATH') or RAY_TOKEN_FILE}"
            print(f"  Ray dashboard {handle.dashboard_url} (Ray auth: {tok})")
        print(f"  cache: {'Redis ' + redact_url(cfg.redis_url) if cfg.redis_url else 'in-process LRU (no REDIS_URL)'}; "
              f"auth: {'bearer token' if cfg.reward_api_token else 'none'}")
        print("Ctrl-C (or SIGTERM) to stop.", flush=True)
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    except _Terminate:
        stopped_by = "SIGTERM"
    finally:
        # a second Ctrl-C / SIGTERM must not cut the clean shutdown short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"stopping ({stopped_by}) ...", flush=True)
        try:
            if ray.is_initialized():
                serve.shutdown()
        except Exception as e:  # pragma: no cover - Ray already gone
            log.warning("serve.shutdown failed: %s", e)
        finally:
            if handle is not None and ray.is_initialized():
                handle.shutdown()
        print("stopped.", flush=True)
    return 0
