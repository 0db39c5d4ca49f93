"""Policy -> rollout engines weight sync.

:func:`sync_weights` picks the transport:

* ``object_store`` (CPU, HF engines, or anything else): policy rank 0 exports its
  full HF-named state dict once into the Ray object store (the return value of
  ``state_dict_for_sync``); every engine loads that one object. The driver never
  holds the tensors.
* ``nccl`` (vLLM engines on GPUs other than the policy's): a stateless NCCL group
  of policy rank 0 (rank 0) and every vLLM worker (ranks 1..N, engine by engine,
  TP rank inside); tensors are broadcast one by one in ``weight_meta`` order and
  each worker loads each tensor as it arrives (no full second copy on the GPU).
* ``cuda_ipc`` (vLLM engines colocated on the policy's GPUs): every policy rank
  shares CUDA IPC handles of its weights in buckets; each vLLM worker maps the
  handles made on its own GPU (matched by GPU UUID) and loads them, zero copy.
  NCCL cannot put two ranks on one GPU, hence this path for COLOCATE_ALL_MODELS.

* ``shared`` (the colocated layout): the engines generate with the policy's own
  module, so nothing moves; each engine records the policy's weights version.

Each call logs and returns the time and bytes moved.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Sequence

from actors import calls
from actors.optional import VLLM_HINT

log = logging.getLogger(__name__)

METHODS = ("auto", "object_store", "nccl", "cuda_ipc", "shared")


def stateless_nccl_group(master_addr: str, master_port: int, rank: int, world_size: int, device):
    """A NCCL communicator outside torch.distributed's default group (vLLM's StatelessProcessGroup)."""
    try:
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup
    except ImportError as e:
        raise ImportError(f"NCCL weight sync: {VLLM_HINT} ({e})") from e
    pg = StatelessProcessGroup.create(host=master_addr, port=int(master_port), rank=rank, world_size=world_size)
    return PyNcclCommunicator(pg, device=device)


def _engine_infos(engines: Sequence[Any], timeout: float) -> list[dict]:
    return calls.get([e.info.remote() for e in engines], "weight sync: rollout.info", timeout)


def choose_method(policy_group, engines: Sequence[Any]) -> str:
    """object_store unless the engines are vLLM on GPU; then cuda_ipc when they share the policy's GPUs."""
    t = calls.timeout_s(policy_group.cfg)
    infos = _engine_infos(engines, t)
    if all(i.get("shares_policy_weights") for i in infos):
        return "shared"
    if any(i["backend"] != "vllm" for i in infos):
        return "object_store"
    pol = policy_group.run("ping")
    if not all(p["device"].startswith("cuda") for p in pol):
        return "object_store"
    policy_uuids = set(policy_group.run("device_uuid"))
    engine_uuids = set()
    for u in calls.get([e.device_uuid.remote() for e in engines], "weight sync: rollout.device_uuid", t):
        engine_uuids.update(u if isinstance(u, list) else [u])
    if "cpu" in engine_uuids:
        return "object_store"
    return "cuda_ipc" if engine_uuids <= policy_uuids else "nccl"


