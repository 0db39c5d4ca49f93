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

A policy / rollout actor's worker SIGKILLed or SIGSTOPped: the driver notices (at once, or after
ACTOR_TIMEOUT_S), restarts the actor groups from the last checkpoint (counted), and when MAX_ACTOR_RESTARTS is
used up stops with a clear ActorGroupsFailed; it never hangs. With one process per role and the rollout engines
judging (VERIFIER_BACKEND=self), a SIGKILLed engine is restarted with every group and the verifier follows the
new engines.
Health and backpressure of the service itself are in ``tests/test_service_hostile.py``; the trainer SIGKILLed
under ``scripts/train.sh`` and resumed is in ``tests/test_train_sh.py``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from conftest import HANG_S
from proc_tree import alive, kill_started, left_after, read_jsonl, tree

pytestmark = pytest.mark.slow

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
SIGTERM_BOUND_S = 90.0      # serve.shutdown + ray.shutdown on a busy 2-core machine take ~10-30 s


def _listening(procs: list[psutil.Process]) -> set[tuple[str, int, str]]:
    pids = {p.pid: p for p in alive(procs)}
    out = set()
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            try:
                out.add((c.laddr.ip, c.laddr.port, pids[c.pid].name()))
            except psutil.NoSuchProcess:
                pass
    return out


PROXY_CHECK_ENV = "RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S"


@pytest.fixture(scope="module")
def embedded_ray():
    """One embedded Ray (3 logical CPUs, no dashboard) for this module's in-process training tests: starting and
    stopping one per test cost about 10 s each on the 2-core runner. Each test ends what it started (actor groups,
    Serve, SIGSTOPped workers), so the next one finds an idle cluster; the Trainer joins it (start_ray reuses an
    initialised Ray and does not shut it down).

    Serve's controller checks its HTTP proxy every 2 s instead of 10 s (Ray's own variable, read by the controller
    that this Ray's raylet starts): a SIGKILLed proxy is declared dead after 3 failed checks, so the reward service
    comes back in seconds rather than ~30 s. The check's timeout (10 s) is Ray's default, so a live proxy on a
    loaded runner is not taken for dead."""
    from core.config import RLFHConfig
    from core.ray_bootstrap import start_ray
    before = os.environ.get(PROXY_CHECK_ENV)
    os.environ[PROXY_CHECK_ENV] = "2"
    try:
        handle = start_ray(RLFHConfig.load(environ={}), num_cpus=3, include_dashboard=False)
    finally:                        # the raylet has it; nothing else in this process should
        if before is None:
            os.environ.pop(PROXY_CHECK_ENV, None)
        else:
            os.environ[PROXY_CHECK_ENV] = before
    yield handle
    handle.shutdown()


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
            time.sleep(0.25)
        started = tree(proc.pid)
        names = {p.name() for p in alive(started)}
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
        left = left_after(started[1:], 20)
        assert not left, f"processes left after SIGTERM: {left}"
        print(f"\nrlfh serve: SIGTERM -> exit 0 in {took:.1f} s, {len(started) - 1} child processes all gone; "
              f"{len(listening)} listening sockets on loopback but {len(replica_wildcards)} Serve replica gRPC port(s)")
    finally:
        kill_started(proc, started[1:])


# ------------------------------------------------------------------------------ training under faults
# The driver over real actor groups (the tiny random Llama, policy + rollout engine only) and the real reward
# service in the same embedded Ray, with the verification cache in a private redis-server. Real processes are
# SIGKILLed by PID: the service's HTTP proxy and reward replica (Serve brings them back), then Redis.

def _tree_named(root_pid: int, prefix: str) -> list[psutil.Process]:
    return [p for p in alive(tree(root_pid)) if p.name().startswith(prefix)]


