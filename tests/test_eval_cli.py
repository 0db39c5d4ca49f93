"""`rlfh eval` and `rlfh compare` end to end with the real SmolLM2-135M-Instruct (a few items, short answers)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.grader import GRADES

REPO = Path(__file__).resolve().parents[1]


def rlfh(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", RLFH_LOG_LEVEL="WARNING")
    return subprocess.run([sys.executable, "-m", "rlfh", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def rlfh_in_process(capsys, *args: str) -> subprocess.CompletedProcess:
    """`rlfh ARGS` through :func:`rlfh.cli.main` in this process: the same parser, checks, messages and exit
    status as the command, without a Python start and torch / transformers imports per call (~4 s each on the
    2-core CI machine). For help texts and bad input; the command itself runs as a subprocess in the end-to-end
    tests (``rlfh`` above)."""
    from rlfh.cli import main
    capsys.readouterr()
    try:
        rc = main(list(args))
    except SystemExit as e:    # argparse: --help (0), a usage error (2)
        rc = e.code if isinstance(e.code, int) else int(e.code is not None)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["rlfh", *args], rc, out, err)


def test_eval_help_lists_every_option(capsys):
    r = rlfh_in_process(capsys, "eval", "--help")
    assert r.returncode == 0
    for opt in ("--model", "--data", "--mode", "--out", "--limit", "--batch-size", "--max-new-tokens", "--system"):
        assert opt in r.stdout
    r = rlfh_in_process(capsys, "compare", "--help")
    assert r.returncode == 0 and "--run" in r.stdout and "McNemar" in r.stdout


def test_eval_bad_data_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "Who?", "knowledge": "x"}) + "\n")
    r = rlfh_in_process(capsys, "eval", "--model", "smollm2-135m-instruct", "--data", str(bad),
                        "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    assert "right_answer" in r.stderr
    r = rlfh_in_process(capsys, "eval", "--model", "smollm2-135m-instruct", "--data", str(tmp_path / "nope.jsonl"),
                        "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "no such file" in r.stderr


def test_compare_needs_eval_folders(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    r = rlfh_in_process(capsys, "compare", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "rep"))
    assert r.returncode == 2 and "summary.json" in r.stderr


def _statements(correct: int, wrong: int) -> dict:
    """An answer's verifier record (as `rlfh eval` writes it) with these numbers of Correct and Wrong statements."""
    labels = {"Correct": correct, "Hedged correct": 0, "Vague": 0, "Hedged wrong": 0, "Wrong": wrong}
    n = correct + wrong
    return {"num_statements": n, "labels": labels, "abstained": False, "fact_precision": correct / n if n else None,
            "num_unaligned": 0, "num_fallback": 0}


def _write_run(folder: Path, name: str, mode: str, answers: list[tuple[str, str, str]],
               statements=None) -> Path:
    """An eval folder as `rlfh eval` writes it, from hand-written (question, gold, answer) triples; ``statements``
    gives each answer's verifier record (:func:`_statements`), by its index."""
    from core.grader import grade_answer
    from evaluation.runner import pair_key, summarise
    folder.mkdir(parents=True)
    recs = []
    for q, gold, ans in answers:
        gr = grade_answer(ans, gold, q)
        recs.append({"uid": q[:8], "key": pair_key(q), "question": q, "gold": gold, "answer": ans, "grade": gr.grade,
                     "reason": gr.reason, "hedged": gr.hedged, "abstained": gr.abstained, "f1": gr.f1,
                     "answer_words": len(ans.split()), "new_tokens": 5, "prompt_tokens": 50, "truncated": False,
                     "verifier": statements(len(recs)) if statements else None})
    (folder / "answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (folder / "summary.json").write_text(json.dumps({"name": name, "mode": mode, "data": "hand.jsonl",
                                                     "metrics": summarise(recs, n_boot=100)}))
    return folder


