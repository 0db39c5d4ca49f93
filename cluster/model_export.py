"""The policy's Hugging Face folders a run leaves: snapshots (SNAPSHOT_STEP, the best dev step) and the final
model (SAVE_PATH/final). Each folder is written under a temporary name and renamed into place, so a reader (or a
run killed mid-write) never sees a half-written model.
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Callable, Optional

log = logging.getLogger(__name__)


def replace_dir(out: Path, tmp: Path, write: Callable[[Path], object]) -> None:
    """Write a folder through ``write(tmp)`` and move it to ``out`` in one rename."""
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    write(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)


def link_or_copy(src: str, dst: str) -> None:
    """copytree's copy function: a hard link (no extra disk for a 0.5 GB model) where the filesystem allows."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def save_policy(groups, out: Path, tmp: Optional[Path] = None) -> Path:
    """The policy's HF folder now (weights only) at ``out``."""
    replace_dir(out, tmp or out.with_name(out.name + ".tmp"), lambda t: groups.policy.run("save_hf", str(t)))
    return out


def export_final(save_path: Path, groups, last_checkpoint: Optional[str], best: bool, dev_eval=None) -> str:
    """SAVE_PATH/final: the policy's HF folder of the last checkpoint (hard links when possible), or with
    ``best`` (FINAL_MODEL=best) the snapshot of the best in-loop dev evaluation (``dev_eval``: its
    :class:`cluster.dev_eval.DevEvaluator`, for the log line)."""
    out = save_path / "final"
    src = Path(last_checkpoint) / "policy_hf" if last_checkpoint else None
    best_dir = save_path / "snapshots" / "best"
    if best and (best_dir / "config.json").is_file():
        log.info("FINAL_MODEL=best: the final model is the policy of step %s (best dev score %.3f)",
                 dev_eval.best_step if dev_eval else "?",
                 dev_eval.best_score if dev_eval and dev_eval.best_score is not None else float("nan"))
        src = best_dir

    def write(tmp: Path) -> None:
        if src is not None and src.is_dir():
            shutil.copytree(src, tmp, copy_function=link_or_copy)
        else:
            groups.policy.run("save_hf", str(tmp))
    replace_dir(out, save_path / ".final.tmp", write)
    log.info("final policy (HF format) at %s", out)
    return str(out)
