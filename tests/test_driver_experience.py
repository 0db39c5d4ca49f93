"""Experience assembly (no Ray): reward items, reward alignment into [B, R], caution placement, label mix,
skipped-batch accounting against a real closed port, prompt loading and the resumable data order."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from actors import calls
from actors.types import RolloutSample, make_batch, token_offsets
from baselines.common import BaselineError, load_questions
from cluster.checkpoint import TrainerState
from cluster.data_order import epoch_order, load_prompts, next_prompt_indices, plan_steps
from cluster.driver import Trainer
from cluster.experience import (RewardUnavailable, ServiceReward, SkipCounter, fetch_rewards, gold_outcomes,
                                graded_end_positions, inject_abstentions, label_mix, reward_items,
                                rewards_to_tensors)
from cluster.experience_maker import Experience, gather_timed
from cluster.phase_timer import PhaseTimer
from cluster.ppo_update import UpdateResult, mean_dicts, update
from cluster.setup_checks import check_abstain_text
from cluster.step_metrics import update_metrics
from core.config import ConfigError, RLFHConfig
from core.core_algos import last_token_values
from core.data import QAItem, balance_question_types, load_items, stratify_question_types
from core.model_loader import load_tokenizer
from core.prompts import SYSTEM_MAY_ABSTAIN, prompt_mode_for, resolve_system
from core.questions import question_type
from conftest import HANG_S, free_port
from doubles import KeywordReward
from reward_service.schemas import ItemReward
from verifier_service.text import is_abstention_text


@pytest.fixture(scope="module")
def tokenizer(embedded_model_path):
    return load_tokenizer(embedded_model_path)


def _sample(tok, prompt_index: int, text: str, eos: bool = True) -> RolloutSample:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if eos:
        ids = ids + [tok.eos_token_id]
    decoded, offs = token_offsets(tok, ids)
    return RolloutSample(prompt_index=prompt_index, prompt_token_ids=[1, 2, 3], response_token_ids=ids,
                         response_text=decoded, token_offsets=offs, finish_reason="stop" if eos else "length")


PROMPTS = [QAItem(question="Who wrote Hamlet?", knowledge=["Hamlet is a tragedy by William Shakespeare."],
                  right_answer="William Shakespeare"),
           QAItem(question="What is the capital of France?", knowledge=["Paris is the capital of France."],
                  right_answer="Paris")]


def test_reward_items_carry_question_materials_gold_and_engine_offsets(tokenizer):
    samples = [_sample(tokenizer, 0, "It was William Shakespeare."), _sample(tokenizer, 1, "Paris.")]
    items = reward_items(samples, PROMPTS)
    assert [it["question"] for it in items] == [p.question for p in PROMPTS]
    assert items[0]["materials"] == PROMPTS[0].knowledge
    assert items[1]["gold_answer"] == "Paris"
    assert items[0]["response"] == "It was William Shakespeare."
    assert len(items[0]["token_offsets"]) == len(samples[0].response_token_ids)
    # the EOS token has an empty span at the end of the text
    assert items[0]["token_offsets"][-1] == [len(items[0]["response"])] * 2


def test_keyword_reward_lands_on_the_word_tokens_and_rewards_to_tensors_aligns_them(tokenizer):
    samples = [_sample(tokenizer, 0, "The answer is Shakespeare, surely."),
               _sample(tokenizer, 1, "I think it is Paris."),
               _sample(tokenizer, 1, "shakespeare wrote it; Shakespeare!", eos=False)]
    batch = make_batch(samples, tokenizer.pad_token_id)
    results = KeywordReward("shakespeare", value=2.0)(reward_items(samples, PROMPTS * 2))
    rewards, signs = rewards_to_tensors(results, batch["action_mask"])
    B, R = batch["action_mask"].shape
    assert rewards.shape == (B, R) and signs.shape == (B, R)
    for i, s in enumerate(samples):
        n = len(s.response_token_ids)
        assert not rewards[i, n:].any(), "padding carries no reward"
        for j, (a, b) in enumerate(s.token_offsets):
            piece = s.response_text[a:b].lower()
            overlaps = any(a < e and b > st for st, e in
                           [(m, m + len("shakespeare")) for m in _find_all(s.response_text.lower(), "shakespeare")])
            assert rewards[i, j].item() == (2.0 if overlaps else 0.0), (i, j, piece)
            assert signs[i, j].item() == (1 if overlaps else 0)
    assert results[0].is_correct and not results[1].is_correct
    assert results[2].label_counts == {"Correct": 2}
    assert rewards[1].sum() == 0


def _find_all(text: str, word: str) -> list[int]:
    out, i = [], text.find(word)
    while i >= 0:
        out.append(i)
        i = text.find(word, i + 1)
    return out


def _result(rewards, signs, score, **kw) -> ItemReward:
    return ItemReward(token_rewards=rewards, token_label_signs=signs, score=score,
                      **{"is_correct": False, "abstained": False, "label_counts": {}, "num_statements": 0,
                         "num_unaligned": 0, **kw})


def test_rewards_to_tensors_refuses_a_length_mismatch():
    mask = torch.tensor([[True, True, True], [True, False, False]])
    ok = [_result([0.1, 0.2, 0.3], [0, 1, -1], 0.6), _result([1.0], [1], 1.0)]
    r, s = rewards_to_tensors(ok, mask)
    assert torch.allclose(r, torch.tensor([[0.1, 0.2, 0.3], [1.0, 0.0, 0.0]]))
    assert s.tolist() == [[0, 1, -1], [1, 0, 0]]
    bad = [_result([0.1, 0.2], [0, 0], 0.3), _result([1.0], [1], 1.0)]
    with pytest.raises(ValueError, match="response 0: 2 token rewards"):
        rewards_to_tensors(bad, mask)
    with pytest.raises(ValueError, match="1 reward results for a batch of 2"):
        rewards_to_tensors(ok[:1], mask)
    nan = [_result([float("nan"), 0, 0], [0, 0, 0], 0.0), _result([1.0], [1], 1.0)]
    with pytest.raises(ValueError, match="non-finite"):
        rewards_to_tensors(nan, mask)


def test_last_token_rewards_places_one_value_on_the_last_valid_token():
    mask = torch.tensor([[True, True, False, False], [True, True, True, True], [False, False, False, False]])
    out = last_token_values(torch.tensor([1.0, -2.0, 5.0]), mask)
    assert out.tolist() == [[0, 1.0, 0, 0], [0, 0, 0, -2.0], [0, 0, 0, 0]]


def test_graded_end_positions_find_the_answer_sentences_last_token(tokenizer):
    two = _sample(tokenizer, 0, "It was William Shakespeare. Hamlet is a tragedy by William Shakespeare.")
    one = _sample(tokenizer, 1, "Paris is the capital.")
    empty = _sample(tokenizer, 1, "")
    pos = graded_end_positions([two, one, empty], scope="first-sentence")
    a, b = two.token_offsets[int(pos[0])]
    assert two.response_text[:b] == "It was William Shakespeare."            # the token that ends the answer
    assert two.response_text[two.token_offsets[int(pos[0]) + 1][0]:].strip().startswith("Hamlet")
    assert one.response_text[:one.token_offsets[int(pos[1])][1]] == "Paris is the capital."  # before its EOS
    assert int(pos[2]) == -1                                                   # nothing to grade: the last token
    assert graded_end_positions([two, one], scope="whole").tolist() == [-1, -1]


def test_label_mix_shares_over_all_statements():
    res = [_result([], [], 0.0, label_counts={"Correct": 3, "Wrong": 1}),
           _result([], [], 0.0, label_counts={"Wrong": 3, "Vague": 1, "Hedged wrong": 0})]
    mix, n = label_mix(res)
    assert n == 8
    assert mix["Correct"] == pytest.approx(3 / 8) and mix["Wrong"] == pytest.approx(4 / 8)
    assert mix["Vague"] == pytest.approx(1 / 8) and mix["Hedged correct"] == 0.0
    assert label_mix([_result([], [], 0.0)])[0]["Correct"] == 0.0


def test_reward_service_down_skips_and_counts_the_batch_on_a_real_closed_port():
    port = free_port()  # bound then released: nothing listens there
    cfg = RLFHConfig.load(reward_timeout_s=2.0, reward_max_retries=1)
    reward_fn = ServiceReward(f"http://127.0.0.1:{port}", cfg)
    items = [{"question": "q?", "response": "An answer.", "materials": ["An answer."], "gold_answer": None,
              "token_offsets": [[0, 2], [2, 9], [9, 10]]}]
    skips = SkipCounter()
    t0 = time.time()
    assert fetch_rewards(reward_fn, items, skips) is None
    assert time.time() - t0 < HANG_S, "bounded retries, no hang"       # the count below is what is bounded
    assert reward_fn.client.requests == 2, "one try + REWARD_MAX_RETRIES=1 retry"
    assert skips.total == 1 and skips.consecutive == 1 and skips.reasons["reward_unavailable"] == 1
    assert "ConnectError" in skips.last_error or "connect" in skips.last_error.lower()
    assert fetch_rewards(reward_fn, items, skips) is None
    assert skips.total == 2 and skips.consecutive == 2
    # a working reward function resets the consecutive count but not the total
    got = fetch_rewards(KeywordReward("answer"), items, skips)
    assert got is not None and got[0].token_rewards == [0.0, 1.0, 0.0]  # " answer" only
    assert skips.total == 2 and skips.consecutive == 0
    reward_fn.close()


def test_other_reward_errors_are_not_swallowed():
    def broken(items):
        raise KeyError("bug")

    def down(items):
        raise RewardUnavailable("judge pool empty")

    skips = SkipCounter()
    with pytest.raises(KeyError):
        fetch_rewards(broken, [{}], skips)
    assert skips.total == 0
    assert fetch_rewards(down, [{}], skips) is None and skips.total == 1
    with pytest.raises(RuntimeError, match="returned 0 results for 1 items"):
        fetch_rewards(lambda items: [], [{}], skips)


@pytest.mark.parametrize("spec", ["halueval:test", "halueval", "halueval:all"])
def test_training_on_the_test_split_is_refused(spec):
    with pytest.raises(ConfigError, match=r"PROMPT_DATA \(--prompt-data\).*never trained on.*halueval:train"):
        load_prompts(RLFHConfig.load(prompt_data=spec))


def test_too_few_prompts_for_a_batch_is_a_clear_error(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"question": "Q1?", "knowledge": "K"}\n{"question": "Q2?", "knowledge": "K"}\n')
    with pytest.raises(ConfigError, match="fewer than ROLLOUT_BATCH_SIZE=8"):
        load_prompts(RLFHConfig.load(prompt_data=str(f)))
    assert len(load_prompts(RLFHConfig.load(prompt_data=str(f), rollout_batch_size=2))) == 2


def test_data_order_is_a_resumable_pure_function_of_seed_and_epoch():
    n, batch, seed = 10, 4, 7
    state = TrainerState()
    seen = [next_prompt_indices(state, n, batch, seed) for _ in range(5)]
    # full batches only: 2 per epoch, the last 2 prompts of each epoch's order are dropped
    assert seen[0] + seen[1] == epoch_order(n, seed, 0)[:8].tolist()
    assert seen[2] + seen[3] == epoch_order(n, seed, 1)[:8].tolist()
    assert (state.epoch, state.index) == (2, 4)
    assert epoch_order(n, seed, 0).tolist() != epoch_order(n, seed, 1).tolist()
    # resuming from a saved position gives the same next batches
    resumed = TrainerState(epoch=1, index=4)
    assert next_prompt_indices(resumed, n, batch, seed) == seen[3]
    assert next_prompt_indices(resumed, n, batch, seed) == seen[4]
    assert plan_steps(RLFHConfig.load(rollout_batch_size=4, num_episodes=3), 10) == (2, 6)
    assert plan_steps(RLFHConfig.load(rollout_batch_size=4, num_episodes=3, max_steps=5), 10) == (2, 5)


def test_inject_abstentions_replaces_the_last_k_of_each_group(tokenizer):
    n, k = 3, 1
    samples = [_sample(tokenizer, i // n, f"Answer {i}.") for i in range(2 * n)]
    ids = tokenizer.encode("I don't know.", add_special_tokens=False) + [tokenizer.eos_token_id]
    out, injected = inject_abstentions(samples, n, k, ids, tokenizer)
    assert injected.tolist() == [False, False, True, False, False, True]
    for i, s in enumerate(out):
        if injected[i]:
            assert s.response_text == "I don't know." and s.response_token_ids == ids
            assert s.prompt_index == samples[i].prompt_index and s.prompt_token_ids == samples[i].prompt_token_ids
            assert s.finish_reason == "stop" and len(s.token_offsets) == len(ids)
        else:
            assert s is samples[i]
    # the candidate goes through the verifier's abstention path, so the reward service gives ABSTAIN_TOKEN_REWARD
    assert is_abstention_text(out[2].response_text)
    batch = make_batch(out, tokenizer.pad_token_id)
    assert int(batch["action_mask"][2].sum()) == len(ids)
    none, flags = inject_abstentions(samples, n, 0, ids, tokenizer)
    assert none == samples and not flags.any()
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        inject_abstentions(samples, n, 3, ids, tokenizer)
    with pytest.raises(ValueError, match="whole groups"):
        inject_abstentions(samples[:4], n, 1, ids, tokenizer)


def test_mixed_prompt_mode_is_a_stable_half_split_and_system_prompts_resolve():
    qs = [it.question for it in load_items("halueval:dev", limit=200)]
    modes = [prompt_mode_for(q, "mixed") for q in qs]
    assert modes == [prompt_mode_for(q, "mixed") for q in qs]  # fixed per question
    share = modes.count("evidence") / len(modes)
    assert 0.35 < share < 0.65, share
    assert {prompt_mode_for(q, "closed") for q in qs} == {"closed"}
    # EVIDENCE_SHARE: a stable share; a smaller share only moves questions from evidence to closed book
    quarter = [prompt_mode_for(q, "mixed", 0.25) for q in qs]
    assert 0.15 < quarter.count("evidence") / len(qs) < 0.35
    assert all(m == "evidence" for m, h in zip(modes, quarter) if h == "evidence")
    assert {prompt_mode_for(q, "mixed", 0.0) for q in qs} == {"closed"}
    assert {prompt_mode_for(q, "mixed", 1.0) for q in qs} == {"evidence"}
    with pytest.raises(ValueError, match="evidence_share"):
        prompt_mode_for("q", "mixed", 1.5)
    assert resolve_system("may-abstain") == SYSTEM_MAY_ABSTAIN
    assert resolve_system("Be brief.") == "Be brief."
    with pytest.raises(ValueError, match="prompt mode"):
        prompt_mode_for("q", "open-book")
    with pytest.raises(ValueError, match="system prompt is empty"):
        resolve_system("  ")


def test_gold_outcomes_use_the_gold_grader_and_fall_back_to_the_verifier():
    prompts = [QAItem(question="Were A and B both American?", knowledge=["A and B are American."],
                      right_answer="yes"),
               QAItem(question="Who founded C?", knowledge=["D founded C."], right_answer=None)]
    samples = [SimpleNamespace(prompt_index=0, response_text=t) for t in ("Yes, both were.", "No.",
                                                                         "I don't know.", "")]
    samples.append(SimpleNamespace(prompt_index=1, response_text="D founded C."))
    # the verifier's strict verdicts: only the last counts as correct
    ver_c = torch.tensor([False, False, False, False, True])
    ver_a = torch.tensor([False, False, True, False, False])
    c, a = gold_outcomes(samples, prompts, ver_c, ver_a)
    assert c.tolist() == [True, False, False, False, True]   # gold grader; no gold: the verifier's verdict
    assert a.tolist() == [False, False, True, True, False]   # an empty response is no answer either


@pytest.mark.parametrize("env, fragment", [
    ({"ABSTAIN_OUTCOME_REWARD": "2"}, "OUTCOME_WRONG=-1.0 <= ABSTAIN_OUTCOME_REWARD=2.0"),
    ({"ABSTAIN_OUTCOME_REWARD_EVIDENCE": "-3"}, "ABSTAIN_OUTCOME_REWARD_EVIDENCE=-3.0 must be a finite number between"),
    ({"ABSTAIN_OUTCOME_REWARD_EVIDENCE": "nan"}, "ABSTAIN_OUTCOME_REWARD_EVIDENCE"),
    ({"TOKEN_REWARD_WEIGHT": "0"}, "leaves no reward"),
    ({"EVIDENCE_SHARE": "1.5"}, "EVIDENCE_SHARE"),
    ({"OUTCOME_REWARD": "binary"}, "OUTCOME_REWARD"),
    ({"ABSTAIN_SAMPLES": "4", "N_SAMPLES_PER_PROMPT": "4"}, "ABSTAIN_SAMPLES=4 must be smaller"),
    ({"PROMPT_MODE": "open"}, "PROMPT_MODE"),
    ({"SYSTEM_PROMPT": "   "}, "SYSTEM_PROMPT is blank"),
    ({"OUTCOME_TOKEN": "graded-end"}, "OUTCOME_TOKEN=graded-end places the outcome reward of OUTCOME_REWARD=ternary"),
    ({"OUTCOME_TOKEN": "answer"}, "OUTCOME_TOKEN"),
    ({"TOKEN_REWARD_CAP": "-1"}, "TOKEN_REWARD_CAP"),
    ({"TOKEN_REWARD_CAP": "2", "CAUTION_REWARD": "true"}, "TOKEN_REWARD_CAP=2.0 caps the verifier's token-level"),
    ({"TOKEN_REWARD_CAP": "2", "TOKEN_REWARD_WEIGHT": "0", "OUTCOME_REWARD": "ternary"}, "are not used"),
])
def test_abstention_and_prompt_settings_are_checked(env, fragment):
    with pytest.raises(ConfigError, match=fragment):
        RLFHConfig.load(environ=env)


def test_the_trainer_refuses_an_abstention_candidate_the_verifier_reads_as_an_answer():
    cfg = RLFHConfig.load(environ={"ABSTAIN_SAMPLES": "1", "ABSTAIN_TEXT": "Paris is the capital."})
    with pytest.raises(ConfigError, match="ABSTAIN_TEXT='Paris is the capital.' .* does not read as an abstention"):
        Trainer(cfg)
    check_abstain_text(RLFHConfig.load(environ={"ABSTAIN_SAMPLES": "1"}))           # "I don't know." passes
    check_abstain_text(cfg.model_copy(update={"abstain_samples": 0}))               # unused: not checked


def test_abstain_outcome_reward_evidence_is_optional_and_round_trips_through_the_environment():
    cfg = RLFHConfig.load(environ={})
    assert cfg.abstain_outcome_reward_evidence is None
    assert RLFHConfig.load(environ=cfg.to_env()).abstain_outcome_reward_evidence is None
    cfg = RLFHConfig.load(environ={"ABSTAIN_OUTCOME_REWARD_EVIDENCE": "-0.2"})
    assert cfg.abstain_outcome_reward_evidence == -0.2
    assert RLFHConfig.load(environ=cfg.to_env()).abstain_outcome_reward_evidence == -0.2


def test_type_balance_repeats_closed_form_questions_deterministically():
    items = [QAItem(question=f"Who founded company {i}?", knowledge=["x"], right_answer="y") for i in range(70)]
    items += [QAItem(question=f"Is city {i} in France?", knowledge=["x"], right_answer="yes") for i in range(5)]
    items += [QAItem(question=f"Which is older, A{i} or B{i}?", knowledge=["x"], right_answer=f"A{i}")
              for i in range(10)]
    out = balance_question_types(items, 0.25)
    assert out[:len(items)] == items  # originals first, in order
    counts = {t: sum(question_type(it.question) == t for it in out) for t in ("yes_no", "choice", "open")}
    assert counts["open"] == 70
    assert counts["yes_no"] / len(out) >= 0.25 - 1e-9 and counts["choice"] / len(out) >= 0.25 - 1e-9
    assert {it.question for it in out} == {it.question for it in items}  # repeats only, nothing new
    assert balance_question_types(items, 0.25) == out
    assert balance_question_types(items, 0.0) is items
    with pytest.raises(ValueError, match="TYPE_BALANCE"):
        balance_question_types(items, 0.6)


def test_stratified_question_types_are_distinct_and_keep_their_order():
    items = [QAItem(question=f"Who founded company {i}?", knowledge=["x"], right_answer="y") for i in range(70)]
    items += [QAItem(question=f"Is city {i} in France?", knowledge=["x"], right_answer="yes") for i in range(30)]
    items += [QAItem(question=f"Which is older, A{i} or B{i}?", knowledge=["x"], right_answer=f"A{i}")
              for i in range(4)]
    out = stratify_question_types(items, 40, 0.25)
    counts = {t: sum(question_type(it.question) == t for it in out) for t in ("yes_no", "choice", "open")}
    assert len(out) == 40 and len({it.question for it in out}) == 40            # distinct, no repeats
    assert counts == {"yes_no": 10, "choice": 4, "open": 26}                   # only 4 two-option exist
    assert [items.index(it) for it in out] == sorted(items.index(it) for it in out)
    assert stratify_question_types(items, 40, 0.0) == items[:40]
    with pytest.raises(ValueError, match="min_share"):
        stratify_question_types(items, 40, 0.5)
    # the baselines' --type-share on the embedded train split
    got = load_questions("halueval:train", 80, type_share=0.25)
    shares = {t: sum(question_type(it.question) == t for it in got) / len(got) for t in ("yes_no", "choice")}
    assert len(got) == 80 and min(shares.values()) >= 0.25
    with pytest.raises(BaselineError, match="--type-share"):
        load_questions("halueval:train", 80, type_share=0.7)


@pytest.mark.parametrize("serial", [False, True])
def test_forward_phase_times_add_up_to_the_wall_time_when_phases_run_one_after_another(monkeypatch, serial):
    """The colocated layout runs the reference, critic and policy forwards one after another in one process:
    each phase's time then starts where the previous one ended (else the table shows cumulative times)."""
    finish = {"ref_a": 0.05, "ref_b": 0.10}   # phase a's one call, then phase b's
    # a clock that moves only when a call "finishes": exact times, whatever else loads the runner
    clock = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])

    def wait_any(pending, deadline, what, timeout):
        nxt = min(pending, key=finish.get)
        clock[0] = 1000.0 + finish[nxt]
        return [nxt], [r for r in pending if r != nxt]
    monkeypatch.setattr(calls, "wait_any", wait_any)
    monkeypatch.setattr(calls, "get", lambda refs, what, timeout: [torch.zeros(1, 2) for _ in refs])
    timer = PhaseTimer()
    out = gather_timed({"a": ["ref_a"], "b": ["ref_b"]}, timer, 60.0, serial=serial)
    assert out["a"].shape == (1, 2)
    assert timer.times["a"] == pytest.approx(0.05, abs=1e-9)
    assert timer.times["b"] == pytest.approx(0.05 if serial else 0.10, abs=1e-9)