def test_compare_hand_built_runs_mcnemar_and_verdict(tmp_path, capsys):
    qs = [(f"What is the capital of country number {i}?", f"City{i}") for i in range(30)]
    # base: 20 wrong, 10 right. trained: abstains on 12 of the 20 wrong, keeps all 10 right.
    base = [(q, g, "It is Wrongville." if i < 20 else f"It is {g}.") for i, (q, g) in enumerate(qs)]
    trained = [(q, g, "I don't know." if i < 12 else a) for i, (q, g, a) in enumerate(base)]
    a = _write_run(tmp_path / "base", "base", "closed", base)
    b = _write_run(tmp_path / "trained", "trained", "closed", list(reversed(trained)))  # order must not matter
    rep = tmp_path / "report"
    r = rlfh("compare", str(a), str(b), "--out", str(rep), "--n-boot", "300")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((rep / "report.json").read_text())
    (group,) = report["groups"].values()
    (pair,) = group["pairs"]
    assert pair["n_paired"] == 30
    inc, cor = pair["mcnemar_incorrect"], pair["mcnemar_correct"]
    assert (inc["a_only"], inc["b_only"]) == (12, 0)
    assert inc["p_value"] == pytest.approx(2 / 2 ** 12)
    assert (cor["a_only"], cor["b_only"], cor["p_value"]) == (0, 0, 1.0)
    assert pair["success"] and pair["verdict"] == "fewer hallucinations, correct answers kept"
    m = {x["name"]: x["metrics"] for x in group["models"]}
    assert m["trained"]["abstain_rate"]["value"] == pytest.approx(12 / 30)
    assert m["base"]["gold"]["incorrect"]["value"] == pytest.approx(20 / 30)
    assert pair["diff"]["incorrect"]["value"] == pytest.approx(-12 / 30)
    for png in ("outcomes.png", "tradeoff.png"):
        assert (rep / png).read_bytes()[:4] == b"\x89PNG"
    assert "training_curves.png" not in (rep / "report.md").read_text()

    # a model that refuses everything: fewer hallucinations AND significantly fewer correct answers
    refuse = [(q, g, "I don't know.") for q, g, _ in base]
    c = _write_run(tmp_path / "refuser", "refuser", "closed", refuse)
    r = rlfh_in_process(capsys, "compare", str(a), str(c), "--out", str(tmp_path / "rep2"), "--n-boot", "100")
    assert r.returncode == 0
    (group,) = json.loads((tmp_path / "rep2" / "report.json").read_text())["groups"].values()
    assert group["pairs"][0]["verdict"] == "fewer hallucinations but also fewer correct answers"
    assert not group["pairs"][0]["success"]

    # --expect gates on it: met for trained (whichever side of the pair it is), not met for the refuser
    r = rlfh_in_process(capsys, "compare", str(b), str(a), "--out", str(tmp_path / "rep3"), "--n-boot", "100",
                        "--expect", "trained")
    assert r.returncode == 0 and "EXPECTATION MET" in r.stdout, r.stdout[-2000:]
    r = rlfh_in_process(capsys, "compare", str(a), str(c), "--out", str(tmp_path / "rep4"), "--n-boot", "100",
                        "--expect", "refuser")
    assert r.returncode == 3 and "refuser vs base: fewer hallucinations but also fewer correct answers" in r.stdout
    r = rlfh_in_process(capsys, "compare", str(a), str(c), "--out", str(tmp_path / "rep5"), "--n-boot", "100",
                        "--expect", "nobody")
    assert r.returncode == 2 and "no run has that name; the runs are base, refuser" in r.stderr
    # --expect-mode limits the gate to the named modes (these runs are all closed-book)
    r = rlfh_in_process(capsys, "compare", str(a), str(c), "--out", str(tmp_path / "rep6"), "--n-boot", "100",
                        "--expect", "refuser", "--expect-mode", "evidence")
    assert r.returncode == 2 and "no run has that name in mode evidence" in r.stderr
    r = rlfh_in_process(capsys, "compare", str(a), str(c), "--out", str(tmp_path / "rep7"), "--n-boot", "100",
                        "--expect", "refuser", "--expect-mode", "closed")
    assert r.returncode == 3


