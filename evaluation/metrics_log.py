"""A training run's per-step records (``RUN_DIR/metrics.jsonl``), as the report (:mod:`evaluation.report`) and its
plots (:mod:`evaluation.plots`) read them; here, below both, so the report and the plots do not import each other.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Per-step records of a training run (``RUN_DIR/metrics.jsonl``); [] when absent. Bad lines are skipped."""
    p = Path(run_dir)
    p = p / "metrics.jsonl" if p.is_dir() else p
    if not p.exists():
        return []
    rows = []
    for line in p.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    rows.sort(key=lambda r: r.get("step", 0))
    return rows
