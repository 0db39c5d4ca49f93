"""In-loop dev evaluation (cluster/dev_eval.py): grading, per-type metrics, the best-step bookkeeping."""
from __future__ import annotations

import pytest

from cluster.dev_eval import DevAnswer, _better, dev_items, dev_metrics, grade_dev, selection_value, track_best
from core.data import QAItem


def _a(qtype, mode="closed", correct=False, abstained=False):
    return DevAnswer("q", qtype, mode, "a", correct, abstained)


def test_dev_metrics_by_hand():
    rows = [_a("yes_no", correct=True), _a("yes_no"), _a("open", abstained=True), _a("open"),
            _a("choice", correct=True), _a("open", mode="evidence", correct=True), _a("open", mode="evidence")]
    m = dev_metrics(rows, 1.0, -0.5, -1.0)
    assert m["dev/closed/correct"] == pytest.approx(2 / 5)
    assert m["dev/closed/incorrect"] == pytest.approx(2 / 5)
    assert m["dev/closed/abstain"] == pytest.approx(1 / 5)
    assert m["dev/closed/acc_attempted"] == pytest.approx(2 / 4)
    assert m["dev/closed/abstain/open"] == pytest.approx(1 / 2)
    assert m["dev/closed/abstain/yes_no"] == 0.0 and m["dev/closed/correct/yes_no"] == 0.5
    assert m["dev/closed/score"] == pytest.approx((2 - 0.5 - 2) / 5)
    assert m["dev/evidence/score"] == pytest.approx(0.0)
    assert m["dev/score"] == pytest.approx((m["dev/closed/score"] + 0.0) / 2)
    assert m["dev/evidence/correct"] == 0.5 and "dev/evidence/abstain/yes_no" not in m
    # nothing attempted: no accuracy on attempted answers (not a silent 0)
    assert "dev/closed/acc_attempted" not in dev_metrics([_a("open", abstained=True)])
    # type weights (a stratified set weighed back to the natural mix): per-type mean outcomes, weighted.
    # closed: yes/no (1 - 1) / 2 = 0, choice 1, open (-0.5 - 1) / 2 = -0.75; evidence: open only
    w = dev_metrics(rows, 1.0, -0.5, -1.0, type_weights={"yes_no": 0.1, "choice": 0.1, "open": 0.8})
    assert w["dev/closed/score"] == pytest.approx(0.1 * 0 + 0.1 * 1 + 0.8 * -0.75)
    assert w["dev/evidence/score"] == pytest.approx(0.0)            # one type present: its own mean
    assert w["dev/closed/correct"] == m["dev/closed/correct"]        # the shares stay plain
    # ... and the natural-mix shares the gate selection reads: correct yes/no 1/2, choice 1, open 0;
    # incorrect yes/no 1/2, choice 0, open 1/2
    assert w["dev/closed/natural/correct"] == pytest.approx(0.1 * 0.5 + 0.1 * 1 + 0.8 * 0)
    assert w["dev/closed/natural/incorrect"] == pytest.approx(0.1 * 0.5 + 0.1 * 0 + 0.8 * 0.5)
    assert m["dev/closed/natural/incorrect"] == m["dev/closed/incorrect"]   # no weights: the plain shares


def test_selection_by_the_gate_terms_ranks_right_answers_within_the_incorrect_bound():
    def dev(score, closed_c, closed_i, ev_c):
        return {"dev/score": score, "dev/closed/natural/correct": closed_c, "dev/closed/natural/incorrect": closed_i,
                "dev/evidence/natural/correct": ev_c, "dev/evidence/natural/incorrect": 0.4}
    # dev steps 0, 2 and 6 of a make train run (experiments/2026-11-diary.md, rounded)
    warm, answers_more, too_many_wrong = dev(-0.27, 0.035, 0.17, 0.53), dev(-0.32, 0.056, 0.18, 0.47), \
        dev(-0.26, 0.072, 0.34, 0.55)
    # the ternary score prefers the warm start and then the step with 34% wrong; the gate terms prefer more
    # closed-book right answers, whatever the passage half's noise says ...
    assert selection_value(warm, None) > selection_value(answers_more, None)
    assert selection_value(too_many_wrong, None) == (-0.26, 0.0, 0.0)
    assert selection_value(answers_more, 0.25) == (1.0, 0.056, 0.47)
    assert _better(selection_value(answers_more, 0.25), selection_value(warm, 0.25))
    # ... as long as closed-book incorrect stays within the bound; over it, any step within it wins
    assert selection_value(too_many_wrong, 0.25) == (0.0, -0.34, 0.55)
    assert _better(selection_value(warm, 0.25), selection_value(too_many_wrong, 0.25))
    assert _better(selection_value(dev(0, 0, 0.30, 0), 0.25), selection_value(too_many_wrong, 0.25))
    # a closed-book tie goes to the passage half; a full tie keeps the earlier step
    assert _better(selection_value(dev(0, 0.056, 0.2, 0.49), 0.25), selection_value(answers_more, 0.25))
    assert not _better(selection_value(answers_more, 0.25), selection_value(dict(answers_more), 0.25))
    with pytest.raises(ValueError, match="DEV_EVAL_MODES"):
        selection_value({"dev/score": 0.0}, 0.25)