@pytest.mark.slow
# real model: the documented `rlfh eval --model smollm2-135m-instruct` run, graded and verified as a user runs it
def test_eval_and_compare_with_real_model(tmp_path):
    runs = {}
    for name, system, mode in (("base", "default", "closed"), ("prompt-only", "may-abstain", "closed")):
        out = tmp_path / name
        knowledge = ["--knowledge-samples", "2"] if name == "base" else []
        r = rlfh("eval", "--model", "smollm2-135m-instruct", "--data", "halueval:test", "--mode", mode,
                 "--system", system, "--limit", "4", "--max-new-tokens", "16", "--batch-size", "4",
                 "--name", name, "--out", str(out), "--no-progress", *knowledge)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "correct" in r.stdout and "incorrect" in r.stdout
        recs = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
        assert len(recs) == 4
        for rec in recs:
            assert rec["grade"] in GRADES
            assert rec["gold"] and isinstance(rec["answer"], str)
            assert 0 < rec["new_tokens"] <= 16
            v = rec["verifier"]
            assert v is not None and v["num_statements"] == sum(v["labels"].values())
            # two sampled answers per question, each graded: the share right is 0, 1/2 or 1
            assert rec["known_rate"] in ((0.0, 0.5, 1.0) if knowledge else (None,))
        s = json.loads((out / "summary.json").read_text())
        assert s["mode"] == mode and s["system"] == system and s["metrics"]["n"] == 4
        gold = s["metrics"]["gold"]
        assert sum(gold[k]["value"] for k in ("correct", "incorrect", "not_attempted")) == pytest.approx(1.0)
        for k, e in gold.items():
            assert e["ci95"][0] <= e["value"] <= e["ci95"][1], k
        runs[name] = out

    # same deterministic subset for both runs (pairs by question)
    qa = [json.loads(x)["key"] for x in (runs["base"] / "answers.jsonl").read_text().splitlines()]
    qb = [json.loads(x)["key"] for x in (runs["prompt-only"] / "answers.jsonl").read_text().splitlines()]
    assert qa == qb

    # a training run folder with a few metrics records (as the driver writes them)
    run_dir = tmp_path / "train"
    run_dir.mkdir()
    with open(run_dir / "metrics.jsonl", "w") as fh:
        for step in range(1, 4):
            fh.write(json.dumps({"step": step, "reward_mean": -0.5 + 0.2 * step, "kl": 0.01 * step,
                                 "label_share/Correct": 0.1 * step, "label_share/Wrong": 0.8 - 0.1 * step,
                                 "abstain_rate": 0.1 * step, "correct_rate": 0.05, "response_length": 30 - step})
                     + "\n")
    rep = tmp_path / "report"
    r = rlfh("compare", str(runs["base"]), str(runs["prompt-only"]), "--out", str(rep), "--run", str(run_dir),
             "--n-boot", "200")
    assert r.returncode == 0, r.stderr[-3000:]
    md = (rep / "report.md").read_text()
    assert "prompt-only" in md and "McNemar" in md and "training verifier" in md
    assert "Outcomes by what base knew" in md  # the base recorded --knowledge-samples
    for png in ("outcomes.png", "tradeoff.png", "training_curves.png"):
        p = rep / png
        assert p.exists() and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert f"]({png})" in md
    report = json.loads((rep / "report.json").read_text())
    (group,) = report["groups"].values()
    (pair,) = group["pairs"]
    assert pair["n_paired"] == 4
    assert 0.0 <= pair["mcnemar_incorrect"]["p_value"] <= 1.0
    assert report["training"]["steps"] == 3


