"""The host clock's account: which of this machine's time is the script's, at the node's speed.

See Note [Host time] in phantom/host/__init__.py for the model. `HostAccount` is the one object
that moves the simulated host clock for the script's own work: `begin_op` closes the gap since
phantom last returned to the script and charges it, `end_op` opens the next one. Everything
phantom does in between (fake dispatch, the cost model, the allocator model) is not charged;
what the node's host pays for the same call (a kernel launch, a runtime call) is charged by the
caller as a fixed cost instead.
"""
from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Callable

from phantom.engine import Timeline
from phantom.hardware import GPUSpec
from phantom.host.pace import PACE_FILE_ENV, read_pace, wait_for_pace
from phantom.host.machine import reference_step_ns
from phantom.host.speed import HostSpeedNormalizer
from phantom.host.steady import SteadyGaps, straggler_pace

# The clock the script's host time is measured with: this process's CPU time, not wall time.
# Gaps in wall time include the time the process waits for a core, whether other ranks or
# other work on this machine hold it (on a loaded 2-core machine a host-bound step came out
# 290 ms in wall time and 34 ms in CPU time; real: 21 ms). Blocking waits are not CPU time.
HOST_CLOCK_NS = time.process_time_ns
REAL_NS = time.perf_counter_ns  # bound before any patching
# Host cost of launching one CUDA kernel, beyond the Python and dispatcher work the
# simulation measures directly (that part runs for real here). Measured on an H200 host
# (bench/host/data/host_h200.json, bench/host/host_calibration.py, torch 2.11): an eager
# `torch.add(x, 1, out=y)` on CUDA costs 6.95 us of host time, the same op on a CPU tensor 2.90 us.
HOST_KERNEL_LAUNCH_NS = 4_000.0
# cuBLAS adds its own host work per GEMM (handle, heuristics cache): a small matmul costs
# 21.9 us of host time against 6.95 us for an elementwise op on the same host.
GEMM_EXTRA_HOST_NS = 15_000.0
# Re-measure this machine's current speed every this many handler exits (~1 ms each) ...
SPEED_SAMPLE_EVERY_OPS = 2_000
SPEED_SAMPLE_EVERY_S = 1.0  # ... or this much wall time, whichever comes first
PROGRESS_EVERY_S = 10.0
PROGRESS_CHECK_EVERY_OPS = 256


