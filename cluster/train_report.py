"""End-of-run report: a rich summary table and ``training_curves.png``.

Both read the per-step records the driver appends to ``SAVE_PATH/metrics.jsonl``
(one JSON object per step, see :mod:`cluster.driver`), so a report can be
rebuilt from any finished or interrupted run::

    python -m cluster.train_report runs/rlfh
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Optional

from core.verify_schema import LABELS

PHASES = ("generate", "reward", "reference", "critic", "policy_forward", "train", "sync")
#: C, HC, V, HW, W: each label's initials.
LABEL_ABBREV = {lab: "".join(word[0].upper() for word in lab.split()) for lab in LABELS}


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Per-step records of a run (``metrics.jsonl``), in step order; missing file -> []."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    rows.sort(key=lambda r: r.get("step", 0))
    return rows


def label_mix(row: dict[str, Any]) -> dict[str, float]:
    """``{label: share}`` of one record (shares of all statements of the step)."""
    return {lab: float(row.get(f"label_share/{lab}", 0.0)) for lab in LABELS}


def format_mix(mix: dict[str, float]) -> str:
    """Compact label mix, e.g. ``C.42 HC.05 V.20 HW.03 W.30``."""
    return " ".join(f"{LABEL_ABBREV[lab]}{mix.get(lab, 0.0):.2f}".replace("0.", ".") for lab in LABELS)


def _first_last(rows: list[dict], key: str) -> tuple[Optional[float], Optional[float]]:
    vals = [r[key] for r in rows if key in r and r[key] is not None and not r.get("skipped")]
    vals = [v for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]
    return (vals[0], vals[-1]) if vals else (None, None)


def _fmt(v: Optional[float], nd: int = 3) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def summary_rows(rows: list[dict[str, Any]], info: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value) pairs of the summary table; ``info`` holds run facts (wall_time_s, model_dir...)."""
    trained = [r for r in rows if not r.get("skipped")]
    out: list[tuple[str, str]] = []
    out.append(("steps", f"{info.get('steps', len(rows))} ({len(trained)} trained, "
                         f"{info.get('skipped_batches', sum(1 for r in rows if r.get('skipped')))} skipped)"))
    if "run_time_s" in info:
        w = info["run_time_s"]
        out.append(("wall time (this run: start-up, training, saving)", f"{w:.0f} s ({w / 60:.1f} min)"))
    if "wall_time_s" in info:
        w = info["wall_time_s"]
        out.append(("training loop time (all runs of this SAVE_PATH)", f"{w:.0f} s ({w / 60:.1f} min)"))
    r0, r1 = _first_last(rows, "reward_mean")
    out.append(("reward / response (first -> last)", f"{_fmt(r0)} -> {_fmt(r1)}"))
    s0, s1 = _first_last(rows, "score_mean")
    if s0 is not None:
        out.append(("verifier score (first -> last)", f"{_fmt(s0)} -> {_fmt(s1)}"))
    k0, k1 = _first_last(rows, "kl")
    out.append(("KL to reference (first -> last)", f"{_fmt(k0, 4)} -> {_fmt(k1, 4)}"))
    l0, l1 = _first_last(rows, "response_length")
    out.append(("response length (first -> last)", f"{_fmt(l0, 1)} -> {_fmt(l1, 1)}"))
    if trained:
        out.append(("label mix (first)", format_mix(label_mix(trained[0]))))
        out.append(("label mix (last)", format_mix(label_mix(trained[-1]))))
    dev = info.get("dev_rows") or []
    if dev:
        first, last = dev[0], dev[-1]
        # the step the dev selection kept (its gate terms, DEV_SELECT_MAX_INCORRECT), not the highest dev/score;
        # rows from before dev/best_step was logged fall back to the score
        kept = best_dev_step(dev)
        best = next((d for d in dev if d["step"] == kept), None) or \
            max(dev, key=lambda d: d.get("dev/score", float("-inf")))
        mode = "closed" if "dev/closed/score" in first else "evidence"

        def dev_line(d: dict) -> str:
            return (f"step {d['step']}: correct {_pct(d.get(f'dev/{mode}/correct'))}, incorrect "
                    f"{_pct(d.get(f'dev/{mode}/incorrect'))}, declined {_pct(d.get(f'dev/{mode}/abstain'))} (yes/no "
                    f"{_pct(d.get(f'dev/{mode}/abstain/yes_no'))}, two-option {_pct(d.get(f'dev/{mode}/abstain/choice'))}"
                    f", open {_pct(d.get(f'dev/{mode}/abstain/open'))})")
        out.append((f"dev, greedy, {mode} (first)", dev_line(first)))
        out.append((f"dev, greedy, {mode} (last)", dev_line(last)))
        out.append(("dev, best step (FINAL_MODEL=best keeps it)", dev_line(best) + f"; score {best['dev/score']:.3f}"))
    times = [r.get("time/total") for r in trained if r.get("time/total")]
    if times:
        out.append(("mean step time", f"{sum(times) / len(times):.1f} s"))
    tps = [r.get("rollout_tokens_per_s") for r in trained if r.get("rollout_tokens_per_s")]
    if tps:
        out.append(("rollout tokens/s (mean)", f"{sum(tps) / len(tps):.1f}"))
    out.append(("skipped batches (reward service down)", str(info.get("skipped_batches", 0))))
    for key, name in (("model_dir", "final model (HF format)"), ("checkpoint", "last checkpoint"),
                      ("metrics_path", "metrics (JSONL)"), ("tensorboard_dir", "TensorBoard"),
                      ("curves_png", "curves (PNG)"), ("dashboard_url", "Ray dashboard")):
        if info.get(key):
            out.append((name, str(info[key])))
    return out


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def print_summary(rows: list[dict[str, Any]], info: dict[str, Any], file=None) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title="RLFH training summary", show_header=True, header_style="bold")
    t.add_column("", style="bold")
    t.add_column("value", overflow="fold")
    for k, v in summary_rows(rows, info):
        t.add_row(k, v)
    Console(file=file or sys.stdout, width=120).print(t)


