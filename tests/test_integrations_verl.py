"""verl: RLFH's token-level rewards as verl's dense reward tensor, on verl's own DataProto, from the real service.

verl 0.9.1 is installed by `make setup` with --no-deps into .venv/extras/verl (requirements/verl-nodeps.txt):
its declared dependencies pin GPU packages and another transformers, but ``verl.DataProto`` and its reward-manager
registry import on CPU with the venv's torch.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from integration_service import OBEROI
from integrations.verl import RLFHRewardManager, dense_reward_tensor, response_text_and_offsets
from reward_service.client import RewardClient

VERL_DIR = Path(__file__).resolve().parents[1] / ".venv" / "extras" / "verl"


def import_verl():
    if not (VERL_DIR / "verl").is_dir():
        pytest.fail(f"verl is not installed in {VERL_DIR}: run `make setup` (requirements/verl-nodeps.txt)")
    if str(VERL_DIR) not in sys.path:
        sys.path.append(str(VERL_DIR))          # appended: its wheel also ships top-level `tests` / `scripts`
    import verl
    return verl


# ------------------------------------------------------------------------------ layout (pure)

def test_dense_reward_tensor_layout():
    t = dense_reward_tensor([[0.5, -1.0, 0.0], [], [2.0]], [3, 0, 1], width=4)
    assert t.dtype == torch.float32 and t.shape == (3, 4)
    assert t.tolist() == [[0.5, -1.0, 0.0, 0.0], [0.0] * 4, [2.0, 0.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="sample 0: 2 token rewards for 3"):
        dense_reward_tensor([[1.0, 2.0]], [3], width=4)
    with pytest.raises(ValueError, match="outside"):
        dense_reward_tensor([[1.0] * 5], [5], width=4)
    with pytest.raises(ValueError, match="2 reward lists for 1"):
        dense_reward_tensor([[1.0], [1.0]], [1], width=4)


@pytest.fixture(scope="module")
def tok(embedded_model_path):
    from core.model_loader import load_tokenizer
    return load_tokenizer(embedded_model_path)


def test_response_offsets_cover_text_and_eos_is_zero_width(tok):
    answer = " The head office is in Delhi, naïvely — 30 hotels."
    ids = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    text, offs = response_text_and_offsets(tok, ids)
    assert text == answer and len(offs) == len(ids)
    assert offs[-1] == [len(text), len(text)]                          # EOS: zero-width at the end
    assert "".join(text[s:e] for s, e in offs) == text                 # contiguous, non-overlapping
    assert all(a[1] <= b[0] or a == b for a, b in zip(offs, offs[1:]))


# ------------------------------------------------------------------------------ verl's DataProto, real service

@pytest.fixture
def service(shared_reward_service):
    """The reward service the integration modules share (tests/conftest.py starts it once for all of them)."""
    return shared_reward_service


def make_batch(tok, rows, width_prompt=96, width_resp=24):
    """A verl DataProto as its rollout produces it: left-padded prompts, right-padded responses ending in EOS."""
    import numpy as np

    import_verl()
    from verl import DataProto

    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    P, R, M = [], [], []
    for r in rows:
        prompt = tok.apply_chat_template([{"role": "user", "content": r["question"]}], tokenize=False,
                                         add_generation_prompt=True)
        p = tok(prompt, add_special_tokens=False)["input_ids"][-width_prompt:]
        a = (tok(r["answer_text"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id])[:width_resp]
        P.append([pad] * (width_prompt - len(p)) + p)
        R.append(a + [pad] * (width_resp - len(a)))
        M.append([0] * (width_prompt - len(p)) + [1] * len(p) + [1] * len(a) + [0] * (width_resp - len(a)))
    tensors = {"prompts": torch.tensor(P), "responses": torch.tensor(R), "attention_mask": torch.tensor(M)}
    tensors["input_ids"] = torch.cat([tensors["prompts"], tensors["responses"]], dim=1)
    non = {"reward_model": np.array([{"ground_truth": r["gold"], "style": "rule"} for r in rows], dtype=object),
           "extra_info": np.array([{"question": r["question"], "knowledge": r["knowledge"]} if r["in_extra"]
                                   else {} for r in rows], dtype=object),
           "data_source": np.array(["halueval"] * len(rows), dtype=object)}
    return DataProto.from_dict(tensors=tensors, non_tensors=non)


@pytest.mark.slow
def test_reward_manager_dense_tensor_on_dataproto(service, tok, halueval_test_items):
    import_verl()
    from verl.workers.reward_manager import get_reward_manager_cls

    from integrations.verl import register_with_verl

    qa = halueval_test_items[0]
    rows = [
        {"question": OBEROI["question"], "knowledge": OBEROI["knowledge"], "gold": OBEROI["gold"],
         "answer_text": OBEROI["right"], "in_extra": True},
        {"question": OBEROI["question"], "knowledge": OBEROI["knowledge"], "gold": OBEROI["gold"],
         "answer_text": OBEROI["wrong"], "in_extra": True},
        # question from the prompt's chat template, no evidence: gold answer only
        {"question": qa.question, "knowledge": None, "gold": qa.right_answer,
         "answer_text": " " + qa.right_answer + ". It is well known.", "in_extra": False},
    ]
    data = make_batch(tok, rows)
    manager = RLFHRewardManager(tok, num_examine=0, url=service["url"], batch_size=2, timeout_s=60, max_retries=1)
    out = manager(data, return_dict=True)
    t = out["reward_tensor"]
    R = data.batch["responses"].shape[1]
    assert t.shape == (3, R) and t.dtype == torch.float32
    assert manager.client.requests == 2                                 # batch_size 2: 3 items in 2 requests

    # every row equals /v1/rewards for the same text with the tokenizer's own offsets (+ EOS), zeros on padding
    direct_items = []
    for r in rows:
        text = r["answer_text"]
        offs = [list(o) for o in tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]
        item = {"question": r["question"], "response": text, "materials": [r["knowledge"]] if r["knowledge"] else [],
                "gold_answer": r["gold"], "token_offsets": offs + [[len(text), len(text)]]}
        direct_items.append(item)
    with RewardClient(service["url"], timeout_s=60, max_retries=1) as c:
        direct = c.rewards(direct_items)
    mask = data.batch["attention_mask"][:, data.batch["prompts"].shape[1]:]
    for i, d in enumerate(direct):
        n = int(mask[i].sum())
        assert n == len(d.token_rewards)
        assert t[i, :n].tolist() == pytest.approx(d.token_rewards, abs=1e-6)
        assert torch.all(t[i, n:] == 0)
        assert out["reward_extra_info"]["rlfh_score"][i] == pytest.approx(d.score, abs=1e-5)
        assert d.cached                                                    # the very same verifier request
    # token-level, not one scalar at the end: the right answer's reward sits on its statement's tokens
    assert direct[0].is_correct and not direct[1].is_correct
    assert t[0].sum() > t[1].sum()
    assert (t[2] != 0).sum() >= 2                       # two sentences -> rewards on more than one token
    assert manager(data).shape == (3, R)                 # return_dict=False: the tensor alone

    # verl's own registry accepts it; verl's DataProto carries it as rm_scores
    assert register_with_verl("rlfh") is RLFHRewardManager
    assert get_reward_manager_cls("rlfh") is RLFHRewardManager
    from verl import DataProto
    scored = data.union(DataProto.from_dict(tensors={"rm_scores": t}))
    assert torch.equal(RLFHRewardManager(tok, client=manager.client)(scored), t)   # no second service call


@pytest.mark.slow
def test_compute_score_in_verl_reward_loop(service, tok):
    """verl 0.9's own reward loop: its loader reads our file as ``custom_reward_function`` and its NaiveRewardManager
    scores each sample with it (one scalar per response, as verl's stock trainer uses rewards)."""
    import_verl()
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    path = Path(__file__).resolve().parents[1] / "integrations" / "verl.py"
    cfg = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": str(path), "name": "compute_score", "reward_kwargs": {"url": service["url"]}}}})
    fn = get_custom_reward_fn(cfg)
    rows = [{"question": OBEROI["question"], "knowledge": OBEROI["knowledge"], "gold": OBEROI["gold"],
             "answer_text": a, "in_extra": True} for a in (OBEROI["right"], OBEROI["wrong"])]
    data = make_batch(tok, rows)
    manager = NaiveRewardManager(config=cfg, tokenizer=tok, compute_score=fn)
    outs = [manager.loop.run_until_complete(manager.run_single(data[i:i + 1])) for i in range(len(data))]
    with RewardClient(service["url"], timeout_s=60, max_retries=1) as c:
        direct = c.rewards([{"question": r["question"], "response": r["answer_text"], "materials": [r["knowledge"]],
                             "gold_answer": r["gold"], "token_offsets": [[0, len(r["answer_text"])]]} for r in rows])
    for o, d in zip(outs, direct):
        assert o["reward_score"] == pytest.approx(d.score, abs=1e-6)
        assert o["reward_extra_info"]["correct"] == float(d.is_correct)
    assert outs[0]["reward_score"] > outs[1]["reward_score"]
    with pytest.raises(ValueError, match="extra_info.question"):
        fn(data_source="x", solution_str="Delhi.", ground_truth="Delhi", extra_info={})


def test_documented_verl_keys_exist():
    """Every ``key=value`` of the verl command in docs/INTEGRATIONS.md is a key of the installed verl's PPO trainer
    config (verl/trainer/config/_generated_ppo_trainer.yaml: ppo_trainer.yaml flattened, shipped with verl), and
    the reward function it names is ours."""
    import yaml

    import doc_commands
    import integrations.verl as rlfh_verl
    import_verl()
    cfg = yaml.safe_load((VERL_DIR / "verl" / "trainer" / "config" / "_generated_ppo_trainer.yaml").read_text())
    (prefix, argv), = doc_commands.commands("INTEGRATIONS.md", "verl.trainer.main_ppo",
                                             MODEL="/models/policy", TRAIN_PARQUET="/d/train.parquet",
                                             VAL_PARQUET="/d/dev.parquet")
    assert prefix.get("REWARD_URL", "").startswith("http")          # compute_score's client reads it
    overrides = dict(a.split("=", 1) for a in argv)
    assert len(overrides) == len(argv) and "reward.custom_reward_function.path" in overrides
    for key in overrides:
        node = cfg
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"{key}: not a key of verl's PPO trainer config"
            node = node[part]
    assert Path(overrides["reward.custom_reward_function.path"]).resolve() == Path(rlfh_verl.__file__).resolve()
    assert callable(getattr(rlfh_verl, overrides["reward.custom_reward_function.name"]))
