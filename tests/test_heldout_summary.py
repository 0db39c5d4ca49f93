"""The held-out report's last screen (cluster/heldout_summary.py) on hand-built `rlfh eval` folders and run folders:
the warm start's row and its paired comparison (RL's share), each metric's verdict against the base model and the
warm start, the gate's wording (FAILED only with --strict), how the run ended, and step 0 kept."""
from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from cluster.heldout_summary import (STATEMENT_METRICS, VERDICT_METRICS, WARM_NAME, kept_step, main, metric_verdict,
                                     print_summary, run_lines)
from evaluation.report import compare_runs, expectation_failures
from evaluation.stats import paired_bootstrap_ratio_diff
from test_eval_cli import _statements, _write_run, rlfh_in_process

QS = [(f"Which city hosts museum number {i}?", f"City{i}") for i in range(40)]
WRONG = "It is Wrongville."


def _answers(right: set[int], declined: set[int]) -> list[tuple[str, str, str]]:
    return [(q, g, "I don't know." if i in declined else f"It is {g}." if i in right else WRONG)
            for i, (q, g) in enumerate(QS)]


# base: 10 of 40 right (30-39), 30 wrong. The warm start: 8 more right (0-7), 22 wrong. Trained: declines every
# question the base got wrong (0-29): against the base, fewer wrong answers and the same right ones; against the
# warm start, the 8 right answers it had added are lost
BASE = _answers(set(range(30, 40)), set())
WARM = _answers(set(range(30, 40)) | set(range(8)), set())
TRAINED = _answers(set(range(30, 40)), set(range(30)))


def _report(tmp_path: Path, trained=TRAINED, mode: str = "closed", run_dir=None, statements=None) -> dict:
    runs = [_write_run(tmp_path / f"{name}_{mode}", name, mode, answers, statements and statements(name))
            for name, answers in (("base", BASE), (WARM_NAME, WARM), ("trained", trained))]
    return compare_runs([str(r) for r in runs], tmp_path / "report", run_dir=run_dir and str(run_dir), n_boot=300)


def _screen(report: dict, **kw) -> tuple[bool, str]:
    """(passed, the printout with its line breaks as spaces: rich wraps long lines at the console's width)."""
    out = io.StringIO()
    ok = print_summary(report, file=out, **kw)
    return ok, " ".join(out.getvalue().split())


def test_warm_start_row_its_paired_counts_and_each_metrics_verdict(tmp_path):
    report = _report(tmp_path)
    (group,) = report["groups"].values()
    assert [m["name"] for m in group["models"]] == ["base", WARM_NAME, "trained"]
    pair = next(p for p in group["pairs"] if (p["a"], p["b"]) == (WARM_NAME, "trained"))
    assert (pair["mcnemar_correct"]["a_only"], pair["mcnemar_correct"]["b_only"]) == (8, 0)
    assert (pair["mcnemar_incorrect"]["a_only"], pair["mcnemar_incorrect"]["b_only"]) == (22, 0)

    def verdict(ref, key):
        return metric_verdict(group, ref, next(m for m in VERDICT_METRICS if m[0] == key))

    # against the base: the same right answers, 30 fewer wrong ones, accuracy on attempted 25% -> 100%
    assert verdict("base", "correct")["verdict"] == "no significant change"
    v = verdict("base", "incorrect")
    assert v["verdict"] == "improved" and v["value"] == pytest.approx(-30 / 40) and v["counts"] == "30 fewer / 0 more"
    v = verdict("base", "accuracy_given_attempted")
    assert v["verdict"] == "improved" and v["value"] == pytest.approx(1 - 10 / 40) and v["ci95"][0] > 0
    # against the warm start: 8 right answers lost (exact McNemar p = 2 / 2^8), 22 fewer wrong ones
    v = verdict(WARM_NAME, "correct")
    assert v["verdict"] == "worse" and v["counts"] == "0 gained / 8 lost" and v["p"] == pytest.approx(2 / 2 ** 8)
    assert v["value"] == pytest.approx(-8 / 40) and v["ci95"][1] < 0
    assert verdict(WARM_NAME, "incorrect")["verdict"] == "improved"

    ok, out = _screen(report)
    assert "warm-start" in out and "vs warm-start" in out
    assert "RL's share (trained vs warm-start: incorrect 22 fewer / 0 more" in out
    assert "correct 8 lost / 0 gained (p=0.00781)" in out
    assert "worse: -20.0 pts" in out and "0 gained / 8 lost, p=0.00781" in out
    assert "improved: -75.0 pts" in out and "no significant change: +0.0 pts" in out
    # the gate is judged against the base model, not the warm start: met
    assert ok and "PASSED: selective" in out and "the held-out selective gate was met" in out
    assert expectation_failures(report, "trained", ["closed"], ["base"]) == []
    assert any("trained vs warm-start: fewer hallucinations but also fewer correct answers" in f
               for f in expectation_failures(report, "trained", ["closed"]))