class HostAccount:
    """The script's host time on one rank, in simulated-host nanoseconds.

    `timeline` is the rank's timeline (the simulation replaces it after its start-up
    calibration; `Simulation.timeline` reads it from here); `cache_dir` keeps this machine's
    speed and calibration history; `host_speed`, `host_gaps` and `rank_spread` are the run's
    options (SimOptions); `progress` prints a progress line, called every PROGRESS_EVERY_S of
    wall time.
    """

    def __init__(self, gpu: GPUSpec, timeline: Timeline, cache_dir: Path | None,
                 host_speed: float | None, host_gaps: str, rank_spread: float | None,
                 progress: Callable[[], None]) -> None:
        self.gpu = gpu
        self.timeline = timeline
        self._host_gaps_mode = host_gaps
        self._rank_spread = rank_spread
        self._progress = progress
        self.clock = HOST_CLOCK_NS
        self._real_mark = self.clock()
        # Simulated-host ns a handler entry costs beyond plain eager (host.calibration)
        self.dispatch_overhead_ns = 0.0
        self.calibration_contended = False  # its calibration ran beside other busy processes
        # Simulated-host ns taken off the gaps after each blocking coordinator round trip
        # (a distributed run's collectives): host.calibration, machine.wake_penalty_ns
        self.wake_penalty_ns = 0.0
        self._wake_credit = 0.0  # what is left of it to take off since the last wake-up
        # Warms the script's way to the handler after a round trip, in phantom's time: set by
        # interception.install (PhantomMode.warm_dispatch_paths); off with PHANTOM_NO_REWARM=1
        # (a diagnostic for A/B runs).
        self.warm_dispatch_paths: Callable[[], None] | None = None
        self._rewarm = not os.environ.get("PHANTOM_NO_REWARM")
        # Simulated-host ns a freed storage costs the gap it dies in beyond a real free: the
        # storage's finalizer reaching Python (weakref.finalize), not the allocator model's
        # work, which `storage_released` takes off itself. Measured at start-up.
        self.release_overhead_ns = 0.0
        self.release_host_ns = 0.0  # ... and what the node's host is charged instead
        self._release_credit = 0.0  # this gap's releases: overhead minus the node's cost
        self.releases = 0
        self.wake_ups = 0
        self.dispatch_entries = 0  # every entry into the dispatch handler, metadata included
        # Simulated runtime calls (torch.cuda streams, events and syncs; clock reads)
        self._api_depth = 0
        # Simulated-host ns a runtime call's way in and out costs the gaps around it beyond a
        # real call's (the wrapper, the clock reads): measured at start-up, taken off
        self.api_overhead_ns = 0.0
        self.api_calls = 0
        self.api_host_ns = 0.0  # the node's cost of them, charged
        # Per tensor of a list argument / of a returned list: what crossing the handler costs
        # here (taken off) and on the node (charged); both 0 until the calibration, and while
        # it measures (measure_raw_gaps).
        self.list_overhead_ns = (0.0, 0.0)
        self.list_real_ns = (0.0, 0.0)
        self._list_outputs_pending = 0  # tensors the last handler returned in a list
        self.list_tensors = 0  # list tensors charged at the node's cost
        # All host time of a rank of a multi-GPU run is charged at the pace of its host's
        # slowest rank (set_world; host.steady.straggler_pace); 1 on one GPU.
        self.rank_pace = 1.0
        self.user_host_ns = 0.0  # host time charged for the script's own gaps
        self.speed = HostSpeedNormalizer(cache_dir, clock=self.clock, pace=self._pace_reader())
        # This machine (at its best observed speed) against the simulated host: given, or
        # measured by _measure_host_speed.
        self.host_step_ns_here: float | None = None  # the reference step here, at best speed
        self.host_step_ns_at_start: float | None = None  # ... and as timed at start-up
        self.host_speed = self._measure_host_speed(host_speed)
        self.gap_scale = self.speed.factor * self.host_speed
        self.steady = self.new_steady_gaps()
        self._ops_until_speed_sample = SPEED_SAMPLE_EVERY_OPS
        self._gc_start: tuple[int, int] | None = None  # (clock, _real_mark) when a collection began
        self.next_progress = REAL_NS() + PROGRESS_EVERY_S * 1e9
        self._ops_until_progress_check = PROGRESS_CHECK_EVERY_OPS
        self._speed_sampled_wall = REAL_NS()

    @staticmethod
    def _pace_reader() -> Callable[[], float | None] | None:
        """The reader of the launcher's pace process (host.pace), or None without one."""
        path = os.environ.get(PACE_FILE_ENV)
        return functools.partial(read_pace, path) if path else None

    def _measure_host_speed(self, given: float | None) -> float:
        """Compare this machine with the simulated node's host on the same tiny CPU training
        step (GPUSpec.host_step_ns was measured on the node): the script's host time here is
        scaled by the ratio. The step, like the script's gaps, is mostly PyTorch's Python and
        C++ host path, which a pure-Python score predicts poorly (hosts differ more on one than
        on the other). Timed before the interception is installed, as on the node; both sides
        at their best observed speed: here, the fastest step this machine has run (remembered
        across runs; the probe then tracks how far from that speed it is at each moment)."""
        # The step as timed now, beside the best: the speed probe is plain Python, and a
        # machine can be in a state that slows PyTorch's C++ path far more (1.6x against the
        # probe's 1.1x, for many minutes): the report's summary says so.
        self.host_step_ns_at_start = reference_step_ns(rounds=5, clock=self.clock)
        self.host_step_ns_here = self.speed.record_step(self.host_step_ns_at_start)
        if os.environ.get(PACE_FILE_ENV):
            # it starts with the rank, importing torch; without a reading by now the whole run
            # converts by the probe, as its calibration then does
            if wait_for_pace(os.environ[PACE_FILE_ENV]) is None:
                self.speed.drop_pace()
            self.speed.sample()
        if given is not None:
            return given
        # Gaps are converted to this machine's best speed; the node's reference step is its
        # best too, and a real step runs at the node's typical speed.
        return self.gpu.host_step_ns * self.gpu.host_mean_slowdown / self.host_step_ns_here

    def new_steady_gaps(self) -> SteadyGaps | None:
        return SteadyGaps() if self._host_gaps_mode == "steady" else None

    # -- the script's gaps ----------------------------------------------------------------
    def begin_op(self, site: object = None, dispatched: bool = False, list_inputs: int = 0,
                 now: int | None = None, api: bool = False) -> None:
        """Entering phantom at `site` (the op, or what else ends the gap): charge the user's
        own host time since we last returned.

        For a dispatched op, the gap also holds the cost of reaching our handler through
        torch's Python dispatch (argument boxing, FakeTensor wrapping), which a real GPU run
        does not pay; `dispatch_overhead_ns`, measured at start-up, is taken off. So is the
        cost of passing each of the op's `list_inputs` list-argument tensors, and each tensor of
        a list the previous op returned, through that path, charged at the node's cost instead.
        `now`: the gap's end as read by the caller (HOST_CLOCK_NS), where phantom's own path
        to here began. `api`: the gap ends in a simulated runtime call (api_enter), whose way
        in and out (`api_overhead_ns`) is taken off.
        """
        if self._api_depth:
            return  # inside a simulated CUDA runtime call: its entry closed the script's gap
        if now is None:
            now = self.clock()
        # In simulated-host nanoseconds: this machine at its best observed speed (the probe),
        # scaled by how fast it is relative to the simulated host.
        gap = (now - self._real_mark) * self.gap_scale
        if self._wake_credit > 0:
            # the first runs of the script's code after a round trip, slow on cold caches: a
            # real rank does not sleep there (see host.machine.wake_penalty_ns). DDP's reducer
            # wakes from the autograd thread: a race here only moves the credit between gaps.
            taken = min(gap, self._wake_credit)
            gap -= taken
            self._wake_credit -= taken
        if self._release_credit:
            # storages freed in this gap: their finalizers' way into Python is phantom's, the
            # allocator's malloc and free the node's
            gap = max(0.0, gap - self._release_credit)
            self._release_credit = 0.0
        if self.steady is not None:
            gap = self.steady.typical(site, gap)
        if dispatched:
            self.dispatch_entries += 1
            gap -= self.dispatch_overhead_ns
        elif api:
            gap -= self.api_overhead_ns
        outputs, self._list_outputs_pending = self._list_outputs_pending, 0
        if list_inputs or outputs:
            (over_in, over_out), (real_in, real_out) = self.list_overhead_ns, self.list_real_ns
            gap = max(0.0, gap - list_inputs * over_in - outputs * over_out) \
                + list_inputs * real_in + outputs * real_out
            self.list_tensors += list_inputs + outputs
        gap = max(0.0, gap) * self.rank_pace
        self.user_host_ns += gap
        self.timeline.advance_host(gap)
        self._real_mark = now

    def end_op(self) -> None:
        """Leaving phantom: our own overhead up to here is not the user's time."""
        self._ops_until_speed_sample -= 1
        if self._ops_until_speed_sample <= 0:
            self.sample_speed()
        self._real_mark = self.clock()
        self._ops_until_progress_check -= 1
        if self._ops_until_progress_check <= 0:
            self._ops_until_progress_check = PROGRESS_CHECK_EVERY_OPS
            wall = REAL_NS()
            # Scripts that issue few ops (collective-heavy ones) would re-measure the
            # machine's speed rarely; under changing load, sample by time as well.
            if self._ops_until_speed_sample < SPEED_SAMPLE_EVERY_OPS and \
                    wall - self._speed_sampled_wall > SPEED_SAMPLE_EVERY_S * 1e9:
                self.sample_speed()
                self._real_mark = self.clock()
            if wall >= self.next_progress:
                self.next_progress = REAL_NS() + PROGRESS_EVERY_S * 1e9
                self._progress()

    def restart_gap(self) -> None:
        """The script's next gap starts now (what ran since the mark was phantom's)."""
        self._real_mark = self.clock()

    def returned_list(self, tensors: int) -> None:
        """The handler is returning a list of `tensors` tensors: their way back to the caller
        is in the next gap (begin_op)."""
        self._list_outputs_pending = tensors

    def set_world(self, ranks_per_host: int) -> None:
        """This process is a rank of a multi-GPU run with `ranks_per_host` ranks on its host:
        its host time runs at the pace of the host's slowest rank (host.steady.straggler_pace)."""
        spread = self._rank_spread
        if spread is None:
            spread = self.gpu.host_rank_spread
        self.rank_pace = straggler_pace(ranks_per_host, spread)

    def woke_up(self) -> None:
        """The rank process just returned from a blocking round trip to the coordinator
        (inside phantom's own time: the caller is between begin_op and end_op)."""
        self.wake_ups += 1
        self._wake_credit = self.wake_penalty_ns
        if self._rewarm and self.warm_dispatch_paths is not None:
            try:
                self.warm_dispatch_paths()
            except Exception as e:  # noqa: BLE001 (an accounting refinement must not end the run)
                self._rewarm = False
                print(f"phantom: warming the dispatch path after a collective failed ({type(e).__name__}: "
                      f"{e}); continuing without it (report: host_gaps.rewarm_after_wake false)",
                      file=sys.stderr)

    def storage_released(self, phantom_ns: int) -> None:
        """A fake storage was freed inside the script's gap, phantom's work taking
        `phantom_ns` of this machine's time: that is taken off the gap at once (inside a handler,
        end_op resets the mark anyway); the finalizer's way into Python, beyond the node's own
        free, at the next begin_op."""
        self._real_mark += phantom_ns
        self._release_credit += self.release_overhead_ns - self.release_host_ns
        self.releases += 1

    def on_gc(self, phase: str, info: dict) -> None:
        """gc.callbacks hook: Python's cyclic collections are not charged as host time.

        Under phantom the heap holds the simulation's own objects (fake tensors and their
        metadata, FakeTensorMode's caches, one finalizer per storage): hundreds of thousands
        more than the script has on a GPU host, and each collection walks them. Charged, a
        host-bound step came out up to a full collection (tens to hundreds of ms) longer,
        depending on where the collector happened to run. The script's own collections on
        a GPU host are left out with them: timed there, they take 0.02-1.25 ms of a 15-280 ms
        step."""
        if phase == "start":
            self._gc_start = (self.clock(), self._real_mark)
        elif self._gc_start is not None:
            t0, mark = self._gc_start
            self._gc_start = None
            # Finalizers that ran inside the collection moved the mark already: count once.
            self._real_mark = max(self._real_mark, mark + (self.clock() - t0))

    # -- runtime calls and fixed costs ----------------------------------------------------
    def api_enter(self, site: str, now: int) -> None:
        """A simulated CUDA runtime call (`torch.cuda.current_stream()`, an event record, a
        stream context, a clock read) begins: the script's gap ends here. What the simulation
        does to answer it is phantom's time, not the script's; `api_exit` charges the node's
        cost of the call instead. Calls made inside another (the current stream an event record
        looks up) are part of it. `now`: HOST_CLOCK_NS read first thing in the call."""
        if self._api_depth == 0:
            self.begin_op(site, now=now, api=True)
        self._api_depth += 1

    def api_exit(self, node_ns: float) -> None:
        """The call that `api_enter` began returns: charge the node's host cost of it (outermost
        calls only), at the slowest rank's pace as every host cost."""
        self._api_depth -= 1
        if self._api_depth == 0:
            host_ns = node_ns * self.rank_pace
            self.api_calls += 1
            self.api_host_ns += host_ns
            self.timeline.advance_host(host_ns)
            self.end_op()

    def now_ns(self, node_ns: float = 0.0, now: int | None = None) -> float:
        """The simulated host clock, read as a call that costs the node `node_ns` (`now`: as
        api_enter)."""
        self.api_enter("clock", self.clock() if now is None else now)
        now = self.timeline.host_ns
        self.api_exit(node_ns)
        return now

    def sleep_ns(self, ns: float) -> None:
        """`time.sleep` on the simulated host: the clock moves on, nothing runs."""
        self.begin_op("sleep")
        self.timeline.advance_host(ns)
        self.end_op()

    def at_pace(self, node_ns: float) -> float:
        """A fixed host cost of the node (a kernel launch, a collective's enqueue, a graph
        replay) at the pace of its slowest rank, as every host cost is charged."""
        return node_ns * self.rank_pace

    # -- this machine's speed -------------------------------------------------------------
    def sample_speed(self) -> None:
        self._ops_until_speed_sample = SPEED_SAMPLE_EVERY_OPS
        self._speed_sampled_wall = REAL_NS()
        self.gap_scale = self.speed.sample() * self.host_speed

    def speed_variation(self) -> dict:
        return self.speed.variation()

    def gaps_report(self) -> dict:
        """How the script's host gaps were charged (report: simulation.host_gaps)."""
        steady = self.steady
        share = steady.share() if steady is not None else None
        return {"mode": self._host_gaps_mode, "steady_share": share,
                "new_work": steady.new_work if steady is not None else None,
                "new_work_ns": steady.new_work_ns if steady is not None else None,
                "dispatch_overhead_ns": self.dispatch_overhead_ns,
                "dispatch_entries": self.dispatch_entries, "wake_penalty_ns": self.wake_penalty_ns,
                "list_tensor_overhead_ns": list(self.list_overhead_ns),
                "list_tensor_host_ns": list(self.list_real_ns), "list_tensors": self.list_tensors,
                "release_overhead_ns": self.release_overhead_ns, "release_host_ns": self.release_host_ns,
                "releases": self.releases, "api_overhead_ns": self.api_overhead_ns,
                "wake_ups": self.wake_ups, "user_host_ns": self.user_host_ns,
                "rewarm_after_wake": self._rewarm and self.warm_dispatch_paths is not None,
                "calibration_contended": self.calibration_contended,
                "api_calls": self.api_calls, "api_host_ns": self.api_host_ns}

    def measure_raw_gaps(self) -> None:
        """From here on charge every gap as measured, in this machine's raw ns, with nothing
        taken off, no speed re-sampling and no progress lines: the state the start-up
        calibration measures in (host.calibration)."""
        self.steady = None
        self.gap_scale = 1.0
        # this machine's own gaps: a multi-GPU run's pace (set_world, set before the
        # calibration) multiplied every calibration gap, and the overheads measured from them
        # were taken off gaps that were then multiplied by it again
        self.rank_pace = 1.0
        self.dispatch_overhead_ns = 0.0
        self.list_overhead_ns = self.list_real_ns = (0.0, 0.0)
        self.release_overhead_ns = self.release_host_ns = self._release_credit = 0.0
        self.api_overhead_ns = 0.0
        self.wake_penalty_ns = self._wake_credit = 0.0
        self._ops_until_speed_sample = 1 << 30
        self.next_progress = float("inf")

    def reset_counts(self) -> None:
        """Forget what the start-up calibration's own work counted (the script starts now)."""
        self.next_progress = REAL_NS() + PROGRESS_EVERY_S * 1e9
        self.list_tensors = self._list_outputs_pending = 0
        self.releases, self._release_credit = 0, 0.0
        self.api_calls, self.api_host_ns = 0, 0.0
        self.user_host_ns, self.dispatch_entries, self.wake_ups = 0.0, 0, 0
        self.steady = self.new_steady_gaps()
        self._real_mark = self.clock()
