"""core/optim.py: AdamW with fp32 or bf16 moments (OPTIM_STATE_DTYPE) against torch's own AdamW."""
from __future__ import annotations

import copy

import pytest
import torch

from core.optim import AdamWLowPrecisionState, make_adamw


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in ((64, 32), (32,), (7, 5, 3))]


def _run(opt_factory, steps: int, seed: int = 0, start=None):
    """``steps`` optimizer steps on fixed pseudo-random gradients; returns the parameters and the optimizer."""
    params = _params(seed) if start is None else start
    opt = opt_factory(params)
    g = torch.Generator().manual_seed(seed + 1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g) * (0.1 + p.detach().abs())
        opt.step()
    return params, opt


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_fp32_state_computes_what_torch_adamw_computes(wd):
    ours, _ = _run(lambda ps: AdamWLowPrecisionState(ps, lr=1e-2, weight_decay=wd, state_dtype=torch.float32), 6)
    ref, _ = _run(lambda ps: torch.optim.AdamW(ps, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd), 6)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_bf16_state_halves_the_bytes_and_stays_on_the_fp32_trajectory():
    start = [p.detach().clone() for p in _params()]
    ours, opt = _run(lambda ps: make_adamw(ps, 1e-3, "bf16"), 30)
    ref, ref_opt = _run(lambda ps: make_adamw(ps, 1e-3, "fp32"), 30)
    for st, rst in zip(opt.state.values(), ref_opt.state.values()):
        assert st["exp_avg"].dtype == st["exp_avg_sq"].dtype == torch.bfloat16
        assert st["exp_avg"].nbytes * 2 == rst["exp_avg"].nbytes
    for p0, a, b in zip(start, ours, ref):
        assert a.dtype == torch.float32
        moved, err = (b - p0).norm(), (a - b).norm()
        assert moved > 1e-3 and err < 0.02 * moved, (float(moved), float(err))


def test_bf16_state_round_trips_through_a_state_dict():
    params, opt = _run(lambda ps: make_adamw(ps, 1e-2, "bf16"), 3)
    saved = copy.deepcopy(opt.state_dict())   # what a checkpoint file holds
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    other = make_adamw(copies, 1e-2, "bf16")
    other.load_state_dict(saved)
    assert all(st["exp_avg"].dtype == torch.bfloat16 for st in other.state.values())
    g = torch.Generator().manual_seed(9)
    for ps, o in ((params, opt), (copies, other)):
        g.manual_seed(9)
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g)
        o.step()
    for a, b in zip(params, copies):
        assert torch.equal(a, b)


def test_sliced_step_equals_the_whole_tensor_step(monkeypatch):
    """The bf16 step works in slices of STEP_CHUNK elements (small fp32 working copies); every operation is
    elementwise, so slicing changes nothing, bit for bit, also for a non-contiguous parameter (one whole slice)."""
    import core.optim as optim
    g = torch.Generator().manual_seed(3)
    base = torch.randn(40, 30, generator=g)
    results = []
    for chunk in (1 << 18, 97):
        monkeypatch.setattr(optim, "STEP_CHUNK", chunk)
        params = [torch.nn.Parameter(base.clone()), torch.nn.Parameter(base.clone().t())]   # .t(): not contiguous
        assert not params[1].is_contiguous()
        results.append(_run(lambda ps: make_adamw(ps, 1e-2, "bf16"), 4, start=params)[0])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_auto_state_dtype_is_bf16_on_cpu_and_fp32_on_accelerators():
    from core.optim import resolve_state_dtype
    assert resolve_state_dtype("auto", "cpu") == "bf16"
    assert resolve_state_dtype("auto", torch.device("cuda", 0)) == "fp32"
    assert resolve_state_dtype("fp32", "cpu") == "fp32" and resolve_state_dtype("bf16", "cuda") == "bf16"
    assert isinstance(make_adamw(_params(), 1e-3, "auto"), AdamWLowPrecisionState)
    assert type(make_adamw(_params(), 1e-3, "auto", device="cuda")) is torch.optim.AdamW   # built, not stepped


def test_bad_state_dtype_names_the_setting():
    with pytest.raises(ValueError, match="OPTIM_STATE_DTYPE"):
        make_adamw(_params(), 1e-3, "fp8")
    with pytest.raises(ValueError, match="lr=-1"):
        AdamWLowPrecisionState(_params(), lr=-1)
