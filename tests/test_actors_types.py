"""Data contract of the actors: RolloutSample, make_batch / split / concat, token offsets, placement plans.

No Ray, no training: the real SmolLM2 tokenizer, fast.
"""
from __future__ import annotations

import pytest
import torch

from actors.types import (RolloutSample, concat_batches, make_batch, pad_response, position_ids, split_batch,
                          token_offsets, trim_batch)


@pytest.fixture(scope="module")
def tok(embedded_model_path):
    from core.model_loader import load_tokenizer
    return load_tokenizer(embedded_model_path)


def sample(prompt, resp, text="", idx=0, reason="length"):
    return RolloutSample(prompt_index=idx, prompt_token_ids=prompt, response_token_ids=resp, response_text=text,
                         token_offsets=[(0, 0)] * len(resp), finish_reason=reason)


# ------------------------------------------------------------------------------------------------ make_batch

def test_make_batch_layout_left_prompt_right_response():
    s = [sample([5, 6, 7], [8, 9]), sample([4], [3, 2, 1, 2]), sample([1, 1], [])]
    b = make_batch(s, pad_token_id=0)
    P, R = 3, 4
    assert b["sequences"].shape == (3, P + R) and b["sequences"].dtype == torch.long
    assert b["attention_mask"].dtype == torch.long and b["action_mask"].dtype == torch.bool
    assert b["action_mask"].shape == (3, R)
    assert b["sequences"][0].tolist() == [5, 6, 7, 8, 9, 0, 0]
    assert b["attention_mask"][0].tolist() == [1, 1, 1, 1, 1, 0, 0]
    assert b["sequences"][1].tolist() == [0, 0, 4, 3, 2, 1, 2]
    assert b["attention_mask"][1].tolist() == [0, 0, 1, 1, 1, 1, 1]
    assert b["action_mask"].tolist() == [[True, True, False, False], [True] * 4, [False] * 4]
    # response column j is sequences[:, P + j]
    for i, smp in enumerate(s):
        assert b["sequences"][i, P:P + len(smp.response_token_ids)].tolist() == smp.response_token_ids
    # positions continue through the prompt into the response, as generate() numbers them
    assert position_ids(b["attention_mask"])[1].tolist() == [0, 0, 0, 1, 2, 3, 4]


def test_make_batch_rejects_bad_input():
    with pytest.raises(ValueError, match="no samples"):
        make_batch([], 0)
    with pytest.raises(ValueError, match="empty prompt"):
        make_batch([sample([], [1])], 0)
    with pytest.raises(ValueError, match="token_offsets"):
        RolloutSample(0, [1], [2, 3], "x", [(0, 1)], "stop")
    with pytest.raises(ValueError, match="finish_reason"):
        RolloutSample(0, [1], [2], "x", [(0, 1)], "eos")


def test_split_and_concat_round_trip():
    s = [sample([1] * (i + 1), [2] * (5 - i)) for i in range(5)]
    b = make_batch(s, pad_token_id=0)
    b["advantages"] = torch.randn(5, b["action_mask"].shape[1])
    parts = split_batch(b, 2)
    assert [p["sequences"].shape[0] for p in parts] == [3, 2]
    back = concat_batches(parts)
    for k in b:
        assert torch.equal(back[k], b[k]), k
    # n > B gives empty shards (ranks with nothing to do), still in order
    parts = split_batch(b, 7)
    assert [p["sequences"].shape[0] for p in parts] == [1, 1, 1, 1, 1, 0, 0]
    with pytest.raises(ValueError):
        split_batch(b, 0)


