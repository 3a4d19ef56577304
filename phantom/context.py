"""The simulation context: the one piece of global state phantom has.

A `Simulation` ties together what a simulated GPU needs: the engine's timeline (virtual
time), the cost model (GPU time per op), the allocator model (memory), and the statistics
the report is built from. Interception calls into it; it calls nothing back.
"""
from __future__ import annotations

import dataclasses
import functools
import gc
import os
import random
import statistics
import sys
import threading
import time
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from phantom.cost import KernelCost
from phantom.errors import capture_error
from phantom.cost.dbmodel import make_cost_model
from phantom.engine.power import governor_for
from phantom.engine import Event, Timeline
from phantom.engine.fusion import FUSABLE_CLASSES, FusedKernel
from phantom.engine.graphs import (CapturedGraph, GraphCapture, GraphKernel, instantiate_host_ns,
                                   replay, replay_host_ns)
from phantom.engine.host import (API_CALL, CALIBRATION_PAIRS, CALIBRATION_SHAPE, CONTENDED_SUFFIX,
                                 DISPATCH_OVERHEAD, FIRST_RUNS, FIRST_RUNS_PAIR_FACTOR,
                                 HOST_CLOCK_NS, LIST_INPUT, LIST_OUTPUT, PACED_SUFFIX, RELEASE,
                                 REMEASURE_EVERY, WAKE_PENALTY, HostSpeedNormalizer, SteadyGaps,
                                 code_fingerprint, cpu_contended, reference_step_ns,
                                 straggler_pace, training_step, wake_penalty_ns)
from phantom.engine.pace import PACE_FILE_ENV, read_pace, wait_for_pace
from phantom.engine.pace import PERIOD_S as PACE_PERIOD_S
from phantom.hardware import GPUSpec
from phantom.interception import data_reads
from phantom.memory import AllocatorOutOfMemory, CachingAllocator
from phantom.memory.history import MemoryHistory
from phantom.native.build import cache_dir, storage_address_setter

REAL_NS = time.perf_counter_ns  # bound before any patching
# Whether a run re-measures a full calibration history (Simulation._recent_calibration): its own
# generator, so the script's `random` sequence is the same under phantom as without it.
_remeasure_draw = random.Random().random

# Host cost of launching one CUDA kernel, beyond the Python and dispatcher work the
# simulation measures directly (that part runs for real here). Measured on the lent H200
# host (bench/data/host_h200.json, torch 2.11): an eager `torch.add(x, 1, out=y)` on CUDA
# costs 6.95 us of host time, the same op on a CPU tensor 2.90 us.
HOST_KERNEL_LAUNCH_NS = 4_000.0
# cuBLAS adds its own host work per GEMM (handle, heuristics cache): a small matmul costs
# 21.9 us of host time against 6.95 us for an elementwise op on the same host.
GEMM_EXTRA_HOST_NS = 15_000.0
# Host cost per tensor of a list argument (foreach ops, fused optimizers, cat) and per tensor of
# a returned list, on the node: multi_tensor_apply's per-tensor metadata, one launch per few
# dozen tensors, an allocation per new output. Under phantom every tensor of such a list also
# crosses into Python and back around the fake dispatch, a cost the per-entry dispatch
# overhead does not see (it grows with the list, not with the entries): the list tensors'
# share of a gap is measured here at start-up (_measure_list_costs), taken off, and these
# charged instead. Measured by bench/host_list_ops.py on a lent H200 host (torch 2.11,
# 2026-11-26, bench/data/session20/device_list_ops/): per-call host time against list length
# (16-686 tensors), slopes averaged over two rounds: an in-place `_foreach_mul_` 0.19 us a
# tensor (`_foreach_addcmul_`'s three lists 0.155, `cat` 0.24), an out-of-place
# `_foreach_add` 1.99 us, so 1.80 us per returned tensor, of which the new storage's malloc and
# free (REAL_STORAGE_NS, charged when it is freed) are 1.3.
REAL_LIST_INPUT_NS = 190.0
REAL_LIST_OUTPUT_NS = 500.0
LIST_PROBE = 64  # tensors in the calibration's long list (a short list has one)
# What a new tensor's storage costs the node's host beyond an op that writes into an existing
# one (the caching allocator's malloc and free, a new tensor object): `x * 2` against
# `torch.add(x, 1, out=y)` on the lent H200 host, 8.25 against 6.95 us
# (bench/data/host_h200.json; 1.73 us on the H100 host). Charged per storage freed, in place
# of what freeing a fake one costs here (Simulation.release_overhead_ns).
REAL_STORAGE_NS = 1_300.0
# PCIe transfer rates measured on the lent H100 (bench/kernels/results/kernels_H100.json,
# "transfer" rows): pinned 52.6 GB/s both ways; pageable 8.5 GB/s H2D, 10.4 GB/s D2H.
# A pinned + non_blocking H2D copy runs on the copy engine and leaves the host free; a
# pageable copy is staged through a bounce buffer and blocks the host.
PCIE_GBPS = 10.4  # D2H reads into pageable memory (.cpu(), .item())
PINNED_GBPS = 52.6  # either way to or from page-locked memory (a D2H copy_ into a pinned buffer too)
H2D_PAGEABLE_GBPS = 8.5
_H2D_OPS = (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default)
PROGRESS_EVERY_S = 10.0
PROGRESS_CHECK_EVERY_OPS = 256
# Re-measure this machine's current speed every this many handler exits (~1 ms each).
SPEED_SAMPLE_EVERY_OPS = 2_000
SPEED_SAMPLE_EVERY_S = 1.0  # ... or this much wall time, whichever comes first
CUBLAS_WORKSPACE_BYTES = 32 * 1024**2


@dataclass
class SimOptions:
    gpu: GPUSpec
    device_count: int = 1
    on_data_read: str = "placeholder"  # or "error"
    # How many times as fast as the simulated node's host this machine runs the script's
    # framework code. None: measured at start-up (the same tiny CPU training step here and, once,
    # on the node's host: GPUSpec.host_step_ns).
    host_speed: float | None = None
    quiet: bool = False
    # "steady": from an iteration's second sighting on, a host gap is charged at the mean
    # of the same point of the last few iterations (engine.host.SteadyGaps); "measured":
    # every gap as measured here (scaled by the speed probe).
    host_gaps: str = "steady"
    # Spread (sigma) of the ranks' host times in a multi-GPU step; None: the GPU preset's
    # (GPUSpec.host_rank_spread). 0 runs every rank at a typical rank's pace.
    rank_spread: float | None = None
    # Kernel databases added to the shipped one for this GPU (phantom run --db), and whether to
    # record every op signature (phantom profile).
    db_paths: list[str] = field(default_factory=list)
    record_ops: bool = False
    shipped_db: bool = True


@dataclass
class OpStats:
    calls: int = 0
    gpu_ns: float = 0.0


@dataclass
class Iteration:
    host_ns: float  # host clock when the optimizer step returned
    gpu_done_ns: float  # GPU time at which all work enqueued by then finishes
    gpu_busy_ns: float  # cumulative GPU busy time at that point


@dataclass
class _StreamState:
    current: dict[int, Any] = field(default_factory=dict)
    default: dict[int, Any] = field(default_factory=dict)


def _is_pinned(t: torch.Tensor) -> bool:
    # the fake CUDA hooks' pinned allocator knows its blocks (native/fake_cuda.cpp)
    return t.device.type == "cpu" and t.is_pinned()


