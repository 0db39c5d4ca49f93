"""End to end on CPU: the driver over the real actor groups (policy, critic, reference, HF rollout engine on
real Ray with DeepSpeed/gloo) and the real reward service (Ray Serve over HTTP, the evidence verifier), on a tiny
configuration and the tiny random Llama of tests/conftest.py: these tests are about the loop's mechanics (train,
sync, checkpoint, resume, skip, cache, self-judge), not about learning (tests/test_learning.py has the real model).

One module-scoped Ray + actor cast serves the tests, which run in file order. One module-scoped reward service,
its verification cache a private redis-server, serves the trainings (a Serve deploy + shutdown costs ~20 s): train
2 steps (checkpoint every step), resume from the step-1 checkpoint and compare with the uninterrupted run's step 2,
take the reward service away and check the batch is skipped, read verifications back from Redis; last, the
self-judging trainer deploys its own service.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow


def tiny_cfg(save_path, model_path, **kw):
    from conftest import free_port

    from core.config import RLFHConfig
    base = dict(model_path=model_path, save_path=str(save_path), prompt_data="halueval:train", max_samples=64,
                rollout_batch_size=2, n_samples_per_prompt=2, generate_max_len=8, prompt_max_len=128,
                train_batch_size=4, micro_train_batch_size=4, micro_rollout_batch_size=4, actor_lr=1e-5,
                critic_lr=1e-5, seed=5, max_steps=2, save_step=1, max_ckpt_num=3, rollout_backend="hf",
                num_cpus_per_actor=0.25,
                rollout_dtype="fp32", train_autocast="off",   # the weight-sync check below compares engine and
                # policy log-probs exactly (fp32 both sides; tests/test_layouts.py covers the bf16-autocast default)
                serve_port=free_port(), reward_max_retries=1, reward_timeout_s=60,
                # the demo's recipe: half the questions with evidence, one "I don't know" candidate per prompt
                prompt_mode="mixed", abstain_samples=1, log_samples=4)
    base.update(kw)
    return RLFHConfig.load(environ={}, **base)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, tiny_model_path):
    """Embedded Ray (the project's bootstrap, no dashboard) + the actor groups of the tiny config."""
    from actors.group import create_groups
    from core.ray_bootstrap import start_ray
    cfg = tiny_cfg(tmp_path_factory.mktemp("unused"), tiny_model_path)
    handle = start_ray(cfg, num_cpus=4, include_dashboard=False)
    groups = create_groups(cfg)
    yield {"groups": groups, "ray": handle}
    groups.shutdown()
    handle.shutdown()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    yield path
    # two checkpoints with optimizer state, a snapshot and the final model: not needed after this module
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def reward_service(cluster, private_redis_module, tmp_path_factory, tiny_model_path) -> str:
    """The URL of one reward service on the module's Ray (REDIS_URL: its cache is ``private_redis_module``), which the
    trainings below reach through REWARD_URL. Torn down before the cluster (it depends on it)."""
    from conftest import free_port

    from reward_service.app import deploy, shutdown
    url = deploy(tiny_cfg(tmp_path_factory.mktemp("service"), tiny_model_path, redis_url=private_redis_module.url),
                 "127.0.0.1", free_port())
    yield url
    shutdown()


def fingerprint(groups) -> dict[str, float]:
    return groups.policy.run("weights_fingerprint")[0]


def test_two_steps_train_sync_and_checkpoint(cluster, run_dir, tiny_model_path, reward_service):
    import ray

    from actors.types import make_batch
    from cluster.driver import Trainer
    groups = cluster["groups"]
    engine = groups.rollout[0]
    before = fingerprint(groups)
    v0 = ray.get(engine.weights_version.remote())
    cfg = tiny_cfg(run_dir, tiny_model_path, snapshot_step=2, reward_url=reward_service)

    trainer = Trainer(cfg, groups=groups)   # rewards from the module's reward service (REWARD_URL)
    try:
        trainer.setup()
        result = trainer.fit()
    finally:
        trainer.close()
    assert result.completed and result.state.step == 2 and result.steps_this_run == 2
    rows = result.history
    assert [r["step"] for r in rows] == [1, 2]
    assert not any(r["skipped"] for r in rows)
    # the rewards came from the verifier through the service: statements were labelled
    assert all(r["statements_per_response"] > 0 for r in rows)
    assert all(abs(sum(v for k, v in r.items() if k.startswith("label_share/")) - 1) < 1e-6 for r in rows)
    assert all(r["time/generate"] > 0 and r["time/reward"] > 0 and r["time/train"] > 0 and r["time/sync"] > 0
               for r in rows)
    # one abstention candidate per prompt went through the verifier (as an abstention) and into training;
    # samples.jsonl shows the policy's own responses only
    assert all(r["injected_abstentions"] == cfg.rollout_batch_size for r in rows)
    # the KL to the reference is logged for the policy's own samples and, apart, for the injected candidates;
    # step 1 samples with the reference's weights (fp32 both), so both are 0 there
    assert all("kl_injected" in r for r in rows)
    assert abs(rows[0]["kl"]) < 1e-5 and abs(rows[0]["kl_injected"]) < 1e-5, rows[0]
    logged = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {x["step"] for x in logged} == {1, 2} and all(x["mode"] in ("closed", "evidence") for x in logged)
    assert all(x["response"] != cfg.abstain_text for x in logged)

    # the policy's weights changed
    after = fingerprint(groups)
    moved = sum(abs(after[k] - before[k]) for k in before)
    assert moved > 1e-3, f"policy weights did not change (sum |delta| = {moved})"

    # the engine generates with the synced weights: version advanced, log-probs match the policy's
    v2 = ray.get(engine.weights_version.remote())
    assert v2 > v0 and rows[-1]["weights_version"] == v2
    from core.model_loader import load_tokenizer
    from core.prompts import render_prompt
    tok = load_tokenizer(cfg.model_path)
    samples = ray.get(engine.generate.remote([render_prompt(tok, "Who wrote Hamlet?")], 2, 8, 1.0, 1.0, 3))
    batch = make_batch(samples, tok.pad_token_id)
    lp_engine = ray.get(engine.logprobs.remote(batch))
    lp_policy = groups.policy.dispatch_cat("logprobs", batch)
    assert torch.allclose(lp_engine, lp_policy, atol=1e-4), (lp_engine - lp_policy).abs().max()

    # checkpoints (every step), the final model, metrics, curves, TensorBoard
    ck = Path(cfg.effective_ckpt_path)
    assert (ck / "latest").read_text().strip() == "global_step_00002"
    for name in ("global_step_00001", "global_step_00002"):
        d = ck / name
        for rel in ("policy_hf/config.json", "policy_hf/model.safetensors", "critic_hf/value_head.safetensors",
                    "state/policy", "state/critic", "trainer_state.json", "rng_state.pt", "config.json"):
            assert (d / rel).exists(), f"{name}/{rel}"
    st = json.loads((ck / "global_step_00002" / "trainer_state.json").read_text())
    assert (st["step"], st["epoch"], st["index"]) == (2, 0, 4)
    assert (run_dir / "final" / "model.safetensors").exists()
    assert result.model_dir == str(run_dir / "final")
    # SNAPSHOT_STEP=2: weights only at step 2, the candidates `rlfh select` chooses among
    assert sorted(p.name for p in (run_dir / "snapshots").iterdir()) == ["step_00002"]
    snap = run_dir / "snapshots" / "step_00002"
    assert (snap / "model.safetensors").exists() and (snap / "config.json").exists()
    assert not (snap / "state").exists()
    from evaluation.select import list_candidates
    assert [(c.name, c.step) for c in list_candidates(run_dir)] == [("step00001", 1), ("step00002", 2)]
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    assert (run_dir / "training_curves.png").stat().st_size > 10_000
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))


