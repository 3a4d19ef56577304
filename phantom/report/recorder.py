"""What a rank records for its trace and run report, beyond the summary statistics.

A plain `phantom run` records nothing here (`Simulation.recorder` is None, and every hook is
one attribute test). With `--out` or `--trace` the rank keeps, compactly:

- per iteration, the time its GPU spent computing, waiting for collectives it could not hide,
  and idle (`Breakdown`), and the streams' activity of the last finished iteration (the
  timeline overview of the HTML report);
- the live allocations at the allocated-memory peak, each tagged parameters / gradients /
  optimizer state / activations / other (`PeakTracker`), and memory over time at a bounded
  resolution (`MemorySampler`);
- collectives grouped by (kind, group, size) for the report's top collectives;
- when this rank and the current iteration are traced (`--trace-ranks`, `--trace-iters`):
  every kernel, host span, collective and memory change as a tuple, turned into trace events
  only at the end (phantom.report.trace).

Times are simulated nanoseconds: the host clock for host spans and memory, GPU time for
kernels.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

import torch

if TYPE_CHECKING:
    from phantom.sim import Simulation

CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "other")
_PRIORITY = {"parameters": 0, "gradients": 1, "optimizer_state": 2}
TOP_COLLECTIVES = 15
TOP_LIVE_AT_PEAK = 12
OVERVIEW_MAX_SPANS = 4000  # per stream, in the timeline overview of one iteration


@dataclass
class TraceOptions:
    """Which ranks and iterations record trace events (None: all)."""

    enabled: bool = False
    ranks: list[int] | None = None
    iterations: tuple[int, int | None] | None = None  # [start, stop) over optimizer steps

    def rank_traced(self, rank: int) -> bool:
        return self.enabled and (self.ranks is None or rank in self.ranks)

    def iteration_traced(self, index: int) -> bool:
        if self.iterations is None:
            return True
        start, stop = self.iterations
        return index >= start and (stop is None or index < stop)


# -- memory ------------------------------------------------------------------------------------
class Alloc:
    """One allocation as the caching allocator saw it (block size, not the requested size:
    `max_memory_allocated` counts blocks)."""

    __slots__ = ("size", "n", "category", "iteration", "op")

    def __init__(self, size: int, n: int, iteration: int, op: str) -> None:
        self.size = size
        self.n = n  # allocation sequence number
        self.category: str | None = None  # set by tagging; None: activations or other
        self.iteration = iteration
        self.op = op

    def tag(self, category: str) -> None:
        old = self.category
        if old is None or _PRIORITY.get(category, 9) < _PRIORITY.get(old, 9):
            self.category = category


class PeakTracker:
    """The set of live allocations at the moment allocated memory peaked, exactly.

    Copying the live set at every new peak would cost O(live) per allocation during the first
    forward pass, where nearly every allocation is a new peak. Instead each allocation has a
    sequence number; the peak remembers the last number it includes. The live set at the peak
    is then: allocations still live with a number up to the peak's, plus those freed since
    the peak (kept in `_freed_since_peak`, emptied at each new peak). Tags (parameter, grad,
    optimizer state) set later still reach the allocations of the peak: they are the same
    objects.
    """

    def __init__(self) -> None:
        self.live: set[Alloc] = set()
        self.current = 0
        self.n = 0
        self.peak = 0
        self.peak_n = 0
        self.peak_host_ns = 0.0
        self.peak_iteration = 0
        self._freed_since_peak: list[Alloc] = []

    def malloc(self, size: int, iteration: int, op: str, host_ns: float) -> Alloc:
        self.n += 1
        a = Alloc(size, self.n, iteration, op)
        self.live.add(a)
        self.current += size
        if self.current > self.peak:
            self.peak = self.current
            self.peak_n = self.n
            self.peak_host_ns = host_ns
            self.peak_iteration = iteration
            self._freed_since_peak.clear()
        return a

    def free(self, a: Alloc) -> None:
        self.live.discard(a)
        self.current -= a.size
        if a.n <= self.peak_n:
            self._freed_since_peak.append(a)

    def reset_peak(self, host_ns: float, iteration: int) -> None:
        """torch.cuda.reset_peak_memory_stats(): the peak restarts from what is live now."""
        self.peak = self.current
        self.peak_n = self.n
        self.peak_host_ns = host_ns
        self.peak_iteration = iteration
        self._freed_since_peak.clear()

    def at_peak(self) -> list[Alloc]:
        return [a for a in self.live if a.n <= self.peak_n] + self._freed_since_peak

    def category(self, a: Alloc) -> str:
        if a.category is not None:
            return a.category
        # Untagged: made during the iteration of the peak (forward activations, backward
        # temporaries, the step's inputs and communication buffers), or older and still
        # alive (model buffers, workspaces, caches): other.
        return "activations" if a.iteration == self.peak_iteration else "other"

    def breakdown(self, reported_peak: int) -> dict[str, Any]:
        allocs = self.at_peak()
        by_cat = {c: 0 for c in CATEGORIES}
        for a in allocs:
            by_cat[self.category(a)] += a.size
        tracked = sum(by_cat.values())
        top = sorted(allocs, key=lambda a: -a.size)[:TOP_LIVE_AT_PEAK]
        return {
            "bytes": reported_peak,
            "host_time_ms": self.peak_host_ns / 1e6,
            "iteration": self.peak_iteration,
            "by_category": by_cat,
            # Non-zero only if some allocation bypassed the recorder (a bug): the categories
            # then do not sum to the reported peak, and this says by how much.
            "unattributed_bytes": reported_peak - tracked,
            "allocations": len(allocs),
            "largest": [{"op": a.op, "bytes": a.size, "category": self.category(a)} for a in top],
        }


class MemorySampler:
    """Allocated/reserved memory over the whole run at a bounded resolution: time buckets
    that double in width whenever the run outgrows `max_buckets`, each keeping the minimum
    and maximum allocated and the maximum reserved (so the peak is never averaged away)."""

    def __init__(self, max_buckets: int = 1000, width_ns: float = 10_000.0) -> None:
        self.max_buckets = max_buckets
        self.width = width_ns
        self.buckets: list[list[float] | None] = []  # [min_alloc, max_alloc, max_reserved]

    def add(self, t: float, allocated: int, reserved: int) -> None:
        i = int(t / self.width)
        while i >= self.max_buckets:
            self._coarsen()
            i = int(t / self.width)
        b = self.buckets
        if i >= len(b):
            b.extend([None] * (i + 1 - len(b)))
        cur = b[i]
        if cur is None:
            b[i] = [allocated, allocated, reserved]
        else:
            if allocated < cur[0]:
                cur[0] = allocated
            if allocated > cur[1]:
                cur[1] = allocated
            if reserved > cur[2]:
                cur[2] = reserved

    def _coarsen(self) -> None:
        merged: list[list[float] | None] = []
        for j in range(0, len(self.buckets), 2):
            pair = [x for x in self.buckets[j:j + 2] if x is not None]
            merged.append(None if not pair else [min(p[0] for p in pair), max(p[1] for p in pair),
                                                 max(p[2] for p in pair)])
        self.buckets = merged
        self.width *= 2

    def to_dict(self) -> dict[str, Any]:
        rows = [[round((i + 0.5) * self.width / 1e6, 6), int(b[0]), int(b[1]), int(b[2])]
                for i, b in enumerate(self.buckets) if b is not None]
        return {"bucket_ms": self.width / 1e6,
                "columns": ["time_ms", "min_allocated_bytes", "max_allocated_bytes",
                            "max_reserved_bytes"],
                "rows": rows}


# -- iteration breakdown ---------------------------------------------------------------------
def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in intervals)


class Breakdown:
    """Per iteration window [previous step's GPU completion, this step's]: compute (union of
    non-NCCL kernels), exposed communication (NCCL kernels while no compute kernel runs:
    collectives the compute stream waits for, and waits for late peers), idle (the rest:
    the GPU waits for the host, or for nothing). The three sum to the window.
    `exposed_comm_wait_ms` is the part of the exposed communication in which NCCL kernels only
    wait for peers that have not launched the collective yet (class "comm_wait"): moving no
    data, it points at imbalance between ranks rather than at the network.

    A window is finished one step late: kernels launched after a step may still start inside
    the previous window (a stream left free while NCCL finishes the last collective).
    """

    def __init__(self) -> None:
        self.pending: list[tuple[float, float, int, str]] = []  # start, end, stream, class
        self._windows: list[tuple[float, float]] = []
        self._window_start = 0.0
        self.iterations: list[dict[str, float]] = []
        self.overview: dict[str, Any] | None = None
        self.stream_names: dict[int, str] = {}

    def kernel(self, start: float, end: float, stream: int, op_class: str) -> None:
        self.pending.append((start, end, stream, op_class))

    def mark(self, gpu_done_ns: float) -> None:
        self._windows.append((self._window_start, gpu_done_ns))
        self._window_start = max(self._window_start, gpu_done_ns)
        if len(self._windows) >= 2:
            self._finish(*self._windows.pop(0))

    def finish(self) -> None:
        while self._windows:
            self._finish(*self._windows.pop(0))

    def _finish(self, a: float, b: float) -> None:
        inside = [(max(s, a), min(e, b), sid, cls) for s, e, sid, cls in self.pending
                  if e > a and s < b]
        compute = _union((s, e) for s, e, _, cls in inside if cls not in _COMM)
        moving = _union((s, e) for s, e, _, cls in inside if cls == "comm")
        waiting = _union((s, e) for s, e, _, cls in inside if cls == "comm_wait")
        c = _length(compute)
        with_moving = _length(_union(compute + moving))
        busy = _length(_union(compute + moving + waiting))
        window = max(0.0, b - a)
        self.iterations.append({
            "start_ms": a / 1e6, "end_ms": b / 1e6, "time_ms": window / 1e6,
            "compute_ms": c / 1e6, "exposed_comm_ms": (busy - c) / 1e6,
            "exposed_comm_wait_ms": (busy - with_moving) / 1e6,
            "idle_ms": max(0.0, window - busy) / 1e6,
        })
        self.overview = self._overview(len(self.iterations) - 1, a, b, inside)
        self.pending = [k for k in self.pending if k[1] > b]

    def _overview(self, index: int, a: float, b: float, inside: list) -> dict[str, Any]:
        """Each stream's kernels in one window, adjacent kernels of one class merged (gaps
        below 1/2000 of the window), so a large iteration stays a few thousand spans."""
        gap = max(1_000.0, (b - a) / 2000)
        tracks: dict[int, list[list]] = {}
        for s, e, sid, cls in sorted(inside, key=lambda k: (k[2], k[0])):
            spans = tracks.setdefault(sid, [])
            if spans and spans[-1][2] == cls and s - spans[-1][1] <= gap:
                spans[-1][1] = max(spans[-1][1], e)
            else:
                spans.append([s, e, cls])
        return {
            "iteration": index, "start_ms": a / 1e6, "end_ms": b / 1e6,
            "tracks": [{"stream": sid, "name": self.stream_names.get(sid, _stream_name(sid)),
                        "spans": [[round((s - a) / 1e6, 6), round((e - a) / 1e6, 6), cls]
                                  for s, e, cls in spans[:OVERVIEW_MAX_SPANS]]}
                       for sid, spans in sorted(tracks.items())],
        }

    def summary(self) -> dict[str, Any]:
        its = self.iterations
        steady = its[1:] if len(its) >= 3 else its  # as the report's median/mean

        def mean(key: str) -> float | None:
            return sum(i[key] for i in steady) / len(steady) if steady else None

        return {"iterations": its,
                "steady_state": {k: mean(k) for k in ("time_ms", "compute_ms", "exposed_comm_ms",
                                                      "exposed_comm_wait_ms", "idle_ms")}}


_COMM = ("comm", "comm_wait")


def _stream_name(sid: int) -> str:
    return "stream 0 (default)" if sid == 0 else f"stream {sid}"


# -- collectives -----------------------------------------------------------------------------
def _bus_factor(kind: str, n: int) -> float:
    from phantom.network.collectives import bus_factor

    return bus_factor(kind, n)


# -- the recorder ----------------------------------------------------------------------------
@dataclass
class _Trace:
    kernels: list = field(default_factory=list)  # (stream, start, end, name, class, source, shapes)
    comms: list = field(default_factory=list)    # (stream, start, end, [op info dicts])
    host: list = field(default_factory=list)     # (name, start, end, category)
    memory: list = field(default_factory=list)   # (host_ns, allocated, reserved)


class Recorder:
    """Owned by the Simulation (`sim.recorder`) when the run records; see the module doc."""

    def __init__(self, sim: "Simulation", rank: int, trace: TraceOptions) -> None:
        self.sim = sim
        self.rank = rank
        self.options = trace
        self.rank_traced = trace.rank_traced(rank)
        self.tracing = self.rank_traced and trace.iteration_traced(0)
        self.trace = _Trace()
        self.breakdown = Breakdown()
        self.memory = PeakTracker()
        self.memory_over_time = MemorySampler()
        self.op = ""  # name of the op whose outputs are being allocated
        self.collectives: dict[tuple, list] = {}
        self.traced_iterations: set[int] = set()
        self._optimizers_seen = False
        self._script_globals: dict | None = None
        if self.tracing:
            self.traced_iterations.add(0)

    @property
    def iteration(self) -> int:
        return len(self.sim.iterations)

    # -- kernels and host ---------------------------------------------------------------
    def kernel(self, func: Any, op_class: str, source: str, stream: int, start: float,
               end: float, host_start: float, host_end: float, args: tuple | None) -> None:
        self.breakdown.kernel(start, end, stream, op_class)
        if self.tracing:
            name = func if isinstance(func, str) else func.__name__
            self.trace.kernels.append((stream, start, end, name, op_class, source,
                                       _shapes(args) if args is not None else None))
            self.trace.host.append((name, host_start, host_end, "launch"))

    def host_span(self, name: str, start: float, end: float, category: str) -> None:
        if self.tracing and end > start:
            self.trace.host.append((name, start, end, category))

    def collective(self, stream: int, start: float, end: float, ops: list[tuple]) -> None:
        """One NCCL kernel: `ops` are (GroupInfo, Op, Result) it carried. Until the first of
        them starts on the network, the kernel only waits for peers ("comm_wait")."""
        moving_from = min(max(start, res.start_ns) for _, _, res in ops)
        if moving_from > start:
            self.breakdown.kernel(start, moving_from, stream, "comm_wait")
        self.breakdown.kernel(moving_from, end, stream, "comm")
        group = ops[0][0]
        self.breakdown.stream_names.setdefault(stream, f"NCCL {_group_label(group)}")
        infos = []
        for g, op, res in ops:
            net = max(0.0, res.end_ns - res.start_ns)
            members = len(g.members) if op.kind != "send_recv" else 2
            algbw = op.nbytes / net if net > 0 else 0.0  # bytes/ns = GB/s
            info = {"kind": op.kind, "bytes": op.nbytes, "group": _group_label(g),
                    "ranks": members, "algorithm": res.algorithm, "protocol": res.protocol,
                    "channels": res.channels, "network_start": res.start_ns,
                    "network_end": res.end_ns, "algbw_GBps": algbw,
                    "busbw_GBps": algbw * _bus_factor(op.kind, members)}
            infos.append(info)
            key = (op.kind, info["group"], op.nbytes)
            s = self.collectives.get(key)
            if s is None:
                s = self.collectives[key] = [0, 0.0, 0.0, {}, members]
            s[0] += 1
            s[1] += net
            s[2] += max(0.0, res.start_ns - start)  # waiting for peers (or for its stream)
            algo = f"{res.algorithm}/{res.protocol}" if res.protocol else res.algorithm
            s[3][algo] = s[3].get(algo, 0) + 1
        if self.tracing:
            self.trace.comms.append((stream, start, end, infos))

    # -- memory -------------------------------------------------------------------------
    def malloc(self, size: int, host_ns: float, op: str | None = None,
               category: str | None = None) -> Alloc:
        a = self.memory.malloc(size, self.iteration, op or self.op, host_ns)
        if category is not None:
            a.category = category
        if self._script_globals is None:
            # The script's module globals (runpy's temporary __main__), held so that its
            # model is still alive for `finish` to find its parameters when no optimizer
            # ever tagged them: runpy drops the module when the script returns.
            main = sys.modules.get("__main__")
            self._script_globals = getattr(main, "__dict__", {})
        self._sample(host_ns)
        return a

    def attach(self) -> None:
        """Start recording: give the storages already alive a record each (and a base
        record for any other allocated bytes), so that frees and the peak stay exact."""
        sim = self.sim
        for entry in sim.storage.live.values():
            if entry[0] is not None and entry[1] is None:
                entry[1] = self.memory.malloc(entry[0].size, 0, "(before recording)", 0.0)
                entry[1].category = "other"
        for entry in sim.storage.workspaces.values():
            entry[1] = self.memory.malloc(entry[0].size, 0, "cuBLAS workspace", 0.0)
            entry[1].category = "other"
        rest = sim.allocator.allocated_bytes - self.memory.current
        if rest > 0:
            self.memory.malloc(rest, 0, "(before recording)", 0.0).category = "other"
        sim.recorder = self

    def free(self, a: Alloc | None, host_ns: float) -> None:
        if a is not None:
            self.memory.free(a)
        self._sample(host_ns)

    def _sample(self, host_ns: float) -> None:
        alloc = self.sim.allocator
        allocated, reserved = alloc.allocated_bytes, alloc.reserved_bytes
        self.memory_over_time.add(host_ns, allocated, reserved)
        if self.tracing:
            self.trace.memory.append((host_ns, allocated, reserved))

    def reset_peak(self) -> None:
        self.memory.reset_peak(self.sim.timeline.host_ns, self.iteration)

    def tag_tensor(self, t: Any, category: str) -> None:
        """Tag the allocation behind tensor `t` (a DTensor's local shard) as `category`."""
        local = getattr(t, "_local_tensor", None)  # DTensor (FSDP2, tensor parallel)
        if local is not None:
            t = local
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            return
        try:
            key = t.untyped_storage()._cdata
        except (RuntimeError, NotImplementedError):
            return
        entry = self.sim.storage.live.get(key)
        if entry is not None and entry[1] is not None:
            entry[1].tag(category)

    def tag_optimizer(self, optimizer: Any) -> None:
        """At each optimizer step: what its parameters, their gradients and its state hold."""
        self._optimizers_seen = True
        for group in optimizer.param_groups:
            for p in group["params"]:
                self.tag_tensor(p, "parameters")
                if p.grad is not None:
                    self.tag_tensor(p.grad, "gradients")
        for state in optimizer.state.values():
            for v in state.values():
                if isinstance(v, torch.Tensor):
                    self.tag_tensor(v, "optimizer_state")

    # -- iterations ---------------------------------------------------------------------
    def on_iteration(self, optimizer: Any, gpu_done_ns: float) -> None:
        if optimizer is not None:
            self.tag_optimizer(optimizer)
        self.breakdown.mark(gpu_done_ns)
        self.tracing = self.rank_traced and self.options.iteration_traced(self.iteration)
        if self.tracing:
            self.traced_iterations.add(self.iteration)

    def finish(self) -> None:
        """End of the run: finish the last windows; with no optimizer ever seen, tag the
        nn.Parameters still alive (a script without an optimizer still has a model)."""
        self.breakdown.finish()
        if not self._optimizers_seen:
            import gc

            # Type checks only: isinstance() on arbitrary objects runs their __class__
            # properties (torch's deprecated aliases warn). A fake tensor's parameter is the
            # FakeTensor itself, marked `_is_param` by nn.Parameter.
            tensor, param = torch.Tensor, torch.nn.Parameter
            for obj in gc.get_objects():
                cls = type(obj)
                if issubclass(cls, tensor) and (issubclass(cls, param)
                                                or getattr(obj, "_is_param", False)):
                    self.tag_tensor(obj, "parameters")
                    if obj.grad is not None:
                        self.tag_tensor(obj.grad, "gradients")
        self._script_globals = None

    # -- report -------------------------------------------------------------------------
    def top_collectives(self) -> list[dict[str, Any]]:
        rows = []
        for (kind, group, nbytes), (calls, net_ns, wait_ns, algos, members) in self.collectives.items():
            algbw = nbytes * calls / net_ns if net_ns > 0 else 0.0
            rows.append({"kind": kind, "group": group, "ranks": members, "bytes": nbytes,
                         "calls": calls, "network_ms": net_ns / 1e6, "wait_ms": wait_ns / 1e6,
                         "algbw_GBps": algbw, "busbw_GBps": algbw * _bus_factor(kind, members),
                         "algorithms": algos})
        rows.sort(key=lambda r: -(r["network_ms"] + r["wait_ms"]))
        return rows[:TOP_COLLECTIVES]


def _group_label(g: Any) -> str:
    name = getattr(g, "desc", "") or getattr(g, "name", "")
    members = list(getattr(g, "members", ()))
    return f"{name} {members}" if members else str(name)


def _shapes(args: tuple) -> list:
    """Shapes and dtypes of an op's tensor arguments (lists of tensors: the first few)."""
    out: list = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append([list(a.shape), str(a.dtype).removeprefix("torch.")])
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            out.append([[list(t.shape), str(t.dtype).removeprefix("torch.")]
                        for t in a[:4] if isinstance(t, torch.Tensor)] + (["..."] if len(a) > 4 else []))
    return out
