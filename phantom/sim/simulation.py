"""The simulation of one rank: the one piece of global state phantom has.

A `Simulation` ties together what a simulated GPU needs: the engine's timeline (virtual time),
the cost model (GPU time per op), the allocator model (memory), the host-time account, and the
statistics the report is built from. Interception calls into it; it calls nothing back. Its
parts, each in a module of its own, are reached as attributes: `host` (host.HostAccount),
`streams`, `storage`, `graphs`, `fusion` and `transfers`.
"""
from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch

from phantom.cost import KernelCost
from phantom.errors import RunStopped
from phantom.cost.dbmodel import make_cost_model
from phantom.engine import Timeline
from phantom.engine.fusion import FUSABLE_CLASSES
from phantom.engine.power import governor_for
from phantom.host.account import GEMM_EXTRA_HOST_NS, HOST_KERNEL_LAUNCH_NS, REAL_NS, HostAccount
from phantom.host.costs import HostCosts, table_path
from phantom.host.machine import MachineSpeed
from phantom.host.profile import ProfileReader
from phantom.memory import CachingAllocator
from phantom.memory.history import MemoryHistory
from phantom.sim import values
from phantom.sim.fusion import Fusion
from phantom.sim.graphs import Graphs
from phantom.sim.options import SimOptions
from phantom.sim.storage import Storage
from phantom.sim.streams import Streams
from phantom.sim.transfers import H2D_OPS, Transfers


@dataclass
class OpStats:
    calls: int = 0
    gpu_ns: float = 0.0


@dataclass
class Iteration:
    host_ns: float  # host clock when the optimizer step returned
    gpu_done_ns: float  # GPU time at which all work enqueued by then finishes
    gpu_busy_ns: float  # cumulative GPU busy time at that point


