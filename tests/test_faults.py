"""Faults and safe defaults with real processes.

``rlfh serve`` as a user runs it, then SIGTERM:

- The embedded Ray runs with Ray's token auth on (``RAY_AUTH_MODE`` unset, as for a user): the dashboard's
  job API refuses a request without the token and answers one with it.
- Every port the service's process tree listens on is bound to loopback (GCS, raylet, workers, dashboard,
  agents, Serve's proxy with the default SERVE_HOST), except each Serve replica's inter-deployment gRPC
  port, which Ray 2.60 hard-codes to ``[::]`` (token-authenticated; see docs/DEPLOY.md).
- SIGTERM (what Kubernetes sends on every rollout) stops it cleanly: exit status 0 within a bound, and no
  process it started is left behind (no dashboard or agent re-parented to PID 1 holding ports).

Training under faults (the driver, the tiny random Llama, the real service and a real redis-server): the
service's proxy and replica SIGKILLed mid-run (the batch is skipped and counted, nothing is trained on it, and
training goes on once Serve has restarted them), then Redis SIGKILLed (training goes on, cache degraded).
Health and backpressure of the service itself are in ``tests/test_service_hostile.py``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

pytestmark = pytest.mark.slow

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
SIGTERM_BOUND_S = 90.0      # serve.shutdown + ray.shutdown on a busy 2-core machine take ~10-30 s


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _listening(procs: list[psutil.Process]) -> set[tuple[str, int, str]]:
    pids = {p.pid: p for p in _alive(procs)}
    out = set()
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            try:
                out.add((c.laddr.ip, c.laddr.port, pids[c.pid].name()))
            except psutil.NoSuchProcess:
                pass
    return out


def test_rlfh_serve_loopback_ray_auth_and_clean_sigterm(tmp_path):
    from conftest import free_port

    env = dict(os.environ)
    env.pop("RAY_AUTH_MODE", None)                  # a user's shell: Ray 2.60's default (token auth on)
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.pop("REDIS_URL", None)                      # in-process cache: this test is about processes, not Redis
    port, dash = free_port(), free_port()
    rlfh = Path(sys.executable).with_name("rlfh")
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(rlfh), "serve", "--serve-port", str(port), "--dashboard-port", str(dash),
                                 "--num-cpus", "2", "--verifier-num-cpus", "0.2", "--reward-num-cpus", "0.2"],
                                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, log_path.read_text()[-4000:]
            assert time.monotonic() < deadline, "rlfh serve not ready in 240 s:\n" + log_path.read_text()[-4000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1.0)
        started = _tree(proc.pid)
        names = {p.name() for p in _alive(started)}
        assert any("raylet" in n for n in names) and any("gcs_server" in n for n in names), names

        # loopback only
        listening = _listening(started)
        assert listening, "no listening sockets found"
        # The one exception Ray 2.60 leaves no option for: each Serve replica's inter-deployment gRPC server
        # binds "[::]:0" (ray/serve/_private/replica.py); it carries Ray's token-auth interceptor (auth is on).
        exposed = sorted(x for x in listening if x[0] not in LOOPBACK and not x[2].startswith("ray::ServeReplica"))
        assert not exposed, f"ports bound beyond loopback: {exposed}"
        replica_wildcards = [x for x in listening if x[0] not in LOOPBACK]
        assert len(replica_wildcards) <= 2, replica_wildcards      # one per replica (verifier + rewards)
        assert any(p == port for _, p, _ in listening) and any(p == dash for _, p, _ in listening), listening

        # Ray token auth: the dashboard's job API needs the token
        token_file = Path(env.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
        assert token_file.is_file(), "Ray did not create its token file"
        anon = httpx.get(f"http://127.0.0.1:{dash}/api/jobs/", timeout=30)
        assert anon.status_code in (401, 403), (anon.status_code, anon.text[:300])
        ok = httpx.get(f"http://127.0.0.1:{dash}/api/jobs/", timeout=30,
                       headers={"Authorization": f"Bearer {token_file.read_text().strip()}"})
        assert ok.status_code == 200, (ok.status_code, ok.text[:300])

        # SIGTERM: clean exit, status 0, within the bound, nothing left behind
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=SIGTERM_BOUND_S)
        took = time.monotonic() - t0
        out = log_path.read_text()
        assert rc == 0, out[-4000:]
        assert "stopping (SIGTERM)" in out and "Traceback" not in out.split("stopping (SIGTERM)")[-1], out[-4000:]
        deadline = time.monotonic() + 20
        while _alive(started[1:]) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [(p.pid, p.name()) for p in _alive(started[1:])]
        assert not left, f"processes left after SIGTERM: {left}"
        print(f"\nrlfh serve: SIGTERM -> exit 0 in {took:.1f} s, {len(started) - 1} child processes all gone; "
              f"{len(listening)} listening sockets on loopback but {len(replica_wildcards)} Serve replica gRPC port(s)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for p in _alive(started[1:]):           # only what this test started
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


# ------------------------------------------------------------------------------ training under faults
# The driver over real actor groups (the tiny random Llama, policy + rollout engine only) and the real reward
# service in the same embedded Ray, with the verification cache in a private redis-server. Real processes are
# SIGKILLed by PID: the service's HTTP proxy and reward replica (Serve brings them back), then Redis.

def _tree_named(root_pid: int, prefix: str) -> list[psutil.Process]:
    return [p for p in _alive(_tree(root_pid)) if p.name().startswith(prefix)]


def test_training_survives_the_reward_service_and_redis_dying(tmp_path, tiny_model_path, private_redis):
    import ray
    from ray import serve

    from actors.group import create_groups
    from cluster.config import RLFHConfig
    from cluster.driver import Trainer
    from cluster.experience import ServiceReward
    from cluster.ray_bootstrap import start_ray
    from conftest import free_port
    from reward_service.app import deploy

    cfg = RLFHConfig.load(
        environ={}, model_path=tiny_model_path, save_path=str(tmp_path / "run"), prompt_data="halueval:train",
        max_samples=32, rollout_batch_size=2, n_samples_per_prompt=2, generate_max_len=8, prompt_max_len=128,
        train_batch_size=4, micro_train_batch_size=4, micro_rollout_batch_size=4, advantage_estimator="rloo",
        kl_coef=0.0, max_steps=10, save_step=100, rollout_backend="hf", rollout_dtype="fp32",
        num_cpus_per_actor=0.25, verifier_num_cpus=0.2, reward_num_cpus=0.2, redis_url=private_redis.url,
        reward_timeout_s=5.0, reward_max_retries=1, seed=3)
    handle = start_ray(cfg, num_cpus=3, include_dashboard=False)
    groups = trainer = None
    try:
        url = deploy(cfg, "127.0.0.1", free_port())
        groups = create_groups(cfg)
        trainer = Trainer(cfg, reward_fn=ServiceReward(url, cfg), groups=groups)
        trainer.setup()
        fp = lambda: groups.policy.run("weights_fingerprint")[0]  # noqa: E731

        row1 = trainer.step()
        assert not row1.get("skipped"), row1

        # 1. the reward service dies (HTTP proxy and reward replica SIGKILLed): the batch is skipped, not trained
        victims = _tree_named(os.getpid(), "ray::ProxyActor") + _tree_named(os.getpid(), "ray::ServeReplica:rlfh-rewards:RLFHRewards")
        assert len(victims) == 2, [p.name() for p in victims]
        before = fp()
        t_kill = time.monotonic()
        for p in victims:
            os.kill(p.pid, signal.SIGKILL)
        row2 = trainer.step()
        assert row2["skipped"] is True and trainer.skips.reasons["reward_unavailable"] == 1, row2
        assert fp() == before, "a skipped batch must not train the policy"

        # ... and comes back (Serve restarts both): training goes on
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() - t_kill < 180, "the reward service did not come back in 180 s"
            time.sleep(1.0)
        recover_s = time.monotonic() - t_kill
        row3 = trainer.step()
        assert not row3.get("skipped"), row3
        assert fp() != before

        # 2. Redis dies (SIGKILL): the cache degrades, the step still trains
        os.kill(private_redis.proc.pid, signal.SIGKILL)
        private_redis.proc.wait(timeout=10)
        before = fp()
        row4 = trainer.step()
        assert not row4.get("skipped"), row4
        assert fp() != before
        assert httpx.get(f"{url}/healthz", timeout=30).json()["status"] == "degraded"
        skipped = sum(1 for r in (row1, row2, row3, row4) if r.get("skipped"))
        print(f"\nfaults: 4 steps, 2 kills (service proxy+replica, then Redis); {skipped} batch skipped and counted "
              f"(reward service down), 0 trained on without rewards; service back {recover_s:.1f} s after the "
              f"kill; Redis down: trained, /healthz 'degraded'")
    finally:
        if trainer is not None:
            trainer.close()
        if groups is not None:
            groups.shutdown()
        try:
            serve.shutdown()
        finally:
            handle.shutdown() if handle.started_here else ray.shutdown()
