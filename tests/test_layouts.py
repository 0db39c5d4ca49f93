"""Both model layouts on real Ray with the tiny random Llama of tests/conftest.py (issue 10; the layouts' equality
is mechanics, not the model's behaviour): MODEL_LAYOUT=colocated (policy, rollout engine, reference and critic in
one process, the engine sampling from the policy's own module) and MODEL_LAYOUT=separate (one actor group per
role, weight sync through the object store) produce the same rollout, the same forwards and the same update for
the same data and seed.
"""
from __future__ import annotations

import pytest
import torch

from core.config import ConfigError, RLFHConfig

GEN_TOKENS = 10
QUESTIONS = ["What is the capital of France?", "Who wrote the play Hamlet?"]


# ------------------------------------------------------------------------------------------------ layout choice

def test_auto_layout_is_colocated_on_one_cpu_node_and_separate_elsewhere():
    from actors.group import resolve_layout
    assert resolve_layout(RLFHConfig()) == "colocated"
    assert resolve_layout(RLFHConfig(kl_coef=0.1, advantage_estimator="gae")) == "colocated"
    assert resolve_layout(RLFHConfig(model_layout="separate")) == "separate"
    assert resolve_layout(RLFHConfig(actor_num_nodes=2)) == "separate"                   # multi-node
    assert resolve_layout(RLFHConfig(actor_num_gpus_per_node=1, ref_num_gpus_per_node=1)) == "separate"   # GPUs
    assert resolve_layout(RLFHConfig(zero_stage=3)) == "separate"
    assert resolve_layout(RLFHConfig(), backend="vllm") == "separate"
    with pytest.raises(ConfigError, match="ZERO_STAGE=3"):
        resolve_layout(RLFHConfig(model_layout="colocated", zero_stage=3))
    with pytest.raises(ConfigError, match="ROLLOUT_BACKEND=hf"):
        resolve_layout(RLFHConfig(model_layout="colocated"), backend="vllm")


def test_actor_allocator_preloads_jemalloc_only_where_asked_and_found(monkeypatch, tmp_path):
    import actors.group as G
    lib = tmp_path / "libjemalloc.so.2"
    lib.write_bytes(b"")
    monkeypatch.setattr(G, "JEMALLOC_DIRS", (str(tmp_path),))
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    assert G.find_jemalloc() == str(lib)
    assert G.allocator_env("auto", gpu=False) == {"LD_PRELOAD": str(lib)}
    assert G.allocator_env("auto", gpu=True) == {}                  # auto: CPU actors only
    assert G.allocator_env("jemalloc", gpu=True) == {"LD_PRELOAD": str(lib)}
    assert G.allocator_env("system", gpu=False) == {}
    assert G.actor_env(False, "auto")["LD_PRELOAD"] == str(lib) and "LD_PRELOAD" not in G.actor_env(False)
    monkeypatch.setenv("LD_PRELOAD", "/opt/other.so")                 # a user's own preload is kept
    assert G.allocator_env("auto", gpu=False) == {"LD_PRELOAD": f"{lib}:/opt/other.so"}
    lib.unlink()
    assert G.find_jemalloc() is None and G.allocator_env("auto", gpu=False) == {}
    with pytest.raises(ValueError, match="ACTOR_ALLOCATOR=jemalloc.*libjemalloc2"):
        G.allocator_env("jemalloc", gpu=False)
    with pytest.raises(ConfigError, match="ACTOR_ALLOCATOR"):
        RLFHConfig.load({"ACTOR_ALLOCATOR": "tcmalloc"})


# ------------------------------------------------------------------------------------------------ same update

def _cfg(layout: str, model_path: str, autocast: str = "off") -> RLFHConfig:
    # GAE + KL: every role exists (policy, critic, reference, rollout). One thread: same float sums in both.
    return RLFHConfig(model_path=model_path, model_layout=layout, micro_train_batch_size=2, train_batch_size=4,
                      micro_rollout_batch_size=4, actor_lr=1e-4, critic_lr=1e-4, generate_max_len=GEN_TOKENS,
                      prompt_max_len=128, seed=7, rollout_backend="hf", rollout_dtype="fp32", num_cpus_per_actor=0.25,
                      kl_coef=0.05, advantage_estimator="gae", cpu_threads=1, train_autocast=autocast)


