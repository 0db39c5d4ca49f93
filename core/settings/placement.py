"""Placement settings: the Ray cluster, where each actor group runs, the process layout and CPU threads."""
from __future__ import annotations

from typing import Literal

from core.settings.base import NODE_RESOURCE_PATTERN, Settings, setting


class PlacementSettings(Settings):
    """Nodes, GPUs and CPUs of each actor group, their layout, the Ray cluster they join, threads and memory."""

    ROLE = "placement"

    # ---------------------------------------------------------------- the Ray cluster
    ray_address: str = setting("", "Join this Ray cluster (empty: start an embedded local one).",
                               env="RAY_ADDRESS")
    dashboard_port: int = setting(8265, "Dashboard port of the embedded Ray.", env="DASHBOARD_PORT", ge=1,
                                  le=65535)

    # ---------------------------------------------------------------- actor groups
    actor_num_nodes: int = setting(1, "Nodes for the policy group.", env="ACTOR_NUM_NODES", ge=1)
    actor_num_gpus_per_node: int = setting(0, "GPUs per node for the policy group (0: CPU).",
                                           env="ACTOR_NUM_GPUS_PER_NODE", ge=0)
    critic_num_nodes: int = setting(1, "Nodes for the critic group.", env="CRITIC_NUM_NODES", ge=1)
    critic_num_gpus_per_node: int = setting(0, "GPUs per node for the critic group.",
                                            env="CRITIC_NUM_GPUS_PER_NODE", ge=0)
    ref_num_nodes: int = setting(1, "Nodes for the reference group.", env="REF_NUM_NODES", ge=1)
    ref_num_gpus_per_node: int = setting(0, "GPUs per node for the reference group.",
                                         env="REF_NUM_GPUS_PER_NODE", ge=0)
    colocate_actor_ref: bool = setting(False, "Place policy and reference in the same bundles.",
                                       env="COLOCATE_ACTOR_REF")
    colocate_all_models: bool = setting(False, "Place every model (and rollout engines) in shared bundles.",
                                        env="COLOCATE_ALL_MODELS")
    model_layout: Literal["auto", "colocated", "separate"] = setting(
        "auto", "colocated: policy, rollout engine, reference and critic in one actor process per rank; separate: "
        "one Ray actor group per role; auto: colocated on one CPU-only node.", env="MODEL_LAYOUT",
        doc="colocated: the rollout engine generates with the policy's own weights (no weight-sync copy) and every "
        "phase gets all CPU_THREADS. separate: the multi-node / GPU layout, vLLM engines, weight sync. auto: "
        "colocated when every role runs on CPU on one node with the hf rollout backend and ZERO_STAGE < 3, else "
        "separate.")
    num_cpus_per_actor: float = setting(0.25, "CPUs each actor reserves (fractional on small machines).",
                                        env="NUM_CPUS_PER_ACTOR", gt=0)
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = setting(
        "PACK", "Ray placement-group strategy of each actor group's bundles: PACK, SPREAD, STRICT_PACK or "
        "STRICT_SPREAD.", env="PLACEMENT_STRATEGY",
        doc="PACK: as few nodes as fit; SPREAD: over nodes where it can; STRICT_PACK: one node or fail; "
        "STRICT_SPREAD: one node per bundle or fail.")
    pg_ready_timeout_s: float = setting(
        120.0, "Longest the trainer waits for Ray to reserve an actor group's placement group, seconds; then the "
        "start fails, naming what is missing.", env="RLFH_PG_READY_TIMEOUT_S", gt=0,
        doc="The placement group is the group's bundles' CPUs and GPUs; the error names what was asked for and what "
        "the cluster has free.")
    actor_node_resource: str = setting(
        "", "Ray custom resource a node must have to host the policy group (e.g. rlfh_train). Empty: any node.",
        env="ACTOR_NODE_RESOURCE", pattern=NODE_RESOURCE_PATTERN,
        doc="A node offers it with `ray start --resources='{\"rlfh_train\": 1}'`, the Helm chart with its worker "
        "group's nodeResource. A name no node of the cluster has stops the start at once, naming this setting.")
    critic_node_resource: str = setting(
        "", "Ray custom resource a node must have to host the critic group (see ACTOR_NODE_RESOURCE). Empty: any "
        "node.", env="CRITIC_NODE_RESOURCE", pattern=NODE_RESOURCE_PATTERN)
    ref_node_resource: str = setting(
        "", "Ray custom resource a node must have to host the reference group (see ACTOR_NODE_RESOURCE). Empty: "
        "any node.", env="REF_NODE_RESOURCE", pattern=NODE_RESOURCE_PATTERN)
    rollout_node_resource: str = setting(
        "", "Ray custom resource a node must have to host the rollout engines (see ACTOR_NODE_RESOURCE). Empty: "
        "any node.", env="ROLLOUT_NODE_RESOURCE", pattern=NODE_RESOURCE_PATTERN)

    # ---------------------------------------------------------------- CPU threads and memory
    cpu_threads: int = setting(
        0, "Intra-op CPU threads of each phase on CPU; actors running at the same time split them. 0: auto (every "
        "core, or 1 when other jobs keep it busy).", env="CPU_THREADS", ge=0,
        doc="The phases: generate, log-prob forwards, train step. auto gives 1 thread on a busy machine because two "
        "OpenMP threads descheduled in turn wait for each other at every op.")
    torch_threads: int = setting(
        0, "Intra-op threads of every phase of every model actor on CPU, fixed: overrides CPU_THREADS. 0: off.",
        env="RLFH_TORCH_THREADS", ge=0,
        doc="It also overrides CPU_THREADS's split between actors that run at the same time.")
    actor_allocator: Literal["auto", "jemalloc", "system"] = setting(
        "auto", "Memory allocator of the model actors on Linux: jemalloc (preloaded), system, or auto (jemalloc for "
        "CPU actors when found).", env="ACTOR_ALLOCATOR",
        doc="The model actors: policy, critic, reference, rollout engines. jemalloc: preload libjemalloc "
        "(Debian/Ubuntu: apt install libjemalloc2); glibc's malloc keeps the freed activations of one train step "
        "fragmented and grows step by step (jemalloc's lower peak: docs/PERFORMANCE.md, \"Memory allocator\").")
    ds_shm_comm: bool = setting(
        False, "DeepSpeed's shared-memory all-reduce for CPU ranks (JIT-compiled on first use); off: gloo.",
        env="RLFH_DS_SHM_COMM",
        doc="DeepSpeed compiles it with g++ on first use, which takes minutes on a fresh machine.")