class Simulation:
    """One rank's simulated GPU and host: what every interception hook calls into.

    Built once per rank process (launcher/bootstrap.py) before the interception is installed;
    from there on each CUDA op of the script reaches `on_op`, each of phantom's entries
    `host.begin_op`, each sync `streams`. `rank` picks the rank's part of a saved host profile.
    """

    def __init__(self, options: SimOptions, rank: int = 0) -> None:
        self.options = options
        self.gpu = options.gpu
        self.device_count = options.device_count
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
        self.stopped: str | None = None  # why --stop-above-ms ended the run
        self.stopped_above_ms: float | None = None  # the iteration time it had passed
        self.wall_start_ns = REAL_NS()
        self.first_op_wall_ns: int | None = None
        self.comm = None  # phantom.distributed.comm.RankComm in a distributed run
        # phantom.report.recorder.Recorder when the run keeps a trace or run directory
        self.recorder = None
        self.streams = Streams(self)
        self.storage = Storage(self, self.allocator)
        self.graphs = Graphs(self)
        self.fusion = Fusion(self)
        self.transfers = Transfers(self)
        self.rank = rank
        replay = None
        if options.host_time == "counted" and options.host_profile is not None:
            replay = ProfileReader(options.host_profile, rank)
        self.host = HostAccount(options.gpu, self._new_timeline(), options.host_time,
                                HostCosts.load(table_path(options.gpu.name)), None, replay,
                                options.save_host_profile is not None, options.rank_spread,
                                self._report_progress)

    @property
    def timeline(self) -> Timeline:
        """The rank's timeline; the host account holds it, as it moves its host clock."""
        return self.host.timeline

    def _new_timeline(self) -> Timeline:
        return Timeline(sm_count=self.gpu.sm_count, governor=governor_for(self.gpu))

    def set_machine(self, machine: MachineSpeed) -> None:
        """This machine's speed, read or measured by the interception at start-up."""
        self.host.set_machine(machine)

    # -- ops ------------------------------------------------------------------------------
    def on_op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Charge one simulated CUDA op: allocate its outputs, then time its kernel."""
        if self.ops_intercepted == 0:
            self.first_op_wall_ns = REAL_NS()
        self.ops_intercepted += 1
        if self.graphs.shadow:
            return
        stream_id = self.streams.current_id()
        if self.recorder is not None:
            self.recorder.op = func.__name__
        self.storage.track_outputs(out, stream_id)
        if self.fusion.generated_code:
            return  # timed as part of a generated kernel (Fusion.launch_generated_kernel)
        if func in H2D_OPS and self.transfers.host_to_device(func, args, kwargs, stream_id):
            values.propagate_hint(func, args, out)  # a small CPU value keeps its value
            src = args[0] if func is torch.ops.aten._to_copy.default else args[1]
            values.set_shadow(out if func is torch.ops.aten._to_copy.default else args[0], src)
            return
        cost = self.cost_model.estimate(func, args, kwargs, out)
        if cost is not None and cost.op_class == "gemm":
            self.storage.gemm_workspace(stream_id)
        if cost is not None:  # kernel-less ops (views, empty) cost only the measured dispatch
            fusion = self.fusion
            if fusion.depth and cost.op_class in FUSABLE_CLASSES:
                fusion.add(func, args, kwargs, out, cost, stream_id)
            else:
                if fusion.kernel is not None:  # a GEMM or the like splits a compiled function
                    fusion.flush()
                self.launch(func, cost, stream_id, args, launch_host_ns=self._launch_host_ns(cost))
        values.propagate_hint(func, args, out, kwargs)

    def launch(self, func: Any, cost: KernelCost, stream_id: int, args: tuple = (),
               launch_host_ns: float = HOST_KERNEL_LAUNCH_NS) -> None:
        """Launch one kernel: `launch_host_ns` on the host (0 for an op the host-cost table
        priced, launch included), `cost` on the stream (or into the CUDA graph the stream
        captures)."""
        if self.graphs.shadow:
            return  # a CUDA graph replay launches it
        host_ns = self.host.at_pace(launch_host_ns)
        name = func if isinstance(func, str) else func.__name__
        capture = self.graphs.capture
        if capture is not None and capture.captures(stream_id):
            # captured: the host pays the launch, the GPU runs it at each replay
            self.timeline.advance_host(host_ns)
            capture.kernel(name, cost, stream_id)
            return
        self.enqueue(name, cost, stream_id, host_ns, args)

    def _launch_host_ns(self, cost: KernelCost) -> float:
        """The host cost of an op's kernel launch: none where the host-cost table priced the op
        (its row includes the launch), else the node's launch (a compiled graph's extern GEMM)."""
        if self.host.op_priced():
            return 0.0
        return HOST_KERNEL_LAUNCH_NS + (GEMM_EXTRA_HOST_NS if cost.op_class == "gemm" else 0.0)

    def enqueue(self, name: str, cost: KernelCost, stream_id: int, host_ns: float,
                args: tuple = (), in_graph: bool = False, uses_sms: bool = True) -> None:
        """Put a kernel on the timeline and count it."""
        h0 = self.timeline.host_ns
        start, end = self.timeline.launch(stream_id, cost.gpu_ns, host_ns, op_class=cost.op_class,
                                          flops=cost.flops * cost.energy_per_flop, nbytes=cost.bytes,
                                          in_graph=in_graph, uses_sms=uses_sms)
        if self.recorder is not None:
            self.recorder.kernel(name, cost.op_class, cost.source, stream_id, start, end, h0,
                                 self.timeline.host_ns, args)
        if self.options.stop_above_ms is not None:
            self._check_running_iteration(end)
        stats = self.op_stats[name]
        stats.calls += 1
        stats.gpu_ns += cost.gpu_ns
        self.class_gpu_ns[cost.op_class] += cost.gpu_ns
        self.source_gpu_ns[cost.source] += cost.gpu_ns

    def launch_extension_kernel(self, name: str, nbytes: float, flops: float = 0.0,
                                blocks: int | None = None) -> None:
        """One kernel of a simulated CUDA extension (adapters/: DeepSpeed's FusedLion and
        FusedLamb) that moves `nbytes`, on the current stream (interception.cuda_api
        `extension_kernel`). A grid of fewer `blocks` than the GPU has SMs draws that share of
        the bandwidth: each block runs on one SM (FusedLion's launch of 48 one-chunk tensors,
        48 blocks, took 11.5 us for 15.7 MB on an H200, 1.4 TB/s:
        bench/kernels/deepspeed_optimizers.py)."""
        self.fusion.flush()
        share = 1.0 if blocks is None else min(1.0, blocks / self.gpu.sm_count)
        cost = self.cost_model.fused_pointwise(nbytes, flops, load_efficiency=share)
        self.launch(name, cost, self.streams.current_id())

    def launch_sleep(self, cycles: int) -> None:
        """`torch.cuda._sleep(cycles)`: one kernel spinning on the SM clock for `cycles`
        cycles (benchmarks use it to queue work ahead of the host), at the GPU's boost clock."""
        ns = max(0, int(cycles)) / self.gpu.sm_clock_mhz * 1e3
        self.launch("cuda_sleep", KernelCost(ns, "other", "model", 0.0, 0.0), self.streams.current_id())

    # -- iterations -----------------------------------------------------------------------
    def mark_iteration(self, optimizer: Any = None) -> None:
        if self.comm is not None and self.comm.unwaited:
            self.comm.wait_unwaited()
        host = self.host
        host.begin_op("iteration")
        if host.steady is not None:
            host.steady.new_iteration()
            if self.comm is not None and self.comm.shares_host_gaps:
                self._share_steady_gaps()
        tl = self.timeline
        self.iterations.append(Iteration(tl.host_ns, tl.gpu_idle_ns(), tl.gpu_busy_ns))
        if self.recorder is not None:
            self.recorder.on_iteration(optimizer, self.iterations[-1].gpu_done_ns)
        host.end_op()
        self._check_iteration_bound()

    def _check_iteration_bound(self) -> None:
        """--stop-above-ms: an iteration after the first slower than the bound ends the run."""
        bound, its = self.options.stop_above_ms, self.iterations
        if bound is None or len(its) < 2:
            return
        ms = (its[-1].gpu_done_ns - its[-2].gpu_done_ns) / 1e6
        if ms > bound:
            self._stop(f"iteration {len(its) - 1} took {ms:.2f} ms", ms)

    def _check_running_iteration(self, kernel_end_ns: float) -> None:
        """--stop-above-ms within an iteration after the first: it ends no earlier than the
        kernel just queued, so once that is past the bound the iteration is too."""
        its = self.iterations
        if not its:
            return
        ms = (kernel_end_ns - its[-1].gpu_done_ns) / 1e6
        if ms > self.options.stop_above_ms:
            self._stop(f"iteration {len(its)} took more than {ms:.2f} ms", ms)

    def _stop(self, what: str, ms: float) -> None:
        self.stopped = f"{what}, over --stop-above-ms {self.options.stop_above_ms:g}"
        self.stopped_above_ms = ms
        raise RunStopped(f"phantom: run stopped: {self.stopped}")

    def _share_steady_gaps(self) -> None:
        """Charge the next iteration's steady gaps at what this rank's class leader measured
        (SteadyGaps.use_shared). Transfers this rank deferred go out first: the leader may be
        waiting for one of them."""
        self.comm.flush()
        steady = self.host.steady
        answer = self.comm.client.share_gaps(len(self.iterations), steady.means())
        if answer is None:
            return
        if answer["means"] is not None:
            steady.use_shared(answer["means"])
        cores = answer["cores"]
        if cores is not None and set(cores) != os.sched_getaffinity(0):
            os.sched_setaffinity(0, cores)

    def forget_work(self) -> None:
        """Forget what was simulated so far (the start-up calibration's own steps): the script
        starts from here, on a fresh timeline, with empty statistics and memory."""
        self.host.timeline = self._new_timeline()
        self.iterations.clear()
        self.op_stats.clear()
        self.class_gpu_ns.clear()
        self.source_gpu_ns.clear()
        reset = getattr(self.cost_model, "reset_stats", None)
        if reset is not None:  # the database model's per-signature stats and recorded specs
            reset()
        self.ops_intercepted = 0
        self.data_reads, self.first_data_read = 0, None
        self.first_op_wall_ns = None
        self.storage.clear_cublas_workspaces()
        self.allocator.empty_cache()
        self.allocator.reset_peak_stats()
        self.allocator.reset_accumulated_stats()  # memory_summary's totals are the script's
        self.host.reset_counts()

    def _report_progress(self) -> None:
        if self.options.quiet:
            return
        wall = (REAL_NS() - self.wall_start_ns) / 1e9
        print(
            f"phantom: {len(self.iterations)} iterations, {self.ops_intercepted:,} ops, "
            f"simulated {self.timeline.host_ns / 1e9:.2f} s in {wall:.0f} s wall",
            file=sys.stderr, flush=True,
        )
