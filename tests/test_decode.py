"""actors/decode.py: the kv-buffer sampling loop against transformers' own generate, on the real model."""
from __future__ import annotations

import os

import pytest
import torch

from core.config import RLFHConfig


# real model: greedy equality with generate needs clear argmaxes and rows that end (EOS) at different steps;
# the tiny random Llama never emits EOS and repeats one token
@pytest.fixture(scope="module")
def model_and_tok(embedded_model_path):
    from core.model_loader import load_causal_lm, load_tokenizer
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or 2))   # 1 under run_tests.sh's xdist workers
    return load_causal_lm(embedded_model_path).eval(), load_tokenizer(embedded_model_path)


def _prompts(tok, k=5):
    """Closed-book and evidence prompts of very different lengths (left padding of 70+ tokens)."""
    from core.data import load_halueval
    from core.prompts import render_prompt
    items = load_halueval("dev")[:k]
    return [tok(render_prompt(tok, it.question, it.knowledge_text, "evidence" if i % 2 else "closed"),
                add_special_tokens=False)["input_ids"] for i, it in enumerate(items)]


@pytest.fixture(scope="module")
def greedy_ref(model_and_tok):
    """``(prompts, ref)``: the 5 prompts of :func:`_prompts` and ``model.generate``'s greedy 24 tokens for them,
    computed once for the module (9 tests compare with it; a generate is about as long as the loop it checks).
    Tests get fresh lists."""
    model, tok = model_and_tok
    prompts = _prompts(tok)
    ref = _hf_greedy(model, tok, prompts, 24, [tok.eos_token_id])

    def fresh():
        return [list(p) for p in prompts], [list(r) for r in ref]
    return fresh


def _hf_greedy(model, tok, prompt_ids, max_new_tokens, eos):
    from transformers import GenerationConfig
    P = max(map(len, prompt_ids))
    ids = torch.tensor([[tok.pad_token_id] * (P - len(p)) + p for p in prompt_ids])
    mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompt_ids])
    g = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos,
                         pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=g)[:, P:].tolist()
    return [_through_first(o, set(eos)) for o in out]


def _through_first(ids, eos):
    """``ids`` up to and including the first end token (generate pads the rows that ended first)."""
    for i, t in enumerate(ids):
        if t in eos:
            return ids[:i + 1]
    return ids


@pytest.mark.parametrize("share_prefix,prefill_tokens,n", [(True, 4096, 1), (False, 4096, 1), (True, 250, 2),
                                                             (False, 250, 1)])
def test_greedy_kv_buffer_equals_transformers_generate(model_and_tok, greedy_ref, share_prefix, prefill_tokens, n):
    """Left padding, prompts of 48-122 tokens, rows ending at different steps (so rows are dropped mid-way): the
    same tokens as ``model.generate`` with sdpa and a DynamicCache, and the model's attention setting restored.
    ``share_prefix``: the chat template's system prompt, which all prompts start with, prefilled once.
    ``prefill_tokens=250``: the prompts' rest is prefilled in chunks of different widths (closed-book and evidence
    prompts alternate), so some chunks leave padding columns of the buffer unwritten; ``n=2``: each chunk's
    prompts fill two buffer rows each."""
    import os

    from actors.decode import prefill_chunks, sample
    model, tok = model_and_tok
    prompts, ref = greedy_ref()
    assert max(map(len, prompts)) > 2 * min(map(len, prompts))
    assert len(os.path.commonprefix(prompts)) > 20
    eos = [tok.eos_token_id]
    widths = []
    hook = model.register_forward_pre_hook(lambda m, a, k: widths.append(k["input_ids"].shape), with_kwargs=True)
    try:
        got = sample(model, prompts, n=n, max_new_tokens=24, temperature=0.0, top_p=1.0, eos_ids=eos,
                     pad_id=tok.pad_token_id, share_prefix=share_prefix, prefill_tokens=prefill_tokens)
    finally:
        hook.remove()
    shared = len(os.path.commonprefix(prompts)) if share_prefix else 0
    chunks = prefill_chunks([len(p) - shared for p in prompts], prefill_tokens)
    prefills = ([(1, shared)] if shared else []) + [(hi - lo, width) for lo, hi, width in chunks]
    assert [tuple(w) for w in widths[:len(prefills)]] == prefills
    assert (len(chunks) == 1) if prefill_tokens > 1000 else (1 < len(chunks) < len(prompts))
    assert got == [r for r in ref for _ in range(n)]
    assert len({len(r) for r in ref}) > 1          # the rows really end at different steps
    assert model.config._attn_implementation == "sdpa"
    assert "forward" not in vars(model.get_output_embeddings())   # the weight-major LM head is swapped back