def test_training_survives_the_reward_service_and_redis_dying(tmp_path, tiny_model_path, private_redis, embedded_ray):
    from ray import serve

    from actors.group import create_groups
    from cluster.driver import Trainer
    from cluster.experience import ServiceReward
    from core.config import RLFHConfig
    from conftest import free_port
    from reward_service.app import deploy

    cfg = RLFHConfig.load(
        environ={}, model_path=tiny_model_path, save_path=str(tmp_path / "run"), prompt_data="halueval:train",
        max_samples=32, rollout_batch_size=2, n_samples_per_prompt=2, generate_max_len=8, prompt_max_len=128,
        train_batch_size=4, micro_train_batch_size=4, micro_rollout_batch_size=4, advantage_estimator="rloo",
        kl_coef=0.0, max_steps=10, save_step=100, rollout_backend="hf", rollout_dtype="fp32",
        num_cpus_per_actor=0.25, verifier_num_cpus=0.2, reward_num_cpus=0.2, redis_url=private_redis.url,
        reward_timeout_s=5.0, reward_max_retries=1, seed=3)
    groups = trainer = None
    try:
        # the controller checks the reward replica every second (Serve's default: 10 s), so the SIGKILLed one is
        # replaced at once
        url = deploy(cfg, "127.0.0.1", free_port(), reward_options={"health_check_period_s": 1.0})
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
            time.sleep(0.25)
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
        serve.shutdown()


# ------------------------------------------------------------------------------ actors dying or hanging
# The driver in this process over real actor groups (the tiny random Llama; whatever layout MODEL_LAYOUT picks
# here: one process per role, or policy + rollout in one process) and an in-process reward. A checkpoint every
# 2 steps and at most 1 restart between checkpoints. Real processes, by PID: the policy's worker is SIGKILLed
# (the driver restarts the groups from the last checkpoint and redoes the lost step on the same prompts and
# rollout), the rollout engine's worker is SIGSTOPped (no answer within ACTOR_TIMEOUT_S: restarted the same
# way), then the policy's worker is SIGKILLed twice before the next checkpoint: the run stops with a clear
# ActorGroupsFailed instead of looping or hanging.

POLICY_PROCS = ("ray::PolicyActor", "ray::ColocatedActor")
ROLLOUT_PROCS = ("ray::HFRolloutEngine", "ray::ColocatedActor")


def _actor_procs(prefixes) -> list[psutil.Process]:
    return [p for p in alive(tree(os.getpid())) if p.name().startswith(prefixes)]


