"""PNG plots of the hallucination report (matplotlib, Agg backend)."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, Optional

from evaluation.metrics_log import read_metrics

OUTCOME_COLORS = {"correct": "#2ca02c", "incorrect": "#d62728", "not_attempted": "#9e9e9e"}
OUTCOME_LABELS = {"correct": "correct", "incorrect": "incorrect (hallucinated)", "not_attempted": "not attempted"}
LABEL_COLORS = {"Correct": "tab:green", "Hedged correct": "yellowgreen", "Vague": "tab:gray",
                "Hedged wrong": "tab:orange", "Wrong": "tab:red"}
MODEL_COLORS = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _wrap(name: str, width: int = 18) -> str:
    return "\n".join(textwrap.wrap(name, width)) or name


def plot_outcomes(report: dict[str, Any], out_png: str | Path) -> Path:
    """Grouped bars per model (correct / incorrect / not attempted) with 95% CI whiskers, one panel per group."""
    plt = _plt()
    groups = list(report["groups"].items())
    n_models = max(len(g["models"]) for _, g in groups)
    fig, axes = plt.subplots(1, len(groups), figsize=(max(6.0, 2.0 + 2.2 * n_models) * len(groups) / 1.3, 4.8),
                             squeeze=False, sharey=True)
    keys = ("correct", "incorrect", "not_attempted")
    width = 0.26
    for ax, (gname, g) in zip(axes[0], groups):
        models = g["models"]
        for k_i, k in enumerate(keys):
            xs, ys, lo, hi = [], [], [], []
            for m_i, m in enumerate(models):
                e = m["metrics"]["gold"][k]
                xs.append(m_i + (k_i - 1) * width)
                ys.append(100 * e["value"])
                lo.append(100 * (e["value"] - e["ci95"][0]))
                hi.append(100 * (e["ci95"][1] - e["value"]))
            bars = ax.bar(xs, ys, width=width, color=OUTCOME_COLORS[k], label=OUTCOME_LABELS[k],
                          yerr=[lo, hi], capsize=3, error_kw={"elinewidth": 1, "ecolor": "black"})
            for b, y, h in zip(bars, ys, hi):
                ax.text(b.get_x() + b.get_width() / 2, y + h + 1.0, f"{abs(y):.0f}", ha="center", va="bottom",
                        fontsize=7)
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels([_wrap(m["name"]) for m in models], fontsize=8)
        ax.set_title(gname + f"  (n={models[0]['metrics']['n']})", fontsize=10)
        ax.set_ylim(0, 105)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("% of questions (95% bootstrap CI)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.suptitle("Gold-answer grader: outcomes per model", fontsize=12)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return out_png


def plot_tradeoff(report: dict[str, Any], out_png: str | Path) -> Path:
    """Correct rate (y) vs not-attempted rate (x) per model and mode, CI crosses; incorrect rate annotated."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    names: list[str] = []
    for _, g in report["groups"].items():
        for m in g["models"]:
            if m["name"] not in names:
                names.append(m["name"])
    markers = ["o", "s", "^", "D", "v", "P"]
    for g_i, (gname, g) in enumerate(report["groups"].items()):
        mode = gname.split("|")[-1].strip()
        for m in g["models"]:
            gd = m["metrics"]["gold"]
            x, y = 100 * gd["not_attempted"]["value"], 100 * gd["correct"]["value"]
            xe = [[x - 100 * gd["not_attempted"]["ci95"][0]], [100 * gd["not_attempted"]["ci95"][1] - x]]
            ye = [[y - 100 * gd["correct"]["ci95"][0]], [100 * gd["correct"]["ci95"][1] - y]]
            color = MODEL_COLORS[names.index(m["name"]) % len(MODEL_COLORS)]
            ax.errorbar(x, y, xerr=xe, yerr=ye, fmt=markers[g_i % len(markers)], color=color, ms=8, capsize=3,
                        alpha=0.9, label=f"{m['name']} [{mode}]")
            ax.annotate(f"inc {100 * gd['incorrect']['value']:.0f}%", (x, y), textcoords="offset points",
                        xytext=(6, 6), fontsize=7, color=color)
    ax.set_xlabel("not attempted / abstained (% of questions)")
    ax.set_ylabel("correct (% of questions)")
    ax.set_title("Correct vs abstain trade-off (labels: incorrect rate)\n"
                 "up = more right answers; right = more abstention", fontsize=10)
    ax.grid(alpha=0.3)
    ax.set_xlim(left=-3)
    ax.set_ylim(bottom=-2)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return out_png


