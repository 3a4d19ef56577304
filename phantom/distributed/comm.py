"""The rank side of a collective: NCCL streams, sequence numbers, the coordinator round trip.

ProcessGroupNCCL's semantics, which phantom keeps: each process group has its own NCCL
stream; a collective first makes that stream wait for the current stream (its inputs are
ready), then runs its kernel there; `Work.wait()` makes the current stream wait for the
kernel's end. The kernel occupies the NCCL stream from the moment the stream reaches it
until the collective ends on the network (it spins while peers are late), and takes a few
SMs from compute kernels that overlap it (see engine.timeline).

The host does not block on a collective in a real run; here the rank process blocks in the
coordinator round trip (wall time), but the simulated host clock does not move.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from phantom.distributed.client import CoordinatorAborted, CoordinatorClient
from phantom.distributed.wire import Request, Result
from phantom.engine.timeline import LAUNCH_LATENCY_NS

if TYPE_CHECKING:
    from phantom.sim import Simulation

# Host cost of issuing one collective through ProcessGroupNCCL beyond the Python the simulation
# measures: the C++ work object, two CUDA event records, a stream wait and the
# ncclGroupStart/End + kernel launch. Measured on a 2 x H200 host by
# bench/probes/collective_host_cost.py (data in bench/host/data/collective_host_cost_*.json): a call straight on
# the ProcessGroup takes 18-22 us at the host's best for every collective; under phantom the
# same call already measures ~4-5 us (pybind, the c10d dispatcher op), so this adds the rest.
COLLECTIVE_HOST_NS = 15_000.0


@dataclass
class GroupInfo:
    name: str
    members: tuple[int, ...]  # global ranks in group-rank order
    desc: str = ""

    def global_rank(self, group_rank: int) -> int:
        return self.members[group_rank]


@dataclass
class Op:
    """One collective or point-to-point transfer as the rank issues it."""

    kind: str
    nbytes: int
    signature: tuple
    root: int | None = None          # global rank
    peer: int | None = None          # global rank, for send/recv
    is_send: bool = False
    payload: Any = None              # real CPU data, if the tensors are real
    transfers: tuple = ()
    dtype_bytes: int = 2


@dataclass
class Completed:
    end_ns: float
    result: Result


class RankComm:
    """Owned by the rank's Simulation when the run has a process group."""

    def __init__(self, sim: "Simulation", rank: int, world_size: int,
                 client: CoordinatorClient | None) -> None:
        self.sim = sim
        self.rank = rank
        self.world_size = world_size
        self.client = client
        self._seq: dict[str, int] = {}
        self._p2p_seq: dict[tuple, int] = {}
        self._streams: dict[str, int] = {}
        self.collectives = 0
        self.comm_gpu_ns = 0.0
        self._deferred: list[tuple] = []
        self._depth = 0
        self.unwaited: set = set()  # works whose future went to C++ (DDP), not yet waited
        # More than one rank of a class may run (--ranks all or a list): they charge their
        # class leader's steady host gaps (Simulation._share_steady_gaps).
        self.shares_host_gaps = False

    # -- phantom's own time ---------------------------------------------------------------
    def enter(self) -> None:
        """Entering phantom's collective code: the host time until here was the user's;
        from here until `leave`, it is phantom's (not charged). Calls nest."""
        if self._depth == 0:
            self.sim.host.begin_op("collective")
        self._depth += 1

    def leave(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.sim.host.end_op()

    def nccl_stream(self, group: GroupInfo) -> int:
        sid = self._streams.get(group.name)
        if sid is None:
            sid = self._streams[group.name] = self.sim.streams.new_id()
        return sid

    def issue(self, group: GroupInfo, ops: list[Op],
              finishes: list[Callable[[Completed], None] | None] | None = None) -> Completed:
        """Issue `ops` as one NCCL launch (one collective, or a coalesced group) and
        resolve it with the coordinator. Deferred point-to-point ops go first."""
        self.flush()
        sim = self.sim
        self.enter()
        try:
            ready = self._launch(group)
            batch = [(group, op, ready) for op in ops]
            return self._resolve(batch, finishes or [None] * len(ops))[0]
        finally:
            self.leave()

    def defer(self, group: GroupInfo, op: Op,
              finish: Callable[[Completed], None] | None) -> "Deferred":
        """A send or recv: launched now, resolved with whatever else is pending when its
        result is first needed. Both sides of a pair may post their sends first (as
        `batch_isend_irecv` does without coalescing), so blocking here could deadlock."""
        sim = self.sim
        self.enter()
        try:
            handle = Deferred(self)
            self._deferred.append((group, op, self._launch(group), finish, handle))
            return handle
        finally:
            self.leave()

    def flush(self) -> None:
        if not self._deferred:
            return
        pending, self._deferred = self._deferred, []
        sim = self.sim
        self.enter()
        try:
            done = self._resolve([(g, op, ready) for g, op, ready, _, _ in pending],
                                 [f for _, _, _, f, _ in pending])
            for (_, _, _, _, handle), completed in zip(pending, done):
                handle.completed = completed
        finally:
            self.leave()

    def _launch(self, group: GroupInfo) -> float:
        """Host side of an NCCL launch; returns when the NCCL stream can start it."""
        if self.sim.graphs.is_capturing():
            from phantom.errors import SimulationError

            # NCCL kernels can be captured on a GPU; here a replay would have to meet its peers'
            # replays at the coordinator, which is not built
            raise SimulationError("phantom: a collective inside a captured CUDA graph is not "
                                  "simulated yet; capture the compute only, or run without "
                                  "CUDA graphs (docs/simulation.md, 'CUDA graphs')")
        tl = self.sim.timeline
        sid = self.nccl_stream(group)
        tl.stream_wait_stream(sid, self.sim.streams.current_id())
        launch_ns = self.sim.host.at_pace(COLLECTIVE_HOST_NS)  # at the slowest rank's pace
        tl.advance_host(launch_ns)
        if self.sim.recorder is not None:
            self.sim.recorder.host_span("NCCL launch", tl.host_ns - launch_ns, tl.host_ns, "launch")
        return max(tl.host_ns + LAUNCH_LATENCY_NS, tl.stream(sid).ready_ns)

    def _resolve(self, batch: list[tuple[GroupInfo, Op, float]],
                 finishes: list) -> list[Completed]:
        tl = self.sim.timeline
        site = _user_call_site()
        requests = [self._request(g, op, ready, tl.host_ns, site) for g, op, ready in batch]
        results = self._exchange(requests)
        # One NCCL kernel per group (stream): it holds the stream from the earliest ready
        # time of its ops to the end of the last one.
        per_stream: dict[int, list] = {}
        for (g, op, ready), res in zip(batch, results):
            per_stream.setdefault(self.nccl_stream(g), []).append((ready, res, op.kind, g, op))
        recorder = self.sim.recorder
        for sid, items in per_stream.items():
            start = min(it[0] for it in items)
            end = max(it[1].end_ns for it in items)
            tl.comm_kernel(sid, start, end, max(it[1].channels for it in items),
                           name=items[0][2])
            self.comm_gpu_ns += end - start
            self.sim.class_gpu_ns["comm"] += end - start
            if recorder is not None:
                recorder.collective(sid, start, end, [(it[3], it[4], it[1]) for it in items])
        self.collectives += len(batch)
        completed = [Completed(res.end_ns, res) for res in results]
        for c, finish in zip(completed, finishes):
            if finish is not None:
                finish(c)
        return completed

    # -- waits (from SimWork) -------------------------------------------------------------
    def stream_waits_until(self, end_ns: float) -> None:
        sim = self.sim
        self.enter()
        s = sim.timeline.stream(sim.streams.current_id())
        s.ready_ns = max(s.ready_ns, end_ns)
        self.leave()

    def host_waits_until(self, end_ns: float) -> None:
        sim = self.sim
        self.enter()
        h0 = sim.timeline.host_ns
        sim.timeline.host_ns = max(h0, end_ns)
        if sim.recorder is not None:
            sim.recorder.host_span("wait collective", h0, sim.timeline.host_ns, "sync")
        self.leave()

    def host_reached(self, end_ns: float) -> bool:
        return self.sim.host.now_ns() >= end_ns

    def wait_unwaited(self) -> None:
        """DDP's reducer waits for its buckets' futures in C++ at the end of backward;
        phantom makes the current stream wait for them where that wait happens."""
        self.flush()
        for work in list(self.unwaited):
            work.wait()
        self.unwaited.clear()

    def _request(self, group: GroupInfo, op: Op, ready: float, host: float, site: str) -> Request:
        if op.kind == "send_recv":
            src, dst = (self.rank, op.peer) if op.is_send else (op.peer, self.rank)
            pair = (group.name, src, dst)
            n = self._p2p_seq[pair] = self._p2p_seq.get(pair, 0) + 1
            key = (group.name, "p2p", src, dst, n)
            members = (src, dst)
            transfers = ((src, dst, op.nbytes),) if op.is_send else ()
        else:
            n = self._seq[group.name] = self._seq.get(group.name, 0) + 1
            key = (group.name, n)
            members = group.members
            transfers = op.transfers
        return Request(key=key, rank=self.rank, kind=op.kind, members=members,
                       nbytes=op.nbytes, signature=op.signature, ready_ns=ready, host_ns=host,
                       site=site, group_desc=group.desc or group.name, root=op.root,
                       transfers=transfers, dtype_bytes=op.dtype_bytes, payload=op.payload,
                       group_members=group.members if op.kind == "send_recv" else ())

    def _exchange(self, requests: list[Request]) -> list[Result]:
        if all(len(r.members) == 1 for r in requests) or self.client is None:
            # A group of one (or a run without peers): nothing crosses a link.
            return [Result(r.ready_ns, r.ready_ns + LAUNCH_LATENCY_NS,
                           {r.rank: r.payload} if r.payload is not None else {}, "local", "", 1)
                    for r in requests]
        try:
            return self.client.exchange(requests)
        except CoordinatorAborted as e:
            kinds = ", ".join(dict.fromkeys(r.kind for r in requests))
            raise CoordinatorAborted(self.rank, e.reason,
                                     f" in {kinds} at {requests[0].site}") from None


class Deferred:
    def __init__(self, comm: RankComm) -> None:
        self._comm = comm
        self.completed: Completed | None = None

    def resolve(self) -> Completed:
        if self.completed is None:
            self._comm.flush()
        return self.completed


def _user_call_site() -> str:
    """The innermost frame outside torch and phantom: where the user's code called in."""
    frame = sys._getframe(1)
    while frame is not None:
        f = frame.f_code.co_filename
        if not (_PHANTOM_DIR in f or "/torch/" in f or f.startswith("<")
                or f.endswith(_DECORATOR_FILES)):
            return f"{f}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return "<unknown>"


_PHANTOM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Where the `@deprecated` wrappers torch puts around some collectives live (all_gather_into_tensor,
# reduce_scatter_tensor): their frame is never the user's call.
_DECORATOR_FILES = (os.sep + "typing_extensions.py", os.sep + "warnings.py")
