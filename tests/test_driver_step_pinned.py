"""Pins what one driver step computes, to the bit: three :meth:`Trainer.step` calls on fixed prompts, with
in-process stand-ins for the actors (deterministic rollouts, log-probs and values; no Ray, no model) and a
deterministic reward function. Each step's metrics record, the tensors the critic and the policy are sent to train
on, the abstention controller's state and samples.jsonl are hashed and compared with the hashes the driver gave
before it was split into named parts: a refactor of the driver must leave all of them as they are.

The stand-ins answer exactly what the driver reads of real actors (``generate`` of an engine, ``logprobs`` /
``values`` / ``train_step`` of a group, the "shared" weight sync), and ``actors.calls``' two waits are replaced by
an unwrap of those answers. When a hash changes on purpose (a change to the reward math, a new metric), the
failure message prints the new table to paste here, after checking the change is the one intended.
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
from types import SimpleNamespace

import pytest
import torch

from actors import calls
from actors.types import RolloutSample, token_offsets
from core.config import RLFHConfig
from reward_service.schemas import ItemReward

QUESTIONS = [  # (question, passage, gold answer): open, yes/no and two-option questions
    ("Who wrote Hamlet?", "Hamlet is a tragedy by William Shakespeare.", "William Shakespeare"),
    ("What is the capital of France?", "Paris is the capital of France.", "Paris"),
    ("Is Paris in France?", "Paris is the capital of France.", "yes"),
    ("Was Hamlet written by Charles Dickens or William Shakespeare?", "Hamlet is by Shakespeare.",
     "William Shakespeare"),
    ("Is the sky green?", "The sky is blue on a clear day.", "no"),
    ("What colour is a clear sky?", "The sky is blue on a clear day.", "blue"),
    ("Which is larger, the Moon or the Earth?", "The Earth is larger than the Moon.", "the Earth"),
    ("Who painted the Mona Lisa?", "The Mona Lisa was painted by Leonardo da Vinci.", "Leonardo da Vinci"),
]
REPLIES = ["William Shakespeare.", "Paris.", "Yes.", "No, it is not.", "I don't know.", "It was London, I think.",
           "Blue.", "The Earth.", "Charles Dickens wrote it, surely.", "Leonardo da Vinci painted it in Florence.",
           "I am not sure."]


class Ref:
    """What a ``.remote()`` call returns here: the answer itself (``calls.get`` unwraps it)."""

    def __init__(self, value):
        self.value = value


def _unwrap(refs, what, timeout):
    return [r.value for r in refs] if isinstance(refs, list) else refs.value


def _first_done(pending, deadline, what, timeout):
    return list(pending[:1]), list(pending[1:])


class Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        return Ref(self.fn(*args, **kwargs))


class Engine:
    """A rollout engine: a reply drawn per (seed, prompt, sample) from REPLIES; weights shared with the policy."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.version = 0
        self.generate = Method(self._generate)
        self.info = Method(lambda: {"shares_policy_weights": True, "backend": "hf"})
        self.follow_weights = Method(self._follow)

    def _follow(self, version):
        self.version = int(version)
        return self.version

    def _generate(self, prompts, n, max_new_tokens, temperature, top_p, seed=None, share=1):
        out = []
        for j, text in enumerate(prompts):
            prompt_ids = self.tok(text, add_special_tokens=False)["input_ids"][-20:]
            for k in range(n):
                rng = random.Random(f"{seed}-{j}-{k}-{self.version}")
                ids = self.tok(rng.choice(REPLIES), add_special_tokens=False)["input_ids"]
                stop = rng.random() < 0.8
                ids = (ids + [self.tok.eos_token_id]) if stop else ids[:max(1, len(ids) - 1)]
                reply, offs = token_offsets(self.tok, ids)
                out.append(RolloutSample(prompt_index=j, prompt_token_ids=prompt_ids, response_token_ids=ids,
                                         response_text=reply, token_offsets=offs,
                                         finish_reason="stop" if stop else "length"))
        return out


def _responses(batch):
    R = batch["action_mask"].shape[1]
    return batch["sequences"][:, -R:].float()


