"""Ray actor groups: N ranks of one role, placement bundles, data-parallel dispatch.

* :func:`plan_placement` turns the ``*_NUM_NODES`` / ``*_NUM_GPUS_PER_NODE`` /
  ``COLOCATE_*`` settings into placement groups and bundle indices per role. On
  CPU (``*_NUM_GPUS_PER_NODE == 0``) bundles reserve only the fractional
  ``NUM_CPUS_PER_ACTOR`` per actor, so a 2-core laptop fits a whole run.
* :class:`ActorGroup` starts ``world_size`` ranks of an actor class (rank 0 first:
  it publishes the ``MASTER_ADDR``/``MASTER_PORT`` the others join), then runs a
  method on every rank (:meth:`~ActorGroup.run`) or splits a batch across ranks
  (:meth:`~ActorGroup.dispatch`).
* :func:`create_groups` builds the whole cast of a run: policy, critic (GAE
  only), reference (KL_COEF > 0 only) and the rollout engines.

Several nodes: ``ACTOR_NODE_RESOURCE`` / ``CRITIC_NODE_RESOURCE`` / ``REF_NODE_RESOURCE`` /
``ROLLOUT_NODE_RESOURCE`` name a Ray custom resource a role's node must offer; each bundle then asks for
:data:`NODE_RESOURCE_PER_ACTOR` of it per actor, so Ray can only reserve it on such a node, and
``PLACEMENT_STRATEGY`` is the placement groups' strategy. A name no live node offers is a ConfigError naming
the setting before any placement group is made (:func:`check_node_resources`): Ray would otherwise wait for a
node that never comes. Which node each role's bundles landed on is kept (:meth:`Placement.nodes_of`), so that
after a node dies the run can say which roles went with it (:func:`lost_nodes`).
"""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch

from actors import calls
from actors.colocated import ColocatedActor
from actors.critic import CriticActor
from actors.policy import PolicyActor
from actors.reference import ReferenceActor
from actors.roles import needs_critic, needs_reference
from actors.rollout import HFRolloutEngine, VLLMRolloutEngine, resolve_rollout_backend
from actors.types import Batch, split_batch
from core.config import ConfigError, RLFHConfig, env_name, setting_label
from core.placement import (NODE_RESOURCE_PER_ACTOR, NODE_RESOURCE_SETTINGS, check_node_resources,  # noqa: F401
                            missing_node_resources, node_resource, wait_for_node_resources)

log = logging.getLogger(__name__)

# ================================================================================================ placement


@dataclass
class RolePlacement:
    """Where one role's ranks go: bundle ``bundle_indices[rank]`` of ``placement_group``."""

    role: str
    world_size: int
    num_nodes: int
    num_gpus_per_node: int
    num_gpus_per_actor: float
    num_cpus_per_actor: float
    placement_group: Any = None
    bundle_indices: Optional[list[int]] = None
    shared_with: tuple[str, ...] = ()
    node_resource: str = ""             # the *_NODE_RESOURCE its bundles ask for ("" : any node)
    node_ids: tuple[str, ...] = ()      # the nodes Ray reserved its bundles on (hex ids, bundle order)


@dataclass
class Placement:
    """The plan for a run: one :class:`RolePlacement` per role present, and the placement groups made."""

    roles: dict[str, RolePlacement]
    placement_groups: list = field(default_factory=list)
    gpu: bool = False

    def __getitem__(self, role: str) -> RolePlacement:
        return self.roles[role]

    def get(self, role: str) -> Optional[RolePlacement]:
        return self.roles.get(role)

    def nodes_of(self) -> dict[str, list[str]]:
        """node id (hex) -> the roles with a bundle there, for every node this placement reserved."""
        out: dict[str, list[str]] = {}
        for r in self.roles.values():
            for node in dict.fromkeys(r.node_ids):
                out.setdefault(node, []).append(r.role)
        return out

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group
        for pg in self.placement_groups:
            try:
                remove_placement_group(pg)
            except Exception as e:  # pragma: no cover
                log.warning("removing a placement group failed: %s", e)
        self.placement_groups = []


