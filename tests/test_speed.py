"""Speed plumbing (issue 10): per-phase CPU threads, bf16 rollouts, one generation path for eval and training.

Speed goals themselves are printed by `rlfh bench train|peer`, never asserted here.
"""
from __future__ import annotations

import pytest
import torch

from core.config import RLFHConfig


# ------------------------------------------------------------------------------------------------ threads

def test_phase_threads_split_cpu_threads_over_concurrent_actors():
    from actors.base import phase_threads
    cfg = RLFHConfig(cpu_threads=4)
    assert phase_threads(cfg) == 4
    assert phase_threads(cfg, share=2) == 2
    assert phase_threads(cfg, share=3) == 1
    assert phase_threads(cfg, share=8) == 1       # never 0
    forced = RLFHConfig.load({"RLFH_TORCH_THREADS": "3"}, cpu_threads=4)   # the fixed count wins
    assert phase_threads(forced, share=2) == 3


def test_auto_threads_use_every_core_unless_the_machine_is_busy(monkeypatch):
    import actors.base as base
    monkeypatch.setattr(base, "machine_cores", lambda: 8)
    monkeypatch.setattr(base, "_probe", {})
    monkeypatch.setattr(base, "other_load", lambda window_s=0.2: 0.6)     # the run's own Ray processes, not a job
    assert base.phase_threads(RLFHConfig(cpu_threads=0)) == 8
    assert base.phase_threads(RLFHConfig(cpu_threads=0), share=2) == 4
    monkeypatch.setattr(base, "other_load", lambda window_s=0.2: 3.0)
    assert base.auto_cores() == 8                                   # cached for _PROBE_TTL_S
    assert base.auto_cores(now=base._probe["at"] + base._PROBE_TTL_S + 1) == 1   # re-probed: busy -> 1


def test_eval_threads_follow_the_trainers_busy_rule(monkeypatch):
    """`rlfh eval`'s thread count (evaluation.runner.pick_threads) uses the trainer's BUSY_THRESHOLD: Ray-level
    background load keeps every core, a job beside it (a core or more busy) gets one thread, a number wins."""
    import evaluation.runner as runner
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(runner, "busy_cores", lambda window_s=0.5: 0.6)
    assert runner.pick_threads() == 2
    monkeypatch.setattr(runner, "busy_cores", lambda window_s=0.5: 1.2)
    assert runner.pick_threads() == 1 and runner.pick_threads(3) == 3


def test_other_load_reads_proc_stat():
    from actors.base import machine_cores, other_load
    load = other_load(0.05)
    assert 0.0 <= load <= machine_cores() + 1e-9


# A fractional-CPU Ray actor's phases get CPU_THREADS despite OMP_NUM_THREADS=1: tests/test_actors_ray.py (on that
# module's Ray, which saves a Ray start here).


# ------------------------------------------------------------------------------------------------ bf16 rollouts

