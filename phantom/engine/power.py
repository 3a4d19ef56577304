"""The board's power limit: how far the SM clock falls when a kernel mix asks for more power.

A GPU's power controller holds the board's power, averaged over roughly a tenth of a second,
at or under its limit by lowering the SM clock (measured: hardware/power.py).

A GEMM's database row carries the clock the limit allows a long stream of such GEMMs, not the
burst clock a GEMM runs at between memory-bound kernels in a training step
(see Note [Database GEMM clock] in hardware/power.py). `PowerGovernor` takes each GEMM to the
burst clock by `PowerModel.gemm_db_clock_share` (a row's time is 1.10x its burst-clock time),
keeps an exponentially weighted account of what the kernels placed on one simulated GPU asked
for over the controller's window, finds the clock scale s <= 1 at which that mix would draw
exactly the limit, and stretches the clock-bound part of each compute kernel by 1/s. A long
stream of one GEMM so comes back to about its database time; a step that leaves the board under
its limit runs its GEMMs at the burst clock.

Only kernels that occupy the SMs are accounted (Timeline.launch); NCCL kernels and copy-engine
transfers count as idle time at the board's base power, an underestimate of their draw.
"""
from __future__ import annotations

import math

from phantom.hardware.gpus import GPUSpec
from phantom.hardware.power import PowerModel

# Share of the datasheet HBM bandwidth a streaming kernel reaches (0.90 measured on H100 and
# H200: cost/calibration.py), for the memory-bound part of a compute kernel.
HBM_STREAM_SHARE = 0.90
MEMORY_BOUND_SHARE = 0.8  # a compute kernel whose bytes alone take this share of its time
SCALED_CLASSES = {"gemm": "gemm", "conv": "gemm", "attention": "attention"}
MOVED_TO_BURST = frozenset({"gemm"})  # classes whose database rows carry a lowered clock
MIN_SCALE = 0.3  # no measured board falls this far; a floor keeps a bad input from stalling time
RESOLVE_EVERY_NS = 1e6  # the clock is re-solved at most once per simulated millisecond


