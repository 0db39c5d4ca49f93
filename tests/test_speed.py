"""Speed plumbing (issue 10): per-phase CPU threads, bf16 rollouts, one generation path for eval and training.

Speed goals themselves are printed by `rlfh bench train|peer`, never asserted here.
"""
from __future__ import annotations

import pytest
import torch

from cluster.config import RLFHConfig


# ------------------------------------------------------------------------------------------------ threads

def test_phase_threads_split_cpu_threads_over_concurrent_actors(monkeypatch):
    from actors.base import phase_threads
    monkeypatch.delenv("RLFH_TORCH_THREADS", raising=False)
    cfg = RLFHConfig(cpu_threads=4)
    assert phase_threads(cfg) == 4
    assert phase_threads(cfg, share=2) == 2
    assert phase_threads(cfg, share=3) == 1
    assert phase_threads(cfg, share=8) == 1       # never 0
    monkeypatch.setenv("RLFH_TORCH_THREADS", "3")  # the environment override wins
    assert phase_threads(cfg, share=2) == 3


def test_auto_threads_use_every_core_unless_the_machine_is_busy(monkeypatch):
    import actors.base as base
    monkeypatch.delenv("RLFH_TORCH_THREADS", raising=False)
    monkeypatch.setattr(base, "machine_cores", lambda: 8)
    monkeypatch.setattr(base, "_probe", {})
    monkeypatch.setattr(base, "other_load", lambda window_s=0.2: 0.1)
    assert base.phase_threads(RLFHConfig(cpu_threads=0)) == 8
    assert base.phase_threads(RLFHConfig(cpu_threads=0), share=2) == 4
    monkeypatch.setattr(base, "other_load", lambda window_s=0.2: 3.0)
    assert base.auto_cores() == 8                                   # cached for _PROBE_TTL_S
    assert base.auto_cores(now=base._probe["at"] + base._PROBE_TTL_S + 1) == 1   # re-probed: busy -> 1


def test_other_load_reads_proc_stat():
    from actors.base import machine_cores, other_load
    load = other_load(0.05)
    assert 0.0 <= load <= machine_cores() + 1e-9


@pytest.mark.slow
def test_ray_actor_phase_gets_cpu_threads_despite_omp_num_threads_1():
    """A fractional-CPU Ray actor starts with OMP_NUM_THREADS=1; its phases use CPU_THREADS anyway."""
    import ray

    from actors.group import ActorGroup
    from actors.reference import ReferenceActor
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        cfg = RLFHConfig(cpu_threads=2, num_cpus_per_actor=0.25)
        g = ActorGroup(ReferenceActor, role="reference", cfg=cfg, num_nodes=1, num_gpus_per_node=0)
        try:
            assert ray.get(g.actors[0].phase_threads.remote(1)) == {"threads": 2, "omp_env": "1"}
            assert ray.get(g.actors[0].phase_threads.remote(2))["threads"] == 1
        finally:
            g.shutdown()
    finally:
        ray.shutdown()