def _role_sizes(cfg: RLFHConfig) -> dict[str, tuple[int, int, int]]:
    """role -> (world_size, num_nodes, num_gpus_per_node); rollout counts GPU slots (engines * TP on GPU)."""
    sizes = {"policy": (cfg.actor_num_nodes * max(1, cfg.actor_num_gpus_per_node), cfg.actor_num_nodes,
                        cfg.actor_num_gpus_per_node)}
    if needs_critic(cfg):
        sizes["critic"] = (cfg.critic_num_nodes * max(1, cfg.critic_num_gpus_per_node), cfg.critic_num_nodes,
                           cfg.critic_num_gpus_per_node)
    if needs_reference(cfg):
        sizes["reference"] = (cfg.ref_num_nodes * max(1, cfg.ref_num_gpus_per_node), cfg.ref_num_nodes,
                              cfg.ref_num_gpus_per_node)
    gpu_rollout = cfg.actor_num_gpus_per_node > 0
    slots = cfg.vllm_num_engines * (cfg.vllm_tensor_parallel_size if gpu_rollout else 1)
    sizes["rollout"] = (slots, 1, cfg.actor_num_gpus_per_node)
    return sizes


def _colocation_sets(cfg: RLFHConfig, roles: Sequence[str]) -> list[tuple[str, ...]]:
    if cfg.colocate_all_models:
        return [tuple(roles)]
    sets = []
    if cfg.colocate_actor_ref and "reference" in roles:
        sets.append(("policy", "reference"))
    taken = {r for s in sets for r in s}
    sets += [(r,) for r in roles if r not in taken]
    return sets


def _shared_node_resource(cfg: RLFHConfig, group: Sequence[str], why: str) -> str:
    """The one node resource of roles that share bundles (or a process); a ConfigError when they name two."""
    named = {node_resource(cfg, r) for r in group} - {""}
    if len(named) > 1:
        detail = ", ".join(f"{setting_label(NODE_RESOURCE_SETTINGS[r])} = {node_resource(cfg, r)!r}"
                           for r in group if node_resource(cfg, r))
        raise ConfigError(f"{why} puts {' + '.join(group)} in the same bundles, so they run on one node, but their "
                          f"node resources differ: {detail}. Give them the same resource, or clear {why}.")
    return next(iter(named), "")


def live_node_ids() -> set[str]:
    import ray
    return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}


def lost_nodes(placement: Optional["Placement"]) -> list[dict]:
    """The nodes ``placement`` reserved bundles on that are no longer alive: ``[{"node_id", "roles",
    "resources"}]`` (the node's custom resources: those the GCS still lists, and the *_NODE_RESOURCE its roles
    were placed by). Empty when none is lost."""
    if placement is None or not placement.roles:
        return []
    import ray
    try:
        nodes = {n["NodeID"]: n for n in ray.nodes()}
    except Exception as e:  # noqa: BLE001 - the GCS itself is unreachable: nothing can be said about nodes
        log.warning("could not read the node table: %s", e)
        return []
    out = []
    for node_id, roles in placement.nodes_of().items():
        info = nodes.get(node_id, {})
        if not info.get("Alive", False):
            # the GCS forgets a dead node's resources: the *_NODE_RESOURCE its roles asked for say what it offered
            res = {k for k in info.get("Resources", {}) if k not in ("CPU", "GPU", "memory", "object_store_memory")
                   and not k.startswith("node:")}
            res.update(placement.roles[r].node_resource for r in roles if placement.roles[r].node_resource)
            out.append({"node_id": node_id, "roles": roles, "resources": sorted(res)})
    return out


def _env_names(role: str) -> str:
    return {"policy": "ACTOR_NUM_NODES * ACTOR_NUM_GPUS_PER_NODE",
            "critic": "CRITIC_NUM_NODES * CRITIC_NUM_GPUS_PER_NODE",
            "reference": "REF_NUM_NODES * REF_NUM_GPUS_PER_NODE",
            "rollout": "VLLM_NUM_ENGINES * VLLM_TENSOR_PARALLEL_SIZE"}[role]


