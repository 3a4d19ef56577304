"""Streams, events and the host's waits on them: the `torch.cuda` stream API's side of the
simulation (interception/cuda_api.py calls these; the objects it hands the script live here)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from phantom.engine import Event
from phantom.errors import capture_error

if TYPE_CHECKING:
    from phantom.sim.simulation import Simulation


class Streams:
    """A rank's streams: ids for new ones, the current and default stream of each device (the
    interception's `torch.cuda.Stream` stand-ins, kept opaque here), and the sync points."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.current: dict[int, Any] = {}  # device index -> the script's current stream object
        self.default: dict[int, Any] = {}  # device index -> its default stream object
        self._next_id = 1

    def new_id(self) -> int:
        sid = self._next_id
        self._next_id += 1
        return sid

    def current_id(self) -> int:
        """The id of the current device's current stream (0: the default stream)."""
        s = self.current.get(torch.accelerator.current_device_index())
        return 0 if s is None else s.stream_id

    # -- sync points (called from the torch.cuda API) -------------------------------------
    def _sync(self, fn: Callable, *args: Any, capturable: bool = False) -> None:
        sim = self.sim
        if sim.graphs.capture is not None and not capturable:
            # CUDA's global capture mode refuses every host sync while any stream captures
            capture_error(f"torch.cuda {fn.__name__}")
        if sim.comm is not None:
            sim.comm.flush()  # isend/irecv nobody waited for still complete before a sync
        sim.host.begin_op(fn.__name__)
        h0 = sim.timeline.host_ns
        fn(*args)
        if sim.recorder is not None:
            sim.recorder.host_span(fn.__name__, h0, sim.timeline.host_ns, "sync")
        sim.host.end_op()

    def synchronize_device(self) -> None:
        self._sync(self.sim.timeline.synchronize_device)

    def synchronize_stream(self, stream_id: int) -> None:
        self._sync(self.sim.timeline.synchronize_stream, stream_id)

    def synchronize_event(self, event: Event) -> None:
        self._sync(self.sim.timeline.synchronize_event, event)

    def record_event(self, event: Event, stream_id: int) -> None:
        capture = self.sim.graphs.capture
        if capture is not None and capture.captures(stream_id):
            capture.record_event(event, stream_id)
            return
        self._sync(self.sim.timeline.record_event, event, stream_id, capturable=True)

    def wait_event(self, stream_id: int, event: Event) -> None:
        capture = self.sim.graphs.capture
        if capture is not None and capture.wait_event(stream_id, event):
            return
        self.sim.timeline.stream_wait_event(stream_id, event)

    def wait_stream(self, waiter: int, waited: int) -> None:
        capture = self.sim.graphs.capture
        if capture is not None and capture.wait_stream(waiter, waited):
            return
        self.sim.timeline.stream_wait_stream(waiter, waited)

    def query_stream(self, stream_id: int) -> bool:
        sim = self.sim
        if sim.graphs.is_capturing(stream_id):
            capture_error("a capturing stream's query()")
        sim.host.begin_op("query_stream")
        done = sim.timeline.query_stream(stream_id)
        sim.host.end_op()
        return done

    def query_event(self, event: Event) -> bool:
        sim = self.sim
        sim.host.begin_op("query_event")
        done = sim.timeline.query_event(event)
        sim.host.end_op()
        return done
