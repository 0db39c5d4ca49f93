"""``rlfh submit``: send a training job to a running Ray cluster (the ``ray job submit`` of this project).

The job is ``bash scripts/train.sh`` run from a copy of this repository (Ray's runtime env
``working_dir``: the repo without .venv, runs/, .git...), with the settings that differ from the
defaults (from your environment and the flags below) plus explicit ``--env KEY=VAL`` as the job's
environment variables. The cluster is reached through its dashboard / job API: ``--address`` or
``RAY_ADDRESS`` (``http://127.0.0.1:8265`` after ``kubectl port-forward svc/<release>-rlfh-head-svc 8265``).

Secrets (REWARD_API_TOKEN, MODEL_API_KEY, REDIS_URL) are not sent unless ``--include-secrets``: a
job's runtime env is shown in the dashboard; on Kubernetes the pods get them from the chart's Secret.

Examples::

    rlfh submit --address http://127.0.0.1:8265 --follow
    GRANULARITY=sentence rlfh submit --max-steps 50 --env NCCL_DEBUG=INFO --dry-run
    rlfh submit --entrypoint "python -c 'print(1)'" --no-working-dir
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from core.config import SECRET_ENVS, ConfigError, RLFHConfig, env_name, masked_value
from core.help_text import plain_doc
from core.retry import backoff_delay

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ENTRYPOINT = "bash scripts/train.sh"
DEFAULT_EXCLUDES = [".venv", ".venv-*", "runs", ".git", "**/__pycache__", "*.egg-info", ".pytest_cache",
                    "build", "docs/img", "*.pyc"]
#: Settings that describe *this* machine's way to the cluster, never the job's.
NOT_FORWARDED = ("RAY_ADDRESS", "DASHBOARD_PORT")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SubmitError(RuntimeError):
    """Submission cannot go ahead; the message says why and what to do."""


# ------------------------------------------------------------------------------------------ payload
def parse_env_pairs(pairs: list[str]) -> dict[str, str]:
    """``["KEY=VAL", ...]`` -> dict, with a clear error for a malformed pair."""
    out = {}
    for p in pairs or []:
        key, sep, val = p.partition("=")
        if not sep or not _ENV_KEY.match(key):
            raise ConfigError(f"--env {p!r}: expected KEY=VALUE with KEY a valid variable name (e.g. NCCL_DEBUG=INFO)")
        out[key] = val
    return out


def job_env(cfg: RLFHConfig, extra: dict[str, str], include_secrets: bool = False) -> dict[str, str]:
    """Environment variables of the job: non-default settings of ``cfg`` + ``extra`` (validated)."""
    defaults = RLFHConfig.load({}).to_env()
    env = {k: v for k, v in cfg.to_env().items() if v != defaults[k] and k not in NOT_FORWARDED}
    bad = [k for k in extra if k in NOT_FORWARDED]
    if bad:
        raise ConfigError(f"--env {bad[0]}: describes how to reach the cluster from here, not a job setting; "
                          "use --address")
    env.update(extra)
    # --env values of settings are checked like any setting (bad value -> ConfigError naming it)
    settings = {env_name(n) for n in RLFHConfig.model_fields}
    RLFHConfig.load(environ={k: v for k, v in env.items() if k in settings})
    if not include_secrets:
        dropped = [k for k in SECRET_ENVS if env.pop(k, None) is not None]
        if dropped:
            log.warning("not sending %s (secrets show in the dashboard); the cluster's own env provides them, "
                        "or pass --include-secrets", ", ".join(dropped))
    return env


def build_payload(args: argparse.Namespace, cfg: RLFHConfig) -> dict[str, Any]:
    """What is sent to ``JobSubmissionClient.submit_job`` (also what ``--dry-run`` prints)."""
    env = job_env(cfg, parse_env_pairs(args.env), include_secrets=args.include_secrets)
    runtime_env: dict[str, Any] = {"env_vars": env}
    if not args.no_working_dir:
        wd = Path(args.working_dir).resolve()
        if not wd.is_dir():
            raise ConfigError(f"--working-dir {args.working_dir!r}: not a folder")
        runtime_env["working_dir"] = str(wd)
        runtime_env["excludes"] = DEFAULT_EXCLUDES + list(args.exclude or [])
    payload: dict[str, Any] = {
        "entrypoint": args.entrypoint,
        "submission_id": args.submission_id or f"rlfh-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
        "runtime_env": runtime_env,
        "metadata": {"submitted_by": "rlfh submit", "entrypoint": args.entrypoint},
    }
    if args.entrypoint_num_cpus is not None:
        payload["entrypoint_num_cpus"] = args.entrypoint_num_cpus
    if args.entrypoint_num_gpus is not None:
        payload["entrypoint_num_gpus"] = args.entrypoint_num_gpus
    return payload


def _masked(payload: dict) -> dict:
    out = json.loads(json.dumps(payload))
    env = out["runtime_env"]["env_vars"]
    for k in SECRET_ENVS:
        if env.get(k):
            env[k] = masked_value(k, env[k])
    return out


# ------------------------------------------------------------------------------------------ cluster
def normalise_address(address: str) -> str:
    if not address:
        raise SubmitError("no cluster address: pass --address http://HOST:8265 or set RAY_ADDRESS. On Kubernetes: "
                          "kubectl port-forward svc/<release>-rlfh-head-svc 8265:8265, then --address "
                          "http://127.0.0.1:8265")
    if address.startswith("ray://") or re.match(r"^[^/]+:(6379|10001)$", address):
        raise SubmitError(f"--address {address!r} is a GCS / Ray Client address; jobs go to the dashboard's job API "
                          "(port 8265), e.g. http://127.0.0.1:8265")
    if "://" not in address:
        address = "http://" + address
    return address.rstrip("/")


def auth_headers(token: Optional[str]) -> dict[str, str]:
    """Headers for the job API: ``token`` (``--auth-token``), else ``RAY_AUTH_TOKEN``, else whatever Ray's own
    job client would send (the token file ``~/.ray/auth_token`` when this machine has token auth on).

    The same headers go to the connection check and to the submission, so a cluster with token auth
    is not reported as unauthorized by the check while the submission itself would have been accepted.
    """
    token = token or os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return {"Authorization": f"Bearer {token}"}
    try:
        from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled
        return dict(get_auth_headers_if_auth_enabled({}) or {})
    except Exception:  # noqa: BLE001 - older/newer Ray layout, or token auth off: no header
        return {}


def probe(address: str, headers: dict[str, str], timeout_s: float, retries: int) -> str:
    """GET /api/version with a timeout and bounded retries; returns the cluster's Ray version."""
    import httpx

    last: Optional[Exception] = None
    for attempt in range(retries + 1):
        try:
            r = httpx.get(address + "/api/version", headers=headers, timeout=timeout_s)
            if r.status_code in (401, 403):
                raise SubmitError(f"{address}: {r.status_code} unauthorized. The cluster uses Ray token auth: set "
                                  "RAY_AUTH_TOKEN (or --auth-token) to its token")
            r.raise_for_status()
            return r.json().get("ray_version", "?")
        except SubmitError:
            raise
        except (httpx.HTTPError, ValueError) as e:
            last = e
            log.warning("cluster at %s not reachable (attempt %d/%d): %s", address, attempt + 1, retries + 1, e)
            if attempt < retries:
                time.sleep(backoff_delay(attempt, 1.0, 10.0))
    raise SubmitError(f"cannot reach the Ray job API at {address} after {retries + 1} attempts ({last}). Is the "
                      "dashboard up and port-forwarded (kubectl port-forward svc/<release>-rlfh-head-svc 8265:8265)?")