def test_weight_major_linear_is_the_linear_layer_and_serves_the_head_inside_the_loop(model_and_tok):
    """The decode loop's LM head, ``(W @ x.T).T``: F.linear's values (float rounding), with and without bias, for
    decode-step and prefill shapes; inside :func:`sample` the model's head runs it, outside it does not."""
    import torch.nn.functional as F

    from actors.decode import KVBuffer, _kv_buffer_attention, weight_major_linear
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(300, 64, generator=g), torch.randn(300, generator=g)
    for shape in ((32, 1, 64), (5, 64), (2, 7, 64)):
        x = torch.randn(*shape, generator=g)
        for bias in (None, b):
            got, want = weight_major_linear(x, w, bias), F.linear(x, w, bias)
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    model, _ = model_and_tok
    head, calls = model.get_output_embeddings(), []
    import actors.decode as decode
    real = decode.weight_major_linear
    decode.weight_major_linear = lambda *a: calls.append(a[0].shape) or real(*a)
    try:
        with torch.no_grad(), _kv_buffer_attention(model, KVBuffer(torch.ones((1, 8), dtype=torch.bool))):
            inside = model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=False, logits_to_keep=1).logits
        outside = model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=False, logits_to_keep=1).logits
    finally:
        decode.weight_major_linear = real
    assert calls == [(1, 1, head.in_features)]
    torch.testing.assert_close(inside, outside, rtol=1e-4, atol=1e-4)


def test_prefill_chunks_cover_the_prompts_within_the_token_budget():
    from actors.decode import prefill_chunks
    assert prefill_chunks([10, 10, 10, 10], 40) == [(0, 4, 10)]
    assert prefill_chunks([10, 30, 10, 10], 40) == [(0, 1, 10), (1, 2, 30), (2, 4, 10)]
    assert prefill_chunks([50, 5, 5], 40) == [(0, 1, 50), (1, 3, 5)]    # one prompt alone may exceed the budget
    assert prefill_chunks([], 40) == []
    with pytest.raises(ValueError, match="prefill_tokens"):
        prefill_chunks([3], 0)


@pytest.mark.parametrize("compact_share,n", [(0.0, 1), (0.0, 3), (2.0, 3)])
def test_dropping_finished_rows_keeps_every_row_its_own_tokens(model_and_tok, greedy_ref, monkeypatch, compact_share,
                                                               n):
    """Finished rows dropped at every step (share 0) or never (share 2): the same greedy continuations, and with
    n > 1 each prompt's n rows are copies of its n == 1 continuation (one prefill, rows repeated)."""
    import actors.decode as D
    model, tok = model_and_tok
    prompts, ref = greedy_ref()
    eos = [tok.eos_token_id]
    # the row that ends first goes first: dropping it must move every later row's buffer up
    first = min(range(len(ref)), key=lambda i: len(ref[i]))
    assert len(ref[first]) < 24
    prompts.insert(0, prompts.pop(first))
    ref.insert(0, ref.pop(first))
    monkeypatch.setattr(D, "COMPACT_SHARE", compact_share)
    got = D.sample(model, prompts, n=n, max_new_tokens=24, temperature=0.0, top_p=1.0, eos_ids=eos,
                   pad_id=tok.pad_token_id)
    assert got == [r for r in ref for _ in range(n)]