class Simulation:
    def __init__(self, options: SimOptions) -> None:
        self.options = options
        self.gpu = options.gpu
        self.device_count = options.device_count
        self.timeline = self._new_timeline()
        self.cost_model = make_cost_model(options.gpu, options.db_paths, record=options.record_ops,
                                          use_shipped=options.shipped_db)
        self.allocator = CachingAllocator(options.gpu.memory_bytes)
        self.memory_history = MemoryHistory(self.allocator, lambda: self.timeline.host_ns)
        self.op_stats: dict[str, OpStats] = defaultdict(OpStats)
        self.class_gpu_ns: dict[str, float] = defaultdict(float)
        self.source_gpu_ns: dict[str, float] = defaultdict(float)
        self.iterations: list[Iteration] = []
        self.ops_intercepted = 0
        self.data_reads = 0
        self.first_data_read: str | None = None  # where the script first read a device value
        self._storages: dict[int, list] = {}  # live storage key -> [block, recorder's record or None]
        self._streams = _StreamState()
        # (thread, stream) -> [workspace block, recorder's record or None] (_gemm_workspace)
        self._cublas_workspaces: dict[tuple[int, int], list] = {}
        self._next_stream_id = 1
        # Host time is this process's CPU time, not wall time: gaps in wall time include the
        # time the process waits for a core, whether other ranks or other work on this machine
        # hold it (on a loaded 2-core machine a host-bound step came out 290 ms in wall time
        # and 34 ms in CPU time; real: 21 ms). Blocking waits are not CPU time.
        self._clock = HOST_CLOCK_NS
        self._real_mark = self._clock()
        self.wall_start_ns = REAL_NS()
        self.first_op_wall_ns: int | None = None
        # Simulated-host ns a handler entry costs beyond plain eager: calibrate_dispatch_overhead()
        self.dispatch_overhead_ns = 0.0
        self.calibration_contended = False  # its calibration ran beside other busy processes
        # Simulated-host ns taken off the gaps after each blocking coordinator round trip
        # (a distributed run's collectives): calibrate_dispatch_overhead(), wake_penalty_ns()
        self.wake_penalty_ns = 0.0
        self._wake_credit = 0.0  # what is left of it to take off since the last wake-up
        # Warms the script's way to the handler after a round trip, in phantom's time: set by
        # interception.install (PhantomMode.warm_dispatch_paths); off with PHANTOM_NO_REWARM=1
        # (a diagnostic, for bench/collective_cold_block.py and A/B runs).
        self.warm_dispatch_paths: Callable[[], None] | None = None
        self._rewarm = not os.environ.get("PHANTOM_NO_REWARM")
        # Simulated-host ns a freed storage costs the gap it dies in beyond a real free: the
        # storage's finalizer reaching Python (weakref.finalize), not the allocator model's
        # work, which _release takes off itself. Measured at start-up (_measure_release_cost).
        self.release_overhead_ns = 0.0
        self.release_host_ns = 0.0  # ... and what the node's host is charged instead (REAL_STORAGE_NS)
        self._release_credit = 0.0  # this gap's releases: overhead minus the node's cost
        self.releases = 0
        self.wake_ups = 0
        self.dispatch_entries = 0  # every entry into the dispatch handler, metadata included
        # Simulated runtime calls (torch.cuda streams, events and syncs; clock reads): api_enter/exit
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
        self.launch_host_ns = 0.0  # host time charged for kernel launches (not user time)
        # All host time of a rank of a multi-GPU run is charged at the pace of its host's
        # slowest rank (set_world; engine.host.straggler_pace); 1 on one GPU.
        self.rank_pace = 1.0
        # Inside a torch.compile'd function (interception/compiled.py `install`): its fusable ops are
        # gathered into one kernel (engine/fusion.py) and launched when it returns.
        self._fused_depth = 0
        # The op running now is inside a generated kernel and its outputs never leave it
        # (interception/compiled.py): they live in registers, not in device memory.
        self.in_registers = False
        self._generated_code = False
        self._fused: FusedKernel | None = None
        # A CUDA graph capture under way (engine/graphs.py; torch.cuda.CUDAGraph): kernels on its
        # streams are recorded, not run, and memory comes from the graph's pool.
        self.capture: GraphCapture | None = None
        # The ops running now compute what a CUDA graph replay computes (a reduce-overhead
        # compiled graph, interception/compiled.py): the replay launches their kernels and their
        # memory is the graph's pool, so they make outputs and nothing else.
        self.graph_shadow = False
        self.user_host_ns = 0.0  # host time charged for the script's own gaps
        self._speed = HostSpeedNormalizer(cache_dir(), clock=self._clock, pace=self._pace_reader())
        # This machine (at its best observed speed) against the simulated host: given, or
        # measured by _calibrate_host_speed.
        self.host_step_ns_here: float | None = None  # the reference step here, at best speed
        self.host_step_ns_at_start: float | None = None  # ... and as timed at start-up
        self.host_speed = self._calibrate_host_speed()
        self._gap_scale = self._speed.factor * self.host_speed
        self._steady = self._new_steady_gaps()
        self._ops_until_speed_sample = SPEED_SAMPLE_EVERY_OPS
        self._gc_start: tuple[int, int] | None = None  # (clock, _real_mark) when a collection began
        self.comm = None  # phantom.distributed.comm.RankComm in a distributed run
        # phantom.report.recorder.Recorder when the run keeps a trace or run directory
        self.recorder = None
        self._next_progress = self.wall_start_ns + PROGRESS_EVERY_S * 1e9
        self._ops_until_progress_check = PROGRESS_CHECK_EVERY_OPS
        self._speed_sampled_wall = REAL_NS()

    # -- host time ------------------------------------------------------------------------
    @staticmethod
    def _pace_reader() -> Callable[[], float | None] | None:
        """The reader of the launcher's pace process (engine.pace), or None without one."""
        path = os.environ.get(PACE_FILE_ENV)
        return functools.partial(read_pace, path) if path else None

    def _calibrate_host_speed(self) -> float:
        """Compare this machine with the simulated node's host on the same tiny CPU training
        step (GPUSpec.host_step_ns was measured on the node): the script's host time here is
        scaled by the ratio. The step, like the script's gaps, is mostly PyTorch's Python and
        C++ host path, which a pure-Python score predicts poorly (hosts differ more on one than
        on the other). Timed before the interception is installed, as on the node; both sides
        at their best observed speed: here, the fastest step this machine has run (remembered
        across runs; the probe then tracks how far from that speed it is at each moment)."""
        # The step as timed now, beside the best: the speed probe is plain Python, and this
        # machine can be in a state that slows PyTorch's C++ path far more (1.6x against the
        # probe's 1.1x, for many minutes, on the Session 40 VM): the report's summary says so.
        self.host_step_ns_at_start = reference_step_ns(rounds=5, clock=self._clock)
        self.host_step_ns_here = self._speed.record_step(self.host_step_ns_at_start)
        if os.environ.get(PACE_FILE_ENV):
            # it starts with the rank, importing torch; without a reading by now the whole run
            # converts by the probe, as its calibration below then does
            if wait_for_pace(os.environ[PACE_FILE_ENV]) is None:
                self._speed.drop_pace()
            self._speed.sample()
        if self.options.host_speed is not None:
            return self.options.host_speed
        # Gaps are converted to this machine's best speed; the node's reference step is its
        # best too, and a real step runs at the node's typical speed.
        return self.gpu.host_step_ns * self.gpu.host_mean_slowdown / self.host_step_ns_here

    def _new_timeline(self) -> Timeline:
        return Timeline(sm_count=self.gpu.sm_count, governor=governor_for(self.gpu))

    def _new_steady_gaps(self) -> SteadyGaps | None:
        return SteadyGaps() if self.options.host_gaps == "steady" else None

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
            now = self._clock()
        # In simulated-host nanoseconds: this machine at its best observed speed (the probe),
        # scaled by how fast it is relative to the simulated host.
        gap = (now - self._real_mark) * self._gap_scale
        if self._wake_credit > 0:
            # the first runs of the script's code after a round trip, slow on cold caches: a
            # real rank does not sleep there (see engine.host.wake_penalty_ns). DDP's reducer
            # wakes from the autograd thread: a race here only moves the credit between gaps.
            taken = min(gap, self._wake_credit)
            gap -= taken
            self._wake_credit -= taken
        if self._release_credit:
            # storages freed in this gap: their finalizers' way into Python is phantom's, the
            # allocator's malloc and free the node's
            gap = max(0.0, gap - self._release_credit)
            self._release_credit = 0.0
        if self._steady is not None:
            gap = self._steady.typical(site, gap)
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

    def returned_list(self, tensors: int) -> None:
        """The handler is returning a list of `tensors` tensors: their way back to the caller
        is in the next gap (begin_op)."""
        self._list_outputs_pending = tensors

    def set_world(self, ranks_per_host: int) -> None:
        """This process is a rank of a multi-GPU run with `ranks_per_host` ranks on its host:
        its host time runs at the pace of the host's slowest rank (engine.host.straggler_pace)."""
        spread = self.options.rank_spread
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

    def end_op(self) -> None:
        """Leaving phantom: our own overhead up to here is not the user's time."""
        self._ops_until_speed_sample -= 1
        if self._ops_until_speed_sample <= 0:
            self._sample_host_speed()
        self._real_mark = self._clock()
        self._ops_until_progress_check -= 1
        if self._ops_until_progress_check <= 0:
            self._ops_until_progress_check = PROGRESS_CHECK_EVERY_OPS
            wall = REAL_NS()
            # Scripts that issue few ops (collective-heavy ones) would re-measure the
            # machine's speed rarely; under changing load, sample by time as well.
            if self._ops_until_speed_sample < SPEED_SAMPLE_EVERY_OPS and \
                    wall - self._speed_sampled_wall > SPEED_SAMPLE_EVERY_S * 1e9:
                self._sample_host_speed()
                self._real_mark = self._clock()
            if wall >= self._next_progress:
                self._report_progress()

    def host_speed_variation(self) -> dict:
        return self._speed.variation()

    def host_gaps(self) -> dict:
        """How the script's host gaps were charged (report: simulation.host_gaps)."""
        steady = self._steady
        share = steady.share() if steady is not None else None
        return {"mode": self.options.host_gaps, "steady_share": share,
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

    def _sample_host_speed(self) -> None:
        self._ops_until_speed_sample = SPEED_SAMPLE_EVERY_OPS
        self._speed_sampled_wall = REAL_NS()
        self._gap_scale = self._speed.sample() * self.host_speed

    def host_now_ns(self, node_ns: float = 0.0, now: int | None = None) -> float:
        """The simulated host clock, read as a call that costs the node `node_ns` (`now`: as
        api_enter)."""
        self.api_enter("clock", self._clock() if now is None else now)
        now = self.timeline.host_ns
        self.api_exit(node_ns)
        return now

    def advance_host_ns(self, ns: float) -> None:
        self.begin_op("sleep")
        self.timeline.advance_host(ns)
        self.end_op()

    # -- streams --------------------------------------------------------------------------
    def new_stream_id(self) -> int:
        sid = self._next_stream_id
        self._next_stream_id += 1
        return sid

    def default_stream(self, device_index: int):
        from phantom.interception.cuda_api import Stream

        s = self._streams.default.get(device_index)
        if s is None:
            s = self._streams.default[device_index] = Stream(stream_id=0, device_index=device_index)
        return s

    def current_stream(self, device_index: int):
        s = self._streams.current.get(device_index)
        return s if s is not None else self.default_stream(device_index)

    def set_current_stream(self, stream) -> None:
        self._streams.current[stream.device_index] = stream

    def _current_stream_id(self) -> int:
        s = self._streams.current.get(torch.accelerator.current_device_index())
        return 0 if s is None else s.stream_id

    # -- sync points (called from the torch.cuda API) -------------------------------------
    def _sync(self, fn, *args, capturable: bool = False) -> None:
        if self.capture is not None and not capturable:
            # CUDA's global capture mode refuses every host sync while any stream captures
            capture_error(f"torch.cuda {fn.__name__}")
        if self.comm is not None:
            self.comm.flush()  # isend/irecv nobody waited for still complete before a sync
        self.begin_op(fn.__name__)
        h0 = self.timeline.host_ns
        fn(*args)
        if self.recorder is not None:
            self.recorder.host_span(fn.__name__, h0, self.timeline.host_ns, "sync")
        self.end_op()

    def synchronize_device(self) -> None:
        self._sync(self.timeline.synchronize_device)

    def synchronize_stream(self, stream_id: int) -> None:
        self._sync(self.timeline.synchronize_stream, stream_id)

    def synchronize_event(self, event: Event) -> None:
        self._sync(self.timeline.synchronize_event, event)

    def record_event(self, event: Event, stream_id: int) -> None:
        if self.capture is not None and self.capture.captures(stream_id):
            self.capture.record_event(event, stream_id)
            return
        self._sync(self.timeline.record_event, event, stream_id, capturable=True)

    def stream_wait_event(self, stream_id: int, event: Event) -> None:
        if self.capture is not None and self.capture.wait_event(stream_id, event):
            return
        self.timeline.stream_wait_event(stream_id, event)

    def stream_wait_stream(self, waiter: int, waited: int) -> None:
        if self.capture is not None and self.capture.wait_stream(waiter, waited):
            return
        self.timeline.stream_wait_stream(waiter, waited)

    def query_stream(self, stream_id: int) -> bool:
        if self.capture is not None and self.capture.captures(stream_id):
            capture_error("a capturing stream's query()")
        self.begin_op("query_stream")
        done = self.timeline.query_stream(stream_id)
        self.end_op()
        return done

    def query_event(self, event: Event) -> bool:
        self.begin_op("query_event")
        done = self.timeline.query_event(event)
        self.end_op()
        return done

    # -- ops ------------------------------------------------------------------------------
    def on_op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Charge one simulated CUDA op: allocate its outputs, then time its kernel."""
        if self.ops_intercepted == 0:
            self.first_op_wall_ns = REAL_NS()
        self.ops_intercepted += 1
        if self.graph_shadow:
            return
        stream_id = self._current_stream_id()
        if self.recorder is not None:
            self.recorder.op = func.__name__
        self._track_outputs(out, stream_id)
        if self._generated_code:
            return  # timed as part of a generated kernel (launch_generated_kernel)
        if func in _H2D_OPS and self._is_host_to_device(func, args, kwargs, stream_id):
            data_reads.propagate_hint(func, args, out)  # a small CPU value keeps its value
            src = args[0] if func is torch.ops.aten._to_copy.default else args[1]
            data_reads.set_shadow(out if func is torch.ops.aten._to_copy.default else args[0], src)
            return
        cost = self.cost_model.estimate(func, args, kwargs, out)
        if cost is not None and cost.op_class == "gemm":
            self._gemm_workspace(stream_id)
        if cost is not None:  # kernel-less ops (views, empty) cost only the measured dispatch
            if self._fused_depth and cost.op_class in FUSABLE_CLASSES:
                self._fuse(func, args, kwargs, out, cost, stream_id)
            else:
                if self._fused is not None:  # a GEMM or the like splits a compiled function
                    self._end_fused_kernel(None)
                self._launch(func, cost, stream_id, args)
        data_reads.propagate_hint(func, args, out, kwargs)

    # -- torch.compile'd graphs (interception/compiled.py) -----------------------------------
    def begin_generated_code(self) -> None:
        """The ops that follow compute what Inductor-generated kernels compute: they make their
        outputs (and allocate the stored ones) but launch nothing; `launch_generated_kernel`
        charges the kernels."""
        self._generated_code = True

    def end_generated_code(self) -> None:
        self._generated_code = False

    def launch_generated_kernel(self, name: str, nbytes: float, math_flops: float = 0.0,
                                load_efficiency: float = 1.0, extra_ns: float = 0.0) -> None:
        """One generated kernel moving `nbytes`, on the elementwise memory curve, or longer where
        its math (`math_flops`, cost.roofline.generated_math_flops) is; `extra_ns` on top (a
        mix-order kernel's transposed stores, interception/mix_order.py)."""
        cost = self.cost_model.fused_pointwise(nbytes, math_flops, load_efficiency)
        if extra_ns > 0:
            cost = dataclasses.replace(cost, gpu_ns=cost.gpu_ns + extra_ns)
        self._launch(name, cost, self._current_stream_id())

    def launch_extension_kernel(self, name: str, nbytes: float, flops: float = 0.0,
                                blocks: int | None = None) -> None:
        """One kernel of a simulated CUDA extension (adapters/: DeepSpeed's FusedLion and
        FusedLamb) that moves `nbytes`, on the current stream (interception.cuda_api
        `extension_kernel`). A grid of fewer `blocks` than the GPU has SMs draws that share of
        the bandwidth: each block runs on one SM (FusedLion's launch of 48 one-chunk tensors,
        48 blocks, took 11.5 us for 15.7 MB on a lent H200, 1.4 TB/s; bench/README.md,
        DeepSpeed, Session 46)."""
        self._end_fused_kernel(None)
        share = 1.0 if blocks is None else min(1.0, blocks / self.gpu.sm_count)
        cost = self.cost_model.fused_pointwise(nbytes, flops, load_efficiency=share)
        self._launch(name, cost, self._current_stream_id())

    def launch_sleep(self, cycles: int) -> None:
        """`torch.cuda._sleep(cycles)`: one kernel spinning on the SM clock for `cycles`
        cycles (benchmarks use it to queue work ahead of the host), at the GPU's boost clock."""
        ns = max(0, int(cycles)) / self.gpu.sm_clock_mhz * 1e3
        self._launch("cuda_sleep", KernelCost(ns, "other", "model", 0.0, 0.0), self._current_stream_id())

    # -- torch.compile'd functions ---------------------------------------------------------
    def begin_fused_region(self) -> None:
        """A torch.compile'd function starts (interception/compiled.py `install`); regions nest, the
        outermost one decides."""
        self._fused_depth += 1

    def end_fused_region(self, leaving: Any) -> None:
        """It returned `leaving` (None if it raised): launch the kernel its fusable ops make."""
        self._fused_depth -= 1
        if self._fused_depth == 0:
            self._end_fused_kernel(leaving)

    def _fuse(self, func: Any, args: tuple, kwargs: dict, out: Any, cost: KernelCost,
              stream_id: int) -> None:
        if self._fused is not None and self._fused.stream_id != stream_id:
            self._end_fused_kernel(None)
        if self._fused is None:
            self._fused = FusedKernel(stream_id)
        self._fused.add(func.__name__, args, kwargs, out, cost)

    def _end_fused_kernel(self, leaving: Any) -> None:
        fused, self._fused = self._fused, None
        if fused is None or not fused.ops:
            return
        if fused.single_cost is not None:  # one op: its own kernel (and database row)
            self._launch(fused.ops[0], fused.single_cost, fused.stream_id)
            return
        nbytes = fused.nbytes(leaving)
        name = "fused_" + "_".join(sorted(set(fused.ops)))[:120]
        self._launch(name, self.cost_model.fused_pointwise(nbytes, fused.flops), fused.stream_id)

    def _launch(self, func: Any, cost: KernelCost, stream_id: int, args: tuple = ()) -> None:
        if self.graph_shadow:
            return  # a CUDA graph replay launches it
        gemm_extra = GEMM_EXTRA_HOST_NS if cost.op_class == "gemm" else 0.0
        host_ns = (HOST_KERNEL_LAUNCH_NS + gemm_extra) * self.rank_pace
        self.launch_host_ns += host_ns
        name = func if isinstance(func, str) else func.__name__
        if self.capture is not None and self.capture.captures(stream_id):
            # captured: the host pays the launch, the GPU runs it at each replay
            self.timeline.advance_host(host_ns)
            self.capture.kernel(name, cost, stream_id)
            return
        self._enqueue(name, cost, stream_id, host_ns, args)

    def _enqueue(self, name: str, cost: KernelCost, stream_id: int, host_ns: float,
                 args: tuple = (), in_graph: bool = False, uses_sms: bool = True) -> None:
        h0 = self.timeline.host_ns
        start, end = self.timeline.launch(stream_id, cost.gpu_ns, host_ns, op_class=cost.op_class,
                                          flops=cost.flops * cost.energy_per_flop, nbytes=cost.bytes,
                                          in_graph=in_graph, uses_sms=uses_sms)
        if self.recorder is not None:
            self.recorder.kernel(name, cost.op_class, cost.source, stream_id, start, end, h0,
                                 self.timeline.host_ns, args)
        stats = self.op_stats[name]
        stats.calls += 1
        stats.gpu_ns += cost.gpu_ns
        self.class_gpu_ns[cost.op_class] += cost.gpu_ns
        self.source_gpu_ns[cost.source] += cost.gpu_ns

    def _is_host_to_device(self, func: Any, args: tuple, kwargs: dict, stream_id: int) -> bool:
        src = args[0] if func is torch.ops.aten._to_copy.default else args[1]
        if not isinstance(src, torch.Tensor) or src.device.type != "cpu":
            return False
        non_blocking = kwargs.get("non_blocking", False) or (len(args) > 2 and bool(args[2]))
        # the copy engine reads page-locked memory at full speed whether or not the host
        # waits; only a pinned, non_blocking copy leaves the host free
        pinned = _is_pinned(src)
        nbytes = src.numel() * src.element_size()
        copy_ns = 2_000.0 + nbytes / (PINNED_GBPS if pinned else H2D_PAGEABLE_GBPS)
        if not self._launch_copy("HtoD", pinned, copy_ns, nbytes, stream_id, src,
                                 blocking=not (pinned and non_blocking)):
            return True  # captured into a CUDA graph
        self.source_gpu_ns["model"] += copy_ns
        if not (pinned and non_blocking):
            h1 = self.timeline.host_ns
            self.timeline.synchronize_stream(stream_id)
            if self.recorder is not None:
                self.recorder.host_span("HtoD copy" + ("" if pinned else " (pageable)"), h1,
                                        self.timeline.host_ns, "sync")
        return True

    def on_data_read(self, t: torch.Tensor, blocking: bool, what: str, pinned: bool = False) -> None:
        """A device-to-host copy of `t`; `pinned`: into page-locked memory (the copy engine's
        full speed), else into pageable memory through a staging buffer."""
        self._end_fused_kernel(None)  # a read inside a compiled function waits for its kernel
        self.data_reads += 1
        if self.first_data_read is None:  # named in the summary: a placeholder may steer the loop
            self.first_data_read = data_reads.user_frame_summary()
        if self.options.on_data_read == "error":
            data_reads.raise_data_read(what)
        stream_id = self._current_stream_id()
        nbytes = t.numel() * t.element_size()
        copy_ns = 2_000.0 + nbytes / (PINNED_GBPS if pinned else PCIE_GBPS)
        if not self._launch_copy("DtoH", pinned, copy_ns, nbytes, stream_id, t, blocking, what):
            return  # captured into a CUDA graph
        if blocking:
            # The copy's launch, its latency, the copy and the wait make the whole round trip:
            # ~10 us for a scalar on an idle stream, against `x.item()` taking 7.8 and 11.0 us
            # in all on a lent H100 host (bench/host_sync_cost.py, Session 30). A further 12 us
            # once added here put phantom's `.item()` at 22 us; nothing follows the wait.
            h1 = self.timeline.host_ns
            self.timeline.synchronize_stream(stream_id)
            if self.recorder is not None:
                self.recorder.host_span(f"read ({what})", h1, self.timeline.host_ns, "sync")

    def _launch_copy(self, direction: str, pinned: bool, copy_ns: float, nbytes: int,
                     stream_id: int, tensor: torch.Tensor, blocking: bool, what: str = "") -> bool:
        """Enqueue a copy-engine transfer (the caller then waits for it if `blocking`). On a
        capturing stream it becomes a node of the graph if the host need not wait for it
        (pinned memory, non_blocking), else CUDA's capture error; False: captured."""
        name = f"Memcpy {direction}" + (" (pinned)" if pinned else "")
        host_ns = HOST_KERNEL_LAUNCH_NS * self.rank_pace
        if self.capture is not None and self.capture.captures(stream_id):
            if blocking:
                capture_error(what or f"a {direction} copy the host waits for (pageable memory, "
                              f"or non_blocking=False)")
            self.timeline.advance_host(host_ns)
            self.capture.kernel(name, KernelCost(copy_ns, "copy", "model", 0.0, float(nbytes)),
                                stream_id, uses_sms=False)
            return False
        h0 = self.timeline.host_ns
        start, end = self.timeline.launch(stream_id, copy_ns, host_ns, uses_sms=False)
        self.class_gpu_ns["copy"] += copy_ns
        if self.recorder is not None:
            self.recorder.kernel(name, "copy", "model", stream_id, start, end, h0,
                                 self.timeline.host_ns, (tensor,))
        return True

    # -- CUDA graphs (interception/cuda_api.py CUDAGraph) ----------------------------------
    def begin_capture(self, pool: int) -> None:
        """The current stream starts capturing a graph whose memory comes from `pool`."""
        stream_id = self._current_stream_id()
        if stream_id == 0:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. (However, "
                               "after capture, it's ok to replay them on the default stream.)")
        self._start_capture(stream_id, pool)

    def _start_capture(self, stream_id: int, pool: int) -> None:
        if self.capture is not None:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing "
                               "(another CUDA graph capture is under way in this process)")
        self._end_fused_kernel(None)
        self.capture = GraphCapture(stream_id, pool)

    def end_capture(self) -> tuple[CapturedGraph, list[int]]:
        """The capture ends: the graph is instantiated (host time), with a stream of its own for
        each lane beyond the capture stream."""
        if self.capture is None:
            raise RuntimeError("CUDA error: capture_end called with no capture under way")
        self._end_fused_kernel(None)
        graph, self.capture = self.capture.graph, None
        self.timeline.advance_host(instantiate_host_ns(graph.kernels) * self.rank_pace)
        return graph, [self.new_stream_id() for _ in graph.lanes[1:]]

    def replay_graph(self, graph: CapturedGraph, private_lanes: list[int]) -> None:
        """`CUDAGraph.replay()` on the current stream: one launch's host time, then the graph's
        kernels as captured (engine/graphs.py)."""
        stream_id = self._current_stream_id()
        if self.capture is not None and self.capture.captures(stream_id):
            raise RuntimeError("phantom: replaying a CUDA graph inside another graph's capture is "
                               "not simulated")
        self._end_fused_kernel(None)
        host_ns = replay_host_ns(graph.kernels) * self.rank_pace
        self.launch_host_ns += host_ns
        h0 = self.timeline.host_ns
        self.timeline.advance_host(host_ns)
        if self.recorder is not None:
            self.recorder.host_span("cudaGraphLaunch", h0, self.timeline.host_ns, "launch")
        replay(graph, self.timeline, stream_id, private_lanes, self._enqueue_graph_kernel)

    def record_graph(self, fn: Callable[[], Any], pool: int) -> tuple[Any, CapturedGraph, list[int]]:
        """Capture what `fn` launches on the current stream (a reduce-overhead compiled graph's
        recording, which may run on the default stream: CUDA graph trees capture on a side
        stream of their own), then replay it once, as the recording computes its outputs."""
        self._start_capture(self._current_stream_id(), pool)
        try:
            out = fn()
        finally:
            graph, lanes = self.end_capture()
        self.replay_graph(graph, lanes)
        return out, graph, lanes

    def shadow_run(self, fn: Callable[[], Any]) -> Any:
        """Run `fn`'s ops for their outputs only (graph_shadow)."""
        self.graph_shadow = True
        try:
            return fn()
        finally:
            self.graph_shadow = False

    def track_in_pool(self, t: torch.Tensor, pool: int) -> None:
        """`t`, made by a shadow run, lives in a CUDA graph's pool while the script holds it."""
        self._track(t, pool)

    def _enqueue_graph_kernel(self, kernel: GraphKernel, stream_id: int) -> None:
        self._enqueue(kernel.name, kernel.cost, stream_id, 0.0, in_graph=True,
                      uses_sms=kernel.uses_sms)

    def is_capturing(self, stream_id: int | None = None) -> bool:
        if self.capture is None:
            return False
        return self.capture.captures(self._current_stream_id() if stream_id is None else stream_id)

    # -- memory ---------------------------------------------------------------------------
    def _track_outputs(self, out: Any, stream_id: int) -> None:
        if self.in_registers:
            return
        if isinstance(out, torch.Tensor):
            self._track(out, stream_id)
        elif isinstance(out, (tuple, list)):
            for o in out:
                if isinstance(o, torch.Tensor):
                    self._track(o, stream_id)

    def _track(self, t: torch.Tensor, stream_id: int) -> None:
        if t.device.type != "cuda":
            return  # not device memory
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._storages:
            return  # a view, or an in-place op returning its input: already counted
        block = self._malloc(storage.nbytes(), stream_id)
        self._place(storage, block)
        record = self.recorder.malloc(block.size, self.timeline.host_ns) if self.recorder is not None else None
        self._storages[key] = [block, record]
        # The block lives as long as the storage, not as long as the tensors that first held
        # it: `p.data = x` and `set_` move a tensor to another storage (DeepSpeed re-points
        # every parameter into its flat buffer), views keep a storage alive after its tensor
        # dies. torch keeps one Python object per storage (since 2.0), so its finalizer runs
        # exactly when the storage is freed; a new storage cannot take the key before that.
        weakref.finalize(storage, self._release, key)

    def _place(self, storage: Any, block: Any) -> None:
        """The storage's data_ptr() is its block's simulated address, as on a GPU: distinct
        for live storages, reused as the caching allocator reuses blocks."""
        set_address = storage_address_setter()
        if set_address is not None:
            set_address(storage._cdata, block.ptr if block is not None else 0)

    def _malloc(self, nbytes: int, stream_id: int):
        if self.capture is not None and self.capture.captures(stream_id):
            # a capture allocates from its graph's private pool, which nothing outside the
            # graph (or graphs sharing the pool) reuses: a free list of its own
            stream_id = self.capture.graph.pool
        try:
            return self.allocator.malloc(nbytes, stream_id)
        except AllocatorOutOfMemory as e:
            raise torch.OutOfMemoryError(e.message) from None

    def _release(self, key: int) -> None:
        t0 = self._clock()
        entry = self._storages.pop(key, None)
        if entry is not None and entry[0] is not None:
            self.allocator.free(entry[0])
            if self.recorder is not None:
                self._record_free(entry)
        # phantom's work inside the user's time (the script dropped a tensor): moving the mark
        # takes it off the current gap; inside a handler, end_op resets the mark anyway.
        self._real_mark += self._clock() - t0
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
        step (bench/README, "what the collector costs a real step")."""
        if phase == "start":
            self._gc_start = (self._clock(), self._real_mark)
        elif self._gc_start is not None:
            t0, mark = self._gc_start
            self._gc_start = None
            # Finalizers that ran inside the collection moved the mark already: count once.
            self._real_mark = max(self._real_mark, mark + (self._clock() - t0))

    def _record_free(self, entry: list) -> None:
        self.recorder.free(entry[1], self.timeline.host_ns)

    def record_stream(self, t: torch.Tensor, stream_id: int) -> None:
        """Tensor.record_stream: the tensor's block is in use on `stream_id` too."""
        entry = self._storages.get(t.untyped_storage()._cdata) if t.device.type == "cuda" else None
        if entry is not None and entry[0] is not None:
            self.allocator.record_stream(entry[0], stream_id)

    def on_storage_resize(self, storage: Any, nbytes: int) -> None:
        """`UntypedStorage.resize_` on a CUDA storage: the caching allocator frees the old
        block and allocates one of the new size (FSDP2 frees and re-allocates its unsharded
        parameters this way, keeping the tensor objects)."""
        entry = self._storages.get(storage._cdata)
        if entry is None:
            return
        self.begin_op("storage_resize")
        if entry[0] is not None:
            self.allocator.free(entry[0])
            if self.recorder is not None:
                self._record_free(entry)
        entry[0] = self._malloc(nbytes, self._current_stream_id()) if nbytes > 0 else None
        self._place(storage, entry[0])
        if self.recorder is not None:
            # A storage resized up is FSDP re-allocating an unsharded parameter (the only
            # user of resize_ on CUDA storages in training code): count it as parameters.
            record = None
            if entry[0] is not None:
                record = self.recorder.malloc(entry[0].size, self.timeline.host_ns,
                                              op="UntypedStorage.resize_", category="parameters")
            entry[1] = record
        self.end_op()

    def _gemm_workspace(self, stream_id: int) -> None:
        """cuBLAS's workspace for a GEMM on `stream_id` from this thread: taken from the
        caching allocator at the first GEMM of each (cuBLAS handle, stream) pair and kept until
        `torch._C._cuda_clearCublasWorkspaces()` (32 MiB on Hopper; measured on H100).

        torch hands out cuBLAS handles per thread (ATen's CublasHandlePool.cpp, a
        DeviceThreadHandlePool) and keys the workspaces by handle and stream, so the autograd
        engine's device thread, which runs the backward's GEMMs, holds workspaces of its own:
        a real H100 ran a training step with 32 MiB per stream for the forward's GEMMs and
        32 MiB more for the backward's (bench/live_blocks.py). A thread's identity stands for
        its handle here (a thread that ends returns its handle for the next to reuse, as a
        recycled thread id does)."""
        key = (threading.get_ident(), stream_id)
        if key in self._cublas_workspaces:
            return
        block = self._malloc(CUBLAS_WORKSPACE_BYTES, stream_id)
        record = None
        if self.recorder is not None:
            record = self.recorder.malloc(block.size, self.timeline.host_ns, op="cuBLAS workspace",
                                          category="other")
        self._cublas_workspaces[key] = [block, record]

    def clear_cublas_workspaces(self) -> None:
        """`torch._C._cuda_clearCublasWorkspaces()`: every workspace back to the allocator
        (torch.compile's CUDA graph trees call it around each warm-up and recording, so that a
        workspace is not used in two places), allocated again by the next GEMM of its pair."""
        for block, record in self._cublas_workspaces.values():
            self.allocator.free(block)
            if self.recorder is not None:
                self.recorder.free(record, self.timeline.host_ns)
        self._cublas_workspaces.clear()

    def reset_peak_memory_stats(self) -> None:
        """torch.cuda.reset_peak_memory_stats(): the allocator's peaks, and the recorder's."""
        self.allocator.reset_peak_stats()
        if self.recorder is not None:
            self.recorder.reset_peak()

    def set_memory_fraction(self, fraction: float) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        self.allocator.set_memory_fraction(fraction)

    # -- calibration ----------------------------------------------------------------------
    def calibrate_dispatch_overhead(self, pairs: int = CALIBRATION_PAIRS, steps: int = 4) -> float:
        """What reaching the handler costs per entry, in simulated-host ns (taken off every
        dispatched gap). In a distributed run the first rank to get here measures it, with
        the host speed and the wake-up cost of a round trip (`_measure_wake_penalty`), and
        every other rank uses its numbers: ranks that do the same work must not differ by a
        measurement's noise (an error of 1 us per entry is several ms a step in a host-bound
        run)."""
        client = self.comm.client if self.comm is not None else None
        measure = lambda: self._measure_host_calibration(pairs, steps)  # noqa: E731
        calibration = measure() if client is None else client.shared_calibration(measure)
        self.host_speed = calibration["host_speed"]
        self.host_step_ns_here = calibration["host_step_ns_here"]
        self.dispatch_overhead_ns = calibration["dispatch_overhead_ns"]
        self.wake_penalty_ns = calibration.get("wake_penalty_ns", 0.0)
        self.list_overhead_ns = tuple(calibration.get("list_overhead_ns", (0.0, 0.0)))
        self.list_real_ns = (REAL_LIST_INPUT_NS, REAL_LIST_OUTPUT_NS)
        self.release_overhead_ns = calibration.get("release_overhead_ns", 0.0)
        self.release_host_ns = REAL_STORAGE_NS
        self.api_overhead_ns = calibration.get("api_overhead_ns", 0.0)
        self.calibration_contended = bool(calibration.get("calibration_contended", False))
        self._gap_scale = self._speed.factor * self.host_speed
        # The script's first gap starts here: a rank that waited for another's measurement
        # had its mark at start-up, and its first op was charged the whole start-up (0.6-1.1 s
        # on ranks 1-3 of a 4-rank run, against ~5 ms on the measuring rank).
        self._real_mark = self._clock()
        return self.dispatch_overhead_ns

    def _measure_host_calibration(self, pairs: int, steps: int) -> dict:
        """Measure what reaching the handler costs per entry on this machine, beyond what the
        same program costs in plain eager mode, and forget everything the measurement did.

        Runs a small training step (linear, layer norm, GELU, loss, backward, foreach AdamW)
        on fake CUDA tensors and on real CPU tensors of the same tiny shapes, in alternating
        pairs of blocks so both see the same machine state; the median of the pairs'
        differences, spread over the handler entries of the fake step (metadata queries
        included), is the overhead per entry. A whole step, rather than one op, puts autograd
        bookkeeping and tensor creation and destruction in the measurement.

        The two sides cost about the same (a few µs per entry apart), and the difference is
        taken off every gap of the run, thousands per iteration: an error of 1 µs here moves
        a host-bound step by several ms. The minimum of each side over 5 blocks (tried) put
        the result anywhere between 0 and 4.5 µs from one run to the next on a flickering
        machine; a median of paired differences does not depend on which block hit a fast
        spell. It may come out negative (the fake path cheaper than CPU kernels), and is
        used so: clipping at zero would bias every noisy estimate upwards. What is charged is
        the median of this measurement and the recent ones of the same code on this machine
        (`HostSpeedNormalizer.settle`). Once that history is full, most runs skip the
        measurement and charge its median (`_recent_calibration`).
        """
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        fingerprint = code_fingerprint()  # hashes phantom's sources: once per calibration
        # only where collectives block on a coordinator (not a 1-rank run's local group)
        blocking = self.comm is not None and self.comm.client is not None
        # Other processes on this machine's CPUs bias the measurement (engine.host.
        # CONTENDED_SUFFIX): such runs keep a history of their own, so that runs made alone
        # never charge what a busy machine measured.
        if self._speed.paced:
            # right after its next reading, so that the pace process's own few ms of work do not
            # count as another busy process below (and stay out of the measurement)
            wait_for_pace(os.environ[PACE_FILE_ENV], timeout_s=2 * PACE_PERIOD_S, fresh=True)
        contended = cpu_contended()
        # Measurements converted to the best speed by the pace process and by the probe
        # differ by how the two read this machine: each keeps its own history.
        if self._speed.paced:
            fingerprint += PACED_SUFFIX
        history = fingerprint + CONTENDED_SUFFIX if contended else fingerprint
        recent = self._recent_calibration(history, blocking)
        if recent is not None:
            self._forget_calibration_work()
            return {**recent, "calibration_contended": contended}
        # every gap as measured, none shared with other ranks: the steps are not the
        # script's iterations
        self._steady = None
        if self._speed.known(DISPATCH_OVERHEAD, history) < FIRST_RUNS:
            pairs *= FIRST_RUNS_PAIR_FACTOR  # a new version's first runs: no history to lean on
        fake_step = training_step("cuda", *CALIBRATION_SHAPE)
        with unset_fake_temporarily():
            real_step = training_step("cpu", *CALIBRATION_SHAPE)
            real_step()  # warm both
        fake_step()
        pace = self.rank_pace
        self.measure_raw_gaps()
        # Freed storages first: the per-entry overhead below is then measured net of them (a
        # step frees about one storage per op, and scripts free more or fewer than that)
        release_raw, release_best = self._measure_release_cost(pairs)
        self.release_overhead_ns = release_raw
        diffs = []
        # The CPU side on one intra-op thread, as the reference step: on two shared cores,
        # OpenMP's second thread made a 1 ms step take 3-120 ms (measured), which buried the
        # overhead (it came out 0 from 4 runs in 5).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        for fake_ns, real_ns, entries in self.paired_blocks(fake_step, real_step, pairs, steps):
            # at this machine's best speed, by a probe taken with the pair: one sample taken
            # after the calibration scaled the whole run's overhead by that moment's speed
            diffs.append((fake_ns - real_ns) / entries * self._speed.sample_now())
        list_in, list_out = self._measure_list_costs(pairs)
        api_call = self._measure_api_overhead(pairs)
        torch.set_num_threads(threads)
        self.rank_pace = pace
        self._sample_host_speed()
        if not contended and cpu_contended():  # another process started while it measured
            contended, history = True, fingerprint + CONTENDED_SUFFIX
        per_entry = self._speed.settle(DISPATCH_OVERHEAD, history, statistics.median(diffs))
        self.dispatch_overhead_ns = per_entry * self.host_speed
        list_overhead = (self._speed.settle(LIST_INPUT, history, list_in) * self.host_speed,
                         self._speed.settle(LIST_OUTPUT, history, list_out) * self.host_speed)
        release = self._speed.settle(RELEASE, history, release_best) * self.host_speed
        api_overhead = self._speed.settle(API_CALL, history, api_call) * self.host_speed
        wake_penalty = self._measure_wake_penalty(history) if blocking else 0.0
        del fake_step, real_step
        gc.collect()  # the modules and optimizer form cycles: free their fake storages now
        self._forget_calibration_work()
        return {"host_speed": self.host_speed, "host_step_ns_here": self.host_step_ns_here,
                "dispatch_overhead_ns": self.dispatch_overhead_ns, "wake_penalty_ns": wake_penalty,
                "list_overhead_ns": list_overhead, "release_overhead_ns": release,
                "api_overhead_ns": api_overhead, "calibration_contended": contended}

    def _recent_calibration(self, fingerprint: str, blocking: bool) -> dict | None:
        """The calibration as the median of this machine's last HISTORY measurements of this
        code, without measuring, in all but one run in REMEASURE_EVERY once that history is
        full; None: measure. What a run charges is that median either way (`settle`), so a
        new measurement moves it by a fifteenth at most; measuring took ~2.7 s of a short
        run's ~5.6 s on the development VM (2026-11-27), and the test suite starts hundreds
        of runs. The runs that still measure keep the history following the machine."""
        kinds = [DISPATCH_OVERHEAD, LIST_INPUT, LIST_OUTPUT, RELEASE, API_CALL]
        kinds += [WAKE_PENALTY] if blocking else []
        if _remeasure_draw() < 1 / REMEASURE_EVERY:
            return None
        recent = {kind: self._speed.recent(kind, fingerprint) for kind in kinds}
        if any(value is None for value in recent.values()):
            return None
        self._sample_host_speed()
        at_node = {kind: value * self.host_speed for kind, value in recent.items()}
        return {"host_speed": self.host_speed, "host_step_ns_here": self.host_step_ns_here,
                "dispatch_overhead_ns": at_node[DISPATCH_OVERHEAD],
                "wake_penalty_ns": at_node.get(WAKE_PENALTY, 0.0),
                "list_overhead_ns": (at_node[LIST_INPUT], at_node[LIST_OUTPUT]),
                "release_overhead_ns": at_node[RELEASE], "api_overhead_ns": at_node[API_CALL]}

    def _charged_block(self, block: Callable[[], object]) -> tuple[float, object]:
        """Run `block` as a gap of its own and return what its gaps were charged, with what it
        returned (kept alive until the charge is taken). Under `measure_raw_gaps`."""
        self._real_mark = self._clock()
        u0 = self.user_host_ns
        result = block()
        self.begin_op("probe")  # closes the block's last gap
        self.end_op()
        return self.user_host_ns - u0, result

    def _measure_release_cost(self, pairs: int, n: int = 256) -> tuple[float, float]:
        """What a freed fake storage costs the gap it dies in, beyond freeing a CPU tensor: `n`
        small tensors made and dropped one by one against made and kept, on fake CUDA and on
        the CPU, in alternating blocks; the median per storage, in this machine's raw ns and
        at its best speed. Under `measure_raw_gaps` (no release overhead taken off yet)."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        def make(keep: bool) -> list:
            kept = []
            for _ in range(n):
                x = torch.empty(8, device="cuda")
                if keep:
                    kept.append(x)
                del x
            return kept  # freed after the block, outside the next one's gaps (its mark is reset)

        def fake_block(keep: bool) -> float:
            return self._charged_block(lambda: make(keep))[0]

        def real_block(keep: bool) -> float:
            with unset_fake_temporarily():
                kept = []
                t0 = self._clock()
                for _ in range(n):
                    x = torch.empty(8)
                    if keep:
                        kept.append(x)
                    del x
                return self._clock() - t0

        raw, best = [], []
        for _ in range(pairs):
            fake = fake_block(keep=False) - fake_block(keep=True)
            real = real_block(keep=False) - real_block(keep=True)
            raw.append((fake - real) / n)
            best.append(raw[-1] * self._speed.sample_now())
        return max(0.0, statistics.median(raw)), max(0.0, statistics.median(best))

    def _measure_list_costs(self, pairs: int, calls: int = 4) -> tuple[float, float]:
        """This machine's ns, at its best speed, per tensor of a list argument and per tensor of
        a returned list on the way through the handler: foreach calls on LIST_PROBE tensors
        against the same calls on one, in alternating blocks (an in-place op for the inputs,
        an out-of-place one for inputs and outputs), the median of the pairs' differences.
        Under `measure_raw_gaps`, with the freed storages' cost already taken off (the
        out-of-place outputs die in the next gap): what is left is the tensors' own way."""
        long = [torch.zeros(8, device="cuda") for _ in range(LIST_PROBE)]
        short = long[:1]

        def gaps(fn, tensors: list) -> float:
            self._real_mark = self._clock()  # not the speed probe's time (paired_blocks)
            u0 = self.user_host_ns
            for _ in range(calls):
                fn(tensors)
            return (self.user_host_ns - u0) / calls

        in_place = lambda xs: torch._foreach_mul_(xs, 1.0)  # noqa: E731
        out_of_place = lambda xs: torch._foreach_add(xs, 1.0)  # noqa: E731
        in_place(long), out_of_place(long)  # warm both paths
        inputs, outputs = [], []
        for _ in range(pairs):
            per_input = (gaps(in_place, long) - gaps(in_place, short)) / (LIST_PROBE - 1)
            both = (gaps(out_of_place, long) - gaps(out_of_place, short)) / (LIST_PROBE - 1)
            speed = self._speed.sample_now()
            inputs.append(per_input * speed)
            outputs.append((both - per_input) * speed)
        return max(0.0, statistics.median(inputs)), max(0.0, statistics.median(outputs))

    def _measure_api_overhead(self, pairs: int, calls: int = 256) -> float:
        """This machine's ns, at its best speed, that a simulated runtime call's way in and out
        (the wrapper, its clock reads) adds to the gaps around it, beyond a real call's: blocks
        of `calls` `torch.cuda.current_stream()` calls (its cheapest wrapped call) against as
        many calls of a C function, alternating; the median of the pairs' per-call
        differences. Under `measure_raw_gaps` (the call's node cost goes to the timeline, not
        to the gaps)."""
        from phantom.interception.clock import REAL_PERF_COUNTER_NS

        query = torch.cuda.current_stream

        def queries() -> None:
            for _ in range(calls):
                query()

        def fake_block() -> float:
            return self._charged_block(queries)[0]

        def real_block() -> float:
            t0 = self._clock()
            for _ in range(calls):
                REAL_PERF_COUNTER_NS()
            return self._clock() - t0

        diffs = []
        for _ in range(pairs):
            diffs.append((fake_block() - real_block()) / calls * self._speed.sample_now())
        return max(0.0, statistics.median(diffs))

    def _measure_wake_penalty(self, fingerprint: str) -> float:
        """Simulated-host ns to take off after each blocking round trip (wake_penalty_ns): the
        median of this measurement and the recent ones of the same code on this machine."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            raw = wake_penalty_ns(self._clock)
        if raw is None:
            return 0.0
        best = raw * self._speed.sample_now()
        return self._speed.settle(WAKE_PENALTY, fingerprint, best) * self.host_speed

    def measure_raw_gaps(self) -> None:
        """From here on charge every gap as measured, in this machine's raw ns, with nothing
        taken off, no speed re-sampling and no progress lines: the state the dispatch-overhead
        calibration measures in (and bench/dispatch_overhead_by_workload.py after it)."""
        self._steady = None
        self._gap_scale = 1.0
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
        self._next_progress = float("inf")

    def paired_blocks(self, fake_step: Callable[[], None], real_step: Callable[[], None],
                      pairs: int, steps: int) -> Iterator[tuple[float, float, int]]:
        """Alternating blocks of `steps` calls of `fake_step` (under the simulation) and of
        `real_step` (on real tensors), `pairs` times: yields (the fake block's charged gaps,
        the real block's time, the fake block's handler entries), in this machine's ns under
        `measure_raw_gaps`. Only gaps count on the fake side: the step's simulated syncs and
        launches are not host time of this machine. A pair is yielded as soon as it is
        measured, so the caller can probe the machine's speed with it."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        for _ in range(pairs):
            # The fake block's first gap starts here: left alone, it ran from the previous fake
            # block's last op and held the real block and the caller's speed probe (~1.4 ms),
            # which put ~2.3 us more on every entry (25%, session 20)
            self._real_mark = self._clock()
            u0, e0 = self.user_host_ns, self.dispatch_entries
            for _ in range(steps):
                fake_step()
            fake_ns, entries = self.user_host_ns - u0, self.dispatch_entries - e0
            with unset_fake_temporarily():
                t0 = self._clock()
                for _ in range(steps):
                    real_step()
                real_ns = self._clock() - t0
            yield fake_ns, real_ns, entries

    def _forget_calibration_work(self) -> None:
        self._next_progress = REAL_NS() + PROGRESS_EVERY_S * 1e9
        self.timeline = self._new_timeline()
        self.iterations.clear()
        self.op_stats.clear()
        self.class_gpu_ns.clear()
        self.source_gpu_ns.clear()
        reset = getattr(self.cost_model, "reset_stats", None)
        if reset is not None:  # the database model's per-signature stats and recorded specs
            reset()
        self.ops_intercepted = 0
        self.list_tensors = self._list_outputs_pending = 0
        self.releases, self._release_credit = 0, 0.0
        self.api_calls, self.api_host_ns = 0, 0.0
        self.user_host_ns, self.dispatch_entries, self.wake_ups = 0.0, 0, 0
        self.data_reads, self.first_data_read = 0, None
        self.first_op_wall_ns = None
        self.clear_cublas_workspaces()
        self.allocator.empty_cache()
        self.allocator.reset_peak_stats()
        self.allocator.reset_accumulated_stats()  # memory_summary's totals are the script's
        self._steady = self._new_steady_gaps()
        self._real_mark = self._clock()

    # -- iterations -----------------------------------------------------------------------
    def mark_iteration(self, optimizer: Any = None) -> None:
        if self.comm is not None and self.comm.unwaited:
            self.comm.wait_unwaited()
        self.begin_op("iteration")
        if self._steady is not None:
            self._steady.new_iteration()
            if self.comm is not None and self.comm.shares_host_gaps:
                self._share_steady_gaps()
        tl = self.timeline
        self.iterations.append(Iteration(tl.host_ns, tl.gpu_idle_ns(), tl.gpu_busy_ns))
        if self.recorder is not None:
            self.recorder.on_iteration(optimizer, self.iterations[-1].gpu_done_ns)
        self.end_op()

    def _share_steady_gaps(self) -> None:
        """Charge the next iteration's steady gaps at what this rank's class leader measured
        (SteadyGaps.use_shared). Transfers this rank deferred go out first: the leader may be
        waiting for one of them."""
        self.comm.flush()
        answer = self.comm.client.share_gaps(len(self.iterations), self._steady.means())
        self.woke_up()  # a blocking round trip like a collective's
        if answer is None:
            return
        if answer["means"] is not None:
            self._steady.use_shared(answer["means"])
        cores = answer["cores"]
        if cores is not None and set(cores) != os.sched_getaffinity(0):
            os.sched_setaffinity(0, cores)

    def _report_progress(self) -> None:
        self._next_progress = REAL_NS() + PROGRESS_EVERY_S * 1e9
        if self.options.quiet:
            return
        wall = (REAL_NS() - self.wall_start_ns) / 1e9
        print(
            f"phantom: {len(self.iterations)} iterations, {self.ops_intercepted:,} ops, "
            f"simulated {self.timeline.host_ns / 1e9:.2f} s in {wall:.0f} s wall",
            file=sys.stderr, flush=True,
        )