def test_resume_continues_at_the_same_step_and_data_position(cluster, run_dir, tiny_model_path):
    """Drop the step-2 checkpoint, resume from step 1: step 2 must use the same prompts (and, with the
    weights restored exactly, produce the same rollouts) as the uninterrupted run. The reward is in-process
    (KeywordReward): nothing compared here depends on where rewards come from, and a Serve deploy + shutdown
    costs ~20 s; resuming with the real service is tests/test_faults.py's SIGKILLed trainer (scripts/train.sh)."""
    from safetensors.torch import load_file

    from cluster.driver import Trainer
    from doubles import KeywordReward
    groups = cluster["groups"]
    cfg = tiny_cfg(run_dir, tiny_model_path)
    ck = Path(cfg.effective_ckpt_path)
    uninterrupted = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    shutil.rmtree(ck / "global_step_00002")
    os.remove(ck / "latest")

    trainer = Trainer(cfg, reward_fn=KeywordReward("the"), groups=groups)
    try:
        trainer.setup()
        assert trainer.resumed_from == str(ck / "global_step_00001")
        assert (trainer.state.step, trainer.state.epoch, trainer.state.index) == (1, 0, 2)
        # the policy holds exactly the step-1 weights again
        saved = load_file(str(ck / "global_step_00001" / "policy_hf" / "model.safetensors"))
        fp = fingerprint(groups)
        common = [k for k in saved if k in fp]
        assert len(common) == len(fp), sorted(set(fp) - set(saved))      # every parameter was saved and restored
        assert all(abs(float(saved[k].double().sum()) - fp[k]) < 1e-6 * max(1.0, abs(fp[k])) for k in common)
        result = trainer.fit()
    finally:
        trainer.close()
    assert result.completed and result.steps_this_run == 1
    resumed = result.history[-1]
    expect = uninterrupted[1]
    assert resumed["step"] == expect["step"] == 2
    assert resumed["prompts"] == expect["prompts"]
    assert (resumed["epoch"], resumed["data_index"]) == (expect["epoch"], expect["data_index"])
    assert resumed["rollout_digest"] == expect["rollout_digest"], "same weights + same seed -> same rollouts"
    # the log holds each step once
    assert [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (ck / "latest").read_text().strip() == "global_step_00002"


def test_reward_service_down_skips_the_batch_and_leaves_the_policy_alone(cluster, tmp_path, tiny_model_path):
    import ray

    from conftest import free_port

    from cluster.driver import Trainer
    from cluster.experience import ServiceReward
    from cluster.run_log import progress_postfix
    groups = cluster["groups"]
    cfg = tiny_cfg(tmp_path, tiny_model_path, reward_timeout_s=2.0, reward_max_retries=1)
    before = fingerprint(groups)
    v0 = ray.get(groups.rollout[0].weights_version.remote())
    trainer = Trainer(cfg, reward_fn=ServiceReward(f"http://127.0.0.1:{free_port()}", cfg), groups=groups)
    try:
        trainer.setup()
        row = trainer.step()
        postfix = progress_postfix(row, trainer.skips.total)
    finally:
        trainer.close()
    assert row["skipped"] is True and row["skipped_batches"] == 1
    assert trainer.skips.reasons["reward_unavailable"] == 1
    assert "SKIPPED" in postfix
    assert row["time/train"] == 0 and row["time/sync"] == 0 and "reward_mean" not in row
    assert fingerprint(groups) == before, "a skipped batch must not train the policy"
    assert ray.get(groups.rollout[0].weights_version.remote()) == v0


def test_training_with_redis_caches_verifications_across_runs(cluster, tmp_path, private_redis_module, reward_service,
                                                             tiny_model_path):
    """REDIS_URL set: the reward service's verification cache is a real redis-server. A first run writes its
    verifications there (with the TTL); a second run over the same prompts reads the identical abstention
    candidates back from it (counted as cached, and read from the server: its keyspace hits), and both train.
    The module's service (REDIS_URL's settings) serves both runs through REWARD_URL, as it served the runs above:
    these two train on the dev split, whose questions none of those saw, so the first run finds nothing cached.
    The Redis cache has no in-process layer, so a hit in the second run is a Redis read."""
    import redis

    from cluster.driver import Trainer
    from reward_service.cache import KEY_PREFIX
    groups = cluster["groups"]
    client = redis.Redis.from_url(private_redis_module.url)
    keys_before = set(client.keys(KEY_PREFIX + "*"))
    rows, hits = [], [int(client.info("stats")["keyspace_hits"])]
    for run in ("first", "second"):
        cfg = tiny_cfg(tmp_path / run, tiny_model_path, redis_url=private_redis_module.url, max_steps=1, save_step=0,
                       reward_url=reward_service, prompt_data="halueval:dev")
        trainer = Trainer(cfg, groups=groups)
        try:
            trainer.setup()
            result = trainer.fit()
            cache = trainer.reward_source.service.client.stats()["cache"]
        finally:
            trainer.close()
        assert result.completed and result.steps_this_run == 1 and not result.history[-1]["skipped"]
        assert result.history[-1]["policy_trained"] and result.history[-1]["statements_per_response"] > 0
        assert cache["backend"] == "redis", cache
        rows.append(result.history[-1])
        hits.append(int(client.info("stats")["keyspace_hits"]))
        if run == "first":
            keys = set(client.keys(KEY_PREFIX + "*")) - keys_before
            assert len(keys) >= cfg.rollout_batch_size       # at least the abstention candidates' verifications
            assert 0 < client.ttl(next(iter(keys))) <= cfg.cache_ttl_s
    # one abstention candidate per prompt (of n = 2 samples): the same prompts give the same candidates
    assert rows[1]["prompts"] == rows[0]["prompts"]
    assert rows[1]["cached_rate"] >= 0.5 and rows[1]["cached_rate"] > rows[0]["cached_rate"]
    assert hits[2] - hits[1] >= cfg.rollout_batch_size, hits     # the second run's hits were Redis reads


def test_self_verifier_judges_with_the_policys_rollout_engines(cluster, tmp_path, tiny_model_path):
    """VERIFIER_BACKEND=self: the trainer hands its rollout engines to the verifier replicas, which judge the
    policy's statements by asking the policy (chat on the engines); the step trains on those rewards. The trainer
    deploys this service itself (no REWARD_URL) under the app name the module's service has, so that one (which
    the tests above used) is shut down first; the fixture's own shutdown at the end of the module is then a no-op.
    Last in the file: its step advances the policy's weights version, which the checkpoint tests above compare."""
    from cluster.driver import Trainer
    from reward_service.app import shutdown
    shutdown()
    groups = cluster["groups"]
    cfg = tiny_cfg(tmp_path, tiny_model_path, verifier_backend="self", llm_max_retries=0, llm_timeout_s=600,
                   max_steps=1, save_step=0, reward_timeout_s=900)
    trainer = Trainer(cfg, groups=groups)
    try:
        trainer.setup()
        result = trainer.fit()
        stats = trainer.reward_source.service.client.stats()
    finally:
        trainer.close()
    row = result.history[-1]
    assert result.completed and not row["skipped"] and row["policy_trained"]
    assert stats["verifier"]["backend"] == "self" and stats["verifier"]["items"] > 0