@pytest.mark.slow
# real model: BF16_LOGPROB_DRIFT was measured on SmolLM2-135M; the bound holds for that model
def test_bf16_rollout_logprobs_stay_within_the_measured_drift(embedded_model_path):
    """The default CPU rollout engine (bf16 weights where the CPU has native bf16) samples tokens whose log-probs
    differ from the fp32 policy's by no more than twice the drift measured by `rlfh bench drift`; a weight sync
    from the fp32 policy casts into the bf16 engine."""
    from actors.base import response_logprobs
    from actors.base import cpu_has_fast_bf16
    from actors.rollout import BF16_LOGPROB_DRIFT, HFRolloutEngine, resolve_rollout_dtype
    from actors.types import make_batch
    from core.data import load_halueval
    from core.model_loader import load_tokenizer
    from core.prompts import render_prompt
    cfg = RLFHConfig(rollout_backend="hf", micro_rollout_batch_size=8, cpu_threads=1)
    assert resolve_rollout_dtype(cfg, torch.device("cpu")) == ("bf16" if cpu_has_fast_bf16() else "fp32")
    assert resolve_rollout_dtype(cfg.model_copy(update={"rollout_dtype": "fp32"}), torch.device("cpu")) == "fp32"
    tok = load_tokenizer(embedded_model_path)
    prompts = [render_prompt(tok, it.question) for it in load_halueval("dev")[:4]]
    policy = HFRolloutEngine(cfg.model_copy(update={"rollout_dtype": "fp32"}), tokenizer=tok)   # fp32 stand-in
    engine = HFRolloutEngine(cfg.model_copy(update={"rollout_dtype": "bf16"}), tokenizer=tok)
    assert next(engine.model.parameters()).dtype == torch.bfloat16 and engine.info()["dtype"] == "bfloat16"
    samples = engine.generate(prompts, 2, 24, 1.0, 1.0, seed=5)
    batch = make_batch(samples, tok.pad_token_id)
    mask = batch["action_mask"]
    with torch.no_grad():
        lp32 = response_logprobs(policy.model, batch, cfg, torch.device("cpu"))
    lp16 = engine.logprobs(batch)
    drift = (lp16 - lp32)[mask].abs()
    assert int(mask.sum()) > 40
    assert float(drift.mean()) <= 2 * BF16_LOGPROB_DRIFT["mean"], float(drift.mean())
    assert float(drift.quantile(0.99)) <= 2 * BF16_LOGPROB_DRIFT["p99"], float(drift.quantile(0.99))
    assert float(drift.max()) > 0   # really a different precision
    # weight sync from an fp32 policy: perturbed fp32 weights land (cast) in the bf16 engine
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "mlp" in name:
                p.mul_(1.05)
        lp32_new = response_logprobs(policy.model, batch, cfg, torch.device("cpu"))
    engine.update_weights({n: p.detach() for n, p in policy.model.named_parameters()}, version=3)
    d_new = (engine.logprobs(batch) - lp32_new)[mask].abs()
    assert float(d_new.mean()) <= 2 * BF16_LOGPROB_DRIFT["mean"]
    assert float((lp32_new - lp32)[mask].abs().mean()) > float(d_new.mean())   # the sync changed something real


# ------------------------------------------------------------------------------------------------ one generation path

@pytest.fixture(scope="module")
def real_model(embedded_model_path):
    """SmolLM2-135M-Instruct, fp32, eval mode: loaded once for the tests below that only read it (generations,
    forwards; none changes a weight)."""
    from core.model_loader import load_causal_lm
    return load_causal_lm(embedded_model_path).eval()


@pytest.mark.slow
# real model: greedy equality across code paths needs answers that end (EOS) and clear argmaxes
def test_eval_generation_is_the_rollout_engines_greedy_generation(embedded_model_path, real_model):
    """`rlfh eval`'s generate_greedy runs on the rollout engine: same answers as the engine's own greedy
    ``generate`` (training's code path) and as a plain HF greedy ``generate``; input order kept after sorting."""
    from actors.rollout import HFRolloutEngine
    from core.data import load_halueval
    from core.model_loader import load_tokenizer
    from core.prompts import render_prompt
    from evaluation.generate import generate_greedy
    torch.set_num_threads(1)
    tok = load_tokenizer(embedded_model_path)
    model = real_model
    items = load_halueval("dev")[:5]
    # mixed lengths: evidence prompts are several times longer than closed-book ones
    prompts = [render_prompt(tok, it.question, it.knowledge_text, "evidence" if i % 2 else "closed")
               for i, it in enumerate(items)]
    gens, stats = generate_greedy(model, tok, prompts, batch_size=2, max_new_tokens=20, progress=False)
    assert len(gens) == len(prompts) and stats.new_tokens == sum(g.new_tokens for g in gens)
    engine = HFRolloutEngine(RLFHConfig(rollout_backend="hf", rollout_dtype="fp32", micro_rollout_batch_size=1),
                             model=model, tokenizer=tok)
    ref = engine.generate(prompts, 1, 20, 0.0, 1.0)
    for g, s, p in zip(gens, ref, prompts):
        assert g.text == s.response_text.strip()
        assert g.new_tokens == len(s.response_token_ids) and g.truncated == (s.finish_reason == "length")
        assert g.prompt_tokens == len(tok(p, add_special_tokens=False)["input_ids"])
        # a plain, unbatched HF greedy generate agrees
        ids = torch.tensor([s.prompt_token_ids])
        with torch.no_grad():
            direct = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=20,
                                    do_sample=False, pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
        assert direct[:len(s.response_token_ids)] == s.response_token_ids