TYPE_NAMES = {"yes_no": "yes/no", "choice": "two-option", "open": "open"}


def read_dev(path: str | Path) -> list[dict[str, Any]]:
    """In-loop dev evaluations of a run (``dev_eval.jsonl``: step 0 = before training), in step order."""
    path = Path(path)
    if path.is_dir():
        path = path / "dev_eval.jsonl"
    return read_metrics(path)


TYPE_COLORS = {"yes_no": "tab:blue", "choice": "tab:purple", "open": "tab:brown"}


def _finish_share_axis(ax, title: str, legend_size: int = 8) -> None:
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=legend_size)
    ax.grid(alpha=0.3)


def _per_type_panel(ax, steps: list, rows: list[dict[str, Any]], key: str, marker: str, title: str) -> None:
    """One line per question type of ``key`` (a format with ``{t}``) over ``rows``; types absent are left out."""
    for t, name in TYPE_NAMES.items():
        k = key.format(t=t)
        if any(k in r for r in rows):
            ax.plot(steps, [r.get(k, float("nan")) for r in rows], marker=marker, ms=3, label=name,
                    color=TYPE_COLORS[t])
    _finish_share_axis(ax, title)


def best_dev_step(dev_rows: list[dict[str, Any]]) -> Optional[int]:
    """The best dev step as the last in-loop dev evaluation reports it (``dev/best_step``), None without one."""
    for d in reversed(dev_rows):
        if d.get("dev/best_step") is not None:
            return int(d["dev/best_step"])
    return None


def _declines(rows: list[dict[str, Any]], prefix: str) -> bool:
    """Some record of ``rows`` has a share declined above 0 under a key starting with ``prefix``: the recipe
    abstains. No such key, or only zeros and NaNs (a recipe that never declines, e.g. grounded): False."""
    return any(isinstance(v, (int, float)) and math.isfinite(v) and v > 0
               for r in rows for k, v in r.items() if k.startswith(prefix))


