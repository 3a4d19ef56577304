"""How fast this machine runs Python compared with the simulated GPU host.

The script's own Python time between CUDA ops is measured on the machine running the
simulation, which may be a slow CI box or a fast laptop. A fixed pure-Python workload,
timed here and on the GPU hosts (bench/host_calibration.py), gives the ratio used to scale
that measured time (`--host-speed auto`, the default).
"""
from __future__ import annotations

import statistics
import time

# Median seconds of `python_score()` on the lent H200 host (bench/data/host_h200.json,
# Python 3.12.3, 2026-11-22): the reference "GPU host" CPU.
REFERENCE_SCORE_S = 0.04752


def python_score(repeats: int = 7, n: int = 200_000) -> float:
    """Median seconds for a fixed pure-Python workload (object creation, calls, dicts)."""

    class Box:
        def __init__(self, v: int) -> None:
            self.v = v

        def step(self, d: dict) -> int:
            d[self.v & 63] = self.v
            return self.v + len(d)

    def work() -> int:
        d: dict = {}
        total = 0
        for i in range(n):
            total += Box(i).step(d)
        return total

    clock = time.perf_counter
    times = []
    for _ in range(repeats):
        t0 = clock()
        work()
        times.append(clock() - t0)
    return statistics.median(times)


def measure_host_speed() -> float:
    """This machine's Python speed relative to the reference GPU host (>1: faster here)."""
    # A quarter of the workload, scaled, keeps start-up cost near 0.1 s.
    local = python_score(repeats=5, n=50_000) * 4
    return REFERENCE_SCORE_S / local
