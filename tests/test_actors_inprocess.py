"""Actors built in-process (no Ray) on a tiny random Llama with SmolLM2's tokenizer: checkpoint round trips
(model + optimizer) for the policy and the critic, HF export, and LoRA (the adapter trains; the exported weights
are the MERGED HF weights). Size does not change these mechanics; tests/test_actors_ray.py covers the real model.
The mechanics tests compare the actors' log-probs with a plain fp32 HF model's, so they run with TRAIN_AUTOCAST=off.
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.slow


DIST_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


@pytest.fixture(scope="module", autouse=True)
def restore_process_state():
    """The actors set torch.distributed env vars and a process group in THIS process: undo both afterwards."""
    import os
    saved = {k: os.environ.get(k) for k in DIST_ENV}
    yield
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def policy(tiny_model_path):
    from actors.policy import PolicyActor
    from core.config import RLFHConfig
    cfg = RLFHConfig(model_path=tiny_model_path, train_autocast="off",
                     lora_rank=4, lora_alpha=8, actor_lr=5e-2, micro_train_batch_size=2,
                     train_batch_size=4, gradient_checkpointing=True)
    p = PolicyActor(cfg)
    p.init_model()
    yield p
    p.shutdown()


def make_tiny_batch(tok):
    from actors.types import RolloutSample, make_batch
    samples = []
    for i, (q, a) in enumerate([("Capital of France?", " Paris."), ("Who wrote Hamlet?", " Shakespeare wrote it."),
                                ("2+2?", " 4"), ("Sky colour?", " Blue, mostly.")]):
        p = tok(q, add_special_tokens=False)["input_ids"]
        r = tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        samples.append(RolloutSample(i, p, r, tok.decode(r, skip_special_tokens=True), [(0, 0)] * len(r), "stop"))
    return make_batch(samples, tok.pad_token_id)


def test_lora_trains_only_the_adapter_and_exports_merged_weights(policy, tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    from actors.base import causal_lm_response_logprobs
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    total = sum(p.numel() for p in policy.module.parameters())
    trainable = sum(p.numel() for p in policy.module.parameters() if p.requires_grad)
    assert 0 < trainable < 0.2 * total
    batch = make_tiny_batch(policy.tokenizer)
    lp0 = policy.logprobs(batch)
    with torch.no_grad():
        torch.testing.assert_close(lp0, causal_lm_response_logprobs(base, batch), atol=1e-5, rtol=0)  # B = 0
    adv = torch.where(batch["action_mask"], 1.0, 0.0)
    for _ in range(2):
        m = policy.train_step(dict(batch, old_logprobs=lp0, advantages=adv))
    assert m["grad_norm"] > 0 and m["optimizer_steps"] == 1
    lp1 = policy.logprobs(batch)
    assert ((lp1 - lp0) * batch["action_mask"]).sum() > 0   # positive advantages: likelier now

    sd = policy.state_dict_for_sync()
    hf_names = {n for n, _ in base.named_parameters()}
    assert set(sd) == hf_names  # HF names only: no lora_A/B, no base_layer, no peft prefix
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(sd[q], dict(base.named_parameters())[q])  # the adapter is merged in
    merged = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    merged.load_state_dict(sd, strict=False)
    with torch.no_grad():
        torch.testing.assert_close(causal_lm_response_logprobs(merged, batch), lp1, atol=1e-4, rtol=0)

    out = str(tmp_path / "hf")
    policy.save_hf(out)
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(causal_lm_response_logprobs(reloaded, batch), lp1, atol=1e-4, rtol=0)


def test_actor_train_layers_moves_only_the_last_layers_and_exports_every_weight(tiny_model_path):
    """ACTOR_TRAIN_LAYERS=1 on the 2-layer model: the embeddings (tied head) and layer 0 get no gradient and no
    AdamW state, a train step moves layer 1 and leaves them as loaded, and the weights the rollout engines get are
    the whole model; a value above the layer count is refused with the setting's name."""
    from transformers import AutoModelForCausalLM

    from actors.policy import PolicyActor
    from core.config import RLFHConfig
    cfg = RLFHConfig(model_path=tiny_model_path, train_autocast="off", actor_lr=5e-2, micro_train_batch_size=2,
                     train_batch_size=4, actor_train_layers=1)
    pol = PolicyActor(cfg)   # the process group stays up for the next actor (the module fixture tears it down)
    pol.init_model()
    trainable = {n for n, p in pol.module.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith(("model.layers.1.", "model.norm.")) for n in trainable)
    optimised = {id(p) for g in pol.optimizer.param_groups for p in g["params"]}
    assert optimised == {id(p) for p in pol.module.parameters() if p.requires_grad}
    batch = make_tiny_batch(pol.tokenizer)
    lp0 = pol.logprobs(batch)
    m = pol.train_step(dict(batch, old_logprobs=lp0, advantages=torch.where(batch["action_mask"], 1.0, 0.0)))
    assert m["grad_norm"] > 0
    base = dict(AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).named_parameters())
    sd = pol.state_dict_for_sync()
    assert set(sd) == set(base)
    frozen = [n for n in sd if not n.startswith(("model.layers.1.", "model.norm."))]
    assert frozen and all(torch.equal(sd[n], base[n].detach()) for n in frozen)
    assert any(not torch.equal(sd[n], base[n].detach()) for n in sd if n.startswith("model.layers.1."))
    with pytest.raises(ValueError, match="ACTOR_TRAIN_LAYERS=3: the model has 2 transformer layers"):
        PolicyActor(cfg.model_copy(update={"actor_train_layers": 3})).init_model()