def test_compare_expect_against_leaves_the_warm_start_out_of_the_gate(tmp_path, capsys):
    runs = [_write_run(tmp_path / name, name, "closed", answers)
            for name, answers in (("base", BASE), (WARM_NAME, WARM), ("trained", TRAINED))]
    args = ["compare", *map(str, runs), "--n-boot", "100", "--expect", "trained"]
    r = rlfh_in_process(capsys, *args, "--out", str(tmp_path / "rep1"))
    assert r.returncode == 3 and "trained vs warm-start" in r.stdout, r.stdout[-2000:]
    r = rlfh_in_process(capsys, *args, "--out", str(tmp_path / "rep2"), "--expect-against", "base")
    assert r.returncode == 0 and "EXPECTATION MET" in r.stdout, r.stdout[-2000:]


def test_statement_metrics_get_a_paired_bootstrap_ci_and_a_verdict(tmp_path):
    assert paired_bootstrap_ratio_diff([1, 1, 0, 0], [2] * 4, [2, 2, 1, 1], [2] * 4, n_boot=200)[0] == 0.5
    v, lo, hi = paired_bootstrap_ratio_diff([1, 0, 1, 0, 1, 0], [2] * 6, [2, 1, 2, 1, 2, 1], [2] * 6, n_boot=300)
    assert v == pytest.approx(0.5) and 0 < lo <= v <= hi
    assert all(math.isnan(x) for x in paired_bootstrap_ratio_diff([0], [0], [0], [0], n_boot=10))
    with pytest.raises(ValueError, match="pair the items"):
        paired_bootstrap_ratio_diff([1], [1], [1, 2], [1, 1])
    # base: 1 supported statement of 2 per answer; warm start the same; trained: 2 of 2
    per_model = {"base": lambda i: _statements(1, 1), WARM_NAME: lambda i: _statements(1, 1),
                 "trained": lambda i: _statements(2, 0)}
    report = _report(tmp_path, mode="evidence", statements=per_model.get)
    (group,) = report["groups"].values()
    pair = next(p for p in group["pairs"] if (p["a"], p["b"]) == ("base", "trained"))
    assert pair["verifier_diff"]["fact_precision"]["value"] == pytest.approx(0.5)
    assert pair["verifier_diff"]["supported_statements_per_answer"]["value"] == pytest.approx(1.0)
    for ref in ("base", WARM_NAME):
        for metric in STATEMENT_METRICS:
            assert metric_verdict(group, ref, metric)["verdict"] == "improved", (ref, metric)
    _, out = _screen(report, gate="grounded")
    assert "fact precision (verifier)" in out and "improved: +50.0 pts [+50.0, +50.0]" in out
    assert "improved: +1.00 [+1.00, +1.00]" in out


