"""MKL_VENDOR_SHIM (core/cpu_blas.py): when the launchers preload the one-function library, what it answers, and
that torch's products under it are the same products."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core import cpu_blas

ROOT = Path(__file__).resolve().parents[1]
needs_cc = pytest.mark.skipif(not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="no C compiler")


def never(*_a, **_k):
    raise AssertionError("must not be called")


def test_not_an_amd_cpu_or_off_means_no_preload(tmp_path):
    lib = tmp_path / "shim.so"
    assert cpu_blas.preload_value("auto", vendor="GenuineIntel", uses_mkl=never, path=lib, current="")[0] == ""
    assert cpu_blas.preload_value("off", vendor="AuthenticAMD", uses_mkl=never, path=lib, current="/a.so") == \
        ("", "MKL_VENDOR_SHIM=off: MKL picks its kernels by CPU vendor")
    value, why = cpu_blas.preload_value("auto", vendor="AuthenticAMD", uses_mkl=lambda: False, path=lib, current="")
    assert value == "" and "does not use MKL" in why and not lib.exists()
    with pytest.raises(RuntimeError, match="MKL_VENDOR_SHIM=on: CPU vendor GenuineIntel"):
        cpu_blas.preload_value("on", vendor="GenuineIntel", uses_mkl=never, path=lib, current="")
    with pytest.raises(ValueError, match="MKL_VENDOR_SHIM='yes': use auto, on or off"):
        cpu_blas.preload_value("yes", vendor="AuthenticAMD", path=lib, current="")


def test_no_compiler_is_a_note_in_auto_and_an_error_when_asked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    lib = tmp_path / "shim.so"
    value, why = cpu_blas.preload_value("auto", vendor="AuthenticAMD", uses_mkl=lambda: True, path=lib, current="")
    assert value == "" and "MKL's AMD code paths kept" in why and "MKL_VENDOR_SHIM=off" in why
    with pytest.raises(RuntimeError, match="MKL_VENDOR_SHIM=on: MKL's AMD code paths kept"):
        cpu_blas.preload_value("on", vendor="AuthenticAMD", uses_mkl=lambda: True, path=lib, current="")


@needs_cc
def test_the_shim_is_built_once_answers_intel_and_keeps_a_users_preload(tmp_path, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    lib = tmp_path / "lib" / "shim.so"
    value, why = cpu_blas.preload_value("auto", vendor="AuthenticAMD", uses_mkl=lambda: True, path=lib,
                                        current="/opt/jemalloc.so")
    assert value == f"{lib}:/opt/jemalloc.so" and "MKL_VENDOR_SHIM=off turns it off" in why
    assert ctypes.CDLL(str(lib)).mkl_serv_intel_cpu_true() == 1
    built = lib.stat().st_mtime_ns
    again, _ = cpu_blas.preload_value("auto", vendor="AuthenticAMD", uses_mkl=never, path=lib, current="")
    assert again == str(lib) and lib.stat().st_mtime_ns == built            # no second build, no torch probe
    assert cpu_blas.preload_value("on", vendor="AuthenticAMD", uses_mkl=never, path=lib, current=value)[0] == value


@needs_cc
def test_torch_computes_the_same_products_under_the_shim(tmp_path):
    """The shim changes which MKL kernels run, not what they compute: a linear layer's output agrees to fp32
    rounding with and without it (in fresh processes: the preload acts when torch loads)."""
    lib = cpu_blas.build_shim(tmp_path / "shim.so")
    code = ("import torch, sys; torch.manual_seed(0); a = torch.randn(48, 576); w = torch.randn(1536, 576); "
            "torch.save(torch.nn.functional.linear(a, w), sys.argv[1])")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    for name, extra in (("plain", {}), ("shim", {"LD_PRELOAD": str(lib)})):
        subprocess.run([sys.executable, "-c", code, str(tmp_path / f"{name}.pt")], env={**env, **extra},
                       check=True, timeout=120)
    import torch
    torch.testing.assert_close(torch.load(tmp_path / "shim.pt"), torch.load(tmp_path / "plain.pt"),
                               rtol=1e-4, atol=1e-3)


def test_cli_prints_the_value_and_names_a_bad_setting():
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MKL_VENDOR_SHIM")}
    off = subprocess.run([sys.executable, "-m", "core.cpu_blas", "preload", "--mode", "off"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert off.returncode == 0 and off.stdout == "\n" and "MKL_VENDOR_SHIM=off" in off.stderr
    bad = subprocess.run([sys.executable, "-m", "core.cpu_blas", "preload"], cwd=ROOT,
                         env={**env, "MKL_VENDOR_SHIM": "maybe"}, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "MKL_VENDOR_SHIM" in bad.stderr and "'auto', 'on' or 'off'" in bad.stderr


def test_bench_blas_measures_both_variants_in_child_processes(tiny_model_path, capsys):
    """`rlfh bench blas` on the tiny model: every measurement of every variant comes back and the table has a
    speed-up column exactly when the shim applies on this machine."""
    from bench import blas
    res = blas.measure(repeats=1, rows=2, max_new_tokens=3, threads=1, model=tiny_model_path)
    names = list(res["runs"])
    assert names[0] == "MKL default" and (names[1:] == ["vendor shim"]) == bool(res["shim"])
    for runs in res["runs"].values():
        (run,) = runs
        assert set(run["matmul"]) == {f"{m}x{k}x{n}" for m, k, n in blas.SHAPES}
        assert all(v > 0 for v in run["matmul"].values()) and run["train_s"] > 0 and run["decode_tok_s"] > 0
    blas.print_table(res)
    table = capsys.readouterr().out
    assert "| greedy decode, tokens/s |" in table and ("speed-up" in table) == bool(res["shim"])
    with pytest.raises(ValueError, match="--rows"):
        blas.measure(rows=0)