def test_early_stopping_counts_evaluations_below_the_best_and_not_ties():
    """A make train run (RL seed 1; experiments/2026-11-diary.md): the closed-book selection values of its dev steps 0-12,
    rounded. Step 2 ties step 0 (RL had not changed a greedy answer yet); steps 10 and 12 are over the incorrect
    bound. Patience 1 must stop at step 10 with step 8 kept, as patience 2 kept it at step 12."""
    steps = [(0, (1.0, 0.0531, 0.0)), (2, (1.0, 0.0531, 0.0)), (4, (1.0, 0.0625, 0.0)), (6, (1.0, 0.0659, 0.0)),
             (8, (1.0, 0.0719, 0.0)), (10, (0.0, -0.2834, 0.0)), (12, (0.0, -0.333, 0.0))]

    def run(patience):
        best = best_step = None
        below = 0
        for step, value in steps:
            new_best, below = track_best(best, value, below)
            if new_best:
                best, best_step = value, step
            if below >= patience:
                return best_step, step
        return best_step, steps[-1][0]
    assert run(1) == (8, 10) and run(2) == (8, 12)
    assert track_best(None, (0.0, -0.5, 0.0), 3) == (True, 0)           # the first evaluation is the best
    assert track_best((1.0, 0.05, 0.0), (1.0, 0.05, 0.0), 1) == (False, 1)   # a tie keeps the count
    assert track_best((1.0, 0.05, 0.0), (1.0, 0.04, 0.0), 1) == (False, 2)   # below: one more
    assert track_best((1.0, 0.05, 0.0), (1.0, 0.06, 0.0), 2) == (True, 0)    # better: a new best


def test_grade_dev_uses_the_gold_grader_and_question_type():
    items = [QAItem(question="Is Paris in France?", knowledge="", right_answer="yes", uid="1"),
             QAItem(question="Who wrote Hamlet?", knowledge="", right_answer="William Shakespeare", uid="2"),
             QAItem(question="Who painted the Mona Lisa?", knowledge="", right_answer="Leonardo da Vinci", uid="3")]
    g = grade_dev(items, ["closed"] * 3, ["Yes, it is.", "I don't know.", "Michelangelo painted it."])
    assert [(x.qtype, x.correct, x.abstained) for x in g] == [("yes_no", True, False), ("open", False, True),
                                                              ("open", False, False)]


def test_dev_items_fixed_subset_and_refuses_test():
    from core.questions import question_type
    a, natural = dev_items("halueval:dev", 20)
    assert len(a) == 20 and [x.question for x in a] == [x.question for x in dev_items("halueval:dev", 20)[0]]
    assert sum(natural.values()) == pytest.approx(1.0) and natural["open"] > 0.7   # the split's own mix
    # stratified: at least a quarter yes/no and a quarter two-option, distinct questions, still fixed per run
    s, same = dev_items("halueval:dev", 64, 0.25)
    types = [question_type(x.question) for x in s]
    assert len({x.question for x in s}) == 64 and same == natural
    assert types.count("yes_no") >= 16 and types.count("choice") >= 16
    with pytest.raises(ValueError, match="held-out"):
        dev_items("halueval:test", 5)
    with pytest.raises(ValueError, match="DEV_EVAL_DATA=/no/such.jsonl"):
        dev_items("/no/such.jsonl", 5)


def test_config_needs_dev_eval_for_early_stop_and_best():
    from core.config import RLFHConfig
    with pytest.raises(ValueError, match="DEV_EVAL_STEP"):
        RLFHConfig(early_stop_patience=2)
    with pytest.raises(ValueError, match="DEV_EVAL_STEP"):
        RLFHConfig(final_model="best")
    assert RLFHConfig(dev_eval_step=2, final_model="best", early_stop_patience=2).dev_eval_modes == "closed"
    with pytest.raises(ValueError, match="ABSTAIN_TARGET_RATE"):
        RLFHConfig(abstain_target_rate=0.5)
    assert RLFHConfig(abstain_target_rate=0.5, outcome_reward="ternary").abstain_target_rate_step == 1.0
    with pytest.raises(ValueError, match="ABSTAIN_OUTCOME_REWARD_MODE=answer-mean"):
        RLFHConfig(abstain_outcome_reward_mode="answer-mean", outcome_reward="none", token_reward_weight=1.0)
    both = RLFHConfig(abstain_outcome_reward_mode="answer-mean", abstain_target_rate=0.5, outcome_reward="ternary")
    assert both.abstain_target_rate == 0.5     # the controller moves the margin (core.abstention.step_abstain_reward)