# ------------------------------------------------------------------------------------------------ checkpoints

@pytest.fixture(scope="module")
def full_actors(tiny_model_path):
    from actors.critic import CriticActor
    from actors.policy import PolicyActor
    from core.config import RLFHConfig
    cfg = RLFHConfig(model_path=tiny_model_path, train_autocast="off",
                     actor_lr=1e-2, critic_lr=1e-2, micro_train_batch_size=2,
                     train_batch_size=4)
    p, c = PolicyActor(cfg), CriticActor(cfg)
    p.init_model()
    c.init_model()
    yield p, c
    p.shutdown()


def test_checkpoint_round_trip_restores_model_and_optimizer(full_actors, tmp_path):
    _check_checkpoint_round_trip(*full_actors, tmp_path)


def test_bf16_optimizer_state_trains_and_round_trips(tiny_model_path, tmp_path):
    """OPTIM_STATE_DTYPE=bf16: the AdamW moments of policy and critic are bf16 (half the bytes), and the
    checkpoint round trip restores them exactly."""
    from actors.critic import CriticActor
    from actors.policy import PolicyActor
    from core.config import RLFHConfig
    cfg = RLFHConfig(model_path=tiny_model_path, train_autocast="off", optim_state_dtype="bf16",
                     actor_lr=1e-2, critic_lr=1e-2, micro_train_batch_size=2, train_batch_size=4)
    p, c = PolicyActor(cfg), CriticActor(cfg)
    p.init_model()   # joins this module's process group (its fixtures' teardown destroys it)
    c.init_model()
    _check_checkpoint_round_trip(p, c, tmp_path)
    batch = make_tiny_batch(c.tokenizer)
    v = c.values(batch)
    c.train_step(dict(batch, old_values=v, returns=v + 1))   # the round trip restored the critic's empty state
    for actor in (p, c):
        states = list(getattr(actor.optimizer, "optimizer", actor.optimizer).state.values())
        assert states and all(st["exp_avg"].dtype == st["exp_avg_sq"].dtype == torch.bfloat16 for st in states)
        assert all(param.dtype == torch.float32 for param in actor.module.parameters())


