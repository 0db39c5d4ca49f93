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


def _png_size(path) -> tuple[int, int]:
    from PIL import Image
    with Image.open(path) as im:
        return im.size


def test_training_curves_show_only_the_panels_that_fit_the_recipe(tmp_path):
    """A recipe that never declines (grounded: every share declined 0, or NaN, or not logged) gets no abstention
    panels, and the panels left are laid out without holes (2 x 2 for four); an abstaining one gets all six."""
    from cluster.train_report import curve_panels, panel_grid
    from evaluation.plots import plot_training, training_panels

    def rows(declined: float) -> list[dict]:
        return [{**_row(i, 0.1 * i, 0.001 * i, 0.1 * i), "rollout/abstain/yes_no": 0.0,
                 "rollout/abstain/open": declined} for i in range(1, 7)]

    def dev(declined: float) -> list[dict]:
        return [{"step": s, "dev/score": 0.1, "dev/best_step": 0.0, "dev/evidence/correct": 0.3,
                 "dev/evidence/incorrect": 0.6, "dev/evidence/abstain": declined,
                 "dev/evidence/abstain/open": declined, "dev/evidence/abstain/yes_no": 0.0} for s in (0, 3, 6)]

    grounded = curve_panels(rows(0.0), dev(0.0))
    assert grounded == ["reward", "kl", "labels", "dev"]
    assert curve_panels(rows(float("nan")), dev(float("nan"))) == grounded
    assert curve_panels(rows(0.25), dev(0.1)) == ["reward", "kl", "labels", "rollout_declined", "dev", "dev_declined"]
    assert curve_panels(rows(0.0)) == ["reward", "kl", "labels"]          # no dev evaluation: no dev panel
    assert [panel_grid(n) for n in (2, 3, 4, 5, 6)] == [(1, 2), (1, 3), (2, 2), (2, 3), (2, 3)]
    # 5 x 4 inches a panel at 110 dpi
    assert _png_size(plot_curves(rows(0.0), tmp_path / "g.png", dev(0.0))) == (1100, 880)
    assert _png_size(plot_curves(rows(0.25), tmp_path / "a.png", dev(0.1))) == (1650, 880)
    assert _png_size(plot_curves(rows(0.0), tmp_path / "n.png")) == (1650, 440)

    # the report's copy (`rlfh compare --run`): no abstention line where nothing was declined; a panel with no data
    # at all (no label mix, no rollout behaviour) is not drawn
    assert training_panels(rows(0.0)) == ["reward", "kl", "labels", "behaviour"]    # response length
    bare = [{"step": i, "reward_mean": 0.1, "kl": 0.0, "abstain_rate": 0.0} for i in range(1, 4)]
    assert training_panels(bare) == ["reward", "kl"]
    assert training_panels([{**r, "abstain_rate": 0.2} for r in bare]) == ["reward", "kl", "behaviour"]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bare))
    png = plot_training(tmp_path / "run", tmp_path / "report.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and _png_size(png)[0] > _png_size(png)[1]
