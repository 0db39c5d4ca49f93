"""TRL: one real ``GRPOTrainer`` step on CPU with the embedded SmolLM2, rewarded by the real service over HTTP.

TRL is a test dependency (the `test` extra), never a runtime one. Sizes are tiny on purpose: 2 prompts x 2
generations x 8 new tokens, one optimizer step.
"""
from __future__ import annotations

import math

import pytest

from integration_service import OBEROI, direct_rewards
from integrations.trl import RLFHReward
from reward_service.client import RewardClient, RewardServiceUnavailable


def test_items_from_trl_columns_standard_and_conversational():
    """How TRL's batch (prompts, completions, dataset columns) becomes /v1/rewards items (no service needed)."""
    rf = RLFHReward(client=RewardClient("http://127.0.0.1:9", timeout_s=1, max_retries=0))
    items = rf.items(["<|im_start|>user\nWhere?<|im_end|>\n<|im_start|>assistant\n", "Q: Who?\nA:"],
                     [" Delhi.<|im_end|>", " Nobody."],
                     knowledge=[OBEROI["knowledge"], [OBEROI["knowledge"], "Second passage."]],
                     right_answer=["Delhi", None], answer=[None, "Somebody"])
    assert items[0] == {"question": "Where?", "response": "Delhi.", "materials": [OBEROI["knowledge"]],
                        "gold_answer": "Delhi", "token_offsets": [[0, 6]]}
    assert items[1]["question"] == "Q: Who?\nA:" and items[1]["gold_answer"] == "Somebody"
    assert items[1]["materials"] == [OBEROI["knowledge"], "Second passage."]
    conv = rf.items([[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where?"}]],
                    [[{"role": "assistant", "content": "In Delhi."}]], question=["Where is it?"])
    assert conv[0]["question"] == "Where is it?" and conv[0]["response"] == "In Delhi." and conv[0]["materials"] == []
    with pytest.raises(ValueError, match="column 'knowledge' has 1 values for 2"):
        rf.items(["a", "b"], ["c", "d"], knowledge=["only one"])
    with pytest.raises(ValueError, match="on_unavailable"):
        RLFHReward(client=rf.client, on_unavailable="zero")


def test_unreachable_service_raises_or_gives_none_after_bounded_retries():
    client = RewardClient("http://127.0.0.1:9", timeout_s=1, max_retries=1, backoff_s=0.01)   # nothing listens
    with pytest.raises(RewardServiceUnavailable):
        RLFHReward(client=client)(prompts=["Q?"], completions=["A."])
    assert client.requests == 2                              # one try + one retry, then it gives up
    rf = RLFHReward(client=client, on_unavailable="none")
    assert rf(prompts=["Q?", "Q?"], completions=["A.", "B."]) == [None, None]
    assert rf.unavailable_batches == 1 and client.unavailable == 2


@pytest.fixture
def service(shared_reward_service):
    """The reward service the integration modules share (tests/conftest.py starts it once for all of them)."""
    return shared_reward_service


@pytest.mark.slow
def test_grpo_trainer_one_step_on_cpu(service, tiny_model_path, halueval_test_items, tmp_path):
    """TRL's GRPOTrainer calls RLFHReward for its completions and trains one step on the service's rewards (the
    tiny random Llama: this is about the wiring, what TRL sends and gets, not what the model says)."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from core.model_loader import load_causal_lm, load_tokenizer

    tok = load_tokenizer(tiny_model_path)
    model = load_causal_lm(tiny_model_path)
    # train the last decoder layer only: a real update at a fraction of the backward + AdamW time
    for p in model.parameters():
        p.requires_grad_(False)
    for p in model.model.layers[-1].parameters():
        p.requires_grad_(True)
    rows = [{"question": OBEROI["question"], "knowledge": OBEROI["knowledge"], "answer": OBEROI["gold"]}]
    qa = halueval_test_items[0]
    rows.append({"question": qa.question, "knowledge": " ".join(qa.knowledge), "answer": qa.right_answer})
    for r in rows:       # conversational prompts: TRL applies SmolLM2's chat template
        r["prompt"] = [{"role": "user", "content": r["question"]}]
    reward = RLFHReward(service["url"], batch_size=3, timeout_s=60, max_retries=2)
    seen = []
    orig_rewards = reward.client.rewards

    def spy(items, **kw):         # records what TRL made us send, then calls the real service
        seen.append([dict(it) for it in items])
        return orig_rewards(items, **kw)
    reward.client.rewards = spy

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=8, max_steps=1, learning_rate=1e-5, logging_steps=1,
                      save_strategy="no", report_to=[], use_cpu=True, bf16=False, seed=0,
                      dataloader_num_workers=0, disable_tqdm=True)
    # one intra-op thread: with the cores shared by other jobs, two OpenMP threads spin against each other
    # (a 4 x 40-token forward took 51 s with 2 threads vs 2.9 s with 1 on this busy 2-core machine)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=reward, args=args,
                          train_dataset=Dataset.from_list(rows))
    torch.manual_seed(0)
    try:
        trainer.train()
    finally:
        torch.set_num_threads(threads)

    assert reward.calls == 1 and len(seen) == 1
    sent = seen[0]
    assert len(sent) == 4                                      # 2 prompts x 2 generations
    assert sorted({it["question"] for it in sent}) == sorted(r["question"] for r in rows)
    assert reward.client.requests == 2                          # batch_size 3: 4 items in 2 requests
    got = [r.score for r in reward.last_rewards]
    # the same rewards as asking /v1/rewards directly for the same completions
    direct = direct_rewards(service["url"], [{k: it[k] for k in ("question", "response", "materials",
                                                                  "gold_answer")} for it in sent])
    assert got == pytest.approx([d["score"] for d in direct])
    assert all(d["cached"] for d in direct)                    # the very same verifier requests
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert logs and math.isclose(logs[0]["reward"], sum(got) / len(got), rel_tol=1e-4, abs_tol=1e-4)
    assert "rewards/rlfh_factuality/mean" in logs[0]
    assert trainer.state.global_step == 1
    # an update happened unless both groups' rewards were tied (zero advantages)
    changed = any(not torch.equal(before[n], p) for n, p in model.named_parameters() if n in before)
    tied = all(got[i] == got[i + 1] for i in (0, 2))
    assert changed or tied


@pytest.mark.slow
def test_documented_trl_snippet_runs(service, tiny_model_path, monkeypatch, tmp_path):
    """The TRL block of docs/INTEGRATIONS.md, run as written against the real service. Only these change:
    MODEL is a tiny random model, DATA a two-row file, the URL this test's service, and GRPOConfig gets CPU
    options (use_cpu, no bf16: the snippet's defaults ask for bf16 on a GPU) and a one-step size."""
    import json
    import re

    import torch
    import trl

    import doc_commands
    snippet, = [b for b in doc_commands.blocks("INTEGRATIONS.md", "python") if "GRPOTrainer" in b]
    data = tmp_path / "train.jsonl"
    rows = [{"question": OBEROI["question"], "knowledge": OBEROI["knowledge"], "answer": OBEROI["gold"]},
            {"question": "Is Delhi in India?", "knowledge": "Delhi is the capital of India.", "answer": "yes"}]
    data.write_text("".join(json.dumps({**r, "prompt": [{"role": "user", "content": r["question"]}]}) + "\n"
                            for r in rows), encoding="utf-8")
    code = snippet
    for name, value in (("MODEL", tiny_model_path), ("DATA", str(data))):
        code, n = re.subn(rf'^{name} = "[^"]*"', f"{name} = {value!r}", code, flags=re.M)
        assert n == 1, f"the snippet assigns {name} once"
    assert code.count('"http://127.0.0.1:8000"') == 1
    code = code.replace('"http://127.0.0.1:8000"', repr(service["url"]))

    real_config = trl.GRPOConfig
    cpu = dict(use_cpu=True, bf16=False, max_steps=1, per_device_train_batch_size=4, num_generations=2,
               max_completion_length=8, logging_steps=1, save_strategy="no", report_to=[], seed=0,
               dataloader_num_workers=0, disable_tqdm=True)
    monkeypatch.setattr(trl, "GRPOConfig", lambda **kw: real_config(**{**kw, **cpu}))
    monkeypatch.chdir(tmp_path)                      # output_dir="runs/trl" lands here
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ns: dict = {"__name__": "__main__"}
    try:
        exec(compile(code, "docs/INTEGRATIONS.md (TRL block)", "exec"), ns)
    finally:
        torch.set_num_threads(threads)
    trainer = ns["trainer"]
    assert trainer.state.global_step == 1
    reward = trainer.reward_funcs[0]
    assert isinstance(reward, RLFHReward) and reward.calls == 1 and len(reward.last_rewards) == 4
    assert any("rewards/rlfh_factuality/mean" in h for h in trainer.state.log_history)
