"""The Ray actor groups end to end on CPU: real Ray, real DeepSpeed (gloo), the tiny random Llama of
tests/conftest.py (with SmolLM2's tokenizer): these tests are about dispatch, log-prob alignment, updates and
weight sync, not about what the model says.

One module-scoped cast (policy, critic, reference, two HF rollout engines) serves the tests; they run in
file order and later ones build on the state the earlier ones left (the policy is trained as they go).
"""
from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.slow

GEN_TOKENS = 12
QUESTIONS = ["What is the capital of France?", "Who wrote the play Hamlet?"]


@pytest.fixture(scope="module")
def ray_local():
    import ray
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=2 * 1024 ** 3)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def cfg(tiny_model_path):
    from core.config import RLFHConfig
    return RLFHConfig(model_path=tiny_model_path, micro_train_batch_size=2, train_batch_size=4,
                      micro_rollout_batch_size=4, actor_lr=1e-4, critic_lr=1e-4, generate_max_len=GEN_TOKENS,
                      prompt_max_len=128, seed=7, rollout_backend="hf", num_cpus_per_actor=0.25, vllm_num_engines=2,
                      rollout_dtype="fp32", train_autocast="off",
                      cpu_threads=2,   # what auto gives on the idle 2-core CI machine; fixed for the thread check
                      model_layout="separate")   # one group per role: the object-store weight sync is tested here
    # two rollout engines: the tests use the first; the last one shards prompts over both (and syncs both)
    # fp32 everywhere: the actors' log-probs are compared with direct fp32 HF forwards and across ranks at 1e-4
    # (tests/test_layouts.py and tests/test_actors_inprocess.py cover the bf16-autocast default).


@pytest.fixture(scope="module")
def groups(ray_local, cfg):
    from actors.group import create_groups
    g = create_groups(cfg)
    yield g
    g.shutdown()


@pytest.fixture(scope="module")
def tok(tiny_model_path):
    from core.model_loader import load_tokenizer
    return load_tokenizer(tiny_model_path)


@pytest.fixture(scope="module")
def prompts(tok):
    from core.prompts import render_prompt
    return [render_prompt(tok, q) for q in QUESTIONS]


@pytest.fixture(scope="module")
def hf_model(tiny_model_path):
    from core.model_loader import load_causal_lm
    return load_causal_lm(tiny_model_path).eval()


@pytest.fixture(scope="module")
def samples(groups, prompts, ray_local):
    return ray_local.get(groups.rollout[0].generate.remote(prompts, 2, GEN_TOKENS, 1.0, 1.0, 11))


@pytest.fixture(scope="module")
def batch(samples, tok):
    from actors.types import make_batch
    return make_batch(samples, tok.pad_token_id)