def test_driver_restarts_dead_or_hung_actors_from_the_checkpoint_and_gives_up_when_bounded(tmp_path,
                                                                                           tiny_model_path,
                                                                                           embedded_ray):
    import json
    import threading

    from ops.chaos import inject
    from cluster.driver import ActorGroupsFailed, Trainer
    from doubles import KeywordReward
    from core.config import RLFHConfig

    # ACTOR_TIMEOUT_S: the SIGSTOPped engine is given up on after this long. Every call of the tiny model takes well
    # under a second (starting an actor has its own bound, at least 300 s), so 10 s is a wide margin on a loaded
    # runner and the hang costs 10 s of the test, not 20.
    timeout_s = 10.0
    cfg = RLFHConfig.load(
        environ={}, model_path=tiny_model_path, save_path=str(tmp_path / "run"), prompt_data="halueval:train",
        max_samples=32, rollout_batch_size=2, n_samples_per_prompt=2, generate_max_len=8, prompt_max_len=128,
        train_batch_size=4, micro_train_batch_size=4, micro_rollout_batch_size=4, advantage_estimator="rloo",
        kl_coef=0.0, max_steps=10, save_step=2, max_ckpt_num=5, rollout_backend="hf", rollout_dtype="fp32",
        num_cpus_per_actor=0.25, use_tensorboard=True, log_samples=0, seed=5, actor_timeout_s=timeout_s,
        max_actor_restarts=1)
    metrics_path = tmp_path / "run" / "metrics.jsonl"
    trainer = None
    events: list[dict] = []       # what the fault thread did, and when
    stopped: list[int] = []       # PIDs SIGSTOPped here (SIGKILLed in the end if still there)
    done = threading.Event()
    # (step, restarts) after which a fault is injected: the next step's reward waits until it is (HeldReward)
    gates = {(3, 0): threading.Event(), (5, 1): threading.Event(), (7, 2): threading.Event()}

    def logged_steps() -> list[int]:
        return [r["step"] for r in read_jsonl(metrics_path)] if metrics_path.exists() else []

    def wait_for(cond, what, limit=300.0):
        t_end = time.monotonic() + limit
        while not cond():
            if done.is_set() or time.monotonic() > t_end:
                raise RuntimeError(f"fault thread: gave up waiting for {what}")
            time.sleep(0.1)

    def redone(step, restarts) -> bool:   # ``step`` logged again by the groups of restart number ``restarts``
        return any(r["step"] == step and r["actor_restarts"] == restarts for r in read_jsonl(metrics_path))

    def one_victim(prefixes, exclude=()):
        procs = [p for p in _actor_procs(prefixes) if p.pid not in exclude]
        return procs[0] if len(procs) == 1 else None

    def faults():
        try:
            # 1. policy worker SIGKILLed after step 3 (last checkpoint: step 2)
            wait_for(lambda: 3 in logged_steps(), "step 3")
            v = one_victim(POLICY_PROCS)
            assert v is not None, [p.name() for p in _actor_procs(POLICY_PROCS + ROLLOUT_PROCS)]
            assert inject(os.getpid(), "policy", "KILL")["pids"] == [v.pid]        # rlfh chaos kill policy
            events.append({"fault": "SIGKILL", "role": "policy", "pid": v.pid, "t": time.monotonic(),
                           "steps_logged": logged_steps(), "rows": read_jsonl(metrics_path)})
            gates[(3, 0)].set()
            wait_for(lambda: redone(3, 1), "step 3 redone")
            events[-1]["recovered_s"] = time.monotonic() - events[-1]["t"]
            # 2. rollout worker SIGSTOPped after step 5 of the restarted groups (last checkpoint: step 4)
            wait_for(lambda: trainer.actor_restarts >= 1 and logged_steps()[-1:] == [5], "step 5 after the restart")
            v = one_victim(ROLLOUT_PROCS, exclude={e["pid"] for e in events})
            assert v is not None, [p.name() for p in _actor_procs(POLICY_PROCS + ROLLOUT_PROCS)]
            stopped.append(v.pid)
            assert inject(os.getpid(), "rollout", "STOP")["pids"] == [v.pid]       # rlfh chaos kill rollout --signal STOP
            events.append({"fault": "SIGSTOP", "role": "rollout", "pid": v.pid, "t": time.monotonic(),
                           "steps_logged": logged_steps(), "rows": read_jsonl(metrics_path)})
            gates[(5, 1)].set()
            wait_for(lambda: redone(5, 2), "step 5 redone")
            events[-1]["recovered_s"] = time.monotonic() - events[-1]["t"]
            # 3. after step 7: the policy worker SIGKILLed, and once more as soon as the new one is up
            wait_for(lambda: trainer.actor_restarts >= 2 and logged_steps()[-1:] == [7], "step 7 after 2 restarts")
            for n in range(2):
                wait_for(lambda: one_victim(POLICY_PROCS, exclude={e["pid"] for e in events}) is not None,
                         "a new policy worker")
                v = one_victim(POLICY_PROCS, exclude={e["pid"] for e in events})
                assert inject(os.getpid(), "policy", "KILL")["pids"] == [v.pid]
                events.append({"fault": "SIGKILL", "role": "policy", "pid": v.pid, "t": time.monotonic(),
                               "steps_logged": logged_steps()})
                gates[(7, 2)].set()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            events.append({"error": repr(e)})
        finally:
            for g in gates.values():    # never leave the trainer waiting on a fault that will not come
                g.set()

    class HeldReward(KeywordReward):
        """KeywordReward whose step N+1 waits until the fault planned after step N is injected: a step of the tiny
        model can otherwise finish between the fault thread seeing step N logged (it polls every 0.1 s) and its
        kill, so 'after step N' would land after step N+1. Bounded by HANG_S (a fault thread that died)."""

        def __call__(self, items):
            gate = gates.get((trainer.state.step - 1, trainer.actor_restarts))
            if gate is not None:
                gate.wait(HANG_S)
            return super().__call__(items)

    try:
        trainer = Trainer(cfg, reward_fn=HeldReward("the"), show_progress=False)
        trainer.setup()
        thread = threading.Thread(target=faults, daemon=True)
        thread.start()
        t0 = time.monotonic()
        with pytest.raises(ActorGroupsFailed) as info:
            trainer.fit()
        t_stop = time.monotonic()
        done.set()
        thread.join(timeout=30)
        assert not any("error" in e for e in events), (events, info.value)
        assert [e["fault"] for e in events] == ["SIGKILL", "SIGSTOP", "SIGKILL", "SIGKILL"], events
        msg = str(info.value)
        assert "the policy" in msg and "MAX_ACTOR_RESTARTS=1" in msg and "global_step_00006" in msg, msg
        # bounded: it gave up (the count of restarts below), and in hang-guard time, not a benchmark
        assert t_stop - events[-1]["t"] < 10 * HANG_S, "the driver took too long to give up"
        assert trainer.actor_restarts == 4
        rows = read_jsonl(metrics_path)
        steps = [r["step"] for r in rows]
        assert steps == list(range(1, 7)), steps        # rewound to the last checkpoint; nothing twice
        # each restart went back to the checkpoint: the lost steps were redone on the same data and rollout
        assert events[0]["steps_logged"][-1] == 3 and events[1]["steps_logged"][-1] == 5
        for ev, step in ((events[0], 3), (events[1], 5)):
            lost = next(r for r in ev["rows"] if r["step"] == step)
            again = rows[step - 1]
            for k in ("prompts", "epoch", "data_index", "rollout_digest"):
                assert again[k] == lost[k], (step, k, again[k], lost[k])
        # the hang was noticed after ACTOR_TIMEOUT_S, not never (a hang guard: a loaded runner redoes step 5 slowly)
        assert events[1]["recovered_s"] < timeout_s + 10 * HANG_S, events[1]["recovered_s"]
        restarts = [r["actor_restarts"] for r in rows]
        assert restarts == [0, 0, 1, 1, 2, 2], restarts
        print(f"\nactor faults: {len(events)} injected ({', '.join(e['fault'] + ' ' + e['role'] for e in events)}); "
              f"restarts: {trainer.actor_restarts}, steps lost: 0 (steps after each checkpoint redone), gave up "
              f"{t_stop - events[-1]['t']:.1f} s after the last kill with: {msg[:160]}... total {t_stop - t0:.0f} s")
        print(json.dumps([{k: v for k, v in e.items() if k not in ("t", "rows")} for e in events]))
    finally:
        done.set()
        for g in gates.values():
            g.set()
        for pid in stopped:               # only what this test stopped
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if trainer is not None:
            trainer.close()