@pytest.mark.parametrize("n,sync_every", [(1, 1), (2, 5)])
def test_fixed_shape_loop_greedy_equals_transformers_generate(model_and_tok, greedy_ref, n, sync_every):
    """HF_DECODE_LOOP=graph's step (eager here: the same function a CUDA graph records on a GPU): attention over
    the whole buffer with unwritten columns masked, finished rows kept, the write column and positions on the
    device, the host checking for the end only every ``sync_every`` steps: token for token ``model.generate``."""
    from actors.decode import sample
    model, tok = model_and_tok
    prompts, ref = greedy_ref()
    eos = [tok.eos_token_id]
    got = sample(model, prompts, n=n, max_new_tokens=24, temperature=0.0, top_p=1.0, eos_ids=eos,
                 pad_id=tok.pad_token_id, fixed_shapes=True, sync_every=sync_every)
    assert got == [r for r in ref for _ in range(n)]
    assert len({len(r) for r in ref}) > 1          # rows end at different steps and keep decoding after it
    assert model.config._attn_implementation == "sdpa"


def test_fixed_shape_loop_samples_reproduce_and_stop_at_the_end_token(model_and_tok):
    """Seeded sampling (the uniforms of every step drawn up front) repeats exactly, another seed differs, and
    every row is cut after its first end token, with nothing but generated tokens in it."""
    from actors.decode import sample
    model, tok = model_and_tok
    prompts = _prompts(tok, 3)
    eos = [tok.eos_token_id]

    def run(seed):
        return sample(model, prompts, n=3, max_new_tokens=20, temperature=0.8, top_p=0.9, eos_ids=eos,
                      pad_id=tok.pad_token_id, generator=torch.Generator().manual_seed(seed), fixed_shapes=True)
    a, b, c = run(3), run(3), run(4)
    assert a == b and a != c
    for row in a:
        assert 1 <= len(row) <= 20 and eos[0] not in row[:-1]
        assert tok.pad_token_id not in row or tok.pad_token_id == eos[0]


def test_suppressed_first_tokens_never_start_a_reply(model_and_tok):
    from actors.decode import sample
    model, tok = model_and_tok
    prompts = _prompts(tok, 3)
    free = sample(model, prompts, n=1, max_new_tokens=3, temperature=0.0, top_p=1.0, eos_ids=[tok.eos_token_id],
                  pad_id=tok.pad_token_id)
    banned = sorted({g[0] for g in free})
    got = sample(model, prompts, n=1, max_new_tokens=3, temperature=0.0, top_p=1.0, eos_ids=[tok.eos_token_id],
                 pad_id=tok.pad_token_id, suppress_first_ids=banned)
    assert all(g[0] not in banned for g in got)


def test_sampler_draws_from_the_softmax_and_the_nucleus():
    """Chi-square of 200k draws over a vocabulary that is not a multiple of the block size; temperature and
    top-p keep exactly the nucleus and renormalise it; greedy is argmax."""
    from actors.decode import SAMPLE_BLOCK, sample_next_tokens
    torch.manual_seed(0)
    V, N = 3 * SAMPLE_BLOCK + 37, 200_000
    logits = torch.randn(V) * 2
    gen = torch.Generator().manual_seed(1)
    counts = torch.bincount(sample_next_tokens(logits.expand(N, V), 1.0, 1.0, gen), minlength=V).double()
    expect = torch.softmax(logits.double(), -1) * N
    chi2 = float(((counts - expect) ** 2 / expect).sum())
    assert chi2 < V + 6 * (2 * V) ** 0.5, chi2          # mean V-1, sd sqrt(2(V-1)): a 6-sigma bound
    # nucleus: temperature 0.7, top-p 0.6
    q = torch.softmax(logits.double() / 0.7, -1)
    sq, order = q.sort(descending=True)
    keep = order[(sq.cumsum(0) - sq) < 0.6]
    draws = sample_next_tokens(logits.expand(N, V).to(torch.bfloat16), 0.7, 0.6, gen)
    assert set(draws.tolist()) == set(keep.tolist())
    nucleus = torch.zeros(V, dtype=torch.float64)
    nucleus[keep] = q[keep] / q[keep].sum()
    freq = torch.bincount(draws, minlength=V).double() / N
    assert 0.5 * float((freq - nucleus).abs().sum()) < 0.01
    assert sample_next_tokens(logits[None], 0.0, 1.0).item() == int(logits.argmax())