def test_heldout_summary_tables_and_verdicts(tmp_path, capsys):
    """`make train`'s last step (cluster/heldout_summary.py) on hand-built runs: a selective closed-book model
    passes, an evidence-mode model that lost right answers fails, and the table has the random-abstention row."""
    from cluster.heldout_summary import main as summary_main
    qs = [(f"Which city hosts museum number {i}?", f"City{i}") for i in range(40)]
    base = [(q, g, "It is Wrongville." if i < 30 else f"It is {g}.") for i, (q, g) in enumerate(qs)]
    selective = [(q, g, "I don't know." if i < 24 else a) for i, (q, g, a) in enumerate(base)]
    lost = [(q, g, "I don't know." if i >= 30 else a) for i, (q, g, a) in enumerate(base)]   # declines the right ones
    runs = [_write_run(tmp_path / "bc", "base", "closed", base), _write_run(tmp_path / "tc", "trained", "closed", selective),
            _write_run(tmp_path / "be", "base", "evidence", base), _write_run(tmp_path / "te", "trained", "evidence", lost)]
    rep = tmp_path / "rep"
    r = rlfh("compare", *map(str, runs), "--out", str(rep), "--n-boot", "100")
    assert r.returncode == 0, r.stderr[-2000:]
    rc = summary_main([str(rep / "report.json")])
    out = capsys.readouterr().out
    assert rc == 3                                             # the evidence half fails
    # not strict (HELDOUT_STRICT off): the check that was not met reads "not met", never FAILED
    assert "PASSED: selective" in out and "not met: significantly fewer correct answers" in out
    assert "FAILED" not in out
    assert "random abstention (base declining 24, as many as trained)" in out and "question-type rule" in out
    assert "accuracy on attempted" in out
    # 40 questions, 10 right for the base: the closed-book verdict says how little it can show at this size
    assert out.count("note: 40 questions, 10 of them answered right by base") == 1 and "HELDOUT_LIMIT=300" in out
    assert summary_main([str(tmp_path / "missing.json")]) == 2


def test_grounded_gate_needs_more_right_fewer_wrong_and_precision_without_saying_less(tmp_path, capsys):
    """HELDOUT_GATE=grounded on hand-built runs with the passage: a model that answers 16 more of 40 right and
    states more supported facts passes; one whose precision rises only because it says less fails, naming it."""
    from cluster.heldout_summary import main as summary_main
    qs = [(f"Which city hosts museum number {i}?", f"City{i}") for i in range(40)]
    base = [(q, g, "It is Wrongville." if i < 24 else f"It is {g}.") for i, (q, g) in enumerate(qs)]
    better = [(q, g, f"It is {g}." if i < 16 or i >= 24 else a) for i, (q, g, a) in enumerate(base)]
    runs = [_write_run(tmp_path / "be", "base", "evidence", base, lambda i: _statements(1, 1)),
            _write_run(tmp_path / "te", "trained", "evidence", better, lambda i: _statements(2, 0)),
            _write_run(tmp_path / "bc", "base", "closed", base), _write_run(tmp_path / "tc", "trained", "closed", base)]
    rep = tmp_path / "rep"
    r = rlfh("compare", *map(str, runs), "--out", str(rep), "--n-boot", "100", "--expect", "trained",
             "--gate", "grounded", "--expect-mode", "evidence")
    assert r.returncode == 0 and "EXPECTATION MET (evidence mode)" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert summary_main([str(rep / "report.json"), "--gate", "grounded"]) == 0
    out = capsys.readouterr().out
    assert "PASSED: more right answers, fewer wrong ones, higher fact precision" in out
    assert "PASSED: correct answers not significantly fewer" in out    # closed book: only kept, not gated
    assert "supported per answer" in out and "2.00" in out and "50.0" in out and "100.0" in out
    # the same answers, but precision from saying less: one statement, half of what the base had supported
    terse = tmp_path / "terse"
    _write_run(terse, "trained", "evidence", better, lambda i: _statements(1, 0) if i % 2 else _statements(0, 0))
    rep2 = tmp_path / "rep2"
    r = rlfh("compare", str(runs[0]), str(terse), "--out", str(rep2), "--n-boot", "100", "--expect", "trained",
             "--gate", "grounded")
    assert r.returncode == 3 and "precision bought by saying less" in r.stdout, r.stdout[-2000:]
    # `make demo` adds the prompt-only baseline: the gate holds against it too. One that answers as the base does
    # leaves the verdict as it was; one that answers as well as the trained model takes the gain from training
    for po_answers, po_statements, rc in ((base, lambda i: _statements(1, 1), 0), (better, lambda i: _statements(2, 0), 3)):
        po = _write_run(tmp_path / f"po{rc}", "prompt-only", "evidence", po_answers, po_statements)
        r = rlfh("compare", str(runs[0]), str(po), str(runs[1]), "--out", str(tmp_path / f"rep-po{rc}"),
                 "--n-boot", "100", "--expect", "trained", "--gate", "grounded")
        assert r.returncode == rc, r.stdout[-2000:] + r.stderr[-2000:]
        assert ("vs prompt-only (needs +10" in r.stdout) == (rc == 3), r.stdout[-2000:]
        assert "vs base (needs" not in r.stdout
    # too small a gain fails with the margin named; the selective gate is still the default
    small = [(q, g, f"It is {g}." if i < 2 or i >= 24 else a) for i, (q, g, a) in enumerate(base)]
    _write_run(tmp_path / "small", "trained", "evidence", small, lambda i: _statements(2, 0))
    r = rlfh("compare", str(runs[0]), str(tmp_path / "small"), "--out", str(tmp_path / "rep3"), "--n-boot", "100",
             "--expect", "trained", "--gate", "grounded")
    assert r.returncode == 3 and "needs +10" in r.stdout and "needs -15" in r.stdout, r.stdout[-2000:]
    r = rlfh("compare", str(runs[0]), str(tmp_path / "small"), "--out", str(tmp_path / "rep4"), "--n-boot", "100",
             "--expect", "trained", "--gate", "closed-book")
    assert r.returncode == 2 and "--gate" in r.stderr


