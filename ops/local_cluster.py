"""A Ray cluster of several nodes on one machine, as Ray's own tests build one, for `rlfh chaos soak` and the
multi-node tests.

The head (GCS, dashboard, Serve's controller) is started in this process by ``ray.cluster_utils.Cluster``; each
worker node is a child process that starts a raylet joined to it, as ``ray start --address=HEAD --block`` does in a
KubeRay worker pod (``ray start`` itself would rewrite 127.0.0.1 to the machine's address, which a head bound to
loopback does not listen on). Every node binds 127.0.0.1 and offers one custom resource that names it (``rlfh_train``...), which the
``*_NODE_RESOURCE`` settings place roles on. A worker node can be started from any thread
(``Cluster.add_node`` cannot: Ray's node sets signal handlers), so a node lost to ``rlfh chaos kill node`` can
be replaced while training runs, as KubeRay replaces a lost pod.

``FAST_NODE_DEATH``: the GCS checks each raylet every 0.5 s and declares it dead after 4 missed checks (Ray's
defaults, 3 s and 5, take ~15 s): a lost node is noticed in seconds.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from core.ray_bootstrap import LOCAL_RAY_ENV, _bind_loopback

log = logging.getLogger(__name__)

FAST_NODE_DEATH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                   "health_check_timeout_ms": 1000, "health_check_failure_threshold": 4}
OBJECT_STORE_BYTES = 200 * 1024 ** 2


class WorkerNode:
    """One worker node with ``resources``, joined to the head at ``address``: a child process
    (``python -m ops.local_cluster``) that starts a raylet as ``ray start --address=ADDRESS --block`` does,
    and ends when its raylet does. Returns once the GCS lists it alive (``node_id``); RuntimeError when it has not
    joined within ``timeout_s``."""

    def __init__(self, address: str, resources: dict, num_cpus: float = 1, timeout_s: float = 120.0):
        import ray
        self.resources = dict(resources)
        before = {n["NodeID"] for n in ray.nodes()}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ops.local_cluster", "--address", address, "--num-cpus", f"{num_cpus:g}",
             "--resources", json.dumps(self.resources)],
            cwd=str(Path(__file__).resolve().parents[1]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            new = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in before]
            if new:
                self.node_id: str = new[0]
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                code = self.proc.poll()
                self.stop()
                raise RuntimeError(f"a worker node with {self.resources} did not join {address} within "
                                   f"{timeout_s:.0f}s (exit code {code})")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGKILL the node (its raylet and every worker): the process's session, and any child that left it."""
        import psutil
        try:
            procs = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            log.warning("ray start (PID %d) did not exit after SIGKILL", self.proc.pid)


class LocalCluster:
    """A head in this process plus worker nodes started with :meth:`add_node`; :meth:`shutdown` ends them all.

    Sets the loopback environment of an embedded Ray (:data:`core.ray_bootstrap.LOCAL_RAY_ENV`) for as long as it
    runs, and connects this process (``ray.init``)."""

    def __init__(self, head_cpus: float = 1, dashboard_port: Optional[int] = None,
                 fast_node_death: bool = True):
        import ray
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster

        env = dict(os.environ)   # to put back on shutdown: the loopback variables as they were
        self._env_before = {k: env.get(k) for k in LOCAL_RAY_ENV}
        self._enabled_before = ray_constants.ENABLE_RAY_CLUSTER
        os.environ.update(LOCAL_RAY_ENV)
        _bind_loopback()
        head = dict(num_cpus=head_cpus, node_ip_address="127.0.0.1", object_store_memory=OBJECT_STORE_BYTES)
        if dashboard_port:
            head.update(include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=dashboard_port)
        if fast_node_death:
            head["_system_config"] = FAST_NODE_DEATH
        self.cluster = Cluster(initialize_head=True, head_node_args=head)
        self.address: str = self.cluster.address
        self.workers: list[WorkerNode] = []
        ray.init(address=self.address, log_to_driver=False)

    def add_node(self, resources: dict, num_cpus: float = 1) -> WorkerNode:
        node = WorkerNode(self.address, resources, num_cpus)
        self.workers.append(node)
        return node

    def shutdown(self) -> None:
        import ray
        from ray._private import ray_constants
        try:
            ray.shutdown()
            while self.workers:
                self.workers.pop().stop()
        finally:
            self.cluster.shutdown()
            ray_constants.ENABLE_RAY_CLUSTER = self._enabled_before
            for k, v in self._env_before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def node_is_dead(node_id: str) -> bool:
    """True once the GCS has declared ``node_id`` dead (or forgotten it)."""
    import ray
    return not any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())


def _serve_worker_node(address: str, num_cpus: float, resources: dict) -> int:
    """The child process of :class:`WorkerNode`: start a raylet (and its agents) bound to 127.0.0.1, joined to
    ``address``, as ``Cluster.add_node`` does in-process; return when the raylet has ended (killed, or SIGTERM)."""
    from ray._private import ray_constants
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    os.environ.update(LOCAL_RAY_ENV)
    _bind_loopback()
    params = RayParams(node_ip_address="127.0.0.1", num_cpus=num_cpus, num_gpus=0, resources=resources,
                       object_store_memory=OBJECT_STORE_BYTES, gcs_address=address, include_log_monitor=False,
                       node_manager_port=0, min_worker_port=0, max_worker_port=0)
    params.dashboard_agent_listen_port = None
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    node = Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
    raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process
    while not stop and raylet.poll() is None:
        time.sleep(0.5)
    node.kill_all_processes(check_alive=False, allow_graceful=False)
    return 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="One worker node of a LocalCluster (started by WorkerNode).")
    ap.add_argument("--address", required=True)
    ap.add_argument("--num-cpus", type=float, default=1.0)
    ap.add_argument("--resources", default="{}")
    a = ap.parse_args()
    sys.exit(_serve_worker_node(a.address, a.num_cpus, json.loads(a.resources)))