def plan_placement(cfg: RLFHConfig, create: bool = True, timeout_s: Optional[float] = None) -> Placement:
    """Placement groups and bundle indices per role, honouring COLOCATE_ACTOR_REF / COLOCATE_ALL_MODELS.

    Colocated roles share one placement group whose bundle ``i`` hosts rank ``i`` of each of them; on GPU
    each of the ``k`` sharing actors asks for ``1/k`` of the bundle's GPU. Colocated roles must have the
    same number of ranks on GPU (the error names the variables to fix). On CPU every bundle reserves
    ``NUM_CPUS_PER_ACTOR`` per actor placed on it (fractional: whole CPUs would not fit a laptop).
    ``create=False`` plans without touching Ray (for printing / tests). ``timeout_s``: how long Ray may take
    to reserve each placement group (default RLFH_PG_READY_TIMEOUT_S).
    """
    timeout_s = cfg.pg_ready_timeout_s if timeout_s is None else timeout_s
    sizes = _role_sizes(cfg)
    gpu = any(g > 0 for _, _, g in sizes.values())
    cpu_each = cfg.num_cpus_per_actor
    placement = Placement(roles={}, gpu=gpu)
    if create:      # a resource no node has: say so now, not after RLFH_PG_READY_TIMEOUT_S of pending
        check_node_resources(cfg, list(sizes))
    for group in _colocation_sets(cfg, list(sizes)):
        flag = "COLOCATE_ALL_MODELS" if cfg.colocate_all_models else "COLOCATE_ACTOR_REF"
        node_res = _shared_node_resource(cfg, group, flag) if len(group) > 1 else node_resource(cfg, group[0])
        gpu_roles = [r for r in group if sizes[r][2] > 0]
        if len(group) > 1 and gpu_roles:
            ws = {r: sizes[r][0] for r in group}
            if len(set(ws.values())) != 1:
                detail = ", ".join(f"{_env_names(r)} = {n}" for r, n in ws.items())
                raise ValueError(f"{flag}=true needs the same number of GPUs for every colocated role: {detail}")
        n_bundles = max(sizes[r][0] for r in group)
        share = len(group)
        frac = int(10000 / share) / 10000.0
        bundles = []
        for b in range(n_bundles):
            on_b = [r for r in group if b < sizes[r][0]]
            res = {"CPU": round(cpu_each * len(on_b), 4)}
            if any(sizes[r][2] > 0 for r in on_b):
                res["GPU"] = 1.0
            if node_res:
                res[node_res] = round(NODE_RESOURCE_PER_ACTOR * len(on_b), 4)
            bundles.append(res)
        pg, on_nodes = None, ()
        if create:
            pg = _make_pg(bundles, group, timeout_s, cfg.placement_strategy)
            placement.placement_groups.append(pg)
            on_nodes = bundle_nodes(pg)
        for r in group:
            ws, nodes, gpn = sizes[r]
            gpus = 0.0 if gpn == 0 else (1.0 if share == 1 else frac)
            placement.roles[r] = RolePlacement(
                role=r, world_size=ws, num_nodes=nodes, num_gpus_per_node=gpn, num_gpus_per_actor=gpus,
                num_cpus_per_actor=cpu_each, placement_group=pg, bundle_indices=list(range(ws)),
                shared_with=tuple(x for x in group if x != r), node_resource=node_res,
                node_ids=tuple(on_nodes[:ws]))
    return placement


def bundle_nodes(pg) -> tuple[str, ...]:
    """The node (hex id) each bundle of a ready placement group is reserved on, in bundle order."""
    from ray.util.placement_group import placement_group_table
    where = placement_group_table(pg).get("bundles_to_node_id", {})
    return tuple(str(where.get(i, "")) for i in range(len(where)))


