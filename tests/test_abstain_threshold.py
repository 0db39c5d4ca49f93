"""`rlfh eval --abstain-threshold`: abstention decided by the model's own P(abstain text | prompt), with the real
SmolLM2-135M-Instruct (a few halueval:test questions, short answers)."""
from __future__ import annotations

import json
import math
import shutil
import statistics

import pytest
import torch

from test_eval_cli import rlfh_in_process

ABSTAIN = "I don't know."


# real model: thresholds at the median of P(abstain) need a model whose P(abstain) differs by question
@pytest.fixture(scope="module")
def model_and_prompts(embedded_model_path, halueval_test_items):
    from core.model_loader import load_causal_lm, load_tokenizer
    from core.prompts import SYSTEM_DEFAULT, render_prompt
    from evaluation.runner import subsample
    tok = load_tokenizer(embedded_model_path)
    model = load_causal_lm(embedded_model_path).eval()
    items = subsample(list(halueval_test_items), 6)
    prompts = [render_prompt(tok, it.question, it.knowledge_text, "closed", system=SYSTEM_DEFAULT) for it in items]
    return model, tok, prompts


def test_abstain_probability_is_the_whole_replys_teacher_forced_probability(model_and_prompts):
    from evaluation.confidence import abstain_probability
    model, tok, prompts = model_and_prompts
    got = abstain_probability(model, tok, prompts, ABSTAIN, batch_size=4)
    a_ids = tok(ABSTAIN, add_special_tokens=False)["input_ids"]
    for prompt, p in zip(prompts, got):
        # one unbatched forward, summed token log-probs of the reply: the definition, written out
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([p_ids + a_ids])
        with torch.inference_mode():
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
        want = math.exp(sum(logp[len(p_ids) - 1 + j, t].item() for j, t in enumerate(a_ids)))
        assert 0.0 < p < 1.0
        assert p == pytest.approx(want, rel=1e-3)
    with pytest.raises(ValueError, match="abstain_text is empty"):
        abstain_probability(model, tok, prompts, "", batch_size=4)


def test_suppressed_first_token_changes_the_greedy_reply(model_and_prompts):
    from evaluation.generate import generate_greedy
    model, tok, prompts = model_and_prompts
    free, _ = generate_greedy(model, tok, prompts[:3], batch_size=3, max_new_tokens=6, progress=False)
    for prompt, g in zip(prompts[:3], free):
        first = tok(g.text, add_special_tokens=False)["input_ids"][0]
        (blocked,), _ = generate_greedy(model, tok, [prompt], batch_size=1, max_new_tokens=6, progress=False,
                                        suppress_first_ids=[first])
        assert blocked.text and tok(blocked.text, add_special_tokens=False)["input_ids"][0] != first


def test_threshold_declines_exactly_where_p_abstain_exceeds_it(tmp_path, model_and_prompts):
    """Threshold at the median of the questions' P(abstain): the upper half is declined with the abstention text
    (graded not attempted), the lower half answered and never with the abstention's first token."""
    from evaluation.confidence import abstain_probability
    from evaluation.runner import EvalConfig, run_eval
    model, tok, prompts = model_and_prompts
    ps = abstain_probability(model, tok, prompts, ABSTAIN, batch_size=6)
    assert len(set(ps)) == len(ps)
    tau = statistics.median(ps)
    out = tmp_path / "thr"
    s = run_eval(EvalConfig(model="smollm2-135m-instruct", data="halueval:test", limit=6, max_new_tokens=12,
                            batch_size=6, out=str(out), name="thr", verifier=False, progress=False, n_boot=50,
                            abstain_threshold=tau))
    recs = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    assert [r["p_abstain"] for r in recs] == pytest.approx(ps, rel=1e-3)
    declined = [r for r in recs if r["p_abstain"] > tau]
    answered = [r for r in recs if r["p_abstain"] <= tau]
    assert len(declined) == 3 and len(answered) == 3
    for r in declined:
        assert r["answer"] == ABSTAIN and r["grade"] == "not_attempted" and r["abstained"]
    first_abstain_id = tok(ABSTAIN, add_special_tokens=False)["input_ids"][0]
    for r in answered:
        assert r["answer"] and tok(r["answer"], add_special_tokens=False)["input_ids"][0] != first_abstain_id
    assert s["abstain_threshold"] == tau and s["abstain_text"] == ABSTAIN
    assert s["metrics"]["gold"]["not_attempted"]["value"] >= 0.5

    # a changed threshold is not re-used from the earlier run
    s2 = run_eval(EvalConfig(model="smollm2-135m-instruct", data="halueval:test", limit=6, max_new_tokens=12,
                             batch_size=6, out=str(out), name="thr", verifier=False, progress=False, n_boot=50,
                             abstain_threshold=min(ps) / 2, reuse=True))
    assert not s2.get("reused") and s2["metrics"]["gold"]["not_attempted"]["value"] == 1.0


def test_abstain_model_decides_and_the_evaluated_model_answers(tmp_path, tiny_model_path, model_and_prompts):
    """The 135M model as the gate in front of the tiny random Llama: declines follow the gate's probabilities,
    the answers are the tiny model's."""
    from evaluation.confidence import abstain_probability
    from evaluation.runner import EvalConfig, run_eval
    model, tok, prompts = model_and_prompts
    ps = abstain_probability(model, tok, prompts, ABSTAIN, batch_size=6)
    tau = statistics.median(ps)
    out = tmp_path / "gate"
    s = run_eval(EvalConfig(model=tiny_model_path, abstain_model="smollm2-135m-instruct", data="halueval:test",
                            limit=6, max_new_tokens=8, batch_size=6, out=str(out), verifier=False, progress=False,
                            n_boot=50, abstain_threshold=tau))
    recs = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    assert [r["p_abstain"] for r in recs] == pytest.approx(ps, rel=1e-3)
    assert [r["answer"] == ABSTAIN for r in recs] == [p > tau for p in ps]
    assert s["abstain_model"] == "smollm2-135m-instruct" and s["abstain_model_fingerprint"]

    # a gate with another vocabulary cannot score the evaluated model's prompts
    from transformers import AutoTokenizer
    other = tmp_path / "other-tok"
    shutil.copytree(tiny_model_path, other)
    t = AutoTokenizer.from_pretrained(other)
    t.add_tokens(["<not-in-the-base-vocab>"])
    t.save_pretrained(other)
    with pytest.raises(ValueError, match="tokenizer differs"):
        run_eval(EvalConfig(model="smollm2-135m-instruct", abstain_model=str(other), data="halueval:test", limit=2,
                            max_new_tokens=4, out=str(tmp_path / "o2"), verifier=False, progress=False,
                            abstain_threshold=0.5))


def test_abstain_options_bad_input_is_a_clear_error(tmp_path, tiny_model_path, capsys):
    def run(*args: str):   # bad input: in this process (tests/test_eval_cli.py runs the command)
        return rlfh_in_process(capsys, *args)

    r = run("eval", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "o"), "--abstain-threshold", "1.5")
    assert r.returncode == 2 and "--abstain-threshold must be in [0, 1]" in r.stderr
    r = run("eval", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "o"),
            "--abstain-model", tiny_model_path)
    assert r.returncode == 2 and "--abstain-model needs --abstain-threshold" in r.stderr
    r = run("eval", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "o"), "--abstain-threshold", "0.5",
            "--abstain-text", "  ")
    assert r.returncode == 2 and "--abstain-text must not be empty" in r.stderr
