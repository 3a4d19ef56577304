"""CUDA graphs: the work captured on a stream, and its replay as one launch.

While a stream captures (`torch.cuda.graph`, `CUDAGraph.capture_begin`), CUDA runs nothing: each
kernel launched on it, and on any stream that joins the capture by waiting on an event recorded
in it, becomes a node of the graph, and event records and waits become its edges. A replay
enqueues the whole graph on the stream it is launched on with one host call (`cudaGraphLaunch`):
its kernels start as their dependencies finish, with no host launch in between.

Here a capture keeps the kernels' costs (at the cost model's clock, as the cost model gave them
at capture time) and the records and waits, in capture order, each on its capture-time stream
("lane"). A replay runs them on the `Timeline` again: the capture's first stream is the replay
stream, every other lane a stream of the graph's own, all starting when the replay stream has
reached the launch; the replay stream then waits for every lane, as work after a graph launch
waits for the whole graph. The timeline's own rules (SM sharing, the power limit, NCCL kernels
in flight) apply to replayed kernels as to any.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Callable

from phantom.cost.base import KernelCost
from phantom.engine.timeline import LAUNCH_LATENCY_NS, Event, Timeline

# Host time of one `CUDAGraph.replay()` (torch's Python and C++, cudaGraphLaunch) by the graph's
# kernel count, measured on an H100 host by bench/suites/cuda_graphs.py (`launch` rows, median of 25
# calls; the real H100 run in bench/results/cuda_graphs/): linear between the points, and past
# the last at the slope of the last two.
REPLAY_HOST_US = ((1, 6.46), (16, 4.89), (128, 16.62), (1024, 38.85))
# Host time `capture_end` takes to instantiate a graph (cudaGraphInstantiate and upload), on
# top of the capture's own launches: 0.2 ms + 4.4 us a node on the same host (the `launch`
# rows' capture time less the same kernels' eager launches, 128 and 1024 nodes).
INSTANTIATE_HOST_NS = 200_000.0
INSTANTIATE_HOST_NS_PER_NODE = 4_400.0


def replay_host_ns(nodes: int) -> float:
    """Host time of one replay of a graph of `nodes` kernels (REPLAY_HOST_US)."""
    ks = [k for k, _ in REPLAY_HOST_US]
    i = min(max(bisect.bisect_left(ks, nodes), 1), len(ks) - 1)  # the segment holding `nodes`
    (k0, u0), (k1, u1) = REPLAY_HOST_US[i - 1], REPLAY_HOST_US[i]
    return (u0 + (u1 - u0) * (nodes - k0) / (k1 - k0)) * 1e3


def instantiate_host_ns(nodes: int) -> float:
    return INSTANTIATE_HOST_NS + INSTANTIATE_HOST_NS_PER_NODE * nodes


@dataclass(slots=True)
class GraphKernel:
    name: str
    cost: KernelCost
    lane: int
    uses_sms: bool = True


@dataclass(slots=True)
class GraphRecord:
    lane: int
    event: int  # the capture's number for the event


@dataclass(slots=True)
class GraphWait:
    lane: int
    event: int


@dataclass
class CapturedGraph:
    """A finished capture: its nodes in capture order and the lanes they run on (the first is
    the capture stream)."""
    nodes: list = field(default_factory=list)
    lanes: list[int] = field(default_factory=list)
    pool: int = 0

    @property
    def kernels(self) -> int:
        return sum(isinstance(n, GraphKernel) for n in self.nodes)


class GraphCapture:
    """A capture under way: which streams capture, and what they have captured."""

    def __init__(self, stream_id: int, pool: int) -> None:
        self.graph = CapturedGraph(lanes=[stream_id], pool=pool)
        self._events: dict[int, int] = {}  # id() of a Timeline Event recorded in the capture
        self._kept: list[Event] = []  # ... kept alive so that id() stays theirs

    def captures(self, stream_id: int) -> bool:
        return stream_id in self.graph.lanes

    def kernel(self, name: str, cost: KernelCost, stream_id: int, uses_sms: bool = True) -> None:
        self.graph.nodes.append(GraphKernel(name, cost, stream_id, uses_sms))

    def record_event(self, event: Event, stream_id: int) -> None:
        number = self._events[id(event)] = len(self._events)
        self._kept.append(event)
        self.graph.nodes.append(GraphRecord(stream_id, number))

    def wait_event(self, stream_id: int, event: Event) -> bool:
        """`stream_id` waits on `event`: an event recorded in this capture makes it join the
        capture (cudaStreamWaitEvent's rule); False if the event is not the capture's."""
        number = self._events.get(id(event))
        if number is None:
            return False
        if stream_id not in self.graph.lanes:
            self.graph.lanes.append(stream_id)
        self.graph.nodes.append(GraphWait(stream_id, number))
        return True

    def wait_stream(self, waiter: int, waited: int) -> bool:
        """Stream.wait_stream: an event recorded on `waited` and waited on by `waiter`."""
        if not self.captures(waited):
            return False
        event = Event()
        self.record_event(event, waited)
        return self.wait_event(waiter, event)


def replay(graph: CapturedGraph, timeline: Timeline, stream_id: int, private_lanes: list[int],
           launch: Callable[[GraphKernel, int], None]) -> None:
    """Enqueue `graph` on `stream_id` after the host has paid for the launch: its capture stream
    runs as `stream_id`, its other lanes as `private_lanes` (streams of the graph's own).
    `launch(kernel, stream)` enqueues one kernel with no host cost."""
    lanes = dict(zip(graph.lanes, [stream_id, *private_lanes]))
    replay_stream = timeline.stream(stream_id)
    start = max(timeline.host_ns + LAUNCH_LATENCY_NS, replay_stream.ready_ns)
    for sid in lanes.values():
        s = timeline.stream(sid)
        s.ready_ns = max(s.ready_ns, start)
    events: dict[int, Event] = {}
    for node in graph.nodes:
        if isinstance(node, GraphKernel):
            launch(node, lanes[node.lane])
        elif isinstance(node, GraphRecord):
            events[node.event] = event = Event()
            timeline.record_event(event, lanes[node.lane])
        else:
            timeline.stream_wait_event(lanes[node.lane], events[node.event])
    end = max(timeline.stream(sid).ready_ns for sid in lanes.values())
    replay_stream.ready_ns = end
    replay_stream.pending_ends.append(end)  # one launch in the stream's queue
