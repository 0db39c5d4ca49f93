"""`rlfh chaos`: inject a real fault into a running `rlfh train` / `rlfh serve`, by PID.

    rlfh chaos list --pid 12345                         # the processes of that run, by role
    rlfh chaos kill policy --pid 12345                  # SIGKILL the policy actor's worker process
    rlfh chaos kill rollout --pid 12345 --signal STOP   # freeze the rollout engine (the driver's timeout fires)
    rlfh chaos kill trainer --pid 12345 --after-step 3 --save-path runs/rlfh   # once step 3 is logged
    rlfh chaos kill node --pid 12345 --node rlfh_rollout   # the node offering that resource: raylet + workers
    rlfh chaos soak --minutes 30 --every 120            # train on a local 4-node cluster under random faults

``--pid`` is the trainer's (or ``rlfh serve``'s) process; the roles are found among its descendants by the
process titles Ray gives actors (``ray::PolicyActor``...). Roles: trainer (the process itself), policy,
rollout, critic, reference (with the colocated layout, policy and rollout are one process), reward-service
(Serve's HTTP proxy and the reward replica), verifier (the verifier replica), redis (a redis-server given by
``--redis-pid``), node (one Ray node of a cluster started under ``--pid``, e.g. by ``ray.cluster_utils`` or
``rlfh chaos soak``: its raylet and every process under it, as when a machine is lost; ``--node`` names it by a
custom resource it offers or by its node id). ``--after-step N`` waits until SAVE_PATH/metrics.jsonl has logged
step N first.

Prints one JSON line: the role, the signal, the PIDs hit, the last step logged then, and the time. Only
processes of the given run are touched (never anything found by name alone). tests/test_faults.py drives
its probes through this command.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

ROLES: dict[str, tuple[str, ...]] = {
    "policy": ("ray::PolicyActor", "ray::ColocatedActor"),
    "rollout": ("ray::HFRolloutEngine", "ray::VLLMRolloutEngine", "ray::ColocatedActor"),
    "critic": ("ray::CriticActor", "ray::ColocatedActor"),
    "reference": ("ray::ReferenceActor", "ray::ColocatedActor"),
    "reward-service": ("ray::ProxyActor", "ray::ServeReplica:rlfh-rewards:RLFHRewards"),
    "verifier": ("ray::ServeReplica:rlfh-rewards:RLFHVerifier",),
}
ALL_ROLES = ("trainer", *ROLES, "redis", "node")
SIGNALS = {"KILL": signal.SIGKILL, "STOP": signal.SIGSTOP, "CONT": signal.SIGCONT, "TERM": signal.SIGTERM}


def _alive(p) -> bool:
    import psutil
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def raylet_flags(cmdline: list[str]) -> dict[str, str]:
    """``--name=value`` flags of a raylet's command line."""
    return dict(a[2:].split("=", 1) for a in cmdline if a.startswith("--") and "=" in a)


def raylet_is(cmdline: list[str], node: str) -> bool:
    """True when the raylet run by ``cmdline`` is ``node``: its node id (or a prefix of 8+ hex digits), or a custom
    resource it offers (a name in its ``--static_resource_list=NAME,AMOUNT,...``)."""
    flags = raylet_flags(cmdline)
    node_id = flags.get("node_id", "")
    if len(node) >= 8 and node_id.startswith(node):
        return True
    names = flags.get("static_resource_list", "").split(",")[0::2]
    return node in names


def node_processes(root_pid: int, node: str) -> list:
    """The raylet of ``node`` among ``root_pid``'s descendants and every process under it (its workers, actors and
    agents); ValueError when ``node`` matches no raylet or more than one."""
    import psutil
    try:
        tree = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    raylets = []
    for p in tree:
        try:
            if _alive(p) and p.name() == "raylet" and raylet_is(p.cmdline(), node):
                raylets.append(p)
        except psutil.NoSuchProcess:
            pass
    if len(raylets) > 1:
        raise ValueError(f"--node {node!r} matches {len(raylets)} nodes under PID {root_pid}; name one by its node id")
    if not raylets:
        return []
    out = [raylets[0]]
    try:
        out += [c for c in raylets[0].children(recursive=True) if _alive(c)]
    except psutil.NoSuchProcess:
        pass
    return out


def role_processes(root_pid: int, role: str, redis_pid: int | None = None, node: str = "") -> list:
    """The live processes of ``role`` in the run whose top process is ``root_pid``."""
    import psutil
    if role == "redis" and not redis_pid:
        raise ValueError("role redis needs --redis-pid (the cache's redis-server is not the run's child)")
    if role == "node":
        if not node:
            raise ValueError("role node needs --node (a custom resource the node offers, or its node id)")
        return node_processes(root_pid, node)
    try:
        root = psutil.Process(redis_pid if role == "redis" else root_pid)
        if role in ("trainer", "redis"):
            return [root] if _alive(root) else []
        children = root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    prefixes = ROLES[role]
    out = []
    for p in children:
        try:
            if _alive(p) and p.name().startswith(prefixes):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def last_step(save_path: str | Path) -> int:
    """The highest step in SAVE_PATH/metrics.jsonl (0: none yet); a line cut short is ignored."""
    path = Path(save_path) / "metrics.jsonl"
    best = 0
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                best = max(best, int(json.loads(line).get("step", 0)))
            except (ValueError, AttributeError):
                pass
    return best