def curve_panels(rows: list[dict[str, Any]], dev_rows: Optional[list[dict[str, Any]]] = None) -> list[str]:
    """The panels of ``training_curves.png`` that fit the run, in drawing order (``rows``: its trained steps).

    Always ``reward`` and ``kl``; ``labels`` (the verifier's label mix) where a record has one; ``rollout_declined``
    (the policy's samples declined per question type) and ``dev_declined`` (the dev answers declined per type) only
    where the recipe abstains (:func:`_declines`: a grounded run's shares are all 0, an empty panel); ``dev`` where
    there are in-loop dev evaluations."""
    dev_rows = [d for d in (dev_rows or []) if "dev/score" in d]
    panels = ["reward", "kl"]
    if any(k.startswith("label_share/") for r in rows for k in r):
        panels.append("labels")
    if _declines(rows, "rollout/abstain/"):
        panels.append("rollout_declined")
    if dev_rows:
        panels.append("dev")
        mode = "closed" if any("dev/closed/score" in d for d in dev_rows) else "evidence"
        if _declines(dev_rows, f"dev/{mode}/abstain/"):
            panels.append("dev_declined")
    return panels


def panel_grid(n: int) -> tuple[int, int]:
    """(rows, columns) of ``n`` panels: one row up to 3, 2 x 2 for 4, rows of 3 beyond."""
    if n <= 3:
        return 1, max(n, 1)
    if n == 4:
        return 2, 2
    return (n + 2) // 3, 3


def plot_curves(rows: list[dict[str, Any]], out_png: str | Path,
                dev_rows: Optional[list[dict[str, Any]]] = None) -> Optional[Path]:
    """Training curves into ``out_png`` (matplotlib Agg). None when no step trained.

    The panels that fit the run (:func:`curve_panels`), laid out by :func:`panel_grid`: reward, KL, label mix
    (share of statements per verifier label); where the recipe abstains, the policy's own samples declined per
    question type (``rollout/abstain/TYPE``); with in-loop dev evaluations (``dev_rows``, greedy), correct /
    incorrect (/ declined, where the recipe abstains) and, where it abstains, the declined share per question type,
    with a dotted line at the best dev step.
    """
    trained = [r for r in rows if not r.get("skipped")]
    if not trained:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in trained]
    dev_rows = [d for d in (dev_rows or []) if "dev/score" in d]
    panels = curve_panels(trained, dev_rows)
    n_rows, n_cols = panel_grid(len(panels))
    fig, grid = plt.subplots(n_rows, n_cols, figsize=(5 * n_cols, 4 * n_rows), squeeze=False)
    flat = [a for row in grid for a in row]
    for a in flat[len(panels):]:
        a.set_visible(False)
    axes = dict(zip(panels, flat))

    _reward_panel(axes["reward"], steps, trained)
    _kl_panel(axes["kl"], steps, trained)
    if "labels" in axes:
        _label_mix_panel(axes["labels"], steps, trained)
    if "rollout_declined" in axes:
        _per_type_panel(axes["rollout_declined"], steps, trained, "rollout/abstain/{t}", ".",
                        "rollouts: share declined, per question type")
    if dev_rows:
        _dev_panels(axes, dev_rows)

    skipped = [r["step"] for r in rows if r.get("skipped")]
    for a in axes.values():
        for s in skipped:
            a.axvline(s, color="black", alpha=0.15, lw=4)
    fig.suptitle("RLFH training curves" + (f" (grey bars: {len(skipped)} skipped batches)" if skipped else "")
                 + ("" if dev_rows else "; no in-loop dev evaluation (DEV_EVAL_STEP=0)"))
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def _reward_panel(ax, steps: list, trained: list[dict[str, Any]]) -> None:
    """Total reward per response, and the verifier's score where the records have one, over the trained steps."""
    ax.plot(steps, [r.get("reward_mean", float("nan")) for r in trained], marker="o", ms=3, label="total reward")
    if any("score_mean" in r for r in trained):
        ax.plot(steps, [r.get("score_mean", float("nan")) for r in trained], marker=".", ms=3, alpha=0.7,
                label="verifier score")
    ax.set_title("reward per response")
    ax.set_xlabel("step")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def _kl_panel(ax, steps: list, trained: list[dict[str, Any]]) -> None:
    """KL to the reference per token over the trained steps."""
    ax.plot(steps, [r.get("kl", float("nan")) for r in trained], color="tab:red", marker="o", ms=3)
    ax.set_title("KL to reference (per token)")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)


