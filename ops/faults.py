"""Fault injection by PID: the processes of a running ``rlfh train`` / ``rlfh serve`` by role, and a signal sent
to them once a step is logged (:func:`inject`). ``rlfh chaos kill`` (:mod:`ops.chaos`) and the soak's injector
(:mod:`ops.soak`) both call it; here, below both, so the command and the soak do not import each other.

Only processes of the given run are touched (never anything found by name alone).
"""
from __future__ import annotations

import json
import os
import signal
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
