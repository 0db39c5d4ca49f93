"""The separate layout on a real multi-node Ray cluster, built on this machine as Ray's own tests build one
(``ops.local_cluster``: ``ray.cluster_utils.Cluster``'s head in this process, each worker ``ray start --block``): a head (the driver, Ray's GCS and dashboard, Serve's controller) and three worker
nodes, each a raylet of its own offering one custom resource that names it. Every node binds 127.0.0.1 (Ray token
auth is off on loopback, as in every test). The placement is the user's settings:

- ``ACTOR_NODE_RESOURCE`` = ``CRITIC_NODE_RESOURCE`` = ``rlfh_train``: the policy and critic groups;
- ``ROLLOUT_NODE_RESOURCE`` = ``REF_NODE_RESOURCE`` = ``rlfh_rollout``: the rollout engine and the reference;
- ``SERVICE_NODE_RESOURCE`` = ``rlfh_service``: the Serve verifier and reward replicas (Redis is the suite's
  redis-server: one machine has one).

The tests run in file order on one cluster and one trainer (the tiny random Llama):

1. two PPO steps end to end; the GCS's actor table says where each actor ran; the engine on the rollout node scores a
   batch exactly as the policy on the training node does after the weight sync (the weights crossed nodes); the
   rewards came over HTTP from the verifier replica on the service node.
2. a placement no node can satisfy fails at once with a ConfigError naming the setting (never a pending wait).
3. the rollout node is lost mid-run (``rlfh chaos kill node``: its raylet and every process under it SIGKILLed
   after step 3, while step 4 waits for its rewards); the run notices within ACTOR_TIMEOUT_S, says which node
   and roles it lost, waits for a node offering ``rlfh_rollout`` (the test starts one, as KubeRay starts a new
   worker pod), restarts every group from step 2's checkpoint on it, redoes steps 3 and 4 and finishes with every
   step rewarded by the service: nothing trained on a missing reward.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time

import pytest
import torch

from conftest import HANG_S, free_port

pytestmark = pytest.mark.slow

TRAIN, ROLLOUT, SERVICE = "rlfh_train", "rlfh_rollout", "rlfh_service"
ACTOR_TIMEOUT_S = 60.0


def _read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _alive_actors() -> dict[str, list]:
    """class name -> [(node id, pid)] of the live actors, from the GCS's actor table (what the dashboard's state
    API serves; read directly, since the dashboard's aggregation lagged behind on a loaded 2-core machine)."""
    from ray._private import state
    out: dict[str, list] = {}
    for a in state.actors().values():
        if a["State"] == "ALIVE":
            out.setdefault(a["ActorClassName"], []).append((a["Address"]["NodeID"], a["Pid"]))
    return out


@pytest.fixture(scope="module")
def cluster():
    """Head + three worker nodes (ops.local_cluster: each worker is ``ray start --block``, as in a KubeRay pod),
    every Ray port on 127.0.0.1."""
    from ops.local_cluster import LocalCluster
    c = LocalCluster(head_cpus=1, dashboard_port=free_port())
    try:
        nodes = {name: c.add_node({name: 1}) for name in (TRAIN, ROLLOUT, SERVICE)}
        yield c, nodes
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def trainer(cluster, tiny_model_path, redis_url, tmp_path_factory):
    """The trainer of this module's run: placement settings as a user sets them, the reward service deployed on
    the cluster (reward_fn None), a checkpoint every 2 steps."""
    from cluster.driver import Trainer
    from core.config import RLFHConfig
    tmp = tmp_path_factory.mktemp("multinode")
    cfg = RLFHConfig.load(
        environ={}, model_path=tiny_model_path, save_path=str(tmp / "run"), ckpt_path=str(tmp / "ckpt"),
        prompt_data="halueval:train", max_samples=32, rollout_batch_size=2, n_samples_per_prompt=2,
        generate_max_len=8, prompt_max_len=128, train_batch_size=4, micro_train_batch_size=4,
        micro_rollout_batch_size=4, advantage_estimator="gae", kl_coef=0.01, max_steps=4, save_step=2,
        rollout_backend="hf", rollout_dtype="fp32", train_autocast="off", model_layout="separate",
        num_cpus_per_actor=0.25, verifier_num_cpus=0.2, reward_num_cpus=0.2, use_tensorboard=False, log_samples=0,
        seed=11, actor_timeout_s=ACTOR_TIMEOUT_S, max_actor_restarts=1, redis_url=redis_url,
        reward_timeout_s=60.0, reward_max_retries=2, serve_port=free_port(), pg_ready_timeout_s=120.0,
        actor_node_resource=TRAIN, critic_node_resource=TRAIN, rollout_node_resource=ROLLOUT,
        ref_node_resource=ROLLOUT, service_node_resource=SERVICE, placement_strategy="PACK")
    t = Trainer(cfg, show_progress=False)
    try:
        t.setup()
        yield t
    finally:
        t.close()