def _make_pg(bundles: list[dict], roles: Sequence[str], timeout_s: float, strategy: str = "PACK"):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    pg = placement_group(bundles, strategy=strategy, name=f"rlfh-{'-'.join(roles)}-{os.getpid()}-{time.time_ns()}")
    try:
        ray.get(pg.ready(), timeout=timeout_s)
    except Exception:
        remove_placement_group(pg)
        need_cpu = sum(b.get("CPU", 0) for b in bundles)
        need_gpu = sum(b.get("GPU", 0) for b in bundles)
        node_res = "".join(f", on a node with {k}" for k in sorted({k for b in bundles for k in b} - {"CPU", "GPU"}))
        raise RuntimeError(
            f"placement group for {'+'.join(roles)} ({len(bundles)} bundles: {need_cpu:g} CPU, {need_gpu:g} GPU"
            f"{node_res}, PLACEMENT_STRATEGY={strategy}) was not scheduled within {timeout_s:.0f}s; the cluster has "
            f"{ray.available_resources()} available. Lower NUM_CPUS_PER_ACTOR or *_NUM_GPUS_PER_NODE / "
            "VLLM_NUM_ENGINES, add nodes (with the *_NODE_RESOURCE asked for), or choose another "
            "PLACEMENT_STRATEGY.") from None
    return pg


def _strategy(pg, bundle_index: Optional[int], capture_children: bool = False):
    if pg is None:
        return None
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    return PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=bundle_index,
                                            placement_group_capture_child_tasks=capture_children)


#: Where Linux distributions and conda put libjemalloc (Debian/Ubuntu: the libjemalloc2 package).
JEMALLOC_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                 "/usr/local/lib", "/opt/conda/lib")


def find_jemalloc() -> Optional[str]:
    """Path of a libjemalloc shared library on this machine (``$CONDA_PREFIX/lib`` first), or None."""
    if not sys.platform.startswith("linux"):
        return None
    dirs = ([os.path.join(os.environ["CONDA_PREFIX"], "lib")] if os.environ.get("CONDA_PREFIX") else []) + \
        list(JEMALLOC_DIRS)
    for d in dirs:
        for name in ("libjemalloc.so.2", "libjemalloc.so"):
            path = os.path.join(d, name)
            if os.path.isfile(path):
                return path
    return None


def allocator_env(allocator: str, gpu: bool) -> dict[str, str]:
    """``{"LD_PRELOAD": ...}`` that makes an actor process use jemalloc (ACTOR_ALLOCATOR), or ``{}``."""
    if allocator == "system" or (allocator == "auto" and gpu):
        return {}
    path = find_jemalloc()
    if path is None:
        if allocator == "jemalloc":
            raise ValueError("ACTOR_ALLOCATOR=jemalloc: no libjemalloc found on this machine (looked in "
                             f"{', '.join(JEMALLOC_DIRS)}). Install it (Debian/Ubuntu: apt install libjemalloc2) "
                             "or set ACTOR_ALLOCATOR=auto or system.")
        return {}
    before = os.environ.get("LD_PRELOAD", "")
    return {"LD_PRELOAD": f"{path}:{before}" if before and path not in before else (before or path)}


#: Variables of this process's environment that every model actor gets as they are: process settings
#: (core.config.ProcessSettings) and where Hugging Face keeps its files.
FORWARDED_ENV = ("RLFH_CACHE_DIR", "RLFH_LOG_LEVEL", "HF_HOME", "HF_HUB_OFFLINE")


def actor_env(gpu: bool, allocator: str = "system") -> dict[str, str]:
    """Environment every model actor gets (CPU: DeepSpeed's cpu accelerator and no CUDA probing; ACTOR_ALLOCATOR)."""
    env = {k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)}
    env["TOKENIZERS_PARALLELISM"] = "false"     # set for the actor processes only (they tokenize in one thread)
    if not gpu:
        # set for the CPU actors only: DeepSpeed's CPU accelerator, and RLFH_FORCE_CPU (a process setting) so
        # that they load on CPU even on a node with a GPU
        env.update({"DS_ACCELERATOR": "cpu", "RLFH_FORCE_CPU": "1"})
    env.update(allocator_env(allocator, gpu))
    return env


# ================================================================================================ groups


