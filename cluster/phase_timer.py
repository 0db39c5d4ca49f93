"""Wall time per phase of one training step (generate, reward, forward, update, sync...).

The experience maker and the PPO update time their phases with it and the step's metrics record reports them;
here, below all three, so the records' module (:mod:`cluster.experience_maker`) and the metrics' module
(:mod:`cluster.step_metrics`, which reads those records) do not import each other.
"""
from __future__ import annotations

import time
from contextlib import contextmanager


class PhaseTimer:
    """Wall time per phase of one step: ``with timer("generate"): ...``."""

    def __init__(self):
        self.times: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.times[phase] = self.times.get(phase, 0.0) + time.perf_counter() - t0