def test_separate_layout_across_three_nodes(cluster, trainer):
    import ray

    from actors.types import make_batch
    from actors.weight_sync import last_sync_stats
    _, nodes = cluster
    node_id = {name: n.node_id for name, n in nodes.items()}
    t0 = time.monotonic()
    for _ in range(2):
        assert trainer._train_one(None)
    steps_s = time.monotonic() - t0
    rows = trainer.history
    assert [r["step"] for r in rows] == [1, 2]
    assert not any(r["skipped"] for r in rows) and all(r["policy_trained"] for r in rows), rows

    # where each actor really ran (the GCS's actor table), and what the placement groups reserved
    actors = _alive_actors()
    where = {cls: {n for n, _ in actors.get(cls, [])} for cls in (
        "PolicyActor", "CriticActor", "ReferenceActor", "HFRolloutEngine",
        "ServeReplica:rlfh-rewards:RLFHVerifier", "ServeReplica:rlfh-rewards:RLFHRewards")}
    assert where == {"PolicyActor": {node_id[TRAIN]}, "CriticActor": {node_id[TRAIN]},
                     "ReferenceActor": {node_id[ROLLOUT]}, "HFRolloutEngine": {node_id[ROLLOUT]},
                     "ServeReplica:rlfh-rewards:RLFHVerifier": {node_id[SERVICE]},
                     "ServeReplica:rlfh-rewards:RLFHRewards": {node_id[SERVICE]}}, (where, node_id)
    placed = trainer.groups.placement.nodes_of()
    assert sorted(placed[node_id[TRAIN]]) == ["critic", "policy"]
    assert sorted(placed[node_id[ROLLOUT]]) == ["reference", "rollout"]

    # the weights crossed nodes: after step 2's sync the engine (rollout node) scores a fresh batch exactly as the
    # policy (training node) does, and both are at the policy's version
    g = trainer.groups
    engine = g.rollout[0]
    stats = last_sync_stats(g.policy)
    version = g.policy.run("weights_version")[0]
    assert version == 2 and ray.get(engine.weights_version.remote()) == version
    assert stats["method"] == "object_store" and stats["version"] == version and stats["bytes"] > 0, stats
    samples = ray.get(engine.generate.remote([_prompt_text(trainer)], 2, 8, 1.0, 1.0, 5))
    batch = make_batch(samples, trainer.tokenizer.pad_token_id)
    pol = g.policy.dispatch_cat("logprobs", batch)
    eng = ray.get(engine.logprobs.remote(batch))
    torch.testing.assert_close(eng, pol, atol=2e-4, rtol=0)

    # the rewards came over HTTP (the trainer's client) from the verifier replica on the service node
    svc = trainer.reward_source.service
    assert svc is not None and svc.client.url.startswith("http://")
    vstats = svc.client.stats()["verifier"]
    verifier_pid = {pid for n, pid in actors["ServeReplica:rlfh-rewards:RLFHVerifier"] if n == node_id[SERVICE]}
    assert vstats["pid"] in verifier_pid and vstats["items"] >= 2 * 4, (vstats, verifier_pid)
    print(f"\nthree nodes: policy+critic on {node_id[TRAIN][:8]}, rollout+reference on {node_id[ROLLOUT][:8]}, "
          f"verifier+reward on {node_id[SERVICE][:8]}; 2 steps in {steps_s:.1f} s; weight sync "
          f"{stats['bytes'] / 1e6:.1f} MB across nodes in {stats['seconds']:.2f} s; "
          f"{vstats['items']} statements' rewards over HTTP")


def _prompt_text(trainer) -> str:
    from core.prompts import render_prompt
    return render_prompt(trainer.tokenizer, "What is the capital of France?")


def test_a_placement_no_node_offers_fails_at_once_naming_the_setting(cluster, trainer):
    from actors.group import create_groups
    from core.config import ConfigError
    from reward_service.app import deploy
    bad = trainer.cfg.model_copy(update={"rollout_node_resource": "rlfh_gpu_node"})
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as info:
        create_groups(bad)
    assert time.monotonic() - t0 < 10.0, "a missing node resource must fail before any placement group waits"
    msg = str(info.value)
    assert "ROLLOUT_NODE_RESOURCE (--rollout-node-resource) = 'rlfh_gpu_node'" in msg and TRAIN in msg, msg
    with pytest.raises(ConfigError, match="SERVICE_NODE_RESOURCE .*'nowhere'"):
        deploy(trainer.cfg.model_copy(update={"service_node_resource": "nowhere"}), "127.0.0.1", free_port())