class ActorGroup:
    """``world_size = num_nodes * max(1, num_gpus_per_node)`` ranks of ``actor_cls`` (a plain class or a
    ``ray.remote`` class). Rank ``r`` goes to ``bundle_indices[r]`` of ``placement_group`` when given."""

    def __init__(self, actor_cls, *, role: str, cfg: RLFHConfig, num_nodes: int, num_gpus_per_node: int,
                 placement_group=None, bundle_indices: Optional[list[int]] = None,
                 num_gpus_per_actor: Optional[float] = None, num_cpus_per_actor: Optional[float] = None,
                 runtime_env: Optional[dict] = None):
        import ray
        if num_nodes < 1 or num_gpus_per_node < 0:
            raise ValueError(f"{role}: num_nodes must be >= 1 and num_gpus_per_node >= 0 "
                             f"(got {num_nodes}, {num_gpus_per_node})")
        self.role, self.cfg = role, cfg
        self.num_nodes, self.num_gpus_per_node = num_nodes, num_gpus_per_node
        self._world_size = num_nodes * max(1, num_gpus_per_node)
        gpu = num_gpus_per_node > 0
        self.num_gpus_per_actor = (1.0 if gpu else 0.0) if num_gpus_per_actor is None else float(num_gpus_per_actor)
        self.num_cpus_per_actor = cfg.num_cpus_per_actor if num_cpus_per_actor is None else num_cpus_per_actor
        self._own_pg = None
        if placement_group is None and gpu and self._world_size > 1:
            self._own_pg = _make_pg([{"GPU": 1.0, "CPU": self.num_cpus_per_actor}] * self._world_size, [role],
                                    cfg.pg_ready_timeout_s)
            placement_group = self._own_pg
        if placement_group is not None and bundle_indices is None:
            bundle_indices = list(range(self._world_size))
        if bundle_indices is not None and len(bundle_indices) < self._world_size:
            raise ValueError(f"{role}: {len(bundle_indices)} bundle indices for {self._world_size} ranks")
        self.placement_group, self.bundle_indices = placement_group, bundle_indices
        remote_cls = actor_cls if hasattr(actor_cls, "remote") else ray.remote(actor_cls)
        env = {"env_vars": actor_env(gpu, cfg.actor_allocator)}
        if runtime_env:
            env = {**runtime_env, "env_vars": {**env["env_vars"], **runtime_env.get("env_vars", {})}}
        self._env = env

        def make(rank: int, addr, port):
            opts = dict(num_cpus=self.num_cpus_per_actor, num_gpus=self.num_gpus_per_actor, runtime_env=self._env)
            strat = _strategy(placement_group, bundle_indices[rank] if bundle_indices else None)
            if strat is not None:
                opts["scheduling_strategy"] = strat
            return remote_cls.options(**opts).remote(cfg, rank, self._world_size, addr, port)

        t0 = time.time()
        first = make(0, None, None)
        addr, port = calls.get(first.master_address.remote(), f"{role} rank 0 start", calls.start_timeout_s(cfg))
        self.actors = [first] + [make(r, addr, port) for r in range(1, self._world_size)]
        calls.get([a.ping.remote() for a in self.actors], f"{role} ranks start", calls.start_timeout_s(cfg))
        log.info("%s group: %d rank(s) up in %.1fs (master %s:%s)", role, self._world_size, time.time() - t0,
                 addr, port)

    @property
    def world_size(self) -> int:
        return self._world_size

    def run_async(self, method: str, *args, **kwargs) -> list:
        """Call ``method`` on every rank; return the ObjectRefs (rank order)."""
        return [getattr(a, method).remote(*args, **kwargs) for a in self.actors]

    def run(self, method: str, *args, **kwargs) -> list:
        """Call ``method`` on every rank, wait, return the results in rank order."""
        return calls.get(self.run_async(method, *args, **kwargs), f"{self.role}.{method}", calls.timeout_s(self.cfg))

    def dispatch_async(self, method: str, batch: Batch, **kwargs) -> list:
        shards = split_batch(batch, self._world_size)
        return [getattr(a, method).remote(s, **kwargs) for a, s in zip(self.actors, shards)]

    def dispatch(self, method: str, batch: Batch, **kwargs) -> list:
        """Split ``batch`` into ``world_size`` contiguous shards (data parallel), call ``method(shard)`` on
        each rank, wait, return the results in rank order."""
        return calls.get(self.dispatch_async(method, batch, **kwargs), f"{self.role}.{method}",
                         calls.timeout_s(self.cfg))

    def dispatch_cat(self, method: str, batch: Batch, **kwargs) -> torch.Tensor:
        """:meth:`dispatch` for per-sample tensor results: concatenated back along dim 0 ([B, ...])."""
        return torch.cat(self.dispatch(method, batch, **kwargs), 0)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Destroy process groups, kill the actors, release this group's own placement group."""
        import ray
        try:
            ray.get(self.run_async("shutdown"), timeout=timeout_s)
        except Exception as e:
            log.warning("%s group: shutdown call failed (%s); killing the actors", self.role, e)
        kill_actors(self.actors)
        self.actors = []
        if self._own_pg is not None:
            from ray.util.placement_group import remove_placement_group
            remove_placement_group(self._own_pg)
            self._own_pg = None