def _check_checkpoint_round_trip(pol, critic, tmp_path):
    batch = make_tiny_batch(pol.tokenizer)
    lp0 = pol.logprobs(batch)
    adv = torch.where(batch["action_mask"], torch.linspace(-1, 1, lp0.numel()).view_as(lp0), 0.0)
    train = dict(batch, old_logprobs=lp0, advantages=adv)
    pol.train_step(train)  # Adam state to save
    ckpt = str(tmp_path / "ckpt")
    pol.save_checkpoint(ckpt)
    saved_lp, saved_opt, saved_ver = pol.logprobs(batch), pol.optimizer_fingerprint(), pol.weights_version()
    assert saved_opt["step"] >= 1 and saved_ver == 1
    pol.train_step(train)
    after = pol.logprobs(batch)
    assert not torch.allclose(after, saved_lp) and pol.optimizer_fingerprint() != saved_opt
    pol.load_checkpoint(ckpt)
    assert pol.weights_version() == saved_ver
    assert torch.equal(pol.logprobs(batch), saved_lp)
    assert pol.optimizer_fingerprint() == saved_opt
    pol.train_step(train)  # same state + same batch -> the same step (Adam's moments came back too)
    torch.testing.assert_close(pol.logprobs(batch), after, atol=1e-6, rtol=0)
    with pytest.raises(FileNotFoundError, match="no policy checkpoint"):
        pol.load_checkpoint(str(tmp_path / "nothing-here"))

    v = critic.values(batch)
    critic.save_checkpoint(ckpt)
    opt = critic.optimizer_fingerprint()
    critic.train_step(dict(batch, old_values=v, returns=v + 1))
    assert not torch.allclose(critic.values(batch), v)
    critic.load_checkpoint(ckpt)
    assert torch.equal(critic.values(batch), v) and critic.optimizer_fingerprint() == opt


def _two_updates_from_one_start(pol, batch, tmp_path, second_old_logprobs: bool = True,
                                before_second=lambda: None):
    """Two updates of ``pol`` on ``batch`` from the same weights and optimizer state (a checkpoint in between):
    the first with the batch's log-probs as the old ones, the second after ``before_second()``, with or without
    them. Returns ``(stats, log-probs after)`` of each; checks that the second one trained."""
    ckpt = str(tmp_path / "before")
    pol.save_checkpoint(ckpt)
    lp0 = pol.logprobs(batch)
    adv = torch.where(batch["action_mask"], torch.linspace(-1, 1, lp0.numel()).view_as(lp0), 0.0)
    first = pol.train_step(dict(batch, old_logprobs=lp0, advantages=adv))
    after_first = pol.logprobs(batch)
    pol.load_checkpoint(ckpt)
    torch.testing.assert_close(pol.logprobs(batch), lp0, atol=0, rtol=0)
    before_second()
    second = pol.train_step(dict(batch, advantages=adv, **({"old_logprobs": lp0} if second_old_logprobs else {})))
    after_second = pol.logprobs(batch)
    assert not torch.allclose(after_second, lp0)  # it did train
    return (first, after_first), (second, after_second)


def test_single_update_without_old_logprobs_is_the_update_with_them(full_actors, tmp_path):
    """The driver skips the old-log-prob forward when one update follows each rollout (no reference): the
    update then uses its own detached log-probs. That must be the same step as with a separate forward."""
    pol, _ = full_actors
    batch = make_tiny_batch(pol.tokenizer)
    assert batch["sequences"].shape[0] <= pol.cfg.train_batch_size  # one optimizer step for the batch
    (with_forward, after_with), (reused, after_reused) = _two_updates_from_one_start(pol, batch, tmp_path,
                                                                                    second_old_logprobs=False)
    # A few float32 ulps: the two paths sum the same gradients in a different order, and the bf16 AdamW moments
    # (OPTIM_STATE_DTYPE=auto on CPU) can round such a difference either way.
    torch.testing.assert_close(after_reused, after_with, atol=1e-6, rtol=1e-6)
    assert reused["clipfrac"] == 0.0 and abs(reused["approx_kl"]) < 1e-9
    assert with_forward["policy_loss"] == pytest.approx(reused["policy_loss"], abs=1e-6)


def test_length_grouped_micro_batches_make_the_same_update(full_actors, tmp_path, monkeypatch):
    """The PPO pass sorts each optimizer step's prompt groups by length before cutting micro batches; with
    token-weighted micro batches that is the update of the rollout's own order, to float32 rounding."""
    import actors.policy as P
    from actors.types import RolloutSample, length_grouped_order, make_batch
    pol, _ = full_actors
    tok = pol.tokenizer
    samples = []
    for i, (q, answers) in enumerate([("2+2?", (" 4", " I don't know.")),
                                      ("Who wrote the play Hamlet, and in which year was it first staged in London?",
                                       (" Shakespeare, around 1600.", " Marlowe"))]):
        p = tok(q, add_special_tokens=False)["input_ids"]
        for a in answers:
            r = tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            samples.append(RolloutSample(i, p, r, a, [(0, 0)] * len(r), "stop"))
    batch = make_batch(samples, tok.pad_token_id)
    assert pol.cfg.train_batch_size == batch["sequences"].shape[0]            # one optimizer step
    assert length_grouped_order(batch, 4).tolist() == [2, 3, 0, 1]          # the long prompt's group first
    def rollout_order():   # the PPO pass without the sort
        monkeypatch.setattr(P, "length_grouped_order", lambda b, chunk: torch.arange(b["sequences"].shape[0]))

    (sorted_step, after_sorted), (rollout_step, after_rollout) = _two_updates_from_one_start(
        pol, batch, tmp_path, before_second=rollout_order)
    torch.testing.assert_close(after_sorted, after_rollout, atol=1e-6, rtol=1e-6)
    assert sorted_step["grad_norm"] == pytest.approx(rollout_step["grad_norm"], rel=1e-5)