def test_separate_layout_dead_rollout_engine_restarted_and_the_self_judge_follows_it(tmp_path, tiny_model_path,
                                                                                     caplog, embedded_ray):
    """One process per role (MODEL_LAYOUT=separate) and VERIFIER_BACKEND=self: the verifier replicas judge with
    the rollout engines. The rollout engine's worker is SIGKILLed after step 3. The driver restarts every group
    (the policy's process is a new one too) from step 2's checkpoint, names the rollout actor, redoes step 3 on the
    same prompts and rollout, and redeploys the verifier with the new engines (without that, every later judgement
    would fall back to LLM_FALLBACK_LABEL against a dead actor); the run completes with every step rewarded by
    the service. One run checks both the separate layout's restart and the self-judge's redeploy: each costs a
    Ray actor start-up and a Serve deploy on the 2-core runner."""
    import logging
    import threading

    from conftest import free_port

    from ops.chaos import inject
    from cluster.driver import Trainer
    from core.config import RLFHConfig

    cfg = RLFHConfig.load(
        environ={}, model_path=tiny_model_path, save_path=str(tmp_path / "run"), prompt_data="halueval:train",
        max_samples=32, rollout_batch_size=2, n_samples_per_prompt=2, generate_max_len=8, prompt_max_len=128,
        train_batch_size=4, micro_train_batch_size=4, micro_rollout_batch_size=4, advantage_estimator="rloo",
        kl_coef=0.0, max_steps=4, save_step=2, rollout_backend="hf", rollout_dtype="fp32", model_layout="separate",
        num_cpus_per_actor=0.25, use_tensorboard=False, log_samples=0, seed=7, actor_timeout_s=120.0,
        max_actor_restarts=1, verifier_backend="self", llm_max_retries=0, llm_timeout_s=120,
        reward_timeout_s=300, reward_max_retries=1, serve_port=free_port())
    metrics_path = tmp_path / "run" / "metrics.jsonl"
    trainer = None
    seen: dict = {}
    done = threading.Event()

    def fault():
        try:
            # what the run started with (read before the kill's wait, so the kill follows step 3 at once)
            seen["engines"] = [e._actor_id.hex() for e in trainer.reward_source.self_judge.engines]
            seen["verifier_pid"] = trainer.reward_source.service.client.stats()["verifier"]["pid"]
            while not any(r["step"] == 3 for r in read_jsonl(metrics_path)):
                if done.is_set():
                    return
                time.sleep(0.1)
            engines = _actor_procs(("ray::HFRolloutEngine",))
            policies = _actor_procs(("ray::PolicyActor",))
            assert len(engines) == 1 and len(policies) == 1, [p.name() for p in alive(tree(os.getpid()))]
            assert inject(os.getpid(), "rollout", "KILL")["pids"] == [engines[0].pid]   # the engine, not the policy
            seen["t"], seen["rows"], seen["policy_pid"] = time.monotonic(), read_jsonl(metrics_path), policies[0].pid
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            seen["error"] = repr(e)

    try:
        caplog.set_level(logging.WARNING, logger="cluster")     # the driver and cluster.recovery (names the actor)
        trainer = Trainer(cfg, show_progress=False)     # reward_fn=None: the reward service, judged by the engines
        trainer.setup()
        th = threading.Thread(target=fault, daemon=True)
        th.start()
        result = trainer.fit()
        t_end = time.monotonic()
        done.set()
        th.join(timeout=30)
        assert "error" not in seen and "t" in seen, seen
        assert result.completed and trainer.actor_restarts == 1
        rows = read_jsonl(metrics_path)
        assert [r["step"] for r in rows] == [1, 2, 3, 4] and not any(r["skipped"] for r in rows), rows
        # restarted from step 2's checkpoint: step 3 redone on the same prompts and rollout
        lost = next(r for r in seen["rows"] if r["step"] == 3)
        for k in ("prompts", "data_index", "rollout_digest"):
            assert rows[2][k] == lost[k], (k, rows[2][k], lost[k])
        assert "the rollout actor died" in caplog.text, caplog.text[-2000:]
        # every group was restarted, not only the dead one (the policy's process is a new one too)
        assert seen["policy_pid"] not in {p.pid for p in _actor_procs(("ray::PolicyActor",))}
        # the judge holds the restarted groups' engines, not the dead one ...
        now = [e._actor_id.hex() for e in trainer.reward_source.self_judge.engines]
        assert now == [e._actor_id.hex() for e in trainer.groups.rollout] and not set(now) & set(seen["engines"])
        # ... in a verifier replica started after the restart, which has verified the steps since
        stats = trainer.reward_source.service.client.stats()["verifier"]
        assert stats["backend"] == "self" and stats["pid"] != seen["verifier_pid"] and stats["items"] > 0
        print(f"\nseparate layout, self-judge: rollout engine SIGKILLed after step 3; restarted from step 2, "
              f"verifier redeployed with the new engine, run completed {t_end - seen['t']:.0f} s after the kill, "
              f"0 steps lost")
    finally:
        done.set()
        if trainer is not None:
            trainer.close()