class PowerGovernor:
    """Clock scale of one simulated GPU under its power limit."""

    def __init__(self, model: PowerModel, limit_w: float, hbm_bytes_per_ns: float) -> None:
        self.model = model
        self.limit_w = float(limit_w)
        self.hbm_bytes_per_ns = hbm_bytes_per_ns
        self.tau_ns = model.window_ms * 1e6
        # A convolution stays at the database's clock, where a tensor-core FLOP costs less
        # (energy per FLOP ~ clock ** (exponent - 1)).
        self._conv_pj_per_flop = model.gemm_pj_per_flop * model.gemm_db_clock_share ** (model.clock_exponent - 1.0)
        self._decayed_to = 0.0  # GPU time to which the sums below are decayed
        self._busy_until = 0.0  # end of the latest kernel accounted
        # Exponentially weighted sums over the window, in unthrottled times (GEMMs at the burst clock):
        self._tc = 0.0  # clock-bound compute time
        self._ec = 0.0  # its dynamic compute energy (W x ns)
        self._tf = 0.0  # time of the other kernels (memory-bound ones)
        self._ef = 0.0  # energy that does not depend on the clock: theirs (base included), HBM's
        self._ti = 0.0  # idle time
        self._scale = 1.0
        self._solved_at = -math.inf
        self.stretched_ns = 0.0  # time added to kernels by the limit, over the run
        self.compute_ns = 0.0  # compute kernels' unthrottled time, over the run

    # -- one kernel -------------------------------------------------------------------------
    def kernel_ns(self, start_ns: float, gpu_ns: float, op_class: str, flops: float, nbytes: float) -> float:
        """Duration of a kernel that takes `gpu_ns` at the database's clock and starts at `start_ns`."""
        self._advance(start_ns)
        kind = SCALED_CLASSES.get(op_class)
        m = self.model
        hbm_w = m.hbm_pj_per_byte * nbytes / gpu_ns * 1e-3 if gpu_ns > 0 else 0.0
        # What the kernel's memory traffic alone would take does not shrink with the clock; a
        # kernel mostly that (a skinny GEMM streaming its weight) is not clock-bound at all.
        mem_ns = nbytes / self.hbm_bytes_per_ns
        if kind is None or gpu_ns <= 0 or flops <= 0 or mem_ns >= MEMORY_BOUND_SHARE * gpu_ns:
            self._add_fixed(start_ns, gpu_ns, m.base_w + hbm_w)
            return gpu_ns
        # A GEMM's database row is taken to the burst clock (measured); attention's rows match
        # traced steps as they are, and convolutions' were never compared: both keep their time.
        moved = op_class in MOVED_TO_BURST
        free_ns = gpu_ns * m.gemm_db_clock_share if moved else gpu_ns
        if kind == "gemm":
            pj = m.gemm_pj_per_flop if moved else self._conv_pj_per_flop
        else:
            pj = m.attention_pj_per_flop
        dyn_w = pj * flops / free_ns * 1e-3
        scale = self._clock_scale(start_ns, free_ns, dyn_w)
        duration = max(mem_ns, free_ns / scale)
        self._tc += free_ns
        self._ec += dyn_w * free_ns
        self._ef += hbm_w * gpu_ns  # HBM energy: the same bytes whatever the clock
        self._busy_until = max(self._busy_until, start_ns + duration)
        self.compute_ns += free_ns
        self.stretched_ns += duration - free_ns
        return duration

    # -- the account --------------------------------------------------------------------------
    def _advance(self, now_ns: float) -> None:
        """Decay the sums to `now_ns` (an exponential window of the controller's length); the
        gap since the latest kernel ended counts as idle time."""
        elapsed = now_ns - self._decayed_to
        if elapsed > 0:
            keep = math.exp(-elapsed / self.tau_ns)
            self._tc *= keep
            self._ec *= keep
            self._tf *= keep
            self._ef *= keep
            self._ti *= keep
            self._decayed_to = now_ns
        idle = now_ns - self._busy_until
        if idle > 0:
            self._ti += self.tau_ns * -math.expm1(-idle / self.tau_ns)  # its weight in the window
            self._busy_until = now_ns

    def _add_fixed(self, start_ns: float, ns: float, watts: float) -> None:
        self._tf += ns
        self._ef += ns * watts
        self._busy_until = max(self._busy_until, start_ns + ns)

    def _clock_scale(self, now_ns: float, next_ns: float, next_dyn_w: float) -> float:
        if now_ns - self._solved_at < RESOLVE_EVERY_NS:
            return self._scale
        self._solved_at = now_ns
        # The kernel about to run counts with the window's history, so a long first kernel is
        # not free of the limit.
        tc = self._tc + next_ns
        ec = self._ec + next_ns * next_dyn_w
        self._scale = solve_clock_scale(self.model, self.limit_w, tc, ec, self._tf, self._ef, self._ti)
        return self._scale

    def mean_scale(self) -> float:
        """Compute kernels' unthrottled time (GEMMs at the burst clock) over their time as run
        (1.0: never limited)."""
        return self.compute_ns / (self.compute_ns + self.stretched_ns) if self.compute_ns else 1.0


def mix_power_w(model: PowerModel, s: float, tc: float, ec: float, tf: float, ef: float, ti: float) -> float:
    """Mean power of a kernel mix run at clock scale s: clock-bound compute time tc (at s = 1)
    with dynamic compute energy ec, other work tf, energy ef that does not depend on the clock
    (other work's, HBM traffic's), idle ti."""
    time = tc / s + tf + ti
    energy = tc / s * model.base_w + ec * s ** (model.clock_exponent - 1.0) + ef + ti * model.base_w
    return energy / time if time > 0 else model.base_w


def solve_clock_scale(model: PowerModel, limit_w: float, tc: float, ec: float, tf: float, ef: float,
                      ti: float) -> float:
    """Largest s <= 1 at which the mix draws no more than the limit (mean power rises with s)."""
    if tc <= 0 or mix_power_w(model, 1.0, tc, ec, tf, ef, ti) <= limit_w:
        return 1.0
    if mix_power_w(model, MIN_SCALE, tc, ec, tf, ef, ti) >= limit_w:
        return MIN_SCALE
    lo, hi = MIN_SCALE, 1.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if mix_power_w(model, mid, tc, ec, tf, ef, ti) > limit_w:
            hi = mid
        else:
            lo = mid
    return lo


def governor_for(gpu: GPUSpec) -> PowerGovernor | None:
    """The power-limit model of a simulated GPU, or None where its draw was never measured."""
    if gpu.power is None:
        return None
    return PowerGovernor(gpu.power, gpu.tdp_watts, gpu.hbm_gbps * HBM_STREAM_SHARE)