def sync_weights(policy_group, engines: Sequence[Any], method: str = "auto") -> int:
    """Push the policy's current weights to every rollout engine; returns the engines' new weights version.

    ``policy_group``: the :class:`actors.group.ActorGroup` of :class:`PolicyActor` (every rank takes part:
    ZeRO-3 gathers are collective). ``engines``: Ray handles of rollout engines.
    """
    import ray
    if method not in METHODS:
        raise ValueError(f"weight sync method must be one of {METHODS}, got {method!r}")
    if not engines:
        raise ValueError("sync_weights: no rollout engines")
    state = _sync_state(policy_group)
    if method == "auto":
        method = state.get("method") or choose_method(policy_group, engines)
        state["method"] = method
    t = calls.timeout_s(policy_group.cfg)
    policy = policy_group.actors[0]
    t0 = time.time()
    if method == "object_store":
        refs = policy_group.run_async("state_dict_for_sync")
        ray.wait(refs, num_returns=len(refs), timeout=t)   # every rank done (ZeRO-3 gathers are collective)
        meta = calls.get(policy.sync_meta.remote(), "weight sync: policy.sync_meta", t)
        version = int(meta["version"])
        # refs[0] is rank 0's dict in the object store: each engine resolves the same object.
        versions = calls.get([e.update_weights.remote(refs[0], version) for e in engines],
                             "weight sync: rollout.update_weights", t)
        nbytes = int(meta.get("bytes", 0))
        del refs
    elif method == "shared":
        version, nbytes = calls.get(policy.weights_version.remote(), "weight sync: policy.weights_version", t), 0
        versions = calls.get([e.follow_weights.remote(version) for e in engines],
                             "weight sync: rollout.follow_weights", t)
    elif method == "nccl":
        version, nbytes, versions = _sync_nccl(policy_group, engines, state, t)
    else:
        version, nbytes, versions = _sync_cuda_ipc(policy_group, engines, t)
    dt = time.time() - t0
    if len(set(versions)) != 1:
        raise RuntimeError(f"weight sync left engines at different versions: {versions}")
    record = {"method": method, "seconds": dt, "bytes": nbytes, "engines": len(engines), "version": versions[0],
              "gb_per_s": (nbytes / dt / 1e9) if dt > 0 else 0.0}
    state["last"] = record
    log.info("weight sync (%s): %.1f MB to %d engine(s) in %.2fs (%.2f GB/s), version %d", method, nbytes / 1e6,
             len(engines), dt, record["gb_per_s"], versions[0])
    return int(versions[0])


def last_sync_stats(policy_group) -> dict:
    """``{method, seconds, bytes, engines, version, gb_per_s}`` of the last :func:`sync_weights` call."""
    return dict(_sync_state(policy_group).get("last", {}))


def _sync_state(policy_group) -> dict:
    st = getattr(policy_group, "_weight_sync_state", None)
    if st is None:
        st = {}
        policy_group._weight_sync_state = st
    return st


def _sync_nccl(policy_group, engines, state, t: float) -> tuple[int, int, list[int]]:
    policy = policy_group.actors[0]
    if "nccl_ready" not in state:
        tp = policy_group.cfg.vllm_tensor_parallel_size
        world = 1 + len(engines) * tp
        addr, _ = calls.get(policy.master_address.remote(), "weight sync: policy.master_address", t)
        port = calls.get(policy.free_port.remote(), "weight sync: policy.free_port", t)
        refs = [e.init_weight_group.remote(addr, port, 1 + i * tp, world) for i, e in enumerate(engines)]
        refs += policy_group.run_async("init_weight_sync_group", addr, port, world)
        calls.get(refs, "weight sync: NCCL group (policy and rollout)", t)
        state["nccl_ready"] = True
        state["metas"] = calls.get(policy.weight_meta.remote(), "weight sync: policy.weight_meta", t)
    metas = state["metas"]
    version = calls.get(policy.weights_version.remote(), "weight sync: policy.weights_version", t)
    recv = [e.receive_weights_nccl.remote(metas, version) for e in engines]
    send = policy_group.run_async("broadcast_weights_nccl")
    versions = calls.get(recv, "weight sync: rollout.receive_weights_nccl", t)
    sent = calls.get(send, "weight sync: policy.broadcast_weights_nccl", t)[0]
    return version, int(sent["bytes"]), versions


def _sync_cuda_ipc(policy_group, engines, t: float, bucket_bytes: int = 1 << 62) -> tuple[int, int, list[int]]:
    """One bucket by default: vLLM's in-place reload finalizes each layer per call, so a layer must not be
    split across calls. Lower ``bucket_bytes`` only for models whose extra full copy does not fit."""
    version = calls.get(policy_group.actors[0].weights_version.remote(), "weight sync: policy.weights_version", t)
    start, nbytes, versions = 0, 0, []
    while True:
        parts = policy_group.run("ipc_handles_for_sync", bucket_bytes, start)
        by_uuid = {p["uuid"]: p["handles"] for p in parts}
        more = parts[0]["more"]
        versions = calls.get([e.update_weights_ipc.remote(by_uuid, version, not more) for e in engines],
                             "weight sync: rollout.update_weights_ipc", t)
        policy_group.run("release_ipc")
        nbytes += parts[0]["bytes"]
        start = parts[0]["next"]
        if not more:
            break
    return version, nbytes, versions