def kill_actors(handles) -> None:
    """``ray.kill`` every handle; one that is already gone is not an error (shutdown paths)."""
    import ray
    for h in handles:
        try:
            ray.kill(h)
        except Exception:  # noqa: BLE001 - dead actor / Ray already down
            pass


def group_for(actor_cls, role: str, cfg: RLFHConfig, rp: RolePlacement) -> ActorGroup:
    return ActorGroup(actor_cls, role=role, cfg=cfg, num_nodes=rp.num_nodes, num_gpus_per_node=rp.num_gpus_per_node,
                      placement_group=rp.placement_group, bundle_indices=rp.bundle_indices,
                      num_gpus_per_actor=rp.num_gpus_per_actor, num_cpus_per_actor=rp.num_cpus_per_actor)


def create_rollout_engines(cfg: RLFHConfig, placement: Optional[Placement] = None,
                           backend: Optional[str] = None) -> list:
    """``VLLM_NUM_ENGINES`` rollout engine actors (Ray handles) for the resolved backend."""
    import ray

    backend = backend or resolve_rollout_backend(cfg)
    cls = VLLMRolloutEngine if backend == "vllm" else HFRolloutEngine
    rp = placement.get("rollout") if placement is not None else None
    gpu = cfg.actor_num_gpus_per_node > 0
    tp = cfg.vllm_tensor_parallel_size if (gpu and backend == "vllm") else 1
    engines = []
    for i in range(cfg.vllm_num_engines):
        num_gpus = 0.0
        if gpu:
            num_gpus = (rp.num_gpus_per_actor if rp is not None else 1.0) if tp == 1 else 0.0
        opts = dict(num_cpus=cfg.num_cpus_per_actor, num_gpus=num_gpus,
                    runtime_env={"env_vars": actor_env(gpu, cfg.actor_allocator)})
        if rp is not None and rp.placement_group is not None:
            opts["scheduling_strategy"] = _strategy(rp.placement_group, rp.bundle_indices[i * tp],
                                                    capture_children=tp > 1)
        engines.append(ray.remote(cls).options(**opts).remote(cfg, i))
    return engines


# ================================================================================================ layouts


