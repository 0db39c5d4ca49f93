"""`rlfh select`: choosing a run's checkpoint on the dev split by the selectivity gate.

The judging is tested on hand-built eval folders (a checkpoint that has learnt nothing, a selective one, one
that declines everything); the command end to end on the real model, with a checkpoint that is the base model
itself: it cannot pass the gate, so the command must say so (exit 3) and still write its choice.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from test_eval_cli import _write_run, rlfh, rlfh_in_process

from evaluation.select import Candidate, SelectError, judge_candidates, list_candidates, rank_key


def _eval_dirs(tmp_path: Path, seed: int = 0) -> tuple[Path, dict[str, Path]]:
    """Base right on 24 of 120 questions; step4 = the base; step8 declines 60 of the base's wrong answers;
    step12 declines everything."""
    rng = random.Random(seed)
    qs = [(f"What is the capital of country number {i}?", f"City{i}") for i in range(120)]
    right = set(rng.sample(range(120), 24))
    base = [(q, g, f"It is {g}." if i in right else "It is Wrongville.") for i, (q, g) in enumerate(qs)]
    declined = set(rng.sample([i for i in range(120) if i not in right], 60))
    runs = {
        "step00004": base,
        "step00008": [(q, g, "I don't know." if i in declined else a) for i, (q, g, a) in enumerate(base)],
        "step00012": [(q, g, "I don't know.") for q, g, _ in base],
    }
    b = _write_run(tmp_path / "base", "base", "closed", base)
    return b, {name: _write_run(tmp_path / name, name, "closed", answers) for name, answers in runs.items()}


def _cands(names):
    return [Candidate(n, int(n[4:]), f"/models/{n}") for n in names]


def test_selects_the_selective_checkpoint_over_untrained_and_collapsed(tmp_path):
    base, dirs = _eval_dirs(tmp_path)
    cands = _cands(["step00004", "step00008", "step00012"])
    res = judge_candidates({"closed": str(base)}, cands, {n: {"closed": str(d)} for n, d in dirs.items()},
                           tmp_path / "out")
    assert res["selected"] == "step00008" and res["selected_passes"], res
    by = {e["name"]: e for e in res["candidates"]}
    assert by["step00008"]["failures"] == []
    assert (by["step00008"]["correct"], by["step00008"]["incorrect"], by["step00008"]["not_attempted"]) == (24, 36, 60)
    assert by["step00004"]["failures"] and by["step00012"]["failures"]
    assert by["step00012"]["correct"] == 0 and by["step00012"]["not_attempted"] == 120
    assert res["base_outcomes"]["closed"] == {"correct": 24, "incorrect": 96, "not_attempted": 0}
    assert (tmp_path / "out" / "report_step00008" / "report.md").is_file()


def test_when_none_passes_a_checkpoint_that_declines_everything_is_not_chosen(tmp_path):
    base, dirs = _eval_dirs(tmp_path)
    cands = _cands(["step00004", "step00012"])
    res = judge_candidates({"closed": str(base)}, cands, {n: {"closed": str(dirs[n])} for n in ("step00004",
                                                                                             "step00012")},
                           tmp_path / "out")
    assert not res["selected_passes"]
    assert res["selected"] == "step00004", [(e["name"], e["failures"]) for e in res["candidates"]]


def test_rank_key_orders_passing_by_fewest_incorrect_then_earlier_step():
    e = lambda name, step, c, i, f: {"name": name, "step": step, "correct": c, "incorrect": i, "failures": f,
                                     "margin_over_random": 0.0}
    entries = [e("a", 4, 10, 50, []), e("b", 8, 10, 40, []), e("c", 12, 10, 40, []), e("d", 16, 0, 0, ["x"])]
    assert min(entries, key=rank_key)["name"] == "b"
    failing = [e("a", 4, 10, 90, ["x", "y"]), e("b", 8, 3, 20, ["x"]), e("c", 12, 5, 30, ["x"])]
    assert min(failing, key=rank_key)["name"] == "c"


def _model_folder(path: Path, step: int | None = None) -> None:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if step is not None:
        (path / "rlfh_meta.json").write_text(json.dumps({"weights_version": step, "source": "base-model"}))


def test_list_candidates_orders_steps_and_drops_a_final_that_is_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    for s in (12, 4, 8):
        _model_folder(run / "checkpoints" / f"global_step_{s:05d}" / "policy_hf", s)
    (run / "checkpoints" / "global_step_00016").mkdir()          # no policy_hf: not a candidate
    _model_folder(run / "final", 12)
    assert [c.name for c in list_candidates(run)] == ["step00004", "step00008", "step00012"]
    _model_folder(tmp_path / "run2" / "final", 20)
    _model_folder(tmp_path / "run2" / "checkpoints" / "global_step_00010" / "policy_hf", 10)
    assert [(c.name, c.step) for c in list_candidates(tmp_path / "run2")] == [("step00010", 10), ("step00020", 20)]
    # weight snapshots (SNAPSHOT_STEP) are candidates too; a step that is also a checkpoint counts once
    for s in (2, 10):
        _model_folder(tmp_path / "run2" / "snapshots" / f"step_{s:05d}", s)
    _model_folder(tmp_path / "run2" / "snapshots" / "step_00004.tmp", 4)   # an export cut short
    cands = list_candidates(tmp_path / "run2")
    assert [c.name for c in cands] == ["step00002", "step00010", "step00020"]
    assert cands[1].path.endswith("global_step_00010/policy_hf")


def test_bad_run_dirs_name_the_fix(tmp_path, capsys):
    with pytest.raises(SelectError, match="not a folder"):
        list_candidates(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SelectError, match="SNAPSHOT_STEP"):
        list_candidates(tmp_path / "empty")
    r = rlfh_in_process(capsys, "select", str(tmp_path / "empty"), "--mode", "closed")
    assert r.returncode == 2 and "SNAPSHOT_STEP" in r.stderr, r.stderr[-2000:]
    r = rlfh_in_process(capsys, "select", str(tmp_path / "empty"), "--limit", "-1")
    assert r.returncode == 2 and "--limit" in r.stderr


@pytest.mark.slow
# real model: `rlfh select` on the embedded model as users run it (its grades decide the exit status)
def test_select_end_to_end_on_the_real_model(tmp_path):
    """A 'checkpoint' that is the embedded base model: evaluated for real, judged, not passing (exit 3)."""
    from core.model_loader import resolve_model_path
    src = Path(resolve_model_path("smollm2-135m-instruct"))
    ck = tmp_path / "run" / "checkpoints" / "global_step_00002" / "policy_hf"
    ck.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            os.symlink(f, ck / f.name)
    # 4 questions: the command's path end to end (evaluate, judge, exit 3, write the choice); the judging itself is
    # tested on 120 hand-built answers above
    r = rlfh("select", str(tmp_path / "run"), "--base", "smollm2-135m-instruct", "--limit", "4",
             "--no-progress", timeout=900)
    assert r.returncode == 3, (r.stdout[-3000:], r.stderr[-3000:])
    assert "No checkpoint passes the gate" in r.stdout and "step00002" in r.stdout
    sel = json.loads((tmp_path / "run" / "select" / "selection.json").read_text())
    assert sel["selected"] == "step00002" and not sel["selected_passes"]
    (cand,) = sel["candidates"]
    assert cand["n"] == 4 and cand["correct"] + cand["incorrect"] + cand["not_attempted"] == 4
    assert sel["base_outcomes"]["closed"] == {k: cand[k] for k in ("correct", "incorrect", "not_attempted")}
    assert os.path.realpath(tmp_path / "run" / "select" / "selected") == str(ck)


def _scored_dir(tmp_path: Path, seed: int = 0) -> tuple[Path, Path, set[int]]:
    """A base eval and one scored with --abstain-threshold 1: the same answers, P(abstain) 0.9 on 60 of the base's
    wrong answers and 0.1 .. 0.3 elsewhere."""
    base, dirs = _eval_dirs(tmp_path, seed)
    src = dirs["step00004"]   # the base's answers
    recs = [json.loads(x) for x in (src / "answers.jsonl").read_text().splitlines()]
    rng = random.Random(seed + 1)
    wrong = [i for i, r in enumerate(recs) if r["grade"] == "incorrect"]
    unsure = set(rng.sample(wrong, 60))
    scored = tmp_path / "scored"
    scored.mkdir()
    with open(scored / "answers.jsonl", "w") as fh:
        for i, r in enumerate(recs):
            r["p_abstain"] = 0.9 if i in unsure else round(0.1 + 0.2 * rng.random(), 4)
            fh.write(json.dumps(r) + "\n")
    s = json.loads((src / "summary.json").read_text())
    s.update(abstain_threshold=1.0, abstain_text="I don't know.")
    (scored / "summary.json").write_text(json.dumps(s))
    return base, scored, unsure


def test_abstain_sweep_derives_each_threshold_exactly_and_selects_a_selective_one(tmp_path):
    from evaluation.select import apply_threshold, sweep_thresholds
    base, scored, unsure = _scored_dir(tmp_path)
    recs = [json.loads(x) for x in (scored / "answers.jsonl").read_text().splitlines()]
    taus = sweep_thresholds([r["p_abstain"] for r in recs])
    assert taus == sorted(set(taus)) and 0.9 not in taus   # no threshold at the top declines nothing
    cand = Candidate("model", None, "/models/gate")
    swept, dirs = [], {}
    for tau in taus:
        c = cand.with_threshold(tau, gate=True)
        swept.append(c)
        dirs[c.name] = {"closed": apply_threshold(scored, tau, tmp_path / f"eval_{c.name}", c.name)}
        out = [json.loads(x) for x in (Path(dirs[c.name]["closed"]) / "answers.jsonl").read_text().splitlines()]
        for r, o in zip(recs, out):   # declined exactly where P(abstain) > tau, answers otherwise untouched
            assert (o["answer"] == "I don't know.") == (r["p_abstain"] > tau)
            assert o["grade"] == ("not_attempted" if r["p_abstain"] > tau else r["grade"])
    res = judge_candidates({"closed": str(base)}, swept, dirs, tmp_path / "out")
    best = next(c for c in swept if c.name == res["selected"])
    assert res["selected_passes"]
    # the chosen threshold declines the 60 unsure questions (all base-wrong) and nothing the base got right
    declined = {i for i, r in enumerate(recs) if r["p_abstain"] > best.abstain_threshold}
    assert unsure <= declined and all(recs[i]["grade"] == "incorrect" for i in declined)
    # the report ranks questions by P(abstain) against the base's correctness, over every question
    from evaluation.report import compare_runs
    from evaluation.selectivity import auroc
    rep = compare_runs([str(base), dirs[best.name]["closed"]], tmp_path / "rep", n_boot=100)
    (g,) = rep["groups"].values()
    got = g["selectivity"]["runs"][best.name]["p_abstain_auroc"]
    assert got == pytest.approx(auroc([-r["p_abstain"] for r in recs], [r["grade"] == "correct" for r in recs]))
    assert got > 0.75 and g["selectivity"]["runs"]["base"]["p_abstain_auroc"] is None
    assert "P(abstain) AUROC" in (tmp_path / "rep" / "report.md").read_text()
    with pytest.raises(SelectError, match="--abstain-threshold 1"):
        apply_threshold(tmp_path / "step00004", 0.5, tmp_path / "x", "x")


@pytest.mark.slow
# real model: the sweep needs P(abstain) spread over questions to choose a threshold in (0, 1)
def test_select_abstain_sweep_end_to_end_with_a_gate_model_folder(tmp_path, capsys):
    """The embedded model as its own gate (a model folder as RUN_DIR), closed and evidence prompts: scored once
    per mode for real, every threshold judged, one threshold per mode chosen, its `rlfh eval` options printed."""
    from core.model_loader import resolve_model_path
    src = Path(resolve_model_path("smollm2-135m-instruct"))
    gate = tmp_path / "rt"
    gate.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            os.symlink(f, gate / f.name)
    # 4 questions per mode: the sweep's decline shares (10 ... 90 %) land on the 2nd, 3rd and 4th largest
    # P(abstain), three thresholds in (0, 1) to judge (fewer questions could not give three)
    r = rlfh("select", str(gate), "--base", "smollm2-135m-instruct", "--limit", "4",
             "--mode", "closed", "--mode", "evidence", "--abstain-sweep", "--abstain-gate", "--no-progress",
             "--out", str(tmp_path / "sel"), timeout=1200)
    assert r.returncode in (0, 3), (r.stdout[-3000:], r.stderr[-3000:])
    top = json.loads((tmp_path / "sel" / "selection.json").read_text())
    assert top["modes"] == ["closed", "evidence"] and set(top["per_mode"]) == {"closed", "evidence"}
    assert top["selected_passes"] == all(m["selected_passes"] for m in top["per_mode"].values())
    for mode in ("closed", "evidence"):
        sel = json.loads((tmp_path / "sel" / mode / "selection.json").read_text())
        assert sel["modes"] == [mode] and sel["selected_is_gate"]
        assert 0 < sel["selected_abstain_threshold"] < 1
        assert top["eval_command"][mode] == sel["eval_command"] == (
            f"--model smollm2-135m-instruct --abstain-model {gate} "
            f"--abstain-threshold {sel['selected_abstain_threshold']:.6g}")
        assert len(sel["candidates"]) >= 3 and all("@" in c["name"] for c in sel["candidates"])
        scored = [json.loads(x) for x in (tmp_path / "sel" / mode / f"eval_model-scored_{mode}" / "answers.jsonl")
                  .read_text().splitlines()]
        assert len(scored) == 4 and all(0 < s["p_abstain"] < 1 for s in scored)
    assert r.stdout.count("rlfh eval --model smollm2-135m-instruct --abstain-model") == 2
    assert "closed prompts" in r.stdout and "evidence prompts" in r.stdout
    r = rlfh_in_process(capsys, "select", str(gate), "--abstain-gate")
    assert r.returncode == 2 and "--abstain-gate needs --abstain-sweep" in r.stderr