def test_the_update_returns_a_typed_result_that_the_metrics_record_shows(monkeypatch):
    """``update`` answers what it did (the driver reads ``policy_trained`` to decide the weight sync); the metrics
    entries are made from that record: the ranks' numeric stats averaged per role, then ``policy_trained``."""
    assert mean_dicts([{"loss": 1.0, "ok": True, "name": "x"}, {"loss": 3}, None]) == {"loss": 2.0}
    monkeypatch.setattr(calls, "get", lambda refs, what, timeout: list(refs))
    stats = {"policy": [{"policy_loss": 1.0}, {"policy_loss": 3.0}], "critic": [{"value_loss": 0.5}]}
    groups = SimpleNamespace(
        policy=SimpleNamespace(dispatch_async=lambda method, batch, share: stats["policy"]),
        critic=SimpleNamespace(dispatch_async=lambda method, batch, share: stats["critic"]))
    exp = Experience(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long),
                     torch.ones(2, 1, dtype=torch.bool), torch.zeros(2, 1), torch.zeros(2, 1),
                     old_values=torch.zeros(2, 1))
    cfg = RLFHConfig.load(environ={}, freezing_actor_steps=1, max_epochs=1)
    frozen, trained = update(cfg, groups, exp, 1, PhaseTimer()), update(cfg, groups, exp, 2, PhaseTimer())
    assert frozen == UpdateResult(False, {}, {"value_loss": 0.5})
    assert trained == UpdateResult(True, {"policy_loss": 2.0}, {"value_loss": 0.5})
    assert list(update_metrics(trained).items()) == [("policy/policy_loss", 2.0), ("critic/value_loss", 0.5),
                                                     ("policy_trained", True)]
    assert update_metrics(frozen) == {"critic/value_loss": 0.5, "policy_trained": False}
