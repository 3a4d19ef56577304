"""Per-link traffic of a run, for the run report: bytes, busy time, utilisation over time.

The network simulator hands over each committed collective's flow segments (interval, wire
bytes per ns on each link). Busy time is the union of a link's intervals with traffic (two
collectives sharing a link at once count once); utilisation over time is kept in time
buckets that double in width when the run outgrows `max_buckets`, so memory stays bounded
however long the run. Times are the model's (before any measured-table rescaling of a
collective's end, which moves no reservation).
"""
from __future__ import annotations

import bisect
from typing import Any

from phantom.network.topology import Topology


class _Busy:
    """Disjoint sorted intervals; inserting merges. Collectives arrive nearly in time order,
    so an insertion is usually an append or a merge with the last interval."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def add(self, s: float, e: float) -> None:
        starts, ends = self.starts, self.ends
        if not starts or s > ends[-1]:
            starts.append(s)
            ends.append(e)
            return
        i = bisect.bisect_left(ends, s)  # first interval that ends at or after s
        j = bisect.bisect_right(starts, e)  # intervals [i, j) overlap or touch [s, e]
        if i >= j:
            starts.insert(i, s)
            ends.insert(i, e)
            return
        starts[i:j] = [min(s, starts[i])]
        ends[i:j] = [max(e, ends[j - 1])]

    def total(self) -> float:
        return sum(e - s for s, e in zip(self.starts, self.ends))


class LinkUsage:
    def __init__(self, topology: Topology, max_buckets: int = 1000,
                 bucket_ns: float = 50_000.0) -> None:
        self.topology = topology
        self.max_buckets = max_buckets
        self.bucket_ns = bucket_ns
        self.bytes: dict[int, float] = {}
        self.busy: dict[int, _Busy] = {}
        self.buckets: dict[int, list[float]] = {}  # link -> wire bytes per bucket
        self.end_ns = 0.0
        self.collectives = 0

    def add(self, segments: list[tuple[float, float, dict[int, float]]]) -> None:
        """One collective's segments: (t0, t1, {link: wire bytes per ns})."""
        self.collectives += 1
        for t0, t1, load in segments:
            if t1 <= t0:
                continue
            while t1 > self.bucket_ns * self.max_buckets:
                self._coarsen()
            self.end_ns = max(self.end_ns, t1)
            for link, rate in load.items():
                if rate <= 0:
                    continue
                self.bytes[link] = self.bytes.get(link, 0.0) + rate * (t1 - t0)
                busy = self.busy.get(link)
                if busy is None:
                    busy = self.busy[link] = _Busy()
                busy.add(t0, t1)
                self._spread(link, t0, t1, rate)

    def _spread(self, link: int, t0: float, t1: float, rate: float) -> None:
        w = self.bucket_ns
        b = self.buckets.get(link)
        if b is None:
            b = self.buckets[link] = []
        i0, i1 = int(t0 / w), int(t1 / w)
        if len(b) <= i1:
            b.extend([0.0] * (i1 + 1 - len(b)))
        for i in range(i0, i1 + 1):
            lo, hi = max(t0, i * w), min(t1, (i + 1) * w)
            if hi > lo:
                b[i] += rate * (hi - lo)

    def _coarsen(self) -> None:
        for link, b in self.buckets.items():
            self.buckets[link] = [sum(b[j:j + 2]) for j in range(0, len(b), 2)]
        self.bucket_ns *= 2

    def to_dict(self, span_ns: float | None = None) -> dict[str, Any]:
        """Links with traffic, busiest first. `span_ns`: the run's simulated length (default:
        the last traffic's end), the denominator of the average utilisation."""
        span = max(span_ns or 0.0, self.end_ns) or 1.0
        links = []
        for lid in sorted(self.bytes, key=lambda l: -self.bytes[l]):
            link = self.topology.links[lid]
            cap = link.capacity  # bytes/ns == GB/s
            w = self.bucket_ns
            links.append({
                "name": link.name, "kind": link.kind, "capacity_GBps": cap,
                "bytes": self.bytes[lid], "busy_ms": self.busy[lid].total() / 1e6,
                "busy_fraction": self.busy[lid].total() / span,
                "utilization": self.bytes[lid] / (cap * span),
                "utilization_over_time": [round(x / (cap * w), 5) for x in self.buckets[lid]],
            })
        return {"span_ms": span / 1e6, "bucket_ms": self.bucket_ns / 1e6,
                "collectives": self.collectives, "links": links}