def test_engine_decode_loops_agree_and_seeds_reproduce(model_and_tok):
    """The engine's three loops (HF_DECODE_LOOP) give the same greedy samples; a seeded kv-buffer rollout
    repeats exactly and another seed gives other samples."""
    from actors.rollout import HFRolloutEngine
    from core.prompts import render_prompt
    model, tok = model_and_tok
    prompts = [render_prompt(tok, q) for q in ("Who wrote Hamlet?", "What is the capital of Peru?")]
    runs = {}
    for loop in ("kv-buffer", "graph", "generate"):
        eng = HFRolloutEngine(RLFHConfig(rollout_dtype="fp32", hf_decode_loop=loop, micro_rollout_batch_size=4),
                              model=model, tokenizer=tok)
        assert eng.decode_loop == loop
        runs[loop] = [s.response_token_ids for s in eng.generate(prompts, 2, 16, 0.0, 1.0)]
    assert runs["kv-buffer"] == runs["generate"] == runs["graph"]
    a, b, c = ([s.response_token_ids for s in eng_samples] for eng_samples in
               (HFRolloutEngine(RLFHConfig(rollout_dtype="fp32"), model=model, tokenizer=tok)
                .generate(prompts, 4, 16, 1.0, 1.0, seed=s) for s in (7, 7, 8)))
    assert a == b and a != c


def test_models_the_loop_cannot_serve_fall_back_to_generate(model_and_tok, monkeypatch):
    """Sliding-window attention: auto picks model.generate, an explicit kv-buffer is refused with the fix."""
    from actors.decode import kv_buffer_supported
    from actors.rollout import resolve_decode_loop
    model, _ = model_and_tok
    assert kv_buffer_supported(model) == (True, "")
    monkeypatch.setattr(model.config, "sliding_window", 64, raising=False)
    ok, why = kv_buffer_supported(model)
    assert not ok and "sliding" in why
    assert resolve_decode_loop(RLFHConfig(), model) == "generate"
    with pytest.raises(ValueError, match="HF_DECODE_LOOP"):
        resolve_decode_loop(RLFHConfig(hf_decode_loop="kv-buffer"), model)


@pytest.mark.parametrize("n,prefill_tokens", [(1, 4096), (3, 4096), (3, 1)])
def test_prompts_that_differ_only_in_their_last_token(model_and_tok, n, prefill_tokens):
    """After the shared prefix each prompt has one token left: its prefill is a one-token forward, over a chunk of
    the buffer's rows, repeated for the ``n`` samples (it failed with a shape error at n > 1). Greedy output is
    generate's, and the same without the shared prefix."""
    from actors.decode import sample
    model, tok = model_and_tok
    base = _prompts(tok, 1)[0]
    prompts = [base[:-1] + [t] for t in (base[-1], tok.eos_token_id, tok.pad_token_id)]
    eos = [tok.eos_token_id]
    ref = _hf_greedy(model, tok, prompts, 8, eos)
    for share in (True, False):
        got = sample(model, prompts, n=n, max_new_tokens=8, temperature=0.0, top_p=1.0, eos_ids=eos,
                     pad_id=tok.pad_token_id, share_prefix=share, prefill_tokens=prefill_tokens)
        assert got == [r for r in ref for _ in range(n)], (share, n)
