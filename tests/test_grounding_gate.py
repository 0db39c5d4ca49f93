"""The evidence-mode grounding gate: `verifier_service.text.grounded_share`, `evaluation.runner.apply_grounding_gate`
and `rlfh eval --grounding-gate --answers-from` end to end with the real SmolLM2-135M-Instruct."""
from __future__ import annotations

import json

import pytest

from core.data import QAItem
from core.prompts import ABSTAIN_TEXT
from evaluation.generate import Generation
from evaluation.runner import apply_grounding_gate
from test_eval_cli import rlfh, rlfh_in_process
from verifier_service.text import grounded_share

PASSAGE = ("The Eiffel Tower was designed by the engineering company of Gustave Eiffel and completed in 1889 in "
           "Paris. It was founded as the entrance arch of the World's Fair.")


def test_grounded_share_counts_what_the_answer_adds_and_finds_in_the_passage():
    q = "Who designed the Eiffel Tower?"
    assert grounded_share("Gustave Eiffel designed it.", q, PASSAGE) == 1.0   # 'gustave' is in the passage
    assert grounded_share("Gustave Eiffel designed it in Lyon.", q, PASSAGE) == pytest.approx(1 / 2)
    assert grounded_share("Marie Curie.", q, PASSAGE) == 0.0                   # nothing it adds is in the passage
    # restating the question, or yes / no, adds no content word
    assert grounded_share("The Eiffel Tower was designed.", q, PASSAGE) is None
    assert grounded_share("Yes.", "Was the Eiffel Tower completed in 1889?", PASSAGE) is None
    # stemmed: 'founding' matches the passage's 'founded'; numbers count as content
    assert grounded_share("Its founding in 1889.", q, PASSAGE) == 1.0
    assert grounded_share("In 1887.", q, PASSAGE) == 0.0


def _gen(text: str) -> Generation:
    return Generation(text=text, prompt_tokens=100, new_tokens=7, truncated=False)


def test_apply_grounding_gate_declines_only_ungrounded_answers_to_open_questions(embedded_model_path):
    from core.model_loader import load_tokenizer
    tok = load_tokenizer(embedded_model_path)
    cases = [  # (question, answer, declined?)
        ("Who designed the Eiffel Tower?", "Gustave Eiffel.", False),                  # grounded
        ("Who designed the Eiffel Tower?", "Marie Curie designed it.", True),          # adds only outside words
        ("Who designed the Eiffel Tower?", "The Eiffel Tower was designed by.", True),  # restates the question
        ("Was the Eiffel Tower completed in 1889?", "Yes.", False),                    # yes/no: never gated
        ("Is the Eiffel Tower in Paris or Lyon?", "Lyon.", False),                     # either-or: never gated
        ("Who designed the Eiffel Tower?", "I don't know.", False),                    # already abstains
    ]
    items = [QAItem(question=q, knowledge=[PASSAGE], right_answer="Gustave Eiffel") for q, _, _ in cases]
    gens = [_gen(a) for _, a, _ in cases]
    shares = [grounded_share(a, q, PASSAGE) for q, a, _ in cases]
    out, ungated = apply_grounding_gate(gens, items, shares, ABSTAIN_TEXT, tok)
    for (q, a, declined), g, u in zip(cases, out, ungated):
        if declined:
            assert g.text == ABSTAIN_TEXT and u == a, (q, a)
            assert g.new_tokens == len(tok(ABSTAIN_TEXT, add_special_tokens=False)["input_ids"])
        else:
            assert g.text == a and u is None, (q, a)


# real model: the gate is checked on the real model's evidence answers (grounded and ungrounded ones)
def test_eval_grounding_gate_on_reused_answers_with_real_model(tmp_path):
    base = tmp_path / "base"
    common = ["--model", "smollm2-135m-instruct", "--data", "halueval:test", "--mode", "evidence", "--limit", "6",
              "--max-new-tokens", "16", "--batch-size", "6", "--no-progress", "--no-verifier"]
    r = rlfh("eval", *common, "--name", "base", "--out", str(base))
    assert r.returncode == 0, r.stderr[-3000:]
    gated = tmp_path / "gated"
    r = rlfh("eval", *common, "--name", "gated", "--out", str(gated), "--grounding-gate",
             "--answers-from", str(base))
    assert r.returncode == 0, r.stderr[-3000:]
    b = [json.loads(x) for x in (base / "answers.jsonl").read_text().splitlines()]
    g = [json.loads(x) for x in (gated / "answers.jsonl").read_text().splitlines()]
    assert [x["key"] for x in b] == [x["key"] for x in g]
    for rb, rg in zip(b, g):
        # every evidence-mode record carries the share, gated or not; the gate re-uses the base's answers
        assert rb["grounded_share"] == rg["grounded_share"]
        if rg["ungated_answer"] is not None:
            assert rg["ungated_answer"] == rb["answer"] and rg["answer"] == ABSTAIN_TEXT
            assert rg["grade"] == "not_attempted" and rg["qtype"] == "open"
            assert not rb["grounded_share"]
        else:
            assert rg["answer"] == rb["answer"] and rg["grade"] == rb["grade"]
            assert rg["qtype"] != "open" or rb["grounded_share"] or rb["abstained"]
    s = json.loads((gated / "summary.json").read_text())
    assert s["grounding_gate"] is True and s["answers_from"] == str(base)


def test_grounding_gate_and_answers_from_bad_input_is_a_clear_error(tmp_path, capsys):
    def run(*args: str):   # bad input: in this process (the command runs for real above)
        return rlfh_in_process(capsys, *args)

    r = run("eval", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "o"), "--grounding-gate")
    assert r.returncode == 2 and "--grounding-gate needs --mode evidence" in r.stderr
    r = run("eval", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "o"),
            "--answers-from", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "no summary.json / answers.jsonl there" in r.stderr
    src = tmp_path / "src"
    src.mkdir()
    (src / "answers.jsonl").write_text("")
    (src / "summary.json").write_text(json.dumps({"data": "halueval:test", "mode": "closed", "max_new_tokens": 8}))
    r = run("eval", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "o"), "--answers-from", str(src))
    assert r.returncode == 2 and "re-use only a run of the same model and settings" in r.stderr
    r = run("eval", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "o"), "--answers-from", str(src),
            "--abstain-threshold", "0.5")
    assert r.returncode == 2 and "cannot be combined with --abstain-threshold" in r.stderr


def test_demo_rejects_an_unknown_recipe_before_doing_anything(tmp_path):
    import os
    import subprocess
    from test_eval_cli import REPO
    env = dict(os.environ, DEMO_RECIPE="ppo", DEMO_DIR=str(tmp_path / "demo"))
    r = subprocess.run(["bash", "scripts/demo.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "RECIPE (--recipe) = 'ppo'" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "demo").exists()
