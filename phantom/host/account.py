"""The host clock's account: the script's own Python as measured, torch's work at table prices.

See Note [Host time] in phantom/host/__init__.py for the model. `HostAccount` is the one object
that moves the simulated host clock for host work. Interception tells it where each thread's
time changes hands:

* `torch_call_enter` / `torch_call_exit`: an outermost torch API call (interception.boundary's
  function mode). What runs inside is torch's work, and phantom's: priced, never measured.
* `begin_op` / `end_op`: phantom's dispatch handler (an ATen op; `dispatched`) or another of
  phantom's own entries (an iteration mark, a stream call). A dispatched op is priced.
* `api_enter` / `api_exit`: a simulated CUDA runtime call or clock read, at a fixed node cost.
* `backward_enter` / `backward_exit`: the autograd engine runs a backward pass. Its own work
  between ops is priced per op; only the Python of hooks between their torch calls is measured.

Everything else a thread does is a segment of the script's own Python: measured in this
thread's CPU time (`--host-time measured`), replayed from a saved profile (`counted`), or not
charged (`off`).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch

from phantom.engine import Timeline
from phantom.hardware import GPUSpec
from phantom.host.costs import HostCosts
from phantom.host.machine import MachineSpeed
from phantom.host.profile import ProfileReader, ProfileWriter
from phantom.host.steady import SteadyGaps, straggler_pace

# The clock the script's Python is measured with: this thread's CPU time. Waiting (for a
# core, for a coordinator round trip) is not CPU time; the autograd engine's thread and the
# main thread each have their own.
HOST_CLOCK_NS = time.thread_time_ns
REAL_NS = time.perf_counter_ns  # bound before any patching
# Host cost of launching one CUDA kernel that no table row prices: a kernel of code phantom
# generates or stands in for (a compiled graph's Triton kernels, torch.cuda._sleep). Measured on
# an H200 host (bench/host/data/host_h200.json, bench/host/host_calibration.py, torch 2.11): an
# eager `torch.add(x, 1, out=y)` on CUDA costs 6.95 us of host time, the same op on a CPU tensor
# 2.90 us.
HOST_KERNEL_LAUNCH_NS = 4_000.0
# cuBLAS adds its own host work per GEMM (handle, heuristics cache): a small matmul costs
# 21.9 us of host time against 6.95 us for an elementwise op on the same host (same file): the
# extra for a GEMM launched by generated code (a compiled graph's extern matmul).
GEMM_EXTRA_HOST_NS = 15_000.0
PROGRESS_EVERY_S = 10.0
PROGRESS_CHECK_EVERY_OPS = 256
HOST_TIME_MODES = ("measured", "counted", "off")


class _ThreadState(threading.local):
    """Where one thread is: inside torch, inside phantom, or in the script's own Python."""
    mark: int | None = None  # start of the open script segment (HOST_CLOCK_NS), None if closed
    script: bool = True  # whether the open segment is the script's (else torch's engine's)
    torch_depth = 0  # nested torch API calls (interception.boundary)
    phantom_depth = 0  # nested entries into phantom (begin_op, api_enter)
    priced = False  # whether the op phantom is handling was priced from the table
    leak_after = 0.0  # what the last torch call's way out adds to the open segment (this machine's ns)
    node: Any = None  # the autograd node whose ops the engine runs on this thread