def test_concat_re_pads_batches_of_different_shapes():
    b1 = make_batch([sample([1, 2, 3], [4])], pad_token_id=0)
    b2 = make_batch([sample([5], [6, 7, 8])], pad_token_id=0)
    c = concat_batches([b1, b2])
    assert c["sequences"].tolist() == [[1, 2, 3, 4, 0, 0], [0, 0, 5, 6, 7, 8]]
    assert c["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]
    assert c["action_mask"].tolist() == [[True, False, False], [True, True, True]]


def test_trim_batch_keeps_alignment():
    s = [sample([1, 2], [3]), sample([4, 5], [6, 7])]
    b = make_batch(s + [sample([9, 9, 9, 9, 9], [1, 1, 1, 1])], pad_token_id=0)
    mb = {k: v[:2] for k, v in b.items()}  # rows with short prompts and responses
    t, cut, keep_r = trim_batch(mb)
    assert cut == 3 and keep_r == 2
    assert t["sequences"].tolist() == [[1, 2, 3, 0], [4, 5, 6, 7]]
    assert pad_response(torch.ones(2, keep_r), 4).tolist() == [[1, 1, 0, 0], [1, 1, 0, 0]]


# ------------------------------------------------------------------------------------------------ offsets

TEXTS = ["The Eiffel Tower is in Paris. It was built in 1889.",
         "Zürich – 東京 are 🙂 cities!!  Spaces  and\n\nnewlines, émigré.",
         "I don't know."]


@pytest.mark.parametrize("text", TEXTS)
def test_token_offsets_index_the_decoded_text(tok, text):
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    decoded, spans = token_offsets(tok, ids)
    assert decoded == tok.decode(ids, skip_special_tokens=True)
    assert len(spans) == len(ids)
    # EOS: empty span at the end of the text
    assert spans[-1] == (len(decoded), len(decoded))
    # spans are monotone, inside the text, and their union tiles it exactly
    prev_end = 0
    for s, e in spans:
        assert 0 <= s <= e <= len(decoded)
        assert s >= min(prev_end, s)
        prev_end = max(prev_end, e)
    distinct = sorted(set(spans))
    assert "".join(decoded[s:e] for s, e in distinct if e > s) == decoded
    # a token that decodes to whole characters on its own owns exactly that text
    for t, (s, e) in zip(ids[:-1], spans[:-1]):
        piece = tok.decode([t])
        if "\ufffd" not in piece:
            assert decoded[s:e] == piece


def test_token_offsets_multibyte_tokens_share_the_character_span(tok):
    ids = tok("🙂", add_special_tokens=False)["input_ids"]
    decoded, spans = token_offsets(tok, ids)
    assert decoded == "🙂"
    assert len(ids) > 1 and all(sp == (0, len(decoded)) for sp in spans)


def test_token_offsets_linear_time(tok):
    import time
    ids = tok("word, " * 400, add_special_tokens=False)["input_ids"]
    t0 = time.perf_counter()
    token_offsets(tok, ids)
    t_small = time.perf_counter() - t0
    ids4 = ids * 8
    t0 = time.perf_counter()
    _, spans = token_offsets(tok, ids4)
    t_big = time.perf_counter() - t0
    assert len(spans) == len(ids4)
    # 8x the tokens must not cost anywhere near 64x (quadratic); generous bound for a busy machine
    assert t_big < max(30 * t_small, 0.5)


# ------------------------------------------------------------------------------------------------ placement

def test_plan_placement_cpu_fractional_and_colocation():
    from actors.group import plan_placement
    from core.config import RLFHConfig
    cfg = RLFHConfig(num_cpus_per_actor=0.25)
    p = plan_placement(cfg, create=False)
    assert set(p.roles) == {"policy", "critic", "reference", "rollout"}
    assert not p.gpu and all(r.num_gpus_per_actor == 0 and r.num_cpus_per_actor == 0.25 for r in p.roles.values())
    assert p["policy"].world_size == 1
    # grpo: no critic; kl 0: no reference
    p = plan_placement(RLFHConfig(advantage_estimator="grpo", kl_coef=0.0), create=False)
    assert set(p.roles) == {"policy", "rollout"}
    p = plan_placement(RLFHConfig(colocate_actor_ref=True), create=False)
    assert p["policy"].shared_with == ("reference",) and p["critic"].shared_with == ()


def test_plan_placement_gpu_colocation_rules():
    from actors.group import plan_placement
    from core.config import RLFHConfig
    cfg = RLFHConfig(actor_num_gpus_per_node=2, critic_num_gpus_per_node=2, ref_num_gpus_per_node=2,
                     vllm_num_engines=2, colocate_all_models=True)
    p = plan_placement(cfg, create=False)
    assert p.gpu
    assert all(r.num_gpus_per_actor == 0.25 for r in p.roles.values())  # 4 roles share each GPU
    assert p["policy"].bundle_indices == [0, 1] == p["rollout"].bundle_indices
    bad = RLFHConfig(actor_num_gpus_per_node=2, ref_num_gpus_per_node=1, colocate_actor_ref=True)
    with pytest.raises(ValueError, match="REF_NUM_NODES"):
        plan_placement(bad, create=False)
    sep = plan_placement(RLFHConfig(actor_num_gpus_per_node=4, critic_num_gpus_per_node=2,
                                    ref_num_gpus_per_node=1, vllm_num_engines=2, vllm_tensor_parallel_size=2),
                         create=False)
    assert sep["policy"].world_size == 4 and sep["policy"].num_gpus_per_actor == 1.0
    assert sep["rollout"].world_size == 4  # 2 engines x TP 2


def test_optional_extras_name_the_install_command(monkeypatch):
    import builtins

    from actors import optional
    real_import = builtins.__import__

    def fake_import(name, *a, **kw):
        if name.split(".")[0] in ("vllm", "flash_attn"):
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    import importlib
    monkeypatch.setattr(importlib, "import_module", lambda n: fake_import(n))
    with pytest.raises(ImportError, match=r"pip install 'rlfh\[vllm\]'.*ROLLOUT_BACKEND=hf"):
        optional.require_vllm()
    with pytest.raises(ImportError, match=r"pip install 'rlfh\[flash-attn\]'"):
        optional.attn_implementation("flash_attention_2")


def test_vllm_backend_without_vllm_is_a_clear_error(monkeypatch):
    from actors import optional, rollout
    from core.config import RLFHConfig
    monkeypatch.setattr(rollout, "vllm_available", lambda: False)
    with pytest.raises(ImportError, match=r"rlfh\[vllm\]"):
        rollout.resolve_rollout_backend(RLFHConfig(rollout_backend="vllm"))
    assert rollout.resolve_rollout_backend(RLFHConfig(rollout_backend="auto"), gpu_available=True) == "hf"
    assert optional.VLLM_HINT.startswith("the vllm backend needs vLLM")