def _label_mix_panel(ax, steps: list, trained: list[dict[str, Any]]) -> None:
    """Share of statements per verifier label over the trained steps."""
    colors = {"Correct": "tab:green", "Hedged correct": "yellowgreen", "Vague": "tab:gray",
              "Hedged wrong": "tab:orange", "Wrong": "tab:red"}
    for lab in LABELS:
        ax.plot(steps, [label_mix(r)[lab] for r in trained], label=lab, color=colors[lab], marker=".", ms=3)
    ax.set_title("label mix (share of statements)")
    ax.set_xlabel("step")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def _dev_panels(axes: dict, dev_rows: list[dict[str, Any]]) -> None:
    """The in-loop dev evaluations (greedy): correct / incorrect (/ declined, where the recipe abstains) in the
    book mode the run evaluates (closed when it has closed-book records, with the passage dashed beside it),
    the declined share per question type where there is that panel, and a dotted line at the best dev step."""
    dsteps = [d["step"] for d in dev_rows]
    mode = "closed" if any("dev/closed/score" in d for d in dev_rows) else "evidence"
    abstains = "dev_declined" in axes or _declines(dev_rows, f"dev/{mode}/abstain")
    ax = axes["dev"]
    for key, name, c in (("correct", "correct", "tab:green"), ("incorrect", "incorrect", "tab:red"),
                         ("abstain", "declined", "tab:gray")):
        if key == "abstain" and not abstains:
            continue
        ax.plot(dsteps, [d.get(f"dev/{mode}/{key}", float("nan")) for d in dev_rows], marker="o", ms=3,
                label=name, color=c)
        if mode == "closed" and any("dev/evidence/correct" in d for d in dev_rows) and key != "abstain":
            ax.plot(dsteps, [d.get(f"dev/evidence/{key}", float("nan")) for d in dev_rows], ls="--",
                    color=c, alpha=0.6, label=f"{name} (with passage)")
    _finish_share_axis(ax, f"dev, greedy ({mode} book)", 7)
    if "dev_declined" in axes:
        _per_type_panel(axes["dev_declined"], dsteps, dev_rows, f"dev/{mode}/abstain/{{t}}", "o",
                        "dev, greedy: share declined per question type")
    best = best_dev_step(dev_rows)
    if best is not None:   # the step FINAL_MODEL=best exports: where to read the dev panels
        for a in (axes[k] for k in ("dev", "dev_declined") if k in axes):
            a.axvline(best, color="black", ls=":", lw=1.2, label=f"best dev step ({best})")
            a.legend(fontsize=8)


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m cluster.train_report SAVE_PATH", file=sys.stderr)
        return 2
    save = Path(argv[0])
    rows = read_metrics(save)
    if not rows:
        print(f"{save}: no metrics.jsonl records", file=sys.stderr)
        return 1
    png = plot_curves(rows, save / "training_curves.png", read_dev(save))
    print_summary(rows, {"steps": rows[-1]["step"], "metrics_path": str(save / "metrics.jsonl"),
                         "dev_rows": read_dev(save),
                         "curves_png": str(png) if png else None,
                         "skipped_batches": sum(1 for r in rows if r.get("skipped"))})
    return 0


if __name__ == "__main__":
    sys.exit(main())