def direct_logprobs(model, sample) -> torch.Tensor:
    """log p(response token j) from an unpadded HF forward of prompt + response: [r]."""
    ids = torch.tensor([sample.prompt_token_ids + sample.response_token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    p, r = len(sample.prompt_token_ids), len(sample.response_token_ids)
    logp = torch.log_softmax(logits[p - 1:p + r - 1], -1)
    return logp.gather(1, torch.tensor(sample.response_token_ids)[:, None])[:, 0]


# ------------------------------------------------------------------------------------------------ rollout

def test_groups_and_placement(groups, cfg, hf_model):
    assert groups.rollout_backend == "hf"
    assert groups.policy.world_size == 1 and groups.critic is not None and groups.reference is not None
    assert set(groups.placement.roles) == {"policy", "critic", "reference", "rollout"}
    pings = groups.policy.run("ping")
    assert pings[0]["device"] == "cpu" and pings[0]["rank"] == 0
    assert groups.init_info["policy"][0]["trainable_params"] == sum(p.numel() for p in hf_model.parameters())


def test_ray_actor_phase_gets_cpu_threads_despite_omp_num_threads_1(groups, ray_local):
    """A fractional-CPU Ray actor starts with OMP_NUM_THREADS=1; its phases use CPU_THREADS anyway (here, not in
    tests/test_speed.py: this module's cast has such an actor, so no Ray or actor starts for the check)."""
    ref = groups.reference.actors[0]
    assert ray_local.get(ref.phase_threads.remote(1)) == {"threads": 2, "omp_env": "1"}
    assert ray_local.get(ref.phase_threads.remote(2))["threads"] == 1


def test_rollout_samples_follow_the_contract(samples, prompts, tok, groups, ray_local):
    assert [s.prompt_index for s in samples] == [0, 0, 1, 1]  # prompt-major
    for s in samples:
        assert s.prompt_token_ids == tok(prompts[s.prompt_index], add_special_tokens=False)["input_ids"]
        assert 1 <= len(s.response_token_ids) <= GEN_TOKENS
        assert s.response_text == tok.decode(s.response_token_ids, skip_special_tokens=True)
        assert len(s.token_offsets) == len(s.response_token_ids)
        spans = sorted(set(s.token_offsets))
        assert "".join(s.response_text[a:b] for a, b in spans if b > a) == s.response_text
        if s.finish_reason == "stop":
            assert s.response_token_ids[-1] == tok.eos_token_id
            assert s.token_offsets[-1] == (len(s.response_text), len(s.response_text))
        else:
            assert len(s.response_token_ids) == GEN_TOKENS and tok.eos_token_id not in s.response_token_ids
    # seeded sampling is reproducible
    again = ray_local.get(groups.rollout[0].generate.remote(prompts, 2, GEN_TOKENS, 1.0, 1.0, 11))
    assert [s.response_token_ids for s in again] == [s.response_token_ids for s in samples]


def test_chat_is_greedy_hf_generate(groups, hf_model, tok, ray_local):
    msgs = [[{"role": "user", "content": "Name a colour."}], [{"role": "user", "content": "Say hi."}]]
    out = ray_local.get(groups.rollout[0].chat.remote(msgs, 8))
    assert len(out) == 2 and all(isinstance(o, str) and o for o in out)
    text = tok.apply_chat_template(msgs[0], tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        g = hf_model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                              do_sample=False, pad_token_id=tok.pad_token_id)
    assert out[0] == tok.decode(g[0, ids.shape[1]:], skip_special_tokens=True)


# ------------------------------------------------------------------------------------------------ log-probs

def test_logprobs_align_with_a_direct_hf_forward(groups, batch, samples, hf_model, ray_local):
    pol = groups.policy.dispatch_cat("logprobs", batch)
    ref = groups.reference.dispatch_cat("logprobs", batch)
    eng = ray_local.get(groups.rollout[0].logprobs.remote(batch))
    R = batch["action_mask"].shape[1]
    assert pol.shape == ref.shape == (len(samples), R)
    for i, s in enumerate(samples):
        r = len(s.response_token_ids)
        want = direct_logprobs(hf_model, s)
        torch.testing.assert_close(pol[i, :r], want, atol=2e-4, rtol=0)
        assert torch.all(pol[i, r:] == 0)
    torch.testing.assert_close(ref, pol, atol=2e-4, rtol=0)   # same initial weights
    torch.testing.assert_close(eng, pol, atol=2e-4, rtol=0)
    assert torch.all(pol[batch["action_mask"]] < 0)


# ------------------------------------------------------------------------------------------------ training

def test_ppo_step_moves_the_policy_and_not_the_reference(groups, batch):
    lp_old = groups.policy.dispatch_cat("logprobs", batch)
    ref_before = groups.reference.run("weights_fingerprint")[0]
    ref_lp_before = groups.reference.dispatch_cat("logprobs", batch)
    fp_before = groups.policy.run("weights_fingerprint")[0]
    v0 = groups.policy.run("weights_version")[0]
    adv = torch.zeros_like(lp_old)
    adv[0::2] = 1.0   # reinforce samples 0 and 2, penalise 1 and 3
    adv[1::2] = -1.0
    adv = adv * batch["action_mask"]
    m = groups.policy.dispatch("train_step", dict(batch, old_logprobs=lp_old, advantages=adv))[0]
    for k in ("policy_loss", "clipfrac", "approx_kl", "entropy", "grad_norm", "lr"):
        assert k in m and math.isfinite(m[k]), (k, m)
    assert m["grad_norm"] > 0 and m["lr"] == pytest.approx(1e-4) and m["optimizer_steps"] == 1
    assert m["entropy"] > 0
    fp_after = groups.policy.run("weights_fingerprint")[0]
    assert sum(fp_after[k] != fp_before[k] for k in fp_before) > 0.9 * len(fp_before)
    assert groups.policy.run("weights_version")[0] == v0 + 1
    lp_new = groups.policy.dispatch_cat("logprobs", batch)
    mask = batch["action_mask"]
    gain = ((lp_new - lp_old) * mask).sum(1) / mask.sum(1)
    assert gain[0::2].mean() > gain[1::2].mean()  # PPO pushed up what had positive advantage
    # the reference is frozen
    assert groups.reference.run("weights_fingerprint")[0] == ref_before
    assert torch.equal(groups.reference.dispatch_cat("logprobs", batch), ref_lp_before)


def test_critic_step_moves_values_towards_returns(groups, batch):
    v0 = groups.critic.dispatch_cat("values", batch)
    mask = batch["action_mask"]
    assert v0.shape == mask.shape and torch.all(v0[~mask] == 0)
    fp0 = groups.critic.run("weights_fingerprint")[0]
    returns = (v0 + 1.0) * mask
    m = groups.critic.dispatch("train_step", dict(batch, old_values=v0, returns=returns))[0]
    for k in ("value_loss", "vf_clipfrac", "grad_norm", "lr"):
        assert k in m and math.isfinite(m[k]), (k, m)
    assert m["value_loss"] == pytest.approx(0.5, rel=0.05)  # 0.5 * (v - (v + 1))^2 at the start
    fp1 = groups.critic.run("weights_fingerprint")[0]
    assert fp1["value_head.weight"] != fp0["value_head.weight"]
    assert sum(fp1[k] != fp0[k] for k in fp0 if k.startswith("backbone.")) > 0
    v1 = groups.critic.dispatch_cat("values", batch)
    assert ((v1 - v0)[mask]).mean() > 0.01


# ------------------------------------------------------------------------------------------------ weight sync

def test_weight_sync_engine_generates_with_the_new_weights(groups, batch, prompts, hf_model, ray_local):
    from actors.weight_sync import last_sync_stats, sync_weights
    engine = groups.rollout[0]
    greedy_before = ray_local.get(engine.generate.remote(prompts[:1], 1, GEN_TOKENS, 0.0, 1.0))

    def perturb(actor, scale: float, seed: int) -> int:
        """Runs inside the policy actor (Ray's __ray_call__): seeded noise on the MLP weights, version bumped."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in actor.module.named_parameters():
                if "mlp" in name and p.requires_grad:
                    with actor._gathered([p]):
                        noise = torch.randn(p.shape, generator=g, dtype=torch.float32) * scale * float(p.float().std())
                        p.add_(noise.to(p.device, p.dtype))
        actor._weights_version += 1
        return actor._weights_version

    # 4 x each MLP weight's std: the tiny random model's greedy answer (a repeated newline) needs a large push
    version = groups.policy.run("__ray_call__", perturb, 4.0, 3)[0]
    pol = groups.policy.dispatch_cat("logprobs", batch)
    stale = ray_local.get(engine.logprobs.remote(batch))
    assert (stale - pol).abs().max() > 1e-2  # the engine still has the old weights
    new_version = sync_weights(groups.policy, groups.rollout)
    assert new_version == version == ray_local.get(engine.weights_version.remote())
    stats = last_sync_stats(groups.policy)
    fp32_bytes = 4 * sum(p.numel() for p in hf_model.parameters())      # every weight went (fp32 rollouts)
    assert stats["method"] == "object_store" and stats["bytes"] >= fp32_bytes and stats["seconds"] > 0, stats
    fresh = ray_local.get(engine.logprobs.remote(batch))
    torch.testing.assert_close(fresh, pol, atol=2e-4, rtol=0)
    greedy_after = ray_local.get(engine.generate.remote(prompts[:1], 1, GEN_TOKENS, 0.0, 1.0))
    assert greedy_after[0].extra["weights_version"] == new_version
    # the perturbation is large: the greedy answer changes with the weights
    assert greedy_after[0].response_token_ids != greedy_before[0].response_token_ids


# ------------------------------------------------------------------------------------------------ 2 ranks

def test_dispatch_over_two_gloo_ranks(cfg, groups, batch, samples, tiny_model_path, ray_local):
    """world_size 2 on CPU (gloo): per-rank results come back in rank order; a train step keeps ranks in lockstep."""
    from actors.group import ActorGroup
    from actors.policy import PolicyActor
    from transformers import AutoModelForCausalLM
    tiny = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    want = [direct_logprobs(tiny, s) for s in samples]
    tiny_cfg = cfg.model_copy(update={"model_path": tiny_model_path, "micro_train_batch_size": 1})
    g = ActorGroup(PolicyActor, role="policy", cfg=tiny_cfg, num_nodes=2, num_gpus_per_node=0)
    try:
        assert g.world_size == 2
        g.run("init_model")
        assert [p["rank"] for p in g.run("ping")] == [0, 1]
        parts = g.dispatch("logprobs", batch)
        assert [p.shape[0] for p in parts] == [2, 2]   # rank 0 got rows 0-1, rank 1 rows 2-3
        for i, s in enumerate(samples):
            got = parts[i // 2][i % 2, :len(s.response_token_ids)]
            torch.testing.assert_close(got, want[i], atol=1e-4, rtol=0)
        # 3 samples over 2 ranks, micro batch 1: 2 micro batches on rank 0, 1 on rank 1, one optimizer step each
        b3 = {k: v[:3] for k, v in batch.items()}
        old = torch.cat(parts)[:3]
        adv = torch.where(b3["action_mask"], 1.0, 0.0)
        metrics = g.dispatch("train_step", dict(b3, old_logprobs=old, advantages=adv))
        assert [m["optimizer_steps"] for m in metrics] == [1, 1]
        assert [m["micro_batches"] for m in metrics] == [2, 1]
        f0, f1 = g.run("weights_fingerprint")
        assert f0 == f1  # gradients were all-reduced: both replicas took the same step
        assert torch.cat(g.dispatch("logprobs", batch)).sub(torch.cat(parts)).abs().max() > 0
        sd = g.run("state_dict_for_sync")
        assert sd[1] == {} and "model.embed_tokens.weight" in sd[0]

        # the module's two rollout engines: prompts are sharded over them and merged back prompt-major; one sync
        # from this group feeds both (this test is the module's last: nothing after it uses their weights)
        from actors.rollout import generate_on_engines
        from actors.weight_sync import sync_weights
        engines = groups.rollout
        assert len(engines) == 2
        version = sync_weights(g, engines)
        assert version == g.run("weights_version")[0] == 1
        want = torch.cat(g.dispatch("logprobs", batch))
        for e in engines:
            torch.testing.assert_close(ray_local.get(e.logprobs.remote(batch)), want, atol=1e-5, rtol=0)
        prompts = ["<|im_start|>user\nA?<|im_end|>\n", "<|im_start|>user\nB?<|im_end|>\n",
                   "<|im_start|>user\nC?<|im_end|>\n"]
        out = generate_on_engines(engines, prompts, 2, 4, 1.0, 1.0, seed=1, timeout=120)
        assert [s.prompt_index for s in out] == [0, 0, 1, 1, 2, 2]
        assert {s.extra["engine"] for s in out} == {0, 1}
        tok_ids = [s.prompt_token_ids for s in out]
        assert tok_ids[0] == tok_ids[1] != tok_ids[2] == tok_ids[3] != tok_ids[4]
    finally:
        g.shutdown()
