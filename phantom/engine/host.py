"""Keep measured host time steady while the simulating machine changes speed.

The script's own Python time between CUDA ops is measured on the machine running the
simulation. Shared and frequency-scaled CPUs change speed during a run: the development VMs
of this project switch between two speeds a factor 2 apart, at random moments. A ~1 ms
pure-Python probe, re-run every few thousand ops, gives the machine's current speed relative
to the fastest it has been seen to run (remembered across runs in phantom's cache
directory); measured time is scaled to that fastest speed, so a run does not come out 2x
slower because the machine was in its slow state.
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

_CLOCK_NS = time.perf_counter_ns  # bound before the simulation patches time
PROBE_N = 2_000


class _Box:
    def __init__(self, v: int) -> None:
        self.v = v

    def step(self, d: dict) -> int:
        d[self.v & 63] = self.v
        return self.v + len(d)


def _probe_ns(clock=_CLOCK_NS) -> int:
    """Nanoseconds for a fixed pure-Python workload (object creation, calls, dicts)."""
    t0 = clock()
    d: dict = {}
    total = 0
    for i in range(PROBE_N):
        total += _Box(i).step(d)
    return clock() - t0


class HostSpeedNormalizer:
    """`factor` converts this machine's measured ns into ns at its best observed speed."""

    def __init__(self, cache_dir: Path | None, clock=_CLOCK_NS) -> None:
        self._clock = clock  # the clock host time is measured with (wall or CPU time)
        self._cache = cache_dir / f"host-probe-{platform.node()}.json" if cache_dir else None
        self.best_ns = self._load_best()
        self.factor = 1.0
        _probe_ns(clock)  # warm the code path
        self.sample()

    def sample(self) -> float:
        current = min(_probe_ns(self._clock) for _ in range(3))  # interruptions only make probes slower
        if self.best_ns is None or current < self.best_ns:
            self.best_ns = current
            self._save_best()
        self.factor = self.best_ns / current
        return self.factor

    def _load_best(self) -> int | None:
        try:
            return int(json.loads(self._cache.read_text())["best_probe_ns"]) if self._cache else None
        except (OSError, ValueError, KeyError):
            return None

    def _save_best(self) -> None:
        if self._cache is None:
            return
        try:
            self._cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"best_probe_ns": self.best_ns, "probe_n": PROBE_N}))
            os.replace(tmp, self._cache)
        except OSError:
            pass  # a read-only cache only costs the memory across runs
