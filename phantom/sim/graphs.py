"""CUDA graphs on the simulated GPU: capture, instantiation and replay (`torch.cuda.CUDAGraph`
in interception/cuda_api.py; reduce-overhead compiled graphs in interception/compiled.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from phantom.engine.graphs import (CapturedGraph, GraphCapture, GraphKernel, instantiate_host_ns,
                                   replay, replay_host_ns)

if TYPE_CHECKING:
    from phantom.sim.simulation import Simulation


class Graphs:
    """The capture under way, if any, and the replays of captured graphs."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        # A capture under way (engine/graphs.py): kernels on its streams are recorded, not
        # run, and memory comes from the graph's pool.
        self.capture: GraphCapture | None = None
        # The ops running now compute what a CUDA graph replay computes (a reduce-overhead
        # compiled graph): the replay launches their kernels and their memory is the graph's
        # pool, so they make outputs and nothing else.
        self.shadow = False

    def is_capturing(self, stream_id: int | None = None) -> bool:
        if self.capture is None:
            return False
        return self.capture.captures(self.sim.streams.current_id() if stream_id is None else stream_id)

    def begin_capture(self, pool: int) -> None:
        """The current stream starts capturing a graph whose memory comes from `pool`."""
        stream_id = self.sim.streams.current_id()
        if stream_id == 0:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. (However, "
                               "after capture, it's ok to replay them on the default stream.)")
        self._start_capture(stream_id, pool)

    def _start_capture(self, stream_id: int, pool: int) -> None:
        if self.capture is not None:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing "
                               "(another CUDA graph capture is under way in this process)")
        self.sim.fusion.flush()
        self.capture = GraphCapture(stream_id, pool)

    def end_capture(self) -> tuple[CapturedGraph, list[int]]:
        """The capture ends: the graph is instantiated (host time), with a stream of its own for
        each lane beyond the capture stream."""
        if self.capture is None:
            raise RuntimeError("CUDA error: capture_end called with no capture under way")
        sim = self.sim
        sim.fusion.flush()
        graph, self.capture = self.capture.graph, None
        sim.timeline.advance_host(sim.host.at_pace(instantiate_host_ns(graph.kernels)))
        return graph, [sim.streams.new_id() for _ in graph.lanes[1:]]

    def replay(self, graph: CapturedGraph, private_lanes: list[int]) -> None:
        """`CUDAGraph.replay()` on the current stream: one launch's host time, then the graph's
        kernels as captured (engine/graphs.py)."""
        sim = self.sim
        stream_id = sim.streams.current_id()
        if self.is_capturing(stream_id):
            raise RuntimeError("phantom: replaying a CUDA graph inside another graph's capture is "
                               "not simulated")
        sim.fusion.flush()
        host_ns = sim.host.at_pace(replay_host_ns(graph.kernels))
        h0 = sim.timeline.host_ns
        sim.timeline.advance_host(host_ns)
        if sim.recorder is not None:
            sim.recorder.host_span("cudaGraphLaunch", h0, sim.timeline.host_ns, "launch")
        replay(graph, sim.timeline, stream_id, private_lanes, self._enqueue_kernel)

    def record(self, fn: Callable[[], Any], pool: int) -> tuple[Any, CapturedGraph, list[int]]:
        """Capture what `fn` launches on the current stream (a reduce-overhead compiled graph's
        recording, which may run on the default stream: CUDA graph trees capture on a side
        stream of their own), then replay it once, as the recording computes its outputs."""
        self._start_capture(self.sim.streams.current_id(), pool)
        try:
            out = fn()
        finally:
            graph, lanes = self.end_capture()
        self.replay(graph, lanes)
        return out, graph, lanes

    def shadow_run(self, fn: Callable[[], Any]) -> Any:
        """Run `fn`'s ops for their outputs only (`shadow`)."""
        self.shadow = True
        try:
            return fn()
        finally:
            self.shadow = False

    def track_in_pool(self, t: torch.Tensor, pool: int) -> None:
        """`t`, made by a shadow run, lives in a CUDA graph's pool while the script holds it."""
        self.sim.storage.track(t, pool)

    def _enqueue_kernel(self, kernel: GraphKernel, stream_id: int) -> None:
        self.sim.enqueue(kernel.name, kernel.cost, stream_id, 0.0, in_graph=True,
                         uses_sms=kernel.uses_sms)
