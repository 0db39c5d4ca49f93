"""`rlfh chaos soak`: train for a set time on a multi-node cluster while killing a random part every N seconds.

    rlfh chaos soak --minutes 30 --every 120             # the embedded default, every kind of fault
    rlfh chaos soak --minutes 10 --faults node,redis      # only those
    ROLLOUT_BATCH_SIZE=4 rlfh chaos soak --recipe main    # any recipe / setting, as for rlfh train

What it builds, all on this machine and all children of this process (so ``rlfh chaos`` finds every one):

- a Ray cluster (:mod:`ops.local_cluster`): a head (GCS, dashboard, Serve's controller, the HTTP proxy) and
  three worker nodes, ``rlfh_train`` (policy, critic), ``rlfh_rollout`` (rollout engine, reference) and
  ``rlfh_service`` (the Serve verifier and reward replicas), placed by the ``*_NODE_RESOURCE`` settings;
- a redis-server on a free loopback port (the verification cache);
- the trainer, in this process: the separate layout, a checkpoint every ``--save-step`` steps, actor calls
  bounded by ``--actor-timeout-s``.

Every ``--every`` seconds one fault is drawn (``--seed``) from ``--faults``:

- ``policy``, ``critic``, ``reference``, ``rollout``: SIGKILL that actor (the trainer restarts the groups from
  the last checkpoint, MAX_ACTOR_RESTARTS);
- ``verifier``, ``reward-service``: SIGKILL a Serve replica (Serve starts a new one; the trainer's client retries);
- ``redis``: SIGKILL the redis-server; it is started again ``--restore-s`` later, as Kubernetes restarts a pod;
- ``node``: SIGKILL one worker node (its raylet and every process on it) at random; a node offering the same
  resource joins ``--restore-s`` after the GCS has declared the old one dead, as KubeRay replaces a pod.

A fault is drawn only once the previous one is restored. At the end it runs the same steps (or --baseline-steps) with no
faults on the same cluster, and prints one table: the faults injected, the steps finished, redone and skipped,
the rewards lost (batches whose rewards never came: skipped, never trained on as zero), and the wall time per
step against the fault-free run. SAVE_PATH/soak.json keeps the table and every fault. A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from core.config import RLFHConfig, add_recipe_arg
from core.ports import free_port
from ops.faults import inject, last_step
from ops.local_cluster import LocalCluster, node_is_dead

log = logging.getLogger(__name__)

FAULTS = ("policy", "critic", "reference", "rollout", "verifier", "reward-service", "redis", "node")
#: the worker nodes, by the custom resource that names each, and the roles the soak's placement puts there
NODES = {"rlfh_train": ("policy", "critic"), "rlfh_rollout": ("rollout", "reference"),
         "rlfh_service": ("verifier", "reward-service")}


#: reruns after ActorGroupsFailed before the soak gives up (a run that keeps failing is the finding)
MAX_RERUNS = 5


@dataclass
class Fault:
    kind: str
    at_s: float                  # seconds into the soak
    step: int                    # the last step logged when it hit
    target: str = ""             # the node's resource, or the role
    pids: list = field(default_factory=list)
    restored_s: Optional[float] = None   # redis / node: seconds until the replacement was up
    error: str = ""              # the injection itself failed (nothing to kill yet...)


class RedisServer:
    """redis-server on ``port`` (loopback, no persistence), a child of this process."""

    def __init__(self, port: int):
        self.port = port
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            except redis.RedisError:
                time.sleep(0.1)
        raise RuntimeError(f"redis-server on port {self.port} did not answer within 30s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class FaultInjector(threading.Thread):
    """Draws and injects one fault every ``every_s`` seconds until :meth:`halt`; restores redis and nodes."""

    def __init__(self, cluster, redis_server: RedisServer, save_path: Path, kinds: list[str], every_s: float,
                 restore_s: float, seed: int):
        super().__init__(daemon=True, name="rlfh-soak-faults")
        self.cluster, self.redis, self.save_path = cluster, redis_server, save_path
        self.kinds, self.every_s, self.restore_s = kinds, every_s, restore_s
        self.rng = random.Random(seed)
        self.faults: list[Fault] = []
        self._halt = threading.Event()
        self._t0 = time.monotonic()

    def halt(self) -> None:
        self._halt.set()

    def run(self) -> None:
        while not self._halt.wait(self.every_s):
            try:
                self.inject_one()
            except Exception as e:  # noqa: BLE001 - a failed injection is recorded, the soak goes on
                log.exception("soak: injecting a fault failed")
                if self.faults:
                    self.faults[-1].error = self.faults[-1].error or repr(e)

    def inject_one(self) -> Fault:
        kind = self.rng.choice(self.kinds)
        fault = Fault(kind, round(time.monotonic() - self._t0, 1), last_step(self.save_path))
        self.faults.append(fault)
        if kind == "redis":
            done = inject(os.getpid(), "redis", redis_pid=self.redis.proc.pid, wait_s=10)
            fault.pids, fault.target = done["pids"], "redis-server"
            t = time.monotonic()
            time.sleep(self.restore_s)
            self.redis.proc.wait(timeout=10)
            self.redis.start()
            fault.restored_s = round(time.monotonic() - t, 1)
        elif kind == "node":
            self._kill_node(fault, inject)
        else:
            done = inject(os.getpid(), kind, wait_s=30)
            fault.pids, fault.target = done["pids"], kind
        log.warning("soak: fault %d at %.0fs (step %d): %s %s%s", len(self.faults), fault.at_s, fault.step, kind,
                    fault.target, "" if fault.restored_s is None else f", restored in {fault.restored_s:.0f}s")
        return fault

    def _kill_node(self, fault: Fault, inject) -> None:
        resource = self.rng.choice(sorted(NODES))
        fault.target = resource
        done = inject(os.getpid(), "node", node=resource, wait_s=30)
        fault.pids = done["pids"]
        t = time.monotonic()
        old = next((w for w in self.cluster.workers if resource in w.resources), None)
        while not node_is_dead(done["node_id"]):
            if time.monotonic() - t > 120:
                raise RuntimeError(f"the GCS did not declare node {done['node_id']} dead within 120s")
            time.sleep(0.2)
        if old is not None:
            self.cluster.workers.remove(old)
            old.stop()
        time.sleep(self.restore_s)
        self.cluster.add_node({resource: 1})
        fault.restored_s = round(time.monotonic() - t, 1)


def _soak_config(args: argparse.Namespace, save_path: Path, redis_url: str, serve_port: int):
    return RLFHConfig.load(
        recipe=args.recipe, save_path=str(save_path), ckpt_path=str(save_path / "checkpoints"), max_steps=10 ** 6,
        save_step=args.save_step, max_actor_restarts=args.max_actor_restarts, actor_timeout_s=args.actor_timeout_s,
        dev_eval_step=0, model_layout="separate", redis_url=redis_url, serve_port=serve_port,
        actor_node_resource="rlfh_train", critic_node_resource="rlfh_train", rollout_node_resource="rlfh_rollout",
        ref_node_resource="rlfh_rollout", service_node_resource="rlfh_service", placement_strategy="PACK",
        use_tensorboard=False)


def _run(cfg, stop_after_s: Optional[float] = None, steps: Optional[int] = None) -> tuple[dict, float]:
    """Train ``cfg`` for ``stop_after_s`` seconds or ``steps`` steps; ``(summary, wall seconds)``. A run that stops
    with ActorGroupsFailed (MAX_ACTOR_RESTARTS spent) is rerun from its checkpoint, as a Kubernetes Job would,
    while time is left; each such stop is counted."""
    from cluster.driver import ActorGroupsFailed, Trainer   # torch and Ray: not for `rlfh chaos --help`
    if steps is not None:
        cfg = cfg.model_copy(update={"max_steps": steps})
    t0 = time.monotonic()
    summary = {"steps": 0, "redone": 0, "skipped": 0, "restarts": [], "trained_without_reward": 0,
               "reward_failures": 0, "reruns": 0, "setup_s": 0.0, "stops": []}
    while True:
        left = None if stop_after_s is None else stop_after_s - (time.monotonic() - t0)
        if left is not None and left <= 0:
            break
        trainer = Trainer(cfg, show_progress=True)
        t_setup = time.monotonic()
        try:
            trainer.setup()
            summary["setup_s"] += time.monotonic() - t_setup
            left = None if left is None else max(1.0, left - (time.monotonic() - t_setup))
            result = trainer.fit(stop_after_s=left)
            done = result.completed or stop_after_s is not None
        except ActorGroupsFailed as e:
            summary["stops"].append(str(e)[:300])
            summary["reruns"] += 1
            if summary["reruns"] > MAX_RERUNS:
                raise
            log.error("soak: the run stopped (%s); rerunning from its checkpoint", e)
            done = False
        finally:
            restarts = list(trainer.recovery.restarts)
            summary["steps"] = trainer.state.step
            summary["redone"] += sum(max(0, r["step"] - r.get("resume_step", r["step"])) for r in restarts)
            summary["skipped"] = trainer.skips.total   # kept in the checkpoint: the run's total
            summary["restarts"] += restarts
            summary["trained_without_reward"] += sum(1 for r in trainer.history
                                                     if r.get("skipped") and r.get("policy_trained"))
            client = getattr(trainer.reward_source.service, "client", None)
            summary["reward_failures"] += getattr(client, "failures", 0)
            trainer.close()
        if done:
            break
    summary["setup_s"] = round(summary["setup_s"], 1)
    return summary, round(time.monotonic() - t0, 1)


def soak(args: argparse.Namespace) -> dict:
    for flag, value, low in (("--minutes", args.minutes, 0), ("--every", args.every, 0)):
        if not value > low:
            raise ValueError(f"{flag} must be > {low}, got {value:g}")
    for flag, value in (("--restore-s", args.restore_s), ("--baseline-steps", args.baseline_steps),
                        ("--save-step", args.save_step), ("--max-actor-restarts", args.max_actor_restarts)):
        if value < 0:
            raise ValueError(f"{flag} must be >= 0, got {value:g}")
    kinds = [k.strip() for k in args.faults.split(",") if k.strip()]
    bad = [k for k in kinds if k not in FAULTS]
    if bad or not kinds:
        raise ValueError(f"--faults: unknown {', '.join(bad) or '(none given)'}; choose from {', '.join(FAULTS)}")
    out = Path(args.save_path)
    out.mkdir(parents=True, exist_ok=True)
    redis_server = RedisServer(free_port())
    cluster = LocalCluster(head_cpus=args.node_cpus, dashboard_port=free_port())
    injector = None
    try:
        for resource in NODES:
            cluster.add_node({resource: 1}, num_cpus=args.node_cpus)
        log.info("soak: cluster at %s, redis at %s, faults %s every %gs", cluster.address, redis_server.url,
                 ",".join(kinds), args.every)
        serve_port = free_port()   # one for both runs: Serve keeps the HTTP options it first started with
        cfg = _soak_config(args, out / "soak", redis_server.url, serve_port)
        injector = FaultInjector(cluster, redis_server, out / "soak", kinds, args.every, args.restore_s, args.seed)
        injector.start()
        faulted, faulted_wall = _run(cfg, stop_after_s=args.minutes * 60)
        injector.halt()
        injector.join(timeout=300)
        base_steps = min(faulted["steps"], args.baseline_steps or faulted["steps"])
        clean, clean_wall = ((None, None) if args.no_baseline or not base_steps else
                             _run(_soak_config(args, out / "baseline", redis_server.url, serve_port),
                                  steps=base_steps))
    finally:
        if injector is not None:
            injector.halt()
        cluster.shutdown()
        redis_server.stop()
    result = {"faults": [asdict(f) for f in injector.faults], "soak": faulted, "soak_wall_s": faulted_wall,
              "baseline": clean, "baseline_wall_s": clean_wall, "minutes": args.minutes, "every_s": args.every}
    (out / "soak.json").write_text(json.dumps(result, indent=1, default=str))
    print(render_table(result))
    return result


def render_table(result: dict) -> str:
    """The soak's summary: faults by kind, steps, rewards lost, wall time against the fault-free run."""
    faults = result["faults"]
    by_kind = Counter(f["kind"] + (f" ({f['target']})" if f["kind"] == "node" else "") for f in faults)
    failed = sum(1 for f in faults if f["error"])
    s, b = result["soak"], result["baseline"]
    # time per step after the set-up (Ray actors, Serve, the model): what the faults cost the loop itself
    per_step = (result["soak_wall_s"] - s["setup_s"]) / max(1, s["steps"])
    lines = [f"soak: {result['minutes']:g} min, a fault every {result['every_s']:g} s",
             f"{'faults injected':<34}{len(faults)}" + (f" ({failed} could not be injected)" if failed else ""),
             *[f"  {k:<32}{v}" for k, v in sorted(by_kind.items())],
             f"{'steps logged':<34}{s['steps']}",
             f"{'steps redone (after a restart)':<34}{s['redone']}",
             f"{'actor-group restarts':<34}{len(s['restarts'])}" + (f", {s['reruns']} rerun(s)" if s.get('reruns')
                                                                    else ""),
             f"{'batches skipped (rewards lost)':<34}{s['skipped']}",
             f"{'steps trained without a reward':<34}{s['trained_without_reward']}",
             f"{'reward calls retried':<34}{s['reward_failures']}",
             f"{'wall time / step':<34}{per_step:.1f} s (+ set-up {s['setup_s']:.0f} s)"]
    if b:
        base = (result["baseline_wall_s"] - b["setup_s"]) / max(1, b["steps"])
        lines.append(f"{'  no faults (' + str(b['steps']) + ' steps)':<34}{base:.1f} s (+ set-up {b['setup_s']:.0f} "
                     f"s): x{per_step / base:.2f}")
    lost = [n for r in s["restarts"] for n in r.get("lost_nodes", [])]
    if lost:
        secs = [r["seconds"] for r in s["restarts"] if r.get("lost_nodes") and "seconds" in r]
        lines.append(f"{'node losses recovered':<34}{len(secs)}, restart {min(secs):.0f}-{max(secs):.0f} s"
                     if secs else f"{'node losses recovered':<34}0")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_recipe_arg(p)
    p.add_argument("--minutes", type=float, default=30.0, help="How long to train under faults (default 30).")
    p.add_argument("--every", type=float, default=120.0, help="Seconds between faults (default 120).")
    p.add_argument("--faults", default=",".join(FAULTS),
                   help=f"Comma-separated kinds to draw from (default all: {','.join(FAULTS)}).")
    p.add_argument("--restore-s", type=float, default=10.0,
                   help="Seconds before a killed redis-server or node is replaced (default 10).")
    p.add_argument("--seed", type=int, default=0, help="Seed of the fault draw (default 0).")
    p.add_argument("--save-step", type=int, default=2, help="Checkpoint every N steps (SAVE_STEP; default 2).")
    p.add_argument("--max-actor-restarts", type=int, default=3,
                   help="MAX_ACTOR_RESTARTS between two checkpoints (default 3).")
    p.add_argument("--actor-timeout-s", type=float, default=300.0,
                   help="ACTOR_TIMEOUT_S: the longest wait on one actor call (default 300).")
    p.add_argument("--node-cpus", type=float, default=1.0, help="CPUs each Ray node offers (default 1).")
    p.add_argument("--save-path", default="runs/soak", help="Where the runs and soak.json go (default runs/soak).")
    p.add_argument("--baseline-steps", type=int, default=0,
                   help="Steps of the fault-free run (default 0: as many as the soak finished).")
    p.add_argument("--no-baseline", action="store_true", help="Skip the fault-free run.")