def _one_step(layout: str, model_path: str, prompts: list[str], pad_id: int, batch=None,
              autocast: str = "off") -> dict:
    """Create the layout, sample, run every forward and one train step of policy and critic on ``batch``
    (default: the layout's own rollout), sync, and return what the test compares."""
    import ray

    from actors.group import create_groups, find_jemalloc
    from actors.types import make_batch
    from actors.weight_sync import last_sync_stats, sync_weights
    g = create_groups(_cfg(layout, model_path, autocast))
    try:
        assert g.layout == layout
        samples = ray.get(g.rollout[0].generate.remote(prompts, 2, GEN_TOKENS, 1.0, 1.0, 11))
        if batch is None:
            batch = make_batch(samples, pad_id)
        old = g.policy.dispatch_cat("logprobs", batch, share=3)
        ref = g.reference.dispatch_cat("logprobs", batch, share=3)
        values = g.critic.dispatch_cat("values", batch, share=3)
        B, R = batch["action_mask"].shape
        gen = torch.Generator().manual_seed(3)
        adv = torch.randn(B, R, generator=gen) * batch["action_mask"]
        returns = torch.randn(B, R, generator=gen) * batch["action_mask"]
        base = {k: batch[k] for k in ("sequences", "attention_mask", "action_mask")}
        pstats = g.policy.dispatch("train_step", dict(base, old_logprobs=old, advantages=adv), share=2)[0]
        cstats = g.critic.dispatch("train_step", dict(base, old_values=values, returns=returns), share=2)[0]
        version = sync_weights(g.policy, g.rollout)
        after_policy = g.policy.dispatch_cat("logprobs", batch)
        after_engine = ray.get(g.rollout[0].logprobs.remote(batch))
        pings = {"policy": g.policy.run("ping")[0], "reference": g.reference.run("ping")[0],
                 "critic": g.critic.run("ping")[0], "rollout": ray.get(g.rollout[0].info.remote())}
        pids = {role: p["pid"] for role, p in pings.items()}
        assert {p["allocator"] for p in pings.values()} == {"jemalloc" if find_jemalloc() else "system"}
        return {"samples": samples, "batch": batch, "old": old, "ref": ref, "values": values, "pstats": pstats,
                "cstats": cstats, "policy_fp": g.policy.run("weights_fingerprint")[0],
                "critic_fp": g.critic.run("weights_fingerprint")[0], "after_policy": after_policy,
                "after_engine": after_engine, "version": version, "sync": last_sync_stats(g.policy), "pids": pids}
    finally:
        g.shutdown()


@pytest.fixture(scope="module")
def layouts_ray():
    """One Ray for both parametrizations (a start + shutdown is ~10 s on the 2-core runner); each run creates and
    shuts down its own actor groups (``_one_step``), so the next finds an idle cluster."""
    import ray
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=1024 ** 3)
    yield
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("autocast", ["off", "bf16"])
def test_colocated_and_separate_layouts_give_the_same_rollout_forwards_and_update(tiny_model_path, autocast,
                                                                                   layouts_ray):
    """fp32 forwards (TRAIN_AUTOCAST=off) and the CPU default's bf16 autocast: the same update in both layouts."""
    from core.model_loader import load_tokenizer
    from core.prompts import render_prompt
    tok = load_tokenizer(tiny_model_path)
    prompts = [render_prompt(tok, q) for q in QUESTIONS]
    sep = _one_step("separate", tiny_model_path, prompts, tok.pad_token_id, autocast=autocast)
    col = _one_step("colocated", tiny_model_path, prompts, tok.pad_token_id, batch=sep["batch"], autocast=autocast)

    # the same seed samples the same tokens (fp32 rollouts: the colocated engine IS the fp32 policy module)
    assert [s.response_token_ids for s in col["samples"]] == [s.response_token_ids for s in sep["samples"]]
    # one process hosts every role in the colocated layout; four in the separate one
    assert len(set(col["pids"].values())) == 1 and len(set(sep["pids"].values())) == 4
    # forwards on the same batch
    for k in ("old", "ref", "values"):
        assert torch.allclose(col[k], sep[k], atol=1e-5, rtol=0), (k, (col[k] - sep[k]).abs().max())
    # the same update: loss, grad norm, and every parameter's sum afterwards
    for stats in ("pstats", "cstats"):
        for k, v in sep[stats].items():
            if isinstance(v, float) and not k.endswith("_s"):
                assert col[stats][k] == pytest.approx(v, rel=1e-5, abs=1e-7), (stats, k)
    assert sep["pstats"]["grad_norm"] > 0 and sep["cstats"]["grad_norm"] > 0
    for fp in ("policy_fp", "critic_fp"):
        assert col[fp].keys() == sep[fp].keys()
        for name, v in sep[fp].items():
            assert col[fp][name] == pytest.approx(v, rel=1e-6, abs=1e-6), (fp, name)
    assert torch.allclose(col["after_policy"], sep["after_policy"], atol=1e-5, rtol=0)
    # the engines sample from the updated weights in both: an object-store copy, or the shared module itself
    assert sep["sync"]["method"] == "object_store" and sep["sync"]["bytes"] > 0
    assert col["sync"]["method"] == "shared" and col["sync"]["bytes"] == 0
    assert col["version"] == sep["version"] >= 1
    assert torch.allclose(col["after_engine"], sep["after_engine"], atol=1e-5, rtol=0)
    # The fp32 engines' scores equal the fp32 policy's; the autocast policy's differ by bf16 rounding (the weight
    # sync itself does not depend on TRAIN_AUTOCAST; `rlfh bench drift` measures that precision gap).
    if autocast == "off":
        for r in (sep, col):
            assert torch.allclose(r["after_engine"], r["after_policy"], atol=1e-5, rtol=0)
        assert not torch.allclose(r["after_policy"], r["old"], atol=1e-4)   # the step changed the policy