@pytest.mark.parametrize("settings, agg, hi", [
    ({}, "token-mean", 0.2),
    ({"advantage_estimator": "dr_grpo"}, "seq-mean-token-sum-norm", 0.2),      # Dr.GRPO's own aggregation
    ({"advantage_estimator": "dr_grpo", "loss_agg": "token-mean"}, "token-mean", 0.2),  # unless LOSS_AGG says
    ({"advantage_estimator": "grpo", "loss_agg": "seq-mean-token-mean", "eps_clip_high": 0.5},
     "seq-mean-token-mean", 0.5),
])
def test_train_step_uses_the_configured_policy_loss(full_actors, settings, agg, hi):
    """The loss a real train step reports is core_algos.policy_loss with LOSS_AGG / EPS_CLIP_HIGH (Dr.GRPO's
    normaliser is the constant GENERATE_MAX_LEN, not the micro batch's trimmed length), on each micro batch."""
    from core.config import RLFHConfig
    from core.core_algos import policy_loss
    pol, _ = full_actors
    saved = pol.cfg
    pol.cfg = RLFHConfig(**{**saved.model_dump(), **settings})
    try:
        assert pol.cfg.effective_loss_agg == agg
        batch = make_tiny_batch(pol.tokenizer)
        lp = pol.logprobs(batch)
        mask = batch["action_mask"]
        ramp = torch.linspace(-1, 1, lp.numel()).view_as(lp)
        adv = torch.where(mask, ramp + 0.3, 0.0)
        old = torch.where(mask, lp + 0.4 * torch.sin(7 * ramp), 0.0)    # ratios from ~0.67 to ~1.5: some clip
        reported = pol.train_step(dict(batch, old_logprobs=old, advantages=adv))
        micro = pol.cfg.micro_train_batch_size
        assert batch["sequences"].shape[0] == 2 * micro and mask.shape[1] < pol.cfg.generate_max_len
        losses, clipfracs = {}, []
        for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
            per_mb = []
            for i in range(0, 2 * micro, micro):
                s = slice(i, i + micro)
                loss, m = policy_loss(lp[s], old[s], adv[s], mask[s], pol.cfg.eps_clip, eps_clip_high=hi,
                                      loss_agg=mode, norm_length=pol.cfg.generate_max_len)
                per_mb.append(float(loss))
                if mode == agg:
                    clipfracs.append(m["clipfrac"])
            losses[mode] = sum(per_mb) / len(per_mb)
        assert len({round(v, 4) for v in losses.values()}) == 3   # the three modes are told apart here
        assert reported["policy_loss"] == pytest.approx(losses[agg], abs=1e-5)
        assert reported["clipfrac"] == pytest.approx(sum(clipfracs) / len(clipfracs), abs=1e-6)
    finally:
        pol.cfg = saved