# ------------------------------------------------------------------------------------------------ cheaper tokens

def _varied_batch(tok):
    """Rows of different prompt and response lengths (left-padded prompts, right-padded responses)."""
    from actors.types import RolloutSample, make_batch
    qa = [("Capital of France?", " Paris."), ("Who wrote the play Hamlet, and when?", " Shakespeare, around 1600."),
          ("2+2?", " 4"), ("What colour is the sky on a clear day at noon?", " Blue, mostly, because of scattering."),
          ("Largest planet?", " Jupiter is the largest planet."), ("Hi", " Hello!")]
    samples = []
    for i, (q, a) in enumerate(qa):
        p = tok(q, add_special_tokens=False)["input_ids"]
        r = tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        samples.append(RolloutSample(i, p, r, a, [(0, 0)] * len(r), "stop"))
    return make_batch(samples, tok.pad_token_id)


def _assert_same_grads(got: dict, want: dict) -> None:
    """Two {parameter name: gradient} maps hold the same parameters and (nearly) equal gradients."""
    assert got.keys() == want.keys() and len(want) > 5
    for n in want:
        assert torch.allclose(got[n], want[n], atol=1e-6, rtol=1e-4), n


@pytest.mark.slow
@pytest.mark.parametrize("checkpointed", [True, False])
def test_chunked_head_logprobs_equal_the_full_logits_path_with_gradients(tiny_model_path, monkeypatch, checkpointed):
    """Log-probs (and entropy, and the gradient of a loss on them) from the hidden states in row chunks, without
    the [B, R, V] logits, equal the full-logits path; with the chunks' logits recomputed in the backward pass
    (above LOGPROB_KEEP_LOGITS_BYTES) or kept."""
    import actors.base as base
    from core.model_loader import load_causal_lm, load_tokenizer
    torch.manual_seed(0)
    tok = load_tokenizer(tiny_model_path)
    model = load_causal_lm(tiny_model_path)
    batch = _varied_batch(tok)
    assert base._decoder_and_head(model) is not None
    monkeypatch.setattr(base, "LOGPROB_CHUNK_ROWS", 7)   # several chunks, one ragged
    monkeypatch.setattr(base, "LOGPROB_KEEP_LOGITS_BYTES", 0 if checkpointed else 1 << 40)
    calls = []
    import torch.utils.checkpoint as ckpt
    real_checkpoint = ckpt.checkpoint
    monkeypatch.setattr(ckpt, "checkpoint", lambda *a, **k: calls.append(1) or real_checkpoint(*a, **k))

    def run(chunked: bool):
        if not chunked:
            monkeypatch.setattr(base, "HEAD_ONLY_MODEL_TYPES", frozenset())
        model.zero_grad()
        lp, ent = base.causal_lm_response_logprobs(model, batch, temperature=0.7, with_entropy=True)
        (lp * torch.linspace(-1, 1, lp.shape[1])).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        with torch.no_grad():
            lp_ng = base.causal_lm_response_logprobs(model, batch, temperature=0.7)
        monkeypatch.setattr(base, "HEAD_ONLY_MODEL_TYPES", frozenset({"llama"}))
        return lp.detach(), ent, grads, lp_ng

    lp_c, ent_c, g_c, ng_c = run(True)
    assert bool(calls) == checkpointed
    lp_f, ent_f, g_f, ng_f = run(False)
    mask = batch["action_mask"]
    assert int(mask.sum()) > 20 and float(lp_f[mask].abs().min()) > 0
    assert torch.allclose(lp_c, lp_f, atol=1e-5, rtol=1e-5)
    assert torch.allclose(ng_c, ng_f, atol=1e-5, rtol=1e-5) and torch.allclose(ng_c, lp_c, atol=1e-6)
    assert torch.allclose(ent_c, ent_f, atol=1e-4, rtol=1e-5)
    _assert_same_grads(g_c, g_f)