def test_a_gate_not_met_reads_failed_only_when_strict(tmp_path):
    refuser = _answers(set(), set(range(40)))   # declines everything: fewer wrong answers, and fewer right ones
    report = _report(tmp_path, trained=refuser)
    ok, out = _screen(report)
    assert not ok and "FAILED" not in out
    assert "gate not met: hand.jsonl | closed: trained is no better than random abstention" in out
    assert "trained vs base: fewer hallucinations but also fewer correct answers" in out
    assert "the held-out selective gate was not met (the verdicts above)" in out
    ok, out = _screen(report, strict=True)
    assert not ok and "FAILED: hand.jsonl | closed: trained is no better" in out and "gate not met" not in out
    assert "FAILED: the held-out selective gate was not met" in out
    # the mode that only must keep its right answers: "not met" / FAILED the same way
    evidence = _report(tmp_path / "e", trained=refuser, mode="evidence")
    assert "not met: significantly fewer correct answers" in _screen(evidence)[1]
    assert "FAILED: significantly fewer correct answers" in _screen(evidence, strict=True)[1]
    # the command line: --strict, exit status 3 either way
    path = tmp_path / "report" / "report.json"
    assert main([str(path)]) == 3 and main([str(path), "--strict"]) == 3


def _run_folder(path: Path, steps: int, final_version: int, best_step=None, best_version=None) -> Path:
    """SAVE_PATH as the driver leaves it: metrics.jsonl, dev_eval.jsonl, final/ (its rlfh_meta.json: the optimizer
    steps its weights took) and, with FINAL_MODEL=best, snapshots/best with the kept step's dev record."""
    (path / "final").mkdir(parents=True)
    (path / "final" / "config.json").write_text("{}")
    (path / "final" / "rlfh_meta.json").write_text(json.dumps({"weights_version": final_version,
                                                               "source": str(path / "no-warm-start")}))
    (path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward_mean": 0.1, "kl": 0.01}) + "\n"
                                                for s in range(1, steps + 1)))
    if best_step is not None:
        dev = [{"step": s, "dev/score": 0.1, "dev/best_step": best_step} for s in range(0, steps + 1, 2)]
        (path / "dev_eval.jsonl").write_text("".join(json.dumps(d) + "\n" for d in dev))
        best = path / "snapshots" / "best"
        best.mkdir(parents=True)
        (best / "rlfh_meta.json").write_text(json.dumps({"weights_version": best_version}))
        (best / "dev_eval.json").write_text(json.dumps({"step": best_step, "dev/score": 0.1}))
    return path


def test_the_last_screen_says_the_run_finished_and_which_step_is_the_final_model(tmp_path):
    # FINAL_MODEL=best kept step 0: the final model is the warm start
    run0 = _run_folder(tmp_path / "run0", steps=6, final_version=0, best_step=0, best_version=0)
    assert kept_step(run0) == (0, "FINAL_MODEL=best: the best in-loop dev evaluation")
    _, out = _screen(_report(tmp_path / "r0", run_dir=run0))
    assert f"finished: the run reached its end after 6 RL steps; final model {run0 / 'final'}" in out
    assert "the final model is the warm start (RL's steps were not kept)" in out
    # FINAL_MODEL=best kept step 4 (its snapshot's weights are the final model's)
    run4 = _run_folder(tmp_path / "run4", steps=6, final_version=8, best_step=4, best_version=8)
    assert kept_step(run4) == (4, "FINAL_MODEL=best: the best in-loop dev evaluation")
    _, out = _screen(_report(tmp_path / "r4", run_dir=run4))
    assert "the final model is the policy of step 4 (FINAL_MODEL=best" in out and "were not kept" not in out
    # FINAL_MODEL=last: the snapshot's weights are not the final model's, the last step is
    last = _run_folder(tmp_path / "last", steps=6, final_version=12, best_step=4, best_version=8)
    assert kept_step(last) == (6, "the last step")
    # no warm start row and none recorded as the final model's source: step 0 is the model RL started from
    report = {"groups": {}, "training": {"run_dir": str(run0), "steps": 6}}
    assert run_lines(report)[1].startswith("the final model is the model RL started from (RL's steps were not kept)")
    # a run without a final model is not finished; a report without a run says nothing of one
    assert run_lines({"groups": {}, "training": {"run_dir": str(tmp_path / "none")}}) == \
        [f"not finished: no final model in {tmp_path / 'none' / 'final'}"]
    assert run_lines({"groups": {}}) == [] and kept_step(tmp_path / "none") is None
