"""Copies between host and device memory: the copy engine's time, and the host's wait for it.

PCIe rates measured on an H100 (bench/kernels/results/kernels_H100.json, "transfer" rows, from
bench/kernels/measure.py): pinned 52.6 GB/s both ways; pageable 8.5 GB/s H2D, 10.4 GB/s D2H. A
pinned, non_blocking H2D copy runs on the copy engine and leaves the host free; a pageable copy
is staged through a bounce buffer and blocks the host.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from phantom.cost import KernelCost
from phantom.errors import capture_error
from phantom.sim import values

if TYPE_CHECKING:
    from phantom.sim.simulation import Simulation

PCIE_GBPS = 10.4  # D2H reads into pageable memory (.cpu(), .item())
PINNED_GBPS = 52.6  # either way to or from page-locked memory (a D2H copy_ into a pinned buffer too)
H2D_PAGEABLE_GBPS = 8.5
COPY_LATENCY_NS = 2_000.0
H2D_OPS = (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default)


def _is_pinned(t: torch.Tensor) -> bool:
    # the fake CUDA hooks' pinned allocator knows its blocks (native/fake_cuda.cpp)
    return t.device.type == "cpu" and t.is_pinned()


class Transfers:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def host_to_device(self, func: Any, args: tuple, kwargs: dict, stream_id: int) -> bool:
        """Time `func` (a `_to_copy` or `copy_`) if it copies a CPU tensor to the device;
        False: it does not (a device-side copy, timed as a kernel)."""
        src = args[0] if func is torch.ops.aten._to_copy.default else args[1]
        if not isinstance(src, torch.Tensor) or src.device.type != "cpu":
            return False
        non_blocking = kwargs.get("non_blocking", False) or (len(args) > 2 and bool(args[2]))
        # the copy engine reads page-locked memory at full speed whether or not the host
        # waits; only a pinned, non_blocking copy leaves the host free
        pinned = _is_pinned(src)
        nbytes = src.numel() * src.element_size()
        copy_ns = COPY_LATENCY_NS + nbytes / (PINNED_GBPS if pinned else H2D_PAGEABLE_GBPS)
        if not self._launch_copy("HtoD", pinned, copy_ns, nbytes, stream_id, src,
                                 blocking=not (pinned and non_blocking)):
            return True  # captured into a CUDA graph
        sim = self.sim
        sim.source_gpu_ns["model"] += copy_ns
        if not (pinned and non_blocking):
            h1 = sim.timeline.host_ns
            sim.timeline.synchronize_stream(stream_id)
            if sim.recorder is not None:
                sim.recorder.host_span("HtoD copy" + ("" if pinned else " (pageable)"), h1,
                                       sim.timeline.host_ns, "sync")
        return True

    def device_to_host(self, t: torch.Tensor, blocking: bool, what: str, pinned: bool = False) -> None:
        """A device-to-host copy of `t` (a value read: `.item()`, `.cpu()`, `print`); `pinned`:
        into page-locked memory (the copy engine's full speed), else into pageable memory
        through a staging buffer."""
        sim = self.sim
        sim.fusion.flush()  # a read inside a compiled function waits for its kernel
        sim.data_reads += 1
        if sim.first_data_read is None:  # named in the summary: a placeholder may steer the loop
            sim.first_data_read = values.user_frame_summary()
        if sim.options.on_data_read == "error":
            values.raise_data_read(what)
        stream_id = sim.streams.current_id()
        nbytes = t.numel() * t.element_size()
        copy_ns = COPY_LATENCY_NS + nbytes / (PINNED_GBPS if pinned else PCIE_GBPS)
        if not self._launch_copy("DtoH", pinned, copy_ns, nbytes, stream_id, t, blocking, what):
            return  # captured into a CUDA graph
        if blocking:
            # The copy's launch, its latency, the copy and the wait make the whole round trip:
            # ~10 us for a scalar on an idle stream, against `x.item()` taking 7.8 and 11.0 us
            # in all on an H100 host (bench/probes/host_sync_cost.py); nothing follows the wait.
            h1 = sim.timeline.host_ns
            sim.timeline.synchronize_stream(stream_id)
            if sim.recorder is not None:
                sim.recorder.host_span(f"read ({what})", h1, sim.timeline.host_ns, "sync")

    def _launch_copy(self, direction: str, pinned: bool, copy_ns: float, nbytes: int,
                     stream_id: int, tensor: torch.Tensor, blocking: bool, what: str = "") -> bool:
        """Enqueue a copy-engine transfer (the caller then waits for it if `blocking`). On a
        capturing stream it becomes a node of the graph if the host need not wait for it
        (pinned memory, non_blocking), else CUDA's capture error; False: captured."""
        sim = self.sim
        name = f"Memcpy {direction}" + (" (pinned)" if pinned else "")
        host_ns = 0.0  # the copy op's call is priced by the host-cost table, launch included
        capture = sim.graphs.capture
        if capture is not None and capture.captures(stream_id):
            if blocking:
                capture_error(what or f"a {direction} copy the host waits for (pageable memory, "
                              f"or non_blocking=False)")
            sim.timeline.advance_host(host_ns)
            capture.kernel(name, KernelCost(copy_ns, "copy", "model", 0.0, float(nbytes)),
                           stream_id, uses_sms=False)
            return False
        h0 = sim.timeline.host_ns
        start, end = sim.timeline.launch(stream_id, copy_ns, host_ns, uses_sms=False)
        sim.class_gpu_ns["copy"] += copy_ns
        if sim.recorder is not None:
            sim.recorder.kernel(name, "copy", "model", stream_id, start, end, h0,
                                sim.timeline.host_ns, (tensor,))
        return True