@pytest.mark.slow
def test_length_bucketed_forward_micro_batches_give_the_rows_in_order(tiny_model_path):
    """batched_response_forward sorts rows by length into micro batches and returns them in the caller's order:
    the same log-probs as one unbucketed pass over the whole batch."""
    from actors.base import batched_response_forward, causal_lm_response_logprobs
    from core.model_loader import load_causal_lm, load_tokenizer
    tok = load_tokenizer(tiny_model_path)
    model = load_causal_lm(tiny_model_path).eval()
    batch = _varied_batch(tok)
    fn = lambda mb: causal_lm_response_logprobs(model, mb)   # noqa: E731
    with torch.no_grad():
        whole = fn(batch)
        bucketed = batched_response_forward(fn, batch, 2, torch.device("cpu"))
    assert torch.allclose(bucketed, whole, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
# real model: greedy and seeded equality of two prefill paths needs clear argmaxes, not a random model's
def test_prefill_once_for_n_samples_gives_the_same_samples(embedded_model_path, real_model):
    """``model.generate`` loop (HF_DECODE_LOOP=generate; the kv-buffer loop always prefills once, see
    tests/test_decode.py): each prompt is prefilled once and its KV cache repeated for the n samples, giving the
    same greedy and seeded samples (and log-probs) as prefilling every copy, as before."""
    from actors.rollout import HFRolloutEngine
    from actors.types import make_batch
    from core.model_loader import load_tokenizer
    from core.prompts import render_prompt
    torch.set_num_threads(1)
    tok = load_tokenizer(embedded_model_path)
    model = real_model
    engine = HFRolloutEngine(RLFHConfig(rollout_backend="hf", rollout_dtype="fp32", micro_rollout_batch_size=6,
                                        hf_decode_loop="generate"), model=model, tokenizer=tok)
    prompts = [render_prompt(tok, q) for q in ("What is the capital of France?", "Who wrote Hamlet?",
                                                "Which river flows through Vienna, Budapest and Belgrade?")]
    runs = {}
    for once in (True, False):
        engine.prefill_once = once
        runs[once] = (engine.generate(prompts, 3, 12, 0.0, 1.0), engine.generate(prompts, 3, 12, 1.0, 1.0, seed=4))
    for a, b in zip(runs[True], runs[False]):
        assert [(s.prompt_index, s.response_token_ids) for s in a] == [(s.prompt_index, s.response_token_ids)
                                                                      for s in b]
    greedy = runs[True][0]
    assert [s.prompt_index for s in greedy] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert len({tuple(s.response_token_ids) for s in greedy[:3]}) == 1          # greedy: n identical copies
    batch = make_batch(runs[True][1], tok.pad_token_id)
    engine.prefill_once = True
    assert torch.isfinite(engine.logprobs(batch)).all()


def test_bench_scaling_times_the_linear_passes_without_asserting_a_time():
    from bench.scaling import measure
    rows = measure(repeat=1)
    assert [r["pass"] for r in rows] == ["entities + sentences", "align_statement", "align_spans"]
    assert all(r["seconds"] > 0 and r["budget_s"] > 0 for r in rows)


@pytest.mark.slow
# real model: BF16_LOGPROB_DRIFT was measured on SmolLM2-135M; the bound holds for that model
def test_colocated_engine_samples_the_fp32_policy_under_bf16_autocast_within_the_measured_drift(embedded_model_path,
                                                                                               real_model):
    """The colocated rollout engine generates with the policy's own fp32 module under bf16 autocast (no bf16 copy
    of the weights): the autocast log-probs of what it samples stay within twice the measured bf16 drift of the
    fp32 ones, and the module's weights stay fp32."""
    from actors.base import response_logprobs
    from actors.rollout import BF16_LOGPROB_DRIFT, HFRolloutEngine
    from actors.types import make_batch
    from core.data import load_halueval
    from core.model_loader import load_tokenizer
    from core.prompts import render_prompt
    torch.set_num_threads(1)
    cfg = RLFHConfig(rollout_backend="hf", micro_rollout_batch_size=8)
    tok = load_tokenizer(embedded_model_path)
    model = real_model
    engine = HFRolloutEngine(cfg, model=model, tokenizer=tok, autocast="bf16", shares_policy_weights=True)
    assert engine.autocast == torch.bfloat16 and "autocast bf16" in engine.info()["dtype"]
    prompts = [render_prompt(tok, it.question) for it in load_halueval("dev")[:4]]
    samples = engine.generate(prompts, 2, 24, 1.0, 1.0, seed=5)
    assert next(model.parameters()).dtype == torch.float32
    batch = make_batch(samples, tok.pad_token_id)
    mask = batch["action_mask"]
    with torch.no_grad():
        lp32 = response_logprobs(model, batch, cfg, torch.device("cpu"))
        with engine._autocast():
            lp16 = response_logprobs(model, batch, cfg, torch.device("cpu"))
    drift = (lp16 - lp32)[mask].abs()
    assert int(mask.sum()) > 40 and float(drift.max()) > 0
    assert float(drift.mean()) <= 2 * BF16_LOGPROB_DRIFT["mean"], float(drift.mean())
    assert float(drift.quantile(0.99)) <= 2 * BF16_LOGPROB_DRIFT["p99"], float(drift.quantile(0.99))
    assert engine.follow_weights(7) == 7 and engine.weights_version() == 7


# real model: `rlfh bench gen`'s default model; its greedy answers must match token for token across loops
def test_bench_gen_times_both_decode_loops_on_the_same_prompts(embedded_model_path):
    """`rlfh bench gen` runs both loops on the same prompts and, greedy, counts identical answers (here all:
    the kv-buffer loop is token for token model.generate's in fp32); it reports times, it asserts none."""
    from bench.gen import LOOPS, measure, print_table
    res = measure(embedded_model_path, n_prompts=2, n=2, max_new_tokens=6, temperature=0.0, precision="fp32",
                  batch=4, repeats=1, threads=1, progress=False)
    for loop in LOOPS:
        assert len(res[loop]["seconds"]) == 1 and res[loop]["tokens"][0] > 0 and res[loop]["tok_s_best"] > 0
    assert res["greedy_total"] == 4 and res["greedy_identical"] == 4
    assert res["prompt_tokens"] > 0
    print_table(res)
    with pytest.raises(ValueError, match="repeats"):
        measure(embedded_model_path, repeats=0, progress=False)


def test_matmul_ceiling_times_every_linear_layer_once_per_format(tiny_model_path, capsys):
    """`rlfh bench gen --ceiling`: one decode step's matmuls alone, per weight format; the FLOP count is every
    nn.Linear's weight once per row (the tied LM head once), and every format this torch has is timed."""
    from bench.gen import CEILING_FORMATS, matmul_ceiling, print_ceiling
    from core.model_loader import load_causal_lm
    lm = load_causal_lm(tiny_model_path)
    linears = [m for m in lm.modules() if isinstance(m, torch.nn.Linear)]
    res = matmul_ceiling(lm, rows=4, repeats=1)
    assert res["layers"] == len(linears)
    assert res["gflop"] == 2 * 4 * sum(m.weight.numel() for m in linears) / 1e9
    for fmt in CEILING_FORMATS:
        assert res[fmt]["ms"] > 0 and res[fmt]["tok_s"] == pytest.approx(4 / res[fmt]["ms"] * 1e3)
    print_ceiling(res)
    assert "int8-weight" in capsys.readouterr().out


def test_bench_sft_times_each_train_layers_and_token_budget_pair_on_the_same_examples(tiny_model_path, capsys):
    """`rlfh bench sft`: the warm start's training loop once per (--train-layers, --token-budget) pair,
    alternating; training only the last layer leaves fewer parameters trainable, and cutting by least padding
    computes fewer tokens than padding every micro batch to the step's longest prompt when the mix has passages.
    It reports seconds per step, it asserts none; bad values name the option."""
    from bench.sft import measure, parse_layers, print_table
    res = measure(tiny_model_path, train_layers=(0, 1), token_budgets=(0, 2048), evidence_share=0.5, steps=2,
                  batch_size=4, micro_batch_size=4, repeats=1, threads=1)
    runs = res["runs"]
    assert runs[(1, 0)]["trainable"] < runs[(0, 0)]["trainable"]
    assert 0 < res["evidence"] < res["examples"] == 8
    assert runs[(0, 2048)]["tokens_per_step"] < runs[(0, 0)]["tokens_per_step"]
    assert runs[(0, 2048)]["micro_batches"] > runs[(0, 0)]["micro_batches"] == 2
    assert all(len(r["s_per_step"]) == 1 and r["median"] > 0 for r in runs.values())
    assert res["tokens_per_example"] > 0
    print_table(res)
    assert "| all | none (padded) |" in capsys.readouterr().out
    assert parse_layers("0, 15") == [0, 15]
    for bad in ("x", "-1", ""):
        with pytest.raises(ValueError, match="--train-layers"):
            parse_layers(bad)
    with pytest.raises(ValueError, match="--token-budget"):
        parse_layers("a", "--token-budget")


def test_eval_autocast_precision_keeps_fp32_weights_and_caches_their_casts(tiny_model_path):
    """`rlfh eval --dtype autocast`: fp32 weights, matmuls in bf16 inside the context, weights marked trainable
    (autocast caches only those casts); other dtypes add no context."""
    from core.model_loader import load_causal_lm
    from evaluation.generate import EVAL_DTYPES, inference_precision, weights_dtype
    from evaluation.runner import EvalConfig
    assert "autocast" in EVAL_DTYPES and weights_dtype("autocast") == "fp32" and weights_dtype("bf16") == "bf16"
    EvalConfig(model="m", dtype="autocast").check()
    with pytest.raises(ValueError, match="--dtype"):
        EvalConfig(model="m", dtype="int4").check()
    model = load_causal_lm(tiny_model_path).eval().requires_grad_(False)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad(), inference_precision(model, "autocast"):
        logits = model(input_ids=ids).logits
    assert logits.dtype == torch.bfloat16 and next(model.parameters()).dtype == torch.float32
    assert all(p.requires_grad for p in model.parameters())
    with torch.no_grad(), inference_precision(model, "fp32"):
        assert model(input_ids=ids).logits.dtype == torch.float32


# ------------------------------------------------------------------------------------------------ shared prompts

#: A start all prompts share, as a chat template's system prompt is.
SYSTEM = "You are a careful assistant. Answer briefly and say when you do not know.\n"


def _grouped_batch(tok, n: int = 3, system: str = ""):
    """``n`` samples each of three prompts of different lengths (left padded), responses of different lengths
    (right padded), prompt-major like a rollout. ``system``: text every prompt starts with."""
    from actors.types import RolloutSample, make_batch
    prompts = [system + q for q in
               ("Capital of France?", "Who wrote the play Hamlet, and in which year was it first staged?", "2+2?")]
    answers = [" Paris.", " Shakespeare, around 1600, at the Globe.", " 4", " I don't know.", " Lyon", " 5 or so"]
    samples = []
    for i, q in enumerate(prompts):
        p = tok(q, add_special_tokens=False)["input_ids"]
        for j in range(n):
            a = answers[(i + 2 * j) % len(answers)]
            r = tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            samples.append(RolloutSample(i, p, r, a, [(0, 0)] * len(r), "stop"))
    return make_batch(samples, tok.pad_token_id)


def test_prompt_groups_find_the_rows_of_each_prompt(tiny_model_path):
    from actors.types import prompt_groups
    from core.model_loader import load_tokenizer
    batch = _grouped_batch(load_tokenizer(tiny_model_path), n=3)
    first, inverse = prompt_groups(batch)
    assert sorted(first.tolist()) == [0, 3, 6]
    assert first[inverse].tolist() == [0, 0, 0, 3, 3, 3, 6, 6, 6]
    # rows reordered: each row still maps to a row with its own prompt
    perm = torch.tensor([4, 0, 8, 3, 1, 7, 2, 6, 5])
    first, inverse = prompt_groups({k: v[perm] for k, v in batch.items()})
    assert len(first) == 3 and (perm[first[inverse]] // 3 == perm // 3).all()


def test_shuffled_epochs_keep_the_rows_of_a_prompt_together(tiny_model_path):
    """Epochs after the first shuffle prompt groups, not rows: micro batches still share their prompts."""
    from actors.types import group_permutation
    from core.model_loader import load_tokenizer
    batch = _grouped_batch(load_tokenizer(tiny_model_path), n=3)
    orders = set()
    for seed in range(6):
        perm = group_permutation(batch, torch.Generator().manual_seed(seed))
        assert sorted(perm.tolist()) == list(range(9))
        groups = (perm // 3).tolist()
        assert groups[0::3] == groups[1::3] == groups[2::3]                  # each group contiguous ...
        assert all(perm[i] < perm[i + 1] for i in range(8) if groups[i] == groups[i + 1])   # ... in its order
        assert torch.equal(perm, group_permutation(batch, torch.Generator().manual_seed(seed)))   # seeded
        orders.add(tuple(groups[0::3]))
    assert len(orders) > 1                                                    # and really shuffled


def test_length_grouped_order_sorts_whole_groups_inside_each_optimizer_step(tiny_model_path):
    """Micro batches pair prompts of similar length: each chunk's (optimizer step's) groups longest first, a
    group's rows together and in order, no row leaving its chunk; the rollout's order where that cannot hold."""
    from actors.types import length_grouped_order
    from core.model_loader import load_tokenizer
    batch = _grouped_batch(load_tokenizer(tiny_model_path), n=3)                 # prompts short, long, short; 3 rows each
    P = batch["sequences"].shape[1] - batch["action_mask"].shape[1]
    plen = batch["attention_mask"][:, :P].sum(1)
    order = length_grouped_order(batch, 9)
    assert sorted(order.tolist()) == list(range(9))
    assert order[:3].tolist() == [3, 4, 5]           # the long prompt's group first, its rows in order
    assert (plen[order][0::3].diff() <= 0).all()     # then by prompt length
    assert length_grouped_order(batch, 3).tolist() == list(range(9))    # one group per chunk: nothing to sort
    two = length_grouped_order(batch, 6)             # chunks of 6 rows: groups 0-1 sorted, group 2 stays last
    assert two.tolist() == [3, 4, 5, 0, 1, 2, 6, 7, 8]
    assert length_grouped_order(batch, 4).tolist() == list(range(9))    # a group straddles two chunks
    mixed = {k: v[[0, 3, 1, 4, 2, 5, 6, 7, 8]] for k, v in batch.items()}  # a prompt's rows not together
    assert length_grouped_order(mixed, 9).tolist() == list(range(9))
    one = {k: v[:0] for k, v in batch.items()}
    assert length_grouped_order(one, 4).tolist() == []


def _logprobs_and_grads(model, batch, share: bool):
    from actors.base import causal_lm_response_logprobs
    model.zero_grad()
    lp = causal_lm_response_logprobs(model, batch, temperature=0.7, share_prompt=share)
    (lp * torch.linspace(-1, 1, lp.shape[1])).sum().backward()
    return lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
@pytest.mark.parametrize("which,system,n", [("policy", "", 3), ("critic", "", 3), ("policy", SYSTEM, 3),
                                           ("critic", SYSTEM, 2), ("policy", SYSTEM, 1)])
def test_shared_prompt_forward_equals_the_full_forward_with_gradients(tiny_model_path, which, system, n):
    """SHARE_PROMPT_FORWARD: each prompt runs once for its samples, and the prompts' common start (a system
    prompt) once for all of them; log-probs (policy) or values (critic) and the gradients of a loss on them equal
    the forward over every full row."""
    import actors.base as base
    from actors.critic import ValueModel, response_values
    from core.model_loader import load_causal_lm, load_tokenizer
    torch.manual_seed(0)
    tok = load_tokenizer(tiny_model_path)
    batch = _grouped_batch(tok, n=n, system=system)
    lm = load_causal_lm(tiny_model_path).train()
    if which == "policy":
        model, decoder = lm, lm.get_decoder()
        run = lambda share: _logprobs_and_grads(model, batch, share)   # noqa: E731
    else:
        model = ValueModel(lm.get_decoder(), lm.config.hidden_size).train()
        decoder = model.backbone

        def run(share):
            model.zero_grad()
            v = response_values(model, batch, share_prompt=share)
            (v * torch.linspace(-1, 1, v.shape[1])).sum().backward()
            return v.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        assert base._can_share_prompt(decoder, batch) is not None      # the shared path really runs
    shared, g_shared = run(True)
    full, g_full = run(False)
    mask = batch["action_mask"]
    assert int(mask.sum()) >= 20 and float(full[mask].abs().min()) > 0
    assert torch.allclose(shared, full, atol=1e-5, rtol=1e-5)
    _assert_same_grads(g_shared, g_full)


@pytest.mark.slow
def test_shared_prompt_forward_is_not_used_under_gradient_checkpointing(tiny_model_path):
    """transformers drops the key/value cache inside checkpointed layers, so the shared path would let the
    responses silently miss their prompt: under GRADIENT_CHECKPOINTING every row runs in full (same result)."""
    import actors.base as base
    from core.model_loader import load_causal_lm, load_tokenizer
    tok = load_tokenizer(tiny_model_path)
    batch = _grouped_batch(tok)
    model = load_causal_lm(tiny_model_path).train()
    plain, g_plain = _logprobs_and_grads(model, batch, False)
    enable = getattr(model, "activation_checkpointing_enable", None)   # transformers >= 5.2x name
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert base._can_share_prompt(model.get_decoder(), batch) is None
    ckpt, g_ckpt = _logprobs_and_grads(model, batch, True)
    assert torch.allclose(ckpt, plain, atol=1e-5, rtol=1e-5)
    _assert_same_grads(g_ckpt, g_plain)
    with torch.no_grad():   # no gradients: nothing is checkpointed, the shared path is fine again
        assert base._can_share_prompt(model.get_decoder(), batch) is not None


def test_shared_prompt_forward_splits_only_batches_that_share_something(tiny_model_path):
    """One full pass when no prompt repeats and the prompts share no start; a pass per shared part otherwise
    (the common start, the distinct prompts, the responses)."""
    import actors.base as base
    from core.model_loader import load_causal_lm, load_tokenizer
    tok = load_tokenizer(tiny_model_path)
    model = load_causal_lm(tiny_model_path).eval()
    decoder = model.get_decoder()
    calls = []
    hook = decoder.register_forward_hook(lambda m, a, k, out: calls.append(1), with_kwargs=True)

    def passes(batch) -> int:
        calls.clear()
        with torch.no_grad():
            base.response_hidden_states(decoder, batch)
        return len(calls)
    try:
        assert passes(_varied_batch(tok)) == 1                     # six different prompts, no common start
        assert passes(_grouped_batch(tok, n=1)) == 1
        assert passes(_grouped_batch(tok, n=2)) == 2               # prompts once, then the responses
        assert passes(_grouped_batch(tok, n=1, system=SYSTEM)) == 3   # common start, prompts, responses
        assert passes(_grouped_batch(tok, n=3, system=SYSTEM)) == 3
    finally:
        hook.remove()


def test_shared_prefix_length_of_left_padded_rows():
    from actors.types import shared_prefix_length
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [5, 6, 7, 9, 9, 9], [0, 5, 6, 7, 8, 1]])
    mask = (torch.arange(6)[None] >= torch.tensor([[2], [0], [1]])).long()
    assert shared_prefix_length(ids, mask) == 3                      # 5 6 7, wherever each row starts
    assert shared_prefix_length(ids[:1], mask[:1]) == 0              # one row: nothing is shared
    assert shared_prefix_length(ids[[0, 0]], mask[[0, 0]]) == 4     # equal rows: the whole (shortest) row
    same_start = torch.tensor([[5, 6, 7], [0, 5, 6]])
    assert shared_prefix_length(same_start, torch.tensor([[1, 1, 1], [0, 1, 1]])) == 2   # capped by the shortest
    assert shared_prefix_length(ids, torch.ones_like(ids)) == 0      # no common first token
    assert shared_prefix_length(ids[:2], torch.tensor([[1, 0, 1, 1, 1, 1], [1] * 6])) == 0   # not left padded


def test_zero3_with_several_ranks_runs_every_prompt_in_full(monkeypatch):
    """Under ZeRO-3 each module forward gathers its parameters collectively, so every rank must run the same
    forwards; whether a micro batch repeats a prompt can differ between ranks, so the shared path is off there."""
    import os

    from actors.policy import PolicyActor
    monkeypatch.setattr(os, "environ", dict(os.environ))   # the actor writes RANK / WORLD_SIZE into the environment
    share = lambda world, **kw: PolicyActor(RLFHConfig(**kw), world_size=world).share_prompt   # noqa: E731
    assert share(2, zero_stage=3) is False
    assert share(1, zero_stage=3) is True
    assert share(2, zero_stage=2) is True
    assert share(1, share_prompt_forward=False) is False