def resolve_layout(cfg: RLFHConfig, backend: Optional[str] = None) -> str:
    """MODEL_LAYOUT: ``colocated`` or ``separate`` (``auto``: colocated for a one-node CPU run on hf engines).

    An explicit ``colocated`` that cannot work raises a ConfigError naming the setting to change.
    """
    sizes = _role_sizes(cfg)
    one_node_cpu = all(nodes == 1 and gpn == 0 for role, (_, nodes, gpn) in sizes.items() if role != "rollout")
    if backend is None:
        backend = resolve_rollout_backend(cfg)
    problems = []
    if backend != "hf":
        problems.append(f"the rollout backend is {backend} (the colocated engine is transformers generate: "
                        "ROLLOUT_BACKEND=hf)")
    if cfg.zero_stage >= 3:
        problems.append("ZERO_STAGE=3 partitions the policy's weights (generation needs them whole)")
    ranks = {role: (ws, gpn) for role, (ws, _, gpn) in sizes.items() if role != "rollout"}
    if len(set(ranks.values())) > 1:
        problems.append("every role needs the same ranks and GPUs ("
                        + ", ".join(f"{_env_names(r)} = {ws}" for r, (ws, _) in ranks.items()) + ")")
    if len({node_resource(cfg, r) for r in sizes} - {""}) > 1:
        problems.append("the roles are placed on different nodes ("
                        + ", ".join(f"{env_name(NODE_RESOURCE_SETTINGS[r])} = {node_resource(cfg, r)!r}"
                                    for r in sizes if node_resource(cfg, r)) + ")")
    if cfg.model_layout == "colocated":
        if problems:
            raise ConfigError("MODEL_LAYOUT=colocated: " + "; ".join(problems) + ". Use MODEL_LAYOUT=separate.")
        return "colocated"
    if cfg.model_layout == "separate":
        return "separate"
    return "colocated" if one_node_cpu and not problems else "separate"


class _RoleMethod:
    def __init__(self, handle, role: str, method: str):
        self.handle, self.role, self.method = handle, role, method

    def remote(self, *args, **kwargs):
        return self.handle.call_role.remote(self.role, self.method, *args, **kwargs)


class RoleHandle:
    """A Ray actor handle's view of one role hosted by a :class:`actors.colocated.ColocatedActor`:
    ``view.generate.remote(...)`` runs ``generate`` on that process's rollout engine."""

    def __init__(self, handle, role: str):
        self._handle, self._role = handle, role

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return _RoleMethod(self._handle, self._role, name)

    def __repr__(self) -> str:
        return f"RoleHandle({self._role} on {self._handle})"


class RoleView(ActorGroup):
    """An :class:`ActorGroup` (run / dispatch) over the ``role`` hosted by each rank of a colocated ``host``
    group. The processes belong to the host: shutting a view down kills nothing."""

    def __init__(self, host: ActorGroup, role: str):   # no super().__init__: it would start actors
        self.host, self.role, self.cfg = host, role, host.cfg
        self.num_nodes, self.num_gpus_per_node = host.num_nodes, host.num_gpus_per_node
        self._world_size = host.world_size
        self.num_gpus_per_actor, self.num_cpus_per_actor = host.num_gpus_per_actor, host.num_cpus_per_actor
        self.placement_group, self.bundle_indices, self._own_pg = host.placement_group, host.bundle_indices, None
        self.actors = [RoleHandle(a, role) for a in host.actors]

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self.actors = []


@dataclass
class Groups:
    """Everything a run trains with. ``critic`` is None unless ADVANTAGE_ESTIMATOR=gae; ``reference`` is None
    when KL_COEF == 0; ``rollout`` is a list of engine actor handles. ``layout`` is ``separate`` (one actor
    group per role) or ``colocated`` (``policy`` is a group of :class:`actors.colocated.ColocatedActor`;
    ``critic`` / ``reference`` are :class:`RoleView` s of it and ``rollout`` its :class:`RoleHandle` s)."""

    policy: ActorGroup
    critic: Optional[ActorGroup]
    reference: Optional[ActorGroup]
    rollout: list
    placement: Placement
    rollout_backend: str = "hf"
    init_info: dict = field(default_factory=dict)
    layout: str = "separate"

    def groups(self) -> list[ActorGroup]:
        return [g for g in (self.policy, self.critic, self.reference) if g is not None]

    def shutdown(self) -> None:
        for g in self.groups():
            g.shutdown()
        kill_actors([e for e in self.rollout if not isinstance(e, RoleHandle)])
        self.rollout = []
        self.placement.remove()