def test_losing_the_rollout_node_mid_run(cluster, trainer, caplog):
    from ops.chaos import inject
    c, nodes = cluster
    assert trainer.state.step == 2 and trainer.last_checkpoint, "runs after the first test (its 2 steps, checkpoint)"
    metrics_path = trainer.run_log.metrics_path
    service = trainer.reward_source.reward_fn
    killed = threading.Event()
    seen: dict = {}

    def gated_reward(items):
        """Step 4 of the first groups waits for its rewards until the rollout node is gone: the node dies
        mid-step, after step 3 was logged and with the last checkpoint at step 2."""
        if trainer.state.step == 4 and trainer.actor_restarts == 0:
            killed.wait(HANG_S)
        return service(items)

    def fault():
        try:
            t_end = time.monotonic() + 10 * HANG_S
            while not any(r["step"] == 3 for r in _read_jsonl(metrics_path)):
                assert time.monotonic() < t_end, "step 3 was not logged"
                time.sleep(0.1)
            seen["rows"] = _read_jsonl(metrics_path)
            seen["kill"] = inject(os.getpid(), "node", node=ROLLOUT)      # rlfh chaos kill node --node rlfh_rollout
            killed.set()
            # the node comes back (as KubeRay starts a new worker pod): once the GCS has declared the old one dead
            import ray
            while any(n["NodeID"] == seen["kill"]["node_id"] and n["Alive"] for n in ray.nodes()):
                assert time.monotonic() < t_end, "the GCS never declared the killed node dead"
                time.sleep(0.2)
            seen["back"] = c.add_node({ROLLOUT: 1})
            seen["t_back"] = time.time()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            seen["error"] = repr(e)
        finally:
            killed.set()

    caplog.set_level(logging.ERROR, logger="cluster.recovery")
    trainer.reward_source.reward_fn = gated_reward
    th = threading.Thread(target=fault, daemon=True)
    th.start()
    try:
        result = trainer.fit()
    finally:
        trainer.reward_source.reward_fn = service
    th.join(timeout=HANG_S)
    assert "error" not in seen and "kill" in seen, seen
    kill = seen["kill"]
    assert kill["node_id"] == nodes[ROLLOUT].node_id and "raylet" in kill["names"], kill
    assert result.completed and trainer.actor_restarts == 1
    # every step accounted for: 1-4 once each, step 3 redone on the same prompts and rollout, none skipped
    rows = _read_jsonl(metrics_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and not any(r["skipped"] for r in rows), rows
    lost = next(r for r in seen["rows"] if r["step"] == 3)
    for k in ("prompts", "data_index", "rollout_digest"):
        assert rows[2][k] == lost[k], (k, rows[2][k], lost[k])
    assert [r["actor_restarts"] for r in rows] == [0, 0, 1, 1]
    # it said which node and which roles it lost, and noticed within ACTOR_TIMEOUT_S
    rec = trainer.recovery.restarts[0]
    assert rec["step"] == 4 and [n["node_id"] for n in rec["lost_nodes"]] == [kill["node_id"]], rec
    assert sorted(rec["lost_nodes"][0]["roles"]) == ["reference", "rollout"] and ROLLOUT in rec["lost_nodes"][0][
        "resources"], rec
    noticed_s = rec["at"] - kill["time"]
    assert 0 <= noticed_s < ACTOR_TIMEOUT_S, noticed_s
    assert f"node {kill['node_id']} ({ROLLOUT}) is lost, and with it the " in caplog.text, caplog.text[-2000:]
    # the groups restarted on the node that came back
    back = seen["back"].node_id
    assert back != kill["node_id"]
    actors = _alive_actors()
    assert {n for n, _ in actors["HFRolloutEngine"]} == {back} == {n for n, _ in actors["ReferenceActor"]}
    assert {n for n, _ in actors["PolicyActor"]} == {nodes[TRAIN].node_id}
    print(f"\nrollout node {kill['node_id'][:8]} killed after step 3: noticed {noticed_s:.1f} s later (ACTOR_TIMEOUT_S "
          f"{ACTOR_TIMEOUT_S:g}), lost {', '.join(rec['lost_nodes'][0]['roles'])}; a node with {ROLLOUT} back "
          f"{seen['t_back'] - kill['time']:.1f} s after the kill; groups restarted from step 2 in "
          f"{rec['seconds']:.1f} s; steps 3-4 redone, 0 skipped")
