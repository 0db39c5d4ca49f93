"""`rlfh chaos soak`'s parts that run in seconds: the fault list is checked before anything starts, a killed
redis-server is really killed and started again, and the summary table says what the soak measured. The soak
itself is a benchmark (30 minutes on the embedded default), not a test; the node loss it injects is tested in
tests/test_multinode.py."""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from ops import soak
from conftest import free_port


def _args(tmp_path: Path, **kw) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    soak.add_arguments(p)
    args = p.parse_args(["--save-path", str(tmp_path)])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def test_an_unknown_fault_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match=r"--faults: unknown nodes; choose from policy, .*node"):
        soak.soak(_args(tmp_path / "out", faults="policy,nodes"))
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="--every must be > 0, got 0"):
        soak.soak(_args(tmp_path / "out", every=0.0))
    with pytest.raises(ValueError, match="--restore-s must be >= 0, got -1"):
        soak.soak(_args(tmp_path / "out", restore_s=-1.0))
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (scripts/run_tests.sh installs it)")
def test_a_redis_fault_kills_the_server_and_starts_it_again(tmp_path):
    import redis
    server = soak.RedisServer(free_port())
    try:
        redis.Redis(port=server.port).set("k", "v")
        old_pid = server.proc.pid
        inj = soak.FaultInjector(None, server, tmp_path, ["redis"], every_s=3600, restore_s=0.2, seed=0)
        fault = inj.inject_one()
        assert fault.kind == "redis" and fault.pids == [old_pid] and fault.restored_s >= 0.2, fault
        assert server.proc.pid != old_pid and redis.Redis(port=server.port).ping()
        assert redis.Redis(port=server.port).get("k") is None   # a new server: the cache starts empty
    finally:
        server.stop()


def test_the_table_says_what_the_soak_cost():
    result = {
        "minutes": 30, "every_s": 120,
        "faults": [{"kind": "node", "target": "rlfh_rollout", "error": ""},
                   {"kind": "policy", "target": "policy", "error": ""},
                   {"kind": "redis", "target": "redis-server", "error": ""},
                   {"kind": "verifier", "target": "verifier", "error": "LookupError('no verifier process')"}],
        "soak": {"steps": 20, "redone": 3, "skipped": 1, "trained_without_reward": 0, "reward_failures": 4,
                 "reruns": 0, "setup_s": 90.0,
                 "restarts": [{"step": 7, "resume_step": 6, "seconds": 71.5,
                               "lost_nodes": [{"node_id": "ab", "roles": ["rollout"], "resources": ["rlfh_rollout"]}]},
                              {"step": 12, "resume_step": 10, "seconds": 40.2, "lost_nodes": []}]},
        "soak_wall_s": 1800.0, "baseline": {"steps": 20, "setup_s": 80.0}, "baseline_wall_s": 1200.0}
    table = soak.render_table(result)
    lines = {line[:34].strip(): line[34:].strip() for line in table.splitlines()[1:]}
    assert lines["faults injected"] == "4 (1 could not be injected)"
    assert lines["node (rlfh_rollout)"] == "1" and lines["policy"] == "1" and lines["redis"] == "1"
    assert lines["steps logged"] == "20" and lines["steps redone (after a restart)"] == "3"
    assert lines["actor-group restarts"] == "2" and lines["batches skipped (rewards lost)"] == "1"
    assert lines["steps trained without a reward"] == "0"
    assert lines["wall time / step"] == "85.5 s (+ set-up 90 s)"
    assert lines["no faults (20 steps)"] == "56.0 s (+ set-up 80 s): x1.53"
    assert lines["node losses recovered"] == "1, restart 72-72 s"
