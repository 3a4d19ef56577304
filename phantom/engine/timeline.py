"""Virtual time for one simulated GPU: a host clock that runs ahead of per-stream queues.

The model is CUDA's: the host enqueues a kernel and continues; the kernel starts when the
stream has finished its previous work, when every event the stream waits on has fired, and
no earlier than the host's launch plus the launch latency. Sync points move the host clock
forward to the GPU time they wait for.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from phantom.engine.power import PowerGovernor

# Time from a host launch call until the GPU can start the kernel (driver + PCIe doorbell).
# On H100 with CUDA 12 an empty kernel's launch-to-start latency is ~4-5 us when the queue is
# idle; when the queue is busy this is hidden.
LAUNCH_LATENCY_NS = 4_000.0
# cudaLaunchKernel queue depth: past this many pending kernels the host blocks on launch.
MAX_PENDING_KERNELS = 1024
# Concurrent NCCL kernels never take more than this share of the SMs from compute.
MAX_COMM_SM_SHARE = 0.5


@dataclass(slots=True)
class KernelRecord:
    name: str
    op_class: str
    stream_id: int
    start_ns: float
    end_ns: float
    source: str


@dataclass(slots=True)
class Stream:
    stream_id: int
    priority: int = 0
    ready_ns: float = 0.0  # GPU time at which all work enqueued so far has finished
    pending_ends: list[float] = field(default_factory=list)  # end times, for the queue limit


@dataclass(slots=True)
class Event:
    enable_timing: bool = False
    time_ns: float | None = None  # GPU time at which the event fires; None until recorded

    @property
    def recorded(self) -> bool:
        return self.time_ns is not None


class Timeline:
    """Host clock plus streams. `host_ns` only moves forward.

    Compute kernels share the GPU's SMs: a training kernel (GEMM, attention, a large
    elementwise op) fills every SM, so kernels of different streams execute one after the
    other, in launch order (`sm_free_ns`). Copy-engine transfers (`uses_sms=False`) overlap
    with compute. Communication kernels, which use a few SMs, get their own rule in the
    distributed engine.
    """

    def __init__(self, on_kernel: Callable[[KernelRecord], None] | None = None,
                 sm_count: int = 132, governor: PowerGovernor | None = None) -> None:
        self.host_ns = 0.0
        self.governor = governor  # the board's power limit (None: not modelled for this GPU)
        self.sm_count = sm_count
        # NCCL kernels in flight: (start, end, share of the SMs they occupy)
        self._comm: list[tuple[float, float, float]] = []
        self.streams: dict[int, Stream] = {0: Stream(0)}
        self.gpu_busy_ns = 0.0  # union of kernel time over all streams (approximate: see below)
        self._busy_until = 0.0
        self.sm_free_ns = 0.0
        self._on_kernel = on_kernel

    # -- host -----------------------------------------------------------------------------
    def advance_host(self, ns: float) -> None:
        if ns > 0:
            self.host_ns += ns

    def stream(self, stream_id: int) -> Stream:
        s = self.streams.get(stream_id)
        if s is None:
            s = self.streams[stream_id] = Stream(stream_id)
        return s

    # -- kernels --------------------------------------------------------------------------
    def launch(self, stream_id: int, gpu_ns: float, host_ns: float, name: str = "",
               op_class: str = "", source: str = "", uses_sms: bool = True,
               flops: float = 0.0, nbytes: float = 0.0, in_graph: bool = False) -> tuple[float, float]:
        """Enqueue a kernel; the host pays `host_ns` of launch cost. Returns (start, end).

        `gpu_ns` is the kernel's time at the cost model's clock; with a governor, `op_class`,
        `flops` and `nbytes` tell it what the kernel draws, and the power limit may stretch it.
        `in_graph`: a node of a CUDA graph being replayed (engine/graphs.py), which takes no
        place of its own in the launch queue."""
        s = self.stream(stream_id)
        if not in_graph:
            self._respect_queue_limit(s)
        self.host_ns += host_ns
        start = max(self.host_ns + LAUNCH_LATENCY_NS, s.ready_ns)
        if uses_sms:
            start = max(start, self.sm_free_ns)
            if self.governor is not None:
                gpu_ns = self.governor.kernel_ns(start, gpu_ns, op_class, flops, nbytes)
        end = self._stretch(start, gpu_ns) if uses_sms and self._comm else start + gpu_ns
        s.ready_ns = end
        if uses_sms:
            self.sm_free_ns = end
        if not in_graph:
            s.pending_ends.append(end)
        self._account_busy(start, end)
        if self._on_kernel is not None:
            self._on_kernel(KernelRecord(name, op_class, stream_id, start, end, source))
        return start, end

    def comm_kernel(self, stream_id: int, start: float, end: float, channels: int,
                    name: str = "") -> None:
        """An NCCL kernel whose timing the network decided: it holds `stream_id` from
        `start` to `end` and `channels` SMs (one CUDA block per channel) meanwhile."""
        s = self.stream(stream_id)
        s.ready_ns = max(s.ready_ns, end)
        s.pending_ends.append(end)
        if channels > 0 and end > start:
            self._comm.append((start, end, min(channels / self.sm_count, MAX_COMM_SM_SHARE)))
        if self._on_kernel is not None:
            self._on_kernel(KernelRecord(name, "comm", stream_id, start, end, "nccl"))

    def _stretch(self, start: float, work_ns: float) -> float:
        """End of a compute kernel that needs `work_ns` of the whole GPU, starting at
        `start`, while NCCL kernels hold some SMs: it runs at the share left to it.

        The model is SM occupancy only (a GEMM or attention kernel spreads its tiles over
        the SMs it gets); HBM bandwidth taken by NCCL's copies is not modelled.
        """
        active = [c for c in self._comm if c[1] > start]
        self._comm = active
        t, left = start, work_ns
        while active:
            share = min(sum(f for s, e, f in active if s <= t < e), MAX_COMM_SM_SHARE)
            rate = 1.0 - share
            nxt = min([s for s, _, _ in active if s > t] + [e for _, e, _ in active if e > t],
                      default=float("inf"))
            if t + left / rate <= nxt:
                return t + left / rate
            left -= (nxt - t) * rate
            t = nxt
            active = [c for c in active if c[1] > t]
        return t + left

    def _respect_queue_limit(self, s: Stream) -> None:
        ends = s.pending_ends
        if len(ends) >= MAX_PENDING_KERNELS:
            # Drop finished entries; if still full, the host waits for the oldest one.
            done = 0
            while done < len(ends) and ends[done] <= self.host_ns:
                done += 1
            del ends[:done]
            if len(ends) >= MAX_PENDING_KERNELS:
                self.host_ns = max(self.host_ns, ends[0])
                del ends[0]

    def _account_busy(self, start: float, end: float) -> None:
        # Busy time as the union of kernel intervals in launch order. Kernels of concurrent
        # streams that start before the latest end are merged, so overlap is not double counted.
        if end <= self._busy_until:
            return
        self.gpu_busy_ns += end - max(start, self._busy_until)
        self._busy_until = end

    # -- events and waits -----------------------------------------------------------------
    def record_event(self, event: Event, stream_id: int) -> None:
        # An event fires when all work enqueued on its stream before it has finished; an
        # event recorded on an idle stream fires when the host reaches it.
        event.time_ns = max(self.stream(stream_id).ready_ns, self.host_ns)

    def stream_wait_event(self, stream_id: int, event: Event) -> None:
        if event.time_ns is None:  # CUDA: waiting on a never-recorded event is a no-op
            return
        s = self.stream(stream_id)
        s.ready_ns = max(s.ready_ns, event.time_ns)

    def stream_wait_stream(self, waiter_id: int, waited_id: int) -> None:
        w = self.stream(waiter_id)
        w.ready_ns = max(w.ready_ns, self.stream(waited_id).ready_ns)

    # -- host sync points -----------------------------------------------------------------
    def synchronize_stream(self, stream_id: int) -> None:
        self.host_ns = max(self.host_ns, self.stream(stream_id).ready_ns)

    def synchronize_event(self, event: Event) -> None:
        if event.time_ns is not None:
            self.host_ns = max(self.host_ns, event.time_ns)

    def synchronize_device(self) -> None:
        self.host_ns = max([self.host_ns] + [s.ready_ns for s in self.streams.values()])

    def query_stream(self, stream_id: int) -> bool:
        return self.stream(stream_id).ready_ns <= self.host_ns

    def query_event(self, event: Event) -> bool:
        return event.time_ns is None or event.time_ns <= self.host_ns

    def gpu_idle_ns(self) -> float:
        """Latest GPU completion time over all streams."""
        return max(s.ready_ns for s in self.streams.values())