def inject(root_pid: int, role: str, sig: str = "KILL", after_step: int = 0, save_path: str = "",
           redis_pid: int | None = None, wait_s: float = 600.0, node: str = "") -> dict:
    """Send ``sig`` to ``role``'s processes (after step ``after_step`` is logged); what was done, as a dict."""
    if role not in ALL_ROLES:
        raise ValueError(f"unknown role {role!r}; roles: {', '.join(ALL_ROLES)}")
    if sig not in SIGNALS:
        raise ValueError(f"unknown signal {sig!r}; signals: {', '.join(SIGNALS)}")
    deadline = time.monotonic() + wait_s
    if after_step:
        if not save_path:
            raise ValueError("--after-step needs --save-path (where metrics.jsonl is)")
        while last_step(save_path) < after_step:
            if time.monotonic() > deadline:
                raise TimeoutError(f"step {after_step} not logged in {save_path}/metrics.jsonl within {wait_s:.0f}s")
            time.sleep(0.1)
    while not (procs := role_processes(root_pid, role, redis_pid, node)):
        if time.monotonic() > deadline:
            raise LookupError(f"no {role} process under PID {root_pid} within {wait_s:.0f}s")
        time.sleep(0.2)
    node_id = raylet_flags(procs[0].cmdline()).get("node_id", node) if role == "node" else None  # before the kill
    pids = []
    names = []
    for p in procs:
        try:
            names.append(p.name())
        except Exception:  # noqa: BLE001 - psutil.NoSuchProcess: gone before the signal
            names.append("?")
        try:
            os.kill(p.pid, SIGNALS[sig])
            pids.append(p.pid)
        except ProcessLookupError:
            pass
    done = {"role": role, "signal": sig, "pids": pids, "names": names,
            "step": last_step(save_path) if save_path else None, "time": time.time()}
    if role == "node":
        done["node_id"] = node_id
    return done


def add_parser(sub: argparse._SubParsersAction) -> None:
    from cluster.cli import plain_doc
    p = sub.add_parser("chaos", help="Inject a real fault (SIGKILL / SIGSTOP by PID) into a running train or "
                                     "serve: the trainer, an actor, the reward service, Redis.",
                       description=plain_doc(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    csub = p.add_subparsers(dest="chaos_command", metavar="ACTION", required=True)
    ls = csub.add_parser("list", help="The processes of a run, by role (JSON).")
    ls.add_argument("--pid", type=int, required=True, help="PID of the rlfh train / rlfh serve process.")
    ls.set_defaults(func=_cmd_list)
    k = csub.add_parser("kill", help="Signal a role's processes (SIGKILL unless --signal says otherwise).")
    k.add_argument("role", choices=ALL_ROLES)
    k.add_argument("--pid", type=int, required=True, help="PID of the rlfh train / rlfh serve process.")
    k.add_argument("--signal", default="KILL", choices=list(SIGNALS), help="Signal to send (default KILL).")
    k.add_argument("--after-step", type=int, default=0, help="Wait until this step is in metrics.jsonl first.")
    k.add_argument("--save-path", default="", help="The run's SAVE_PATH (for --after-step).")
    k.add_argument("--redis-pid", type=int, default=None, help="PID of the redis-server (role redis).")
    k.add_argument("--node", default="", help="Role node: a custom resource the node offers (e.g. rlfh_rollout) "
                                              "or its node id.")
    k.add_argument("--wait-s", type=float, default=600.0, help="Give up waiting after this long (default 600).")
    k.set_defaults(func=_cmd_kill)
    from ops import soak
    so = csub.add_parser("soak", help="Train for a set time on a local multi-node cluster while killing a random "
                                      "actor, replica, Redis or node every N seconds; print what it cost.",
                         description=plain_doc(soak.__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    soak.add_arguments(so)
    so.set_defaults(func=_cmd_soak)


def _cmd_soak(args: argparse.Namespace) -> int:
    from ops import soak
    from core.config import ConfigError
    try:
        soak.soak(args)
    except (ValueError, ConfigError) as e:
        print(f"rlfh chaos soak: {e}", file=sys.stderr)
        return 2
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    out = {role: [p.pid for p in role_processes(args.pid, role)] for role in ("trainer", *ROLES)}
    print(json.dumps(out))
    return 0


def _cmd_kill(args: argparse.Namespace) -> int:
    try:
        done = inject(args.pid, args.role, args.signal, args.after_step, args.save_path, args.redis_pid, args.wait_s,
                      args.node)
    except (ValueError, LookupError, TimeoutError) as e:
        print(f"rlfh chaos: {e}", file=sys.stderr)
        return 1
    print(json.dumps(done), flush=True)
    return 0 if done["pids"] else 1