def submit(payload: dict, address: str, headers: dict[str, str], retries: int = 2,
           agent_wait_s: float = 90.0) -> tuple[Any, str]:
    """Submit with bounded retries; the fixed submission_id makes a retry idempotent.

    A cluster that just started answers "No available agent to submit job" until its job agent is up:
    that is retried every few seconds for up to ``agent_wait_s`` (not counted against ``retries``).
    """
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address, headers=headers or None)
    sid = payload["submission_id"]
    failures = 0
    agent_deadline = time.monotonic() + agent_wait_s
    while True:
        try:
            return client, client.submit_job(**payload)
        except Exception as e:  # noqa: BLE001 - the job API raises plain RuntimeError/ConnectionError
            msg = str(e)
            if "already exists" in msg:
                log.info("submission %s already accepted (earlier attempt)", sid)
                return client, sid
            if "No available agent" in msg and time.monotonic() < agent_deadline:
                log.info("the cluster's job agent is not up yet; retrying in 3 s")
                time.sleep(3.0)
                continue
            failures += 1
            if failures > retries:
                raise SubmitError(f"job submission to {address} failed after {failures} attempts: {msg}") from e
            log.warning("submission attempt %d failed: %s; retrying", failures, msg)
            time.sleep(backoff_delay(failures - 1, 2.0, 10.0))