class HostAccount:
    """The host time of one rank, in simulated-host nanoseconds.

    `mode` is --host-time; `costs` the node's table (host.costs); `machine` this machine's
    speed (measured mode); `replay` a saved profile to charge (counted mode); `record` whether
    to keep this run's segments for --save-host-profile; `rank_spread` the run's option;
    `progress` prints a progress line every PROGRESS_EVERY_S of wall time.
    """

    def __init__(self, gpu: GPUSpec, timeline: Timeline, mode: str, costs: HostCosts,
                 machine: MachineSpeed | None, replay: ProfileReader | None, record: bool,
                 rank_spread: float | None, progress: Callable[[], None]) -> None:
        if mode not in HOST_TIME_MODES:
            raise ValueError(f"host time mode {mode!r}: expected one of {', '.join(HOST_TIME_MODES)}")
        self.gpu = gpu
        self.timeline = timeline
        self.mode = mode
        self.costs = costs
        self.machine = machine
        self.replay = replay
        self.recorded = ProfileWriter() if record else None
        self._rank_spread = rank_spread
        self._progress = progress
        self.clock = HOST_CLOCK_NS
        self._thread = _ThreadState()
        self._backward = 0  # backward passes running (the engine's threads see it too)
        # node ns per ns of this machine's thread time (measured mode)
        self.ratio = 1.0
        self.boundary_ns = self.boundary_python_ns = self.release_ns = 0.0
        if machine is not None:
            self.set_machine(machine)
        self.steady = SteadyGaps() if mode == "measured" else None
        # All host time of a rank of a multi-GPU run is charged at the pace of its host's
        # slowest rank (set_world; host.steady.straggler_pace); 1 on one GPU.
        self.rank_pace = 1.0
        self.script_host_ns = 0.0  # charged for the script's own Python
        self.segments = 0
        self.torch_calls = 0
        self.dispatched_ops = 0
        self.api_calls = 0
        self.api_host_ns = 0.0
        self.priced_host_ns = 0.0  # charged from the table for torch's work
        self.next_progress = REAL_NS() + PROGRESS_EVERY_S * 1e9
        self._ops_until_progress_check = PROGRESS_CHECK_EVERY_OPS

    def set_machine(self, machine: MachineSpeed) -> None:
        """This machine's speed (host.machine): how measured segments convert to the node."""
        self.machine = machine
        self.boundary_ns = machine.boundary_ns
        self.boundary_python_ns = machine.boundary_python_ns
        self.release_ns = machine.release_ns
        if self.mode == "measured":
            self.ratio = machine.ratio(self.gpu.host_probe_ns * self.gpu.host_mean_slowdown)

    # -- segments of the script's own Python ----------------------------------------------
    def _close(self, t: _ThreadState, now: int, site: Any, charge: bool, leak_before: float = 0.0) -> None:
        """End this thread's open segment at `now`; charge it if it is the script's. What the
        boundary added to it, the last call's way out and `leak_before` (the way into the call
        that ends it), is taken off."""
        mark, t.mark = t.mark, None
        leak, t.leak_after = t.leak_after + leak_before, 0.0
        if mark is None or not (charge and t.script):
            return
        self._charge_script(now - mark - leak, site)

    def _charge_script(self, here_ns: float, site: Any) -> None:
        self.segments += 1
        if self.mode == "off":
            return
        if self.mode == "counted":
            ns = self.replay.next(_site_name(site)) if self.replay is not None else 0.0
        else:
            ns = max(0.0, here_ns) * self.ratio
            if self.steady is not None:
                ns = self.steady.typical(site, ns)
            if self.recorded is not None:
                self.recorded.add(_site_name(site), ns)
        ns *= self.rank_pace
        self.script_host_ns += ns
        self.timeline.advance_host(ns)

    def _price(self, ns: float) -> None:
        if self.mode == "off":
            return
        ns *= self.rank_pace
        self.priced_host_ns += ns
        self.timeline.advance_host(ns)

    # -- torch API calls (interception.boundary) ------------------------------------------
    def inside_phantom(self) -> bool:
        return self._thread.phantom_depth > 0

    def op_priced(self) -> bool:
        """Whether the op being handled was priced from the table, its launch included (else
        it runs inside a call priced whole, or in generated code: its launch is charged)."""
        t = self._thread
        return t.phantom_depth == 1 and t.priced

    def torch_call_enter(self, func: Any, kind: str, now: int, python: bool = False) -> None:
        """An outermost torch API call `func` of `kind` ("method", "function", "property")
        begins; `python`: a torch function written in Python; `now`: HOST_CLOCK_NS read first
        thing in the boundary. The boundary's cost of the call (machine.MachineSpeed) is taken
        half off the segment it ends, half off the one it starts."""
        t = self._thread
        t.torch_depth += 1
        if t.torch_depth == 1:
            half = (self.boundary_python_ns if python else self.boundary_ns) / 2
            self._close(t, now, func, charge=True, leak_before=half)
            t.leak_after = half
            self.torch_calls += 1
            self._price(self.costs.api_ns(kind))

    def torch_call_exit(self) -> None:
        t = self._thread
        t.torch_depth -= 1
        if t.torch_depth == 0:
            t.mark, t.script = self.clock(), True  # t.leak_after: set at the call's entry

    def backward_enter(self) -> int:
        """The autograd engine starts a backward pass from this thread. Returns what
        backward_exit restores: inside, hooks' torch calls are outermost calls again."""
        t = self._thread
        saved, t.torch_depth = t.torch_depth, 0
        self._backward += 1
        t.mark, t.script = None, False
        self._price(self.costs.backward_ns(passes=1))
        return saved

    def backward_exit(self, saved: int) -> None:
        t = self._thread
        self._backward -= 1
        t.torch_depth = saved
        t.mark = None if saved else self.clock()
        t.script = True

    # -- phantom's own entries ------------------------------------------------------------
    def begin_op(self, site: Any = None, dispatched: bool = False, list_inputs: int = 0,
                 grad: bool = False, now: int | None = None) -> None:
        """Entering phantom at `site`: a dispatched ATen op (`dispatched`: priced from the
        table with `list_inputs` list tensors; `grad`: autograd records a node for it), or
        phantom's own work (an iteration mark, a stream call), which is not charged."""
        t = self._thread
        t.phantom_depth += 1
        if t.phantom_depth > 1:
            return
        t.priced = dispatched
        if t.torch_depth == 0:
            # outside any torch call: a backward op the engine runs, or an op called without
            # passing the boundary (torch.ops from Python); in a backward pass only a hook's
            # Python between its torch calls is the script's
            self._close(t, self.clock() if now is None else now, site, charge=not self._backward)
        if dispatched and self.mode != "off":
            self.dispatched_ops += 1
            if self._backward > 0 and t.torch_depth == 0:  # the engine runs it
                ns = self.costs.op_ns(site, False, list_inputs)
                node = torch._C._current_autograd_node()
                if node is not None and node is not t.node:
                    t.node = node
                    ns += self.costs.backward_ns(nodes=1)
            else:
                ns = self.costs.op_ns(site, grad, list_inputs)
                if t.torch_depth == 0:
                    ns += self.costs.api_ns("function")
            self._price(ns)

    def end_op(self) -> None:
        """Leaving phantom."""
        t = self._thread
        t.phantom_depth -= 1
        if t.phantom_depth == 0 and t.torch_depth == 0:
            t.mark, t.script = self.clock(), not self._backward
        self._ops_until_progress_check -= 1
        if self._ops_until_progress_check <= 0:
            self._ops_until_progress_check = PROGRESS_CHECK_EVERY_OPS
            if REAL_NS() >= self.next_progress:
                self.next_progress = REAL_NS() + PROGRESS_EVERY_S * 1e9
                self._progress()

    def storage_released(self, phantom_ns: int) -> None:
        """A fake storage was freed inside the script's segment, phantom's work taking
        `phantom_ns` of this thread's time: not the script's."""
        t = self._thread
        if t.mark is not None:
            t.mark += phantom_ns + self.release_ns

    def on_gc(self, phase: str, info: dict) -> None:
        """gc.callbacks hook: Python's cyclic collections are not charged as host time.

        Under phantom the heap holds the simulation's own objects (fake tensors and their
        metadata, FakeTensorMode's caches, one finalizer per storage): hundreds of thousands
        more than the script has on a GPU host, and each collection walks them. Charged, a
        host-bound step came out up to a full collection (tens to hundreds of ms) longer,
        depending on where the collector happened to run. The script's own collections on
        a GPU host are left out with them: timed there, they take 0.02-1.25 ms of a 15-280 ms
        step."""
        t = self._thread
        if phase == "start":
            t.gc_start = (self.clock(), t.mark)
        else:
            start = getattr(t, "gc_start", None)
            t.gc_start = None
            if start is not None and t.mark is not None and start[1] is not None:
                # finalizers that ran inside the collection moved the mark already: count once
                t.mark = max(t.mark, start[1] + (self.clock() - start[0]))

    # -- runtime calls and fixed costs ----------------------------------------------------
    def api_enter(self, site: str, now: int) -> None:
        """A simulated CUDA runtime call (`torch.cuda.current_stream()`, an event record, a
        stream context, a clock read) begins: the script's segment ends here (a hook's too, in
        a backward pass). `api_exit` charges the node's cost of the call. `now`:
        HOST_CLOCK_NS read first thing in the call."""
        t = self._thread
        t.phantom_depth += 1
        if t.phantom_depth == 1 and t.torch_depth == 0:
            self._close(t, now, site, charge=True)

    def api_exit(self, node_ns: float) -> None:
        """The call that `api_enter` began returns: charge the node's host cost of it
        (outermost calls only)."""
        t = self._thread
        if t.phantom_depth == 1:
            self.api_calls += 1
            if self.mode != "off":  # its own count: not the table's (priced_host_ns)
                ns = node_ns * self.rank_pace
                self.api_host_ns += ns
                self.timeline.advance_host(ns)
            if t.torch_depth == 0:
                t.mark, t.script = self.clock(), True
        t.phantom_depth -= 1

    def now_ns(self, node_ns: float = 0.0, now: int | None = None) -> float:
        """The simulated host clock, read as a call that costs the node `node_ns` (`now`: as
        api_enter)."""
        self.api_enter("clock", self.clock() if now is None else now)
        now = self.timeline.host_ns
        self.api_exit(node_ns)
        return now

    def sleep_ns(self, ns: float) -> None:
        """`time.sleep` on the simulated host: the clock moves on, nothing runs."""
        self.api_enter("sleep", self.clock())
        self.timeline.advance_host(ns)
        self.api_exit(0.0)

    def at_pace(self, node_ns: float) -> float:
        """A fixed host cost of the node (a kernel launch no table row prices, a collective's
        enqueue, a graph replay) at the pace of its slowest rank; nothing with --host-time off."""
        return 0.0 if self.mode == "off" else node_ns * self.rank_pace

    def set_world(self, ranks_per_host: int) -> None:
        """This process is a rank of a multi-GPU run with `ranks_per_host` ranks on its host:
        its host time runs at the pace of the host's slowest rank (host.steady.straggler_pace)."""
        spread = self._rank_spread
        if spread is None:
            spread = self.gpu.host_rank_spread
        self.rank_pace = straggler_pace(ranks_per_host, spread)

    def restart_segment(self) -> None:
        """The script's next segment starts now on this thread (what ran before was phantom's)."""
        t = self._thread
        if t.torch_depth == 0 and t.phantom_depth == 0:
            t.mark, t.script = self.clock(), not self._backward

    # -- reports --------------------------------------------------------------------------
    def report(self) -> dict:
        """How the host time was charged (report: simulation.host_time)."""
        machine = self.machine
        steady = self.steady
        return {
            "mode": self.mode,
            "script_host_ns": self.script_host_ns, "priced_host_ns": self.priced_host_ns,
            "api_host_ns": self.api_host_ns, "segments": self.segments,
            "torch_calls": self.torch_calls, "dispatched_ops": self.dispatched_ops,
            "api_calls": self.api_calls, "rank_pace": self.rank_pace,
            "ratio": self.ratio if self.mode == "measured" else None,
            "machine": None if machine is None else {
                "source": machine.source, "probe_ns": machine.probe_ns,
                "boundary_ns": machine.boundary_ns, "boundary_python_ns": machine.boundary_python_ns,
                "release_ns": machine.release_ns,
                "cpu": machine.cpu},
            "node_probe_ns": self.gpu.host_probe_ns,
            "node_mean_slowdown": self.gpu.host_mean_slowdown,
            "steady_share": steady.share() if steady is not None else None,
            "costs": self.costs.report(),
            "replay": self.replay.report() if self.replay is not None else None,
        }

    def save_profile(self, directory: Path, rank: int) -> Path | None:
        return self.recorded.save(directory, rank) if self.recorded is not None else None

    def reset_counts(self) -> None:
        """Forget what phantom's own set-up counted (the script starts now)."""
        self.next_progress = REAL_NS() + PROGRESS_EVERY_S * 1e9
        self.script_host_ns = self.priced_host_ns = self.api_host_ns = 0.0
        self.segments = self.torch_calls = self.dispatched_ops = self.api_calls = 0
        for key in self.costs.charged:
            self.costs.charged[key] = 0.0
        if self.steady is not None:
            self.steady = SteadyGaps()
        if self.recorded is not None:
            self.recorded = ProfileWriter()
        if self.replay is not None:
            self.replay.rewind()
        t = self._thread
        t.mark, t.script = self.clock(), True


def _site_name(site: Any) -> str:
    name = getattr(site, "__qualname__", None) or getattr(site, "__name__", None)
    return name if isinstance(name, str) else str(site)
