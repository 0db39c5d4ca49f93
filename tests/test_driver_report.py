"""The end-of-run report: summary rows from metrics.jsonl records and the training-curves PNG."""
from __future__ import annotations

import io
import json

from cluster.train_report import best_dev_step, format_mix, plot_curves, print_summary, read_metrics, summary_rows


def _row(step, reward, kl, correct, skipped=False):
    if skipped:
        return {"step": step, "skipped": True, "skipped_batches": 1, "time/total": 1.0}
    return {"step": step, "skipped": False, "reward_mean": reward, "score_mean": reward, "kl": kl,
            "response_length": 30.0 + step, "time/total": 50.0, "rollout_tokens_per_s": 60.0,
            "label_share/Correct": correct, "label_share/Hedged correct": 0.0, "label_share/Vague": 0.1,
            "label_share/Hedged wrong": 0.0, "label_share/Wrong": 0.9 - correct}


def test_summary_rows_show_first_and_last_values_and_skips(tmp_path):
    rows = [_row(1, -0.5, 0.0, 0.2), _row(2, 0, 0, 0, skipped=True), _row(3, 0.25, 0.012, 0.5)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)))
    got = read_metrics(tmp_path)
    assert [r["step"] for r in got] == [1, 2, 3]
    table = dict(summary_rows(got, {"steps": 3, "wall_time_s": 125.0, "run_time_s": 200, "skipped_batches": 1,
                                    "model_dir": "/m/final"}))
    assert table["steps"] == "3 (2 trained, 1 skipped)"
    assert table["training loop time (all runs of this SAVE_PATH)"] == "125 s (2.1 min)"
    assert table["wall time (this run: start-up, training, saving)"] == "200 s (3.3 min)"
    assert table["reward / response (first -> last)"] == "-0.500 -> 0.250"
    assert table["KL to reference (first -> last)"] == "0.0000 -> 0.0120"
    assert table["label mix (first)"] == format_mix({"Correct": 0.2, "Vague": 0.1, "Wrong": 0.7})
    assert table["label mix (last)"].startswith("C.50")
    assert table["skipped batches (reward service down)"] == "1"
    assert table["final model (HF format)"] == "/m/final"
    out = io.StringIO()
    print_summary(got, {"steps": 3}, file=out)
    assert "RLFH training summary" in out.getvalue()


def test_plot_curves_writes_a_png_and_skips_empty_runs(tmp_path):
    rows = [_row(i, 0.1 * i, 0.001 * i, 0.1 * i) for i in range(1, 6)]
    png = plot_curves(rows, tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert plot_curves([_row(1, 0, 0, 0, skipped=True)], tmp_path / "none.png") is None
    assert read_metrics(tmp_path / "missing.jsonl") == []


def test_best_dev_step_is_the_last_evaluations_report_and_is_drawn(tmp_path):
    dev = [{"step": s, "dev/score": -0.3 + 0.01 * s, "dev/best_step": float(b), "dev/closed/correct": 0.2,
            "dev/closed/abstain/open": 0.8} for s, b in ((0, 0), (2, 2), (4, 4), (6, 4), (8, 4))]
    assert best_dev_step(dev) == 4
    # the summary names the step the selection kept, not the highest dev/score (step 8 here)
    table = dict(summary_rows([], {"dev_rows": dev}))
    assert table["dev, best step (FINAL_MODEL=best keeps it)"].startswith("step 4: ")
    assert best_dev_step([{"step": 0, "dev/score": 0.0}]) is None and best_dev_step([]) is None
    rows = [_row(i, 0.1 * i, 0.001 * i, 0.1 * i) for i in range(1, 9)]
    png = plot_curves(rows, tmp_path / "curves.png", dev)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