def plot_risk_coverage(report: dict[str, Any], out_png: str | Path) -> Optional[Path]:
    """Risk (incorrect share of the answers given) vs coverage (share of questions answered), one panel per group.

    Curves: each model answering its most confident questions first (mean token log-prob), where recorded.
    Points: each model's own operating point (its abstentions decide). Dotted: random abstention from the
    reference (the same risk at every coverage). None when no group has anything to draw.
    """
    groups = [(gname, g) for gname, g in report["groups"].items() if (g.get("selectivity") or {}).get("runs")]
    if not groups:
        return None
    plt = _plt()
    names: list[str] = []
    for _, g in groups:
        for m in g["models"]:
            if m["name"] not in names:
                names.append(m["name"])
    fig, axes = plt.subplots(1, len(groups), figsize=(6.2 * len(groups), 4.8), squeeze=False)
    for ax, (gname, g) in zip(axes[0], groups):
        sel = g["selectivity"]
        for m in g["models"]:
            e = sel["runs"].get(m["name"])
            if e is None:
                continue
            color = MODEL_COLORS[names.index(m["name"]) % len(MODEL_COLORS)]
            rc = e.get("risk_coverage") or {}
            if rc.get("coverage"):
                ax.plot([100 * c for c in rc["coverage"]], [100 * r for r in rc["risk"]], color=color, lw=1.6,
                        label=f"{m['name']}: by confidence (AURC {rc['aurc']:.2f})")
            gd = m["metrics"]["gold"]
            cov = 1 - gd["not_attempted"]["value"]
            risk = gd["incorrect"]["value"] / cov if cov > 0 else float("nan")
            ax.plot(100 * cov, 100 * risk, "o", color=color, ms=9, mec="black",
                    label=f"{m['name']}: own abstentions")
            if m["name"] == sel["reference"]:
                ax.axhline(100 * risk, color=color, ls=":", lw=1.2, label=f"random abstention from {m['name']}")
        ax.set_xlabel("coverage: questions answered (%)")
        ax.set_ylabel("risk: incorrect among answered (%)")
        ax.set_title(gname, fontsize=10)
        ax.set_xlim(0, 102)
        ax.set_ylim(0, 102)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("Risk-coverage: lower is better at every coverage; below the dotted line = better than random "
                 "abstention", fontsize=10)
    fig.tight_layout()
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return out_png


def _has_values(rows: list[dict[str, Any]], key: str, positive: bool = False) -> bool:
    """Some record of ``rows`` has a finite number under ``key`` (above 0 with ``positive``)."""
    return any(isinstance(r.get(key), (int, float)) and math.isfinite(r[key]) and (r[key] > 0 or not positive)
               for r in rows)


def training_panels(rows: list[dict[str, Any]]) -> list[str]:
    """The panels of the report's ``training_curves.png`` that fit the run: ``reward`` and ``kl`` always, ``labels``
    where a record has a verifier label mix, ``behaviour`` where it has a correct rate, a response length, or an
    abstain rate above 0 (a recipe that never declines, e.g. grounded, draws no abstention line)."""
    panels = ["reward", "kl"]
    if any(f"label_share/{lab}" in r for r in rows for lab in LABEL_COLORS):
        panels.append("labels")
    if (_has_values(rows, "correct_rate") or _has_values(rows, "response_length")
            or _has_values(rows, "abstain_rate", positive=True)):
        panels.append("behaviour")
    return panels


def plot_training(run_dir: str | Path, out_png: str | Path) -> Optional[Path]:
    """Reward, KL, label mix and rollout behaviour (correct / abstain rate, length) from RUN_DIR/metrics.jsonl: the
    panels that fit the run (:func:`training_panels`), in a row up to 3 and 2 x 2 for 4."""
    rows = [r for r in read_metrics(run_dir) if not r.get("skipped")]
    if not rows:
        return None
    plt = _plt()
    steps = [r.get("step", i + 1) for i, r in enumerate(rows)]

    def series(key):
        return [r.get(key, float("nan")) if isinstance(r.get(key), (int, float)) else float("nan") for r in rows]

    panels = training_panels(rows)
    shape = (2, 2) if len(panels) == 4 else (1, len(panels))
    fig, grid = plt.subplots(*shape, figsize=(6 * shape[1], 3.75 * shape[0] + (0.5 if shape[0] == 1 else 0)),
                             squeeze=False)
    axes = dict(zip(panels, [a for row in grid for a in row]))
    ax = axes["reward"]
    ax.plot(steps, series("reward_mean"), marker="o", ms=3, label="token reward (sum per response)")
    if any("score_mean" in r for r in rows):
        ax.plot(steps, series("score_mean"), marker=".", ms=3, alpha=0.7, label="verifier score")
    ax.set_title("reward per response")
    ax.legend(fontsize=8)

    ax = axes["kl"]
    ax.plot(steps, series("kl"), color="tab:red", marker="o", ms=3)
    ax.set_title("KL to the reference (per token)")

    if "labels" in axes:
        ax = axes["labels"]
        for lab, color in LABEL_COLORS.items():
            key = f"label_share/{lab}"
            if any(key in r for r in rows):
                ax.plot(steps, series(key), label=lab, color=color, marker=".", ms=3)
        ax.set_ylim(0, 1)
        ax.set_title("verifier label mix of rollout statements")
        ax.legend(fontsize=8)

    if "behaviour" in axes:
        ax = axes["behaviour"]
        for key, color, lab in (("correct_rate", "tab:green", "rollouts judged correct"),
                                ("abstain_rate", "tab:gray", "rollouts abstaining")):
            if _has_values(rows, key, positive=key == "abstain_rate"):
                ax.plot(steps, series(key), color=color, marker=".", ms=3, label=lab)
        ax.set_ylim(0, 1)
        ax.set_title("rollout behaviour")
        h1, l1 = ax.get_legend_handles_labels()
        if _has_values(rows, "response_length"):
            ax2 = ax.twinx()
            ax2.plot(steps, series("response_length"), color="tab:blue", alpha=0.5, ls="--", label="length (tokens)")
            ax2.set_ylabel("response length (tokens)", color="tab:blue")
            h2, l2 = ax2.get_legend_handles_labels()
            h1, l1 = h1 + h2, l1 + l2
        if h1:
            ax.legend(h1, l1, fontsize=8, loc="upper left")
    from matplotlib.ticker import MaxNLocator
    for a in axes.values():
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
        a.set_xlabel("step")
        a.grid(alpha=0.3)
    fig.suptitle(f"Training run {Path(run_dir).name}: {len(rows)} steps", fontsize=12)
    fig.tight_layout()
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png