def create_groups(cfg: RLFHConfig, init_models: bool = True) -> Groups:
    """Plan placement, start every role and (by default) load every model in parallel."""
    import ray

    t0 = time.time()
    backend = resolve_rollout_backend(cfg)
    if resolve_layout(cfg, backend) == "colocated":
        return create_colocated_groups(cfg, init_models)
    placement = plan_placement(cfg)
    made: list = []   # what to tear down if anything below fails
    engines: list = []
    try:
        policy = group_for(PolicyActor, "policy", cfg, placement["policy"])
        made.append(policy)
        critic = group_for(CriticActor, "critic", cfg, placement["critic"]) if placement.get("critic") else None
        made.append(critic)
        reference = (group_for(ReferenceActor, "reference", cfg, placement["reference"])
                     if placement.get("reference") else None)
        made.append(reference)
        engines = create_rollout_engines(cfg, placement, backend)
        groups = Groups(policy=policy, critic=critic, reference=reference, rollout=engines, placement=placement,
                        rollout_backend=backend)
        if init_models:
            refs = {g.role: g.run_async("init_model") for g in groups.groups()}
            refs["rollout"] = [e.info.remote() for e in engines]
            groups.init_info = {role: calls.get(r, f"{role} init_model", calls.start_timeout_s(cfg))
                                for role, r in refs.items()}
    except Exception:
        for g in made:
            if g is not None:
                g.shutdown()
        for e in engines:
            ray.kill(e)
        placement.remove()
        raise
    log.info("groups ready in %.1fs: %s, rollout=%s x%d", time.time() - t0,
             ", ".join(f"{g.role} x{g.world_size}" for g in groups.groups()), backend, len(engines))
    return groups


def create_colocated_groups(cfg: RLFHConfig, init_models: bool = True) -> Groups:
    """The colocated layout: one :class:`actors.colocated.ColocatedActor` per policy rank (one bundle of
    NUM_CPUS_PER_ACTOR each) hosting policy, rollout engine, reference and critic; views for the other roles."""

    t0 = time.time()
    ws, nodes, gpn = _role_sizes(cfg)["policy"]
    roles = list(_role_sizes(cfg))
    node_res = _shared_node_resource(cfg, roles, "MODEL_LAYOUT=colocated")   # one process hosts every role
    check_node_resources(cfg, roles)
    bundles = [{"CPU": cfg.num_cpus_per_actor, **({"GPU": 1.0} if gpn else {}),
                **({node_res: NODE_RESOURCE_PER_ACTOR} if node_res else {})} for _ in range(ws)]
    pg = _make_pg(bundles, ["colocated"], cfg.pg_ready_timeout_s, cfg.placement_strategy)
    rp = RolePlacement(role="policy", world_size=ws, num_nodes=nodes, num_gpus_per_node=gpn,
                       num_gpus_per_actor=1.0 if gpn else 0.0, num_cpus_per_actor=cfg.num_cpus_per_actor,
                       placement_group=pg, bundle_indices=list(range(ws)), node_resource=node_res,
                       node_ids=bundle_nodes(pg),
                       shared_with=tuple(r for r in ("critic", "reference", "rollout")
                                         if r != "critic" or needs_critic(cfg)
                                         if r != "reference" or needs_reference(cfg)))
    placement = Placement(roles={"policy": rp}, placement_groups=[pg], gpu=bool(gpn))
    policy = None
    try:
        policy = group_for(ColocatedActor, "policy", cfg, rp)
        groups = Groups(policy=policy, critic=RoleView(policy, "critic") if needs_critic(cfg) else None,
                        reference=RoleView(policy, "reference") if needs_reference(cfg) else None,
                        rollout=RoleView(policy, "rollout").actors, placement=placement, rollout_backend="hf",
                        layout="colocated")
        if init_models:
            infos = calls.get(policy.run_async("init_model"), "colocated init_model", calls.start_timeout_s(cfg))
            groups.init_info = {role: [i[role] for i in infos] for role in infos[0]}
    except Exception:
        if policy is not None:
            policy.shutdown()
        placement.remove()
        raise
    log.info("colocated layout ready in %.1fs: %d process(es), each policy + %s", time.time() - t0, ws,
             " + ".join(rp.shared_with))
    return groups