class Group:
    """An actor group: forwards are fixed functions of the token ids; train_step records what it was sent."""

    def __init__(self, role, cfg, sent):
        self.role, self.cfg, self.sent = role, cfg, sent
        self.version = 0
        self.actors = [SimpleNamespace(weights_version=Method(lambda: self.version))]

    def dispatch_async(self, method, batch, share=1):
        if method == "logprobs":
            mod = 17 if self.role == "policy" else 13
            return [Ref(-((_responses(batch) % mod) + 1) / 10)]
        if method == "values":
            return [Ref((_responses(batch) % 11) / 10 - 0.5)]
        assert method == "train_step", method
        self.sent.append((self.role, {k: v.clone() for k, v in batch.items()}))
        if self.role == "policy":
            self.version += 1
        return [Ref({"loss": float(sum(v.double().sum() for v in batch.values())), "ok": True})]


def _digest(obj) -> str:
    h = hashlib.sha256()
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        for k in sorted(obj):
            t = obj[k].contiguous()
            h.update(f"{k}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.numpy().tobytes())
    else:
        h.update(json.dumps(obj, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _patch_ray_start(monkeypatch) -> list:
    """Setup without Ray: every loaded driver module's ``start_ray`` (wherever the driver imports it from).
    Returns the list of calls of the stand-in (one per setup: Ray was not started)."""
    started: list = []

    def fake(*args, **kwargs):
        started.append(1)
        return SimpleNamespace(dashboard_url=None, shutdown=lambda: None)
    for name, mod in list(sys.modules.items()):
        if (name.startswith("cluster.") or name == "core.ray_bootstrap") and hasattr(mod, "start_ray"):
            monkeypatch.setattr(mod, "start_ray", fake)
    return started


def _reward(items):
    """Deterministic per-token rewards from the offsets; correct when the gold answer is in the reply."""
    out = []
    for it in items:
        offs = it["token_offsets"]
        rewards = [((a * 31 + b * 7 + len(it["question"])) % 5 - 2) / 4 for a, b in offs]
        signs = [(r > 0) - (r < 0) for r in rewards]
        resp = it["response"].lower()
        abstained = "know" in resp or "not sure" in resp
        correct = not abstained and it["gold_answer"].lower() in resp
        out.append(ItemReward(token_rewards=rewards, token_label_signs=signs, score=float(sum(rewards)),
                              is_correct=correct, abstained=abstained,
                              label_counts={"Correct": sum(s > 0 for s in signs), "Wrong": sum(s < 0 for s in signs)},
                              num_statements=len(offs), num_unaligned=0, num_tokens=len(offs),
                              cached=len(offs) % 3 == 0))
    return out


RECIPES = {
    # PPO with critic and reference, the ternary outcome judged by gold, answer-mean price + target rate,
    # mixed prompts, one injected abstention, FSPO, the variance filter, two epochs (group shuffle), the policy
    # frozen for step 1
    "gae": dict(advantage_estimator="gae", kl_coef=0.05, outcome_reward="ternary",
                abstain_outcome_reward_mode="answer-mean", abstain_target_rate=0.3, abstain_target_rate_step=0.5,
                abstain_outcome_reward_margin=0.1, prompt_mode="mixed",
                abstain_samples=1, fspo=True, filter_variance=0.5, max_epochs=2, advantage_whiten=True,
                token_reward_weight=0.5, abstain_outcome_reward_evidence=-0.5, log_samples=3, freezing_actor_steps=1),
    # a group estimator without critic or reference (the update's own log-probs), caution reward, the adaptive
    # fixed price pushed to its bound, verifier outcome judge, closed book
    "rloo": dict(advantage_estimator="rloo", kl_coef=0.0, outcome_reward="ternary", outcome_grader="verifier",
                 abstain_target_rate=0.4, abstain_target_rate_step=4.0, abstain_outcome_reward=-0.2,
                 caution_reward=True, abstain_samples=1, train_batch_size=16, log_samples=0),
    # the plain token reward (no outcome), GRPO with a reference, the variance filter dropping every prompt of
    # step 1 and some of steps 2 and 3
    "grpo": dict(advantage_estimator="grpo", kl_coef=0.1, kl_estimator="k3", prompt_mode="evidence",
                 filter_variance=0.95, log_samples=2),
}

EXPECTED: dict[str, dict[str, str]] = {  # hashes of the driver before it was split into named parts
    "gae": {
        "1/row": "c11756ffcbed270e",
        "1/0/critic.train_step": "5383ac5a080886ac",
        "1/1/critic.train_step": "5383ac5a080886ac",
        "2/row": "7ca74c3d3d1b54c5",
        "2/0/critic.train_step": "832059c7fbd3e635",
        "2/1/policy.train_step": "46d8c1acf6e91c1b",
        "2/2/critic.train_step": "832059c7fbd3e635",
        "2/3/policy.train_step": "46d8c1acf6e91c1b",
        "3/row": "ef2e8baad0da5872",
        "3/0/critic.train_step": "43b9669ef458d45d",
        "3/1/policy.train_step": "1571a7644a52c646",
        "3/2/critic.train_step": "43b9669ef458d45d",
        "3/3/policy.train_step": "1571a7644a52c646",
        "state.extra": "c2798c9209252261",
        "samples.jsonl": "2c4e87ff529515a3",
    },
    "grpo": {
        "1/row": "9c9ec5027940fccd",
        "2/row": "5ffd52e855f87981",
        "2/0/policy.train_step": "1b1cc21f5bcf0e19",
        "3/row": "09d4232d1162ba87",
        "3/0/policy.train_step": "7a1cd0675bf7511a",
        "state.extra": "44136fa355b3678a",
        "samples.jsonl": "bff3e0054d50a026",
    },
    "rloo": {
        "1/row": "4be1ae6792bd9791",
        "1/0/policy.train_step": "aee71361b6476d67",
        "2/row": "8713f6b387e63589",
        "2/0/policy.train_step": "824a6660ecf7e787",
        "3/row": "e34ec2ea54dcf8d1",
        "3/0/policy.train_step": "36886ab631a82014",
        "state.extra": "8ae2b5fb1793fe1d",
        "samples.jsonl": "12ae32cb1ec02d01",
    },
}


def _run(tmp_path, monkeypatch, model_path, recipe: str) -> dict[str, str]:
    from cluster.driver import Trainer
    from core.model_loader import load_tokenizer
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"question": q, "knowledge": [k], "right_answer": a}) + "\n"
                            for q, k, a in QUESTIONS))
    cfg = RLFHConfig.load(environ={}, model_path=model_path, prompt_data=str(data), save_path=str(tmp_path / "run"),
                          rollout_batch_size=4, n_samples_per_prompt=4, generate_max_len=16, seed=7,
                          use_tensorboard=False, system_prompt="may-abstain", **RECIPES[recipe])
    tok = load_tokenizer(model_path)
    sent: list = []
    groups = SimpleNamespace(rollout=[Engine(tok)], policy=Group("policy", cfg, sent), layout="separate",
                             reference=Group("reference", cfg, sent) if cfg.kl_coef > 0 else None,
                             critic=Group("critic", cfg, sent) if cfg.advantage_estimator == "gae" else None)
    monkeypatch.setattr(calls, "get", _unwrap)
    monkeypatch.setattr(calls, "wait_any", _first_done)
    import cluster.driver  # noqa: F401  (loaded, so its start_ray is patched too)
    import core.ray_bootstrap  # noqa: F401
    started = _patch_ray_start(monkeypatch)
    got: dict[str, str] = {}
    with Trainer(cfg, reward_fn=_reward, groups=groups, show_progress=False) as trainer:
        for _ in range(3):
            sent.clear()
            row = trainer.step()
            step = row["step"]
            kept = {k: v for k, v in row.items() if not k.startswith("time/") and k != "rollout_tokens_per_s"}
            got[f"{step}/row"] = _digest(kept)
            for i, (role, batch) in enumerate(sent):
                got[f"{step}/{i}/{role}.train_step"] = _digest(batch)
        got["state.extra"] = _digest(trainer.state.extra)
    assert started == [1], "the trainer started Ray: the stand-in start_ray was not the one it called"
    samples = tmp_path / "run" / "samples.jsonl"
    got["samples.jsonl"] = _digest(samples.read_text() if samples.exists() else "")
    return got


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_driver_step_computes_what_it_did_before(tmp_path, monkeypatch, embedded_model_path, recipe):
    got = _run(tmp_path, monkeypatch, embedded_model_path, recipe)
    assert got == EXPECTED[recipe], f"new hashes for {recipe!r}:\n{json.dumps(got, indent=1)}"