def test_heldout_summary_percent_never_prints_negative_zero():
    """A share computed as 1 - (correct + incorrect) can land a hair below zero (the base's 'not attempted')."""
    from cluster.heldout_summary import _pct
    assert _pct(1 - (0.07 + 0.93)) == "0.0" and _pct(-1e-17) == "0.0"
    assert _pct(0.123) == "12.3" and _pct(None) == "-"


def test_greedy_answers_are_cached_then_shipped_then_computed(tmp_path, tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.data import QAItem
    from evaluation.answer_cache import answers_cache_path, greedy_answers
    from evaluation.generate import generate_greedy
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    items = [QAItem(question=f"Is {c} a letter?", knowledge="k", right_answer="yes", uid=c) for c in "abc"]
    prompts = [f"Q: {it.question}\nA:" for it in items]
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    kw = dict(max_new_tokens=4, batch_size=2, model_name="tiny", dtype="float32", progress=False,
              cache_root=tmp_path / "cache", shipped_root=shipped)
    first, stats, source = greedy_answers(model, tok, items, prompts, **kw)
    direct, _ = generate_greedy(model, tok, prompts, batch_size=2, max_new_tokens=4, progress=False)
    assert source == "computed" and first == direct and stats.new_tokens == sum(g.new_tokens for g in direct)
    again, stats, source = greedy_answers(model, tok, items, prompts, **kw)
    assert source == "cache" and again == first and stats.seconds == 0.0
    # the key: model, prompts, token limit, rows per call, numerics
    path = answers_cache_path("tiny", prompts, 4, 2, "float32", tmp_path / "cache")
    assert path.is_file()
    assert len({path.name, answers_cache_path("tiny", prompts, 5, 2, "float32", tmp_path).name,
                answers_cache_path("tiny", prompts, 4, 3, "float32", tmp_path).name,
                answers_cache_path("tiny", prompts[:2], 4, 2, "float32", tmp_path).name,
                answers_cache_path("tiny", prompts, 4, 2, "float32+autocast", tmp_path).name,
                answers_cache_path("other", prompts, 4, 2, "float32", tmp_path).name}) == 6
    # a shipped file under the key is read when the cache has none, never copied; shipped_root=None ignores it
    (shipped / path.name).write_text("".join(json.dumps(
        {"uid": it.uid, "question": it.question, "answer": f"shipped {it.uid}", "prompt_tokens": 7, "new_tokens": 2,
         "truncated": False}) + "\n" for it in items))
    path.unlink()
    got, _, source = greedy_answers(model, tok, items, prompts, **kw)
    assert source == "shipped" and [g.text for g in got] == ["shipped a", "shipped b", "shipped c"]
    assert not path.exists()
    got, _, source = greedy_answers(model, tok, items, prompts, **{**kw, "shipped_root": None})
    assert source == "computed" and got == first
    # a file whose rows are other questions, or unreadable, is not used
    path.write_text("not json\n")
    got, _, source = greedy_answers(model, tok, items, prompts, **{**kw, "shipped_root": None})
    assert source == "computed" and got == first
    path.write_text("".join(json.dumps({"uid": u, "question": "q", "answer": "x", "prompt_tokens": 1,
                                        "new_tokens": 1, "truncated": False}) + "\n" for u in "abd"))
    got, _, source = greedy_answers(model, tok, items, prompts, **{**kw, "shipped_root": None})
    assert source == "computed" and got == first
    with pytest.raises(ValueError, match="need one each"):
        greedy_answers(model, tok, items, prompts[:2], **kw)


def test_eval_reuse_takes_cached_greedy_answers_and_without_it_makes_them_again(tmp_path, tiny_model_path, monkeypatch):
    from evaluation.runner import EvalConfig, cached_answers_name, run_eval
    monkeypatch.setenv("RLFH_CACHE_DIR", str(tmp_path / "cache"))
    kw = dict(model=tiny_model_path, data="halueval:test", mode="closed", limit=3, max_new_tokens=4, batch_size=2,
              confidence="off", verifier=False, progress=False, n_boot=50)
    first = run_eval(EvalConfig(out=str(tmp_path / "a"), reuse=True, **kw))
    assert first["timing"]["answers"] == "computed"
    name = cached_answers_name(EvalConfig(out="unused", reuse=True, **kw))
    assert (tmp_path / "cache" / "answers" / name).is_file()   # the name the shipped lookup uses too
    second = run_eval(EvalConfig(out=str(tmp_path / "b"), reuse=True, **kw))   # another folder: not a summary reuse
    assert second["timing"]["answers"] == "cache" and "reused" not in second
    cached = (tmp_path / "cache" / "answers" / name).stat().st_mtime_ns
    plain = run_eval(EvalConfig(out=str(tmp_path / "c"), **kw))   # without --reuse: made again, and cached
    assert plain["timing"]["answers"] == "computed"
    assert (tmp_path / "cache" / "answers" / name).stat().st_mtime_ns != cached
    answers = [[json.loads(x)["answer"] for x in (tmp_path / d / "answers.jsonl").read_text().splitlines()]
               for d in "abc"]
    assert answers[0] == answers[1] == answers[2]
    assert first["metrics"]["counts"] == second["metrics"]["counts"] == plain["metrics"]["counts"]


def test_the_shipped_files_are_the_ones_make_train_looks_up(embedded_model_path):
    """Every file in evaluation/shipped/ is one that `make train` (recipes/main.toml, the grounded recipe) or the
    closed-book recipe looks up: the warm starts' files (tests/test_baselines.py checks their keys and content) and
    the held-out report's base-model answers, which heldout_report.sh asks for with `rlfh eval --reuse` at each
    recipe's settings below. A change to those settings, the prompts or the test split moves a key; then this fails
    and the files must be made again (evaluation/shipped/README.md)."""
    from core.config import RLFHConfig
    from core.prompts import PROMPT_ONLY_SYSTEMS
    from evaluation.answer_cache import SHIPPED_DIR
    from evaluation.runner import EvalConfig, cached_answers_name
    sh = (REPO / "scripts" / "heldout_report.sh").read_text()
    assert '--limit "$limit" --confidence off "${ask[@]}" --out "$out" $reuse' in sh
    assert 'ask=(--system "$system" --max-new-tokens "$(setting GENERATE_MAX_LEN)" --grade-scope "$(setting GRADE_SCOPE)")' in sh

    def heldout_names(cfg) -> dict[str, str]:
        return {mode: cached_answers_name(EvalConfig(
            model="smollm2-135m-instruct", data=cfg.heldout_data, mode=mode, limit=limit, out="unused", reuse=True,
            system=cfg.system_prompt, max_new_tokens=cfg.generate_max_len, grade_scope=cfg.grade_scope))
            for mode, limit in (("closed", cfg.heldout_limit), ("evidence", cfg.heldout_evidence_limit)) if limit}

    closed_book = RLFHConfig.load({}, recipe="abstain-closed-book")
    assert (closed_book.heldout_data, closed_book.heldout_limit, closed_book.heldout_evidence_limit) == \
        ("halueval:test", 300, 100)
    main = RLFHConfig.load({}, recipe="main")
    assert (main.heldout_limit, main.heldout_evidence_limit, main.system_prompt, main.generate_max_len) == \
        (0, 150, "grounded", 64)
    heldout = {"closed-book recipe": heldout_names(closed_book), "main": heldout_names(main)}
    warm = {"closed-book recipe": ["543a5877ec3eaf2e86c4.jsonl", "3ed79bab4b420ac3a2ce.jsonl"],
            "main": ["05d0016e11bae97f534c.jsonl"]}
    # `make demo` (scripts/demo.sh on main): the base model with the recipe's prompt and the prompt-only baseline,
    # closed book and with the passage, as many questions as the grounded gate's report (its own eval line)
    demo_sh = (REPO / "scripts" / "demo.sh").read_text()
    assert '--grade-scope "$EVAL_GRADE_SCOPE" --out "$out" --reuse' in demo_sh
    assert "from core.prompts import PROMPT_ONLY_SYSTEMS" in demo_sh and PROMPT_ONLY_SYSTEMS["grounded"] == \
        "grounded-may-abstain"
    demo = {f"{system} {mode}": cached_answers_name(EvalConfig(
        model="smollm2-135m-instruct", data=main.heldout_data, mode=mode, limit=main.heldout_evidence_limit,
        out="unused", reuse=True, system=system, max_new_tokens=main.generate_max_len, grade_scope=main.grade_scope))
        for system in ("grounded", "grounded-may-abstain") for mode in ("closed", "evidence")}
    shipped = sorted(p.name for p in SHIPPED_DIR.glob("*.jsonl"))
    expected = sorted({n for h in (*heldout.values(), demo) for n in h.values()} | {n for w in warm.values() for n in w})
    assert shipped == expected, f"the recipes look up {heldout} and {warm}, make demo {demo}"
    for name in demo.values():
        rows = [json.loads(line) for line in (SHIPPED_DIR / name).read_text().splitlines()]
        assert len(rows) == main.heldout_evidence_limit and all(0 < r["new_tokens"] <= 64 for r in rows), name
    for recipe, cfg in (("closed-book recipe", closed_book), ("main", main)):
        for mode, name in heldout[recipe].items():
            rows = [json.loads(line) for line in (SHIPPED_DIR / name).read_text().splitlines()]
            n = cfg.heldout_limit if mode == "closed" else cfg.heldout_evidence_limit
            assert len(rows) == n and all(0 < r["new_tokens"] <= cfg.generate_max_len for r in rows), (recipe, mode)
            assert sum(bool(r["answer"].strip()) for r in rows) >= 0.95 * n, (recipe, mode)