def wait_terminal(client, sid: str, timeout_s: Optional[float], poll_s: float = 1.0) -> str:
    """Poll the job's status until it ends (or ``timeout_s``); returns the status name."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        status = str(client.get_job_status(sid)).split(".")[-1]
        if status in TERMINAL:
            return status
        if deadline is not None and time.monotonic() > deadline:
            return status
        time.sleep(poll_s)


def follow(client, sid: str, timeout_s: Optional[float]) -> str:
    """Stream the job's logs to stdout until it ends; returns the final status."""
    async def _tail():
        async for lines in client.tail_job_logs(sid):
            sys.stdout.write(lines)
            sys.stdout.flush()

    try:
        asyncio.run(asyncio.wait_for(_tail(), timeout=timeout_s))
    except asyncio.TimeoutError:
        log.warning("--timeout-s %s reached; the job goes on (rlfh submit does not stop it)", timeout_s)
    except Exception as e:  # noqa: BLE001 - log streaming is best effort; the status poll below decides
        log.warning("log stream ended early (%s); polling the job status", e)
    return wait_terminal(client, sid, timeout_s=30.0 if timeout_s is None else 5.0)


# ------------------------------------------------------------------------------------------ CLI
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "submit", help="Send a training job (bash scripts/train.sh) to a running Ray cluster.",
        description=plain_doc(__doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n")[1]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS", ""),
                   help="Job API of the cluster, e.g. http://127.0.0.1:8265 [env RAY_ADDRESS].")
    p.add_argument("--entrypoint", default=DEFAULT_ENTRYPOINT,
                   help=f"Shell command the job runs in the working dir (default: {DEFAULT_ENTRYPOINT!r}).")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VAL",
                   help="Extra job env var (repeatable). RLFH settings given here are validated like any setting.")
    p.add_argument("--working-dir", default=str(REPO_ROOT),
                   help="Folder uploaded as the job's working dir (default: this repository).")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help=f"More paths to leave out of the upload (always left out: {', '.join(DEFAULT_EXCLUDES)}).")
    p.add_argument("--no-working-dir", action="store_true",
                   help="Upload nothing: run the entrypoint in the cluster's own copy (e.g. the image's /app).")
    p.add_argument("--submission-id", default=None, help="Job id (default: rlfh-<time>-<random>).")
    p.add_argument("--entrypoint-num-cpus", type=float, default=None, help="CPUs reserved for the driver process.")
    p.add_argument("--entrypoint-num-gpus", type=float, default=None, help="GPUs reserved for the driver process.")
    p.add_argument("--include-secrets", action="store_true",
                   help="Also send REWARD_API_TOKEN / MODEL_API_KEY / REDIS_URL from your env (visible in the "
                        "dashboard).")
    p.add_argument("--auth-token", default=None,
                   help="Ray token of the cluster (token auth), sent as a bearer header to the job API; default: "
                        "RAY_AUTH_TOKEN, else ~/.ray/auth_token when token auth is on here (as Ray finds it).")
    p.add_argument("--follow", action="store_true", help="Stream the job's logs until it ends; exit 0 only if it "
                                                           "SUCCEEDED.")
    p.add_argument("--timeout-s", type=float, default=None,
                   help="With --follow: stop following after this many seconds (the job keeps running).")
    p.add_argument("--connect-timeout-s", type=float, default=10.0,
                   help="Timeout of each request to the job API while connecting (default 10).")
    p.add_argument("--retries", type=int, default=2, help="Retries of the connection check and of the submission.")
    p.add_argument("--agent-wait-s", type=float, default=90.0,
                   help="How long to wait for the job agent of a cluster that is still starting (default 90).")
    p.add_argument("--dry-run", action="store_true", help="Print the submission payload (secrets masked) and exit.")
    RLFHConfig.add_cli_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = RLFHConfig.from_args(args)
    payload = build_payload(args, cfg)
    address = args.address
    if args.dry_run:
        print(json.dumps({"address": address or None, **_masked(payload)}, indent=2))
        return 0
    if args.retries < 0 or args.connect_timeout_s <= 0:
        raise ConfigError("--retries must be >= 0 and --connect-timeout-s > 0")
    try:
        address = normalise_address(address)
        headers = auth_headers(args.auth_token)
        version = probe(address, headers, args.connect_timeout_s, args.retries)
        import ray
        if version != ray.__version__:
            log.warning("cluster runs Ray %s, this machine %s: the job API usually copes, but pin the same version",
                        version, ray.__version__)
        client, sid = submit(payload, address, headers, retries=args.retries, agent_wait_s=args.agent_wait_s)
    except SubmitError as e:
        print(f"rlfh submit: {e}", file=sys.stderr)
        return 1
    print(f"submitted {sid} to {address} (Ray {version})")
    if not args.follow:
        print(f"  follow:  ray job logs -f {sid} --address {address}\n"
              f"  status:  ray job status {sid} --address {address}\n"
              f"  stop:    ray job stop {sid} --address {address}")
        return 0
    status = follow(client, sid, args.timeout_s)
    print(f"job {sid}: {status}")
    return 0 if status == "SUCCEEDED" else 1


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="rlfh")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["submit", *(argv or sys.argv[1:])])
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"rlfh submit: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