def test_hf_export_of_policy_and_critic(full_actors, tmp_path):
    from transformers import AutoModelForCausalLM

    from actors.base import causal_lm_response_logprobs
    from actors.critic import VALUE_HEAD_FILE, CriticActor
    pol, critic = full_actors
    batch = make_tiny_batch(pol.tokenizer)
    out = str(tmp_path / "policy")
    pol.save_hf(out)
    m = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(causal_lm_response_logprobs(m, batch), pol.logprobs(batch), atol=1e-5, rtol=0)
    cout = str(tmp_path / "critic")
    critic.save_hf(cout)
    import os
    assert os.path.exists(os.path.join(cout, VALUE_HEAD_FILE))
    # a critic initialised from the export (CRITIC_PRETRAIN) gives the same values
    again = CriticActor(critic.cfg.model_copy(update={"critic_pretrain": cout}))
    again.init_model()
    torch.testing.assert_close(again.values(batch), critic.values(batch), atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------------ ZeRO-3

@pytest.mark.parametrize("state_dtype", ["fp32", "bf16"])
def test_zero3_policy_trains_exports_gathered_weights_and_checkpoints(tiny_model_path, tmp_path, state_dtype):
    from transformers import AutoModelForCausalLM

    from actors.base import causal_lm_response_logprobs
    from actors.policy import PolicyActor
    from core.config import RLFHConfig
    cfg = RLFHConfig(model_path=tiny_model_path, train_autocast="off", optim_state_dtype=state_dtype,
                     zero_stage=3, actor_lr=1e-2, micro_train_batch_size=2,
                     train_batch_size=4)
    pol = PolicyActor(cfg)
    pol.init_model()
    batch = make_tiny_batch(pol.tokenizer)
    lp = pol.logprobs(batch)
    m = pol.train_step(dict(batch, old_logprobs=lp, advantages=torch.where(batch["action_mask"], 1.0, 0.0)))
    assert m["grad_norm"] > 0 and m["optimizer_steps"] == 1
    lp2 = pol.logprobs(batch)
    assert (lp2 - lp).abs().max() > 1e-3
    sd = pol.state_dict_for_sync()  # partitioned parameters gathered to full HF tensors
    ref = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    assert {k: tuple(v.shape) for k, v in sd.items()} == {n: tuple(p.shape) for n, p in ref.named_parameters()}
    ref.load_state_dict(sd, strict=False)
    with torch.no_grad():
        torch.testing.assert_close(causal_lm_response_logprobs(ref, batch), lp2, atol=1e-5, rtol=0)
    pol.save_checkpoint(str(tmp_path))
    pol.train_step(dict(batch, old_logprobs=lp, advantages=torch.where(batch["action_mask"], 1.0, 0.0)))
    pol.load_checkpoint(str(tmp_path))
    assert torch.equal(pol.logprobs(batch), lp2)


# real model: the bf16 drift bound (BF16_LOGPROB_DRIFT) and the 2% grad-norm match were measured on SmolLM2-135M
def test_train_autocast_bf16_trains_fp32_weights_with_the_fp32_gradient(embedded_model_path):
    """TRAIN_AUTOCAST: auto resolves to bf16 exactly where the CPU has native bf16 and DTYPE=fp32. A bf16-autocast
    train step of the real model keeps fp32 weights and gives the fp32 step's gradient norm within 2%, and its
    log-probs stay within twice the measured bf16 drift of the fp32 ones."""
    from actors.base import cpu_has_fast_bf16, resolve_train_autocast
    from actors.policy import PolicyActor
    from actors.rollout import BF16_LOGPROB_DRIFT
    from core.config import RLFHConfig
    from core.model_loader import load_tokenizer
    cpu = torch.device("cpu")
    assert resolve_train_autocast(RLFHConfig(), cpu) == (torch.bfloat16 if cpu_has_fast_bf16() else None)
    assert resolve_train_autocast(RLFHConfig(train_autocast="bf16", dtype="bf16"), cpu) is None
    assert resolve_train_autocast(RLFHConfig(train_autocast="off"), cpu) is None
    tok = load_tokenizer(embedded_model_path)
    batch = make_tiny_batch(tok)
    gen = torch.Generator().manual_seed(0)
    adv = torch.randn(batch["action_mask"].shape, generator=gen) * batch["action_mask"]
    out = {}
    for mode in ("off", "bf16"):
        cfg = RLFHConfig(model_path=embedded_model_path, actor_lr=1e-6, micro_train_batch_size=2, train_batch_size=4,
                         train_autocast=mode, cpu_threads=0)   # auto: 1 while an xdist neighbour is busy
        p = PolicyActor(cfg)   # the process group stays up for the next actor (the module fixture tears it down)
        p.init_model()
        assert p.autocast == (None if mode == "off" else torch.bfloat16)
        lp = p.logprobs(batch)
        stats = p.train_step(dict(batch, advantages=adv))
        assert all(w.dtype == torch.float32 for w in p.module.parameters())
        out[mode] = (lp, stats)
        del p
    (lp32, s32), (lp16, s16) = out["off"], out["bf16"]
    drift = (lp16 - lp32)[batch["action_mask"]].abs()
    assert 0 < float(drift.mean()) <= 2 * BF16_LOGPROB_DRIFT["mean"], float(drift.mean())
    assert s16["grad_norm"] == pytest.approx(s32["grad_norm"], rel=0.02), (s16["grad_norm"], s32["grad_norm"])


# ------------------------------------------------------------------------------------ CRITIC_TRAIN_LAYERS

def test_critic_train_layers_freezes_the_lower_layers_and_shares_them_with_the_reference(tiny_model_path):
    """CRITIC_TRAIN_LAYERS=1 in the colocated actor: the critic's embeddings and first layer ARE the reference's
    modules (one copy), they get no gradient and no optimizer state, a train step moves only the last layer and
    the value head, the reference's log-probs stay put, and before training the values are those of a critic
    that trains everything (same weights, same value head)."""
    from actors.colocated import ColocatedActor
    from actors.base import frozen_lower_modules
    from actors.critic import CriticActor
    from core.config import RLFHConfig
    cfg = RLFHConfig(model_path=tiny_model_path, train_autocast="off", advantage_estimator="gae", kl_coef=0.01,
                     critic_lr=1e-2, micro_train_batch_size=2, train_batch_size=4, critic_train_layers=1)
    host = ColocatedActor(cfg)
    info = host.init_model()
    critic, ref = host.roles["critic"], host.roles["reference"]
    assert info["critic"]["shares_reference_weights"] is True
    backbone = critic.module.backbone
    ours = frozen_lower_modules(backbone, 1, "CRITIC_TRAIN_LAYERS")
    theirs = frozen_lower_modules(ref.model.base_model, 1, "CRITIC_TRAIN_LAYERS")
    assert len(ours) == 2 and all(a is b for (_, _, a), (_, _, b) in zip(ours, theirs))
    trainable = {n for n, p in critic.module.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith(("backbone.layers.1.", "backbone.norm.", "value_head.")) for n in trainable)
    assert info["critic"]["trainable_params"] == sum(p.numel() for p in critic.module.parameters() if p.requires_grad)
    optimised = {id(p) for g in critic.optimizer.param_groups for p in g["params"]}
    assert optimised == {id(p) for p in critic.module.parameters() if p.requires_grad}

    batch = make_tiny_batch(critic.tokenizer)
    batch["returns"] = torch.randn(batch["action_mask"].shape) * batch["action_mask"]
    batch["old_values"] = torch.zeros_like(batch["returns"])
    full = CriticActor(cfg.model_copy(update={"critic_train_layers": 0}))
    full.init_model()
    torch.testing.assert_close(critic.values(batch), full.values(batch), atol=1e-6, rtol=0)
    alone = CriticActor(cfg)   # the separate layout: frozen the same way, its own copy of the frozen part
    assert alone.init_model()["shares_reference_weights"] is False
    assert {n for n, p in alone.module.named_parameters() if p.requires_grad} == trainable
    alone_frozen = frozen_lower_modules(alone.module.backbone, 1, "CRITIC_TRAIN_LAYERS")
    assert not any(a is b for (_, _, a), (_, _, b) in zip(alone_frozen, theirs))

    ref_before = ref.logprobs(batch)
    frozen_before = {n: p.detach().clone() for n, p in critic.module.named_parameters() if not p.requires_grad}
    top_before = critic.module.backbone.layers[1].mlp.up_proj.weight.detach().clone()
    critic.train_step(batch)
    assert all(torch.equal(p, frozen_before[n]) for n, p in critic.module.named_parameters() if not p.requires_grad)
    assert all(p.grad is None for p in critic.module.parameters() if not p.requires_grad)
    assert not torch.equal(critic.module.backbone.layers[1].mlp.up_proj.weight, top_before)
    torch.testing.assert_close(ref.logprobs(batch), ref_before, atol=0, rtol=0)

    with pytest.raises(ValueError, match="CRITIC_TRAIN_LAYERS=3"):
        CriticActor(cfg.model_copy(update={"critic_train_layers": 3})).init_model()