@pytest.mark.slow
def test_trainer_evaluates_dev_in_the_loop_and_keeps_the_best_step(tmp_path, tiny_model_path):
    """The real loop (Ray actor groups, tiny random model: mechanics, not learning) with DEV_EVAL_STEP=1:
    an evaluation before the first step and after each step, in metrics.jsonl / dev_eval.jsonl / the curves,
    and FINAL_MODEL=best exports the snapshot of the best dev step. It runs the abstention recipe's reward
    branch too (make train's): the gold-judged ternary outcome, one injected "I don't know." per group, the
    price controller, the KL anchor, closed-book and evidence prompts mixed."""
    import json

    from cluster.driver import Trainer
    from core.config import RLFHConfig
    from core.ray_bootstrap import start_ray
    from doubles import KeywordReward
    cfg = RLFHConfig.load(
        environ={}, model_path=tiny_model_path, save_path=str(tmp_path), prompt_data="halueval:train",
        max_samples=32, rollout_batch_size=2, n_samples_per_prompt=2, generate_max_len=6, prompt_max_len=96,
        train_batch_size=4, micro_train_batch_size=4, micro_rollout_batch_size=8, advantage_estimator="rloo",
        kl_coef=0.1, actor_lr=1e-3, max_steps=2, seed=3, use_tensorboard=False, rollout_backend="hf",
        dev_eval_step=1, dev_eval_size=4, dev_eval_modes="closed+evidence", dev_eval_max_len=4, final_model="best",
        prompt_mode="mixed", evidence_share=0.5, outcome_reward="ternary", outcome_grader="gold",
        abstain_outcome_reward=-0.5, abstain_samples=1, abstain_target_rate=0.5, abstain_target_rate_step=0.2,
        dev_select_max_incorrect=0.5)
    handle = start_ray(cfg, num_cpus=4, include_dashboard=False)
    trainer = Trainer(cfg, reward_fn=KeywordReward("the"), show_progress=False)
    try:
        trainer.setup()
        result = trainer.fit()
    finally:
        trainer.close()
        handle.shutdown()
    assert result.completed
    dev = [json.loads(x) for x in (tmp_path / "dev_eval.jsonl").read_text().splitlines()]
    assert [d["step"] for d in dev] == [0, 1, 2]
    for d in dev:
        for k in ("dev/closed/correct", "dev/closed/incorrect", "dev/closed/abstain", "dev/evidence/correct",
                  "dev/score", "dev/best_step"):
            assert k in d, k
        assert d["dev/closed/correct"] + d["dev/closed/incorrect"] + d["dev/closed/abstain"] == pytest.approx(1.0)
    assert all("dev/score" in r for r in result.history)           # merged into each evaluated step's record
    for r in result.history:   # the ternary branch: gold outcomes, one injected abstention per prompt, the price
        assert r["injected_abstentions"] == 2 and 0.0 <= r["gold_abstain_rate"] <= 1.0
        assert any(k.startswith("rollout/abstain/") for k in r), sorted(r)
        assert -1.0 <= r["abstain_price"] <= 1.0
    # the controller: price - step * (closed-book sampled abstention rate - target), used from the next step on
    first, second = result.history[0], result.history[1]
    rate = first.get("gold_abstain_rate/closed", first["gold_abstain_rate"])
    assert first["abstain_price"] == -0.5
    assert second["abstain_price"] == pytest.approx(-0.5 - 0.2 * (rate - 0.5))
    answers = (tmp_path / "dev_answers.jsonl").read_text().splitlines()
    assert len(answers) == 3 * 2 * 4                                 # 3 evaluations x 2 modes x 4 questions
    best_step = int(dev[-1]["dev/best_step"])
    # DEV_SELECT_MAX_INCORRECT: the best step is the one the gate terms rank first (the earliest of equals)
    ranked = max(dev, key=lambda d: (selection_value(d, 0.5), -d["step"]))
    assert best_step == ranked["step"]
    assert json.loads((tmp_path / "snapshots" / "best" / "dev_eval.json").read_text())["step"] == best_step
    assert (tmp_path / "final" / "config.json").is_file()
    assert (tmp_path / "training_curves.png").stat().st_size > 10_000


def test_colocated_layout_names_the_settings_it_ignores():
    from cluster.setup_checks import ignored_by_layout
    from core.config import RLFHConfig
    cfg = RLFHConfig(vllm_num_engines=2, colocate_all_models=True, critic_num_nodes=1)
    assert ignored_by_layout(cfg, "colocated") == ["vllm_num_engines", "colocate_all_models"]
    assert ignored_by_layout(cfg, "separate") == []
    assert ignored_by_layout(RLFHConfig(), "colocated") == []
