"""MKL's fast kernels on AMD CPUs (MKL_VENDOR_SHIM).

PyTorch's x86 wheels link Intel MKL for fp32 matrix products. MKL picks its kernels by CPU vendor: on an AMD CPU
``mkl_serv_intel_cpu_true()`` answers 0 and MKL takes slower generic code paths. A one-function shared library
that answers 1, preloaded (``LD_PRELOAD``), makes MKL dispatch by the CPU's instruction sets instead, as it does
on Intel: the AVX2 kernels on an AVX2 CPU. `rlfh bench blas` measures what that buys on a machine; the figures
for the 2-core AMD EPYC this project is tuned on are in docs/PERFORMANCE.md, "MKL on AMD CPUs".

The launchers (``scripts/train.sh``, ``scripts/demo.sh``, ``scripts/run_tests.sh``) export what
``python -m core.cpu_blas preload`` prints; every process they start (``rlfh`` stages, the embedded Ray and its
actors) inherits it. Building needs a C compiler (``cc``) once; the library lives in the virtual environment
(``.venv/lib/rlfh/``). Nothing changes on Intel CPUs, on ARM, or where torch does not use MKL.

This module imports no torch at import time: the launchers call it before any model process starts.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from core.config import LauncherSettings

#: The whole shim. MKL calls this to ask whether the CPU is Intel's.
SHIM_SOURCE = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
SHIM_NAME = "libmkl_vendor_shim.so"


def shim_path() -> Path:
    """Where the compiled shim lives: inside this Python's environment (``make clean`` removes it with .venv)."""
    return Path(sys.prefix) / "lib" / "rlfh" / SHIM_NAME


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """``vendor_id`` of the first CPU (``AuthenticAMD``, ``GenuineIntel``), "" where /proc/cpuinfo has none."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def torch_uses_mkl() -> bool:
    """Whether this environment's torch does its fp32 products with MKL (imports torch, which is slow)."""
    import torch
    return bool(torch.backends.mkl.is_available()) and "BLAS_INFO=mkl" in torch.__config__.show()


def build_shim(out: Path, compiler: Optional[str] = None) -> Path:
    """Compile :data:`SHIM_SOURCE` into ``out`` (written atomically). Raises RuntimeError naming the fix when no C
    compiler is found or it fails."""
    cc = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH; install one (Debian/Ubuntu: apt install gcc) "
                           "or set MKL_VENDOR_SHIM=off")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp) / "shim.c", Path(tmp) / SHIM_NAME
        src.write_text(SHIM_SOURCE)
        try:
            res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)], capture_output=True,
                                 text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeError(f"{cc} failed to build the MKL vendor shim: {e}; set MKL_VENDOR_SHIM=off") from e
        if res.returncode != 0:
            raise RuntimeError(f"{cc} failed to build the MKL vendor shim (exit {res.returncode}): "
                               f"{res.stderr.strip()[-500:]}; set MKL_VENDOR_SHIM=off")
        tmp_out = out.with_suffix(f".tmp{os.getpid()}")
        shutil.copyfile(lib, tmp_out)
        os.replace(tmp_out, out)
    return out


def preload_value(mode: str, *, vendor: Optional[str] = None, uses_mkl=torch_uses_mkl,
                  path: Optional[Path] = None, current: Optional[str] = None) -> tuple[str, str]:
    """``(LD_PRELOAD value, one line saying why)`` for MKL_VENDOR_SHIM=``mode``; the value is "" where the shim
    does not apply. ``current``: the LD_PRELOAD already set (kept after the shim). Builds the shim on first use.

    auto: the shim on an AMD CPU whose torch uses MKL, built with the machine's C compiler (none found: a note,
    no shim). on: the same, but an error where it cannot apply. off: never.
    """
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"MKL_VENDOR_SHIM={mode!r}: use auto, on or off")
    current = os.environ.get("LD_PRELOAD", "") if current is None else current
    if mode == "off":
        return "", "MKL_VENDOR_SHIM=off: MKL picks its kernels by CPU vendor"
    vendor = cpu_vendor() if vendor is None else vendor
    path = shim_path() if path is None else path

    def no(why: str) -> tuple[str, str]:
        if mode == "on":
            raise RuntimeError(f"MKL_VENDOR_SHIM=on: {why}; use MKL_VENDOR_SHIM=auto or off")
        return "", why

    if vendor != "AuthenticAMD":
        return no(f"CPU vendor {vendor or 'unknown'}: MKL needs no shim")
    if str(path) in current.split(":"):
        return current, f"the MKL vendor shim is already preloaded ({path})"
    if not path.is_file():
        if not uses_mkl():
            return no("torch does not use MKL here")
        try:
            build_shim(path)
        except RuntimeError as e:
            return no(f"MKL's AMD code paths kept ({e})")
    value = f"{path}:{current}" if current else str(path)
    return value, f"AMD CPU: MKL's Intel kernels for fp32 products (LD_PRELOAD={path}; MKL_VENDOR_SHIM=off turns it off)"


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m core.cpu_blas", description=__doc__.split("\n\n")[0] + "\n\n" +
                                __doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pre = sub.add_parser("preload", help="print the LD_PRELOAD value a launcher should export (empty: none); the "
                         "reason goes to stderr")
    pre.add_argument("--mode", default=None, help="auto, on or off (default: the MKL_VENDOR_SHIM setting)")
    args = p.parse_args(argv)
    try:
        if args.mode is None:
            mode = LauncherSettings.load().mkl_vendor_shim
        else:
            mode = args.mode
        value, why = preload_value(mode)
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(why, file=sys.stderr)
    print(value)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
