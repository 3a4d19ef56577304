"""Collective times measured on real nodes, used ahead of NCCL's model where they apply.

`python -m phantom.network.calibrate` (run with torchrun on a GPU node) writes a table of
GPU-only collective times over sizes; tables shipped in `phantom/network/data/` are loaded
here. NCCL's tuning model rates ring all_reduce, all_gather and reduce_scatter alike and
has no pipeline start-up cost; on a real 2x H200 NVLink node all_gather runs at ~0.8x
all_reduce's bus bandwidth and mid-size collectives pay tens of microseconds more than the
model. Where a table matches the cluster (same GPU, one NVSwitch node, same number of
ranks, NVLS off), the simulator scales its own flow-model time by measured/modelled on an
idle network, so contention still comes from the flow model.
"""
from __future__ import annotations

import bisect
import json
import math
from pathlib import Path

from phantom.network.cluster import ClusterSpec
from phantom.network.collectives import CollectiveOp

DATA_DIR = Path(__file__).resolve().parent / "data"


class MeasuredTable:
    def __init__(self, data: dict, source: str) -> None:
        header = data["header"]
        self.source = source
        self.gpu_name: str = header["gpu"]
        self.ranks: int = int(header["ranks"])
        self.curves = {kind: sorted((float(b), float(t) * 1e3) for b, t in rows)
                       for kind, rows in data["times_us"].items()}

    def matches(self, cluster: ClusterSpec, op: CollectiveOp) -> bool:
        ranks = op.ranks
        return (cluster.gpu.lower() in self.gpu_name.lower() and len(ranks) == self.ranks
                and cluster.intra_node.kind == "nvswitch" and not cluster.intra_node.nvls
                and len({cluster.node_of(r) for r in ranks}) == 1 and op.kind in self.curves)

    def time_ns(self, kind: str, nbytes: float) -> float:
        """Log-log interpolation; clamped to the measured range's end points' slope-free ends."""
        curve = self.curves[kind]
        sizes = [b for b, _ in curve]
        if nbytes <= sizes[0]:
            return curve[0][1]
        if nbytes >= sizes[-1]:
            b, t = curve[-1]
            return t * nbytes / b  # beyond the largest size: bandwidth-bound, linear
        i = bisect.bisect_right(sizes, nbytes)
        (b0, t0), (b1, t1) = curve[i - 1], curve[i]
        w = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
        return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))


def load_tables(directory: Path = DATA_DIR) -> list[MeasuredTable]:
    return [MeasuredTable(json.loads(p.read_text()), p.name)
            for p in sorted(directory.glob("collectives_*.json"))]


def measured_size(op: CollectiveOp) -> float | None:
    """The size a table is indexed by, or None when the op's traffic is not what was measured."""
    if op.kind == "send_recv":
        return float(op.transfers[0][2]) if len(op.transfers) == 1 else None
    if op.kind == "all_to_all" and op.transfers:
        # Even splits between every pair are what was measured; uneven ones are their own.
        sizes = {b for _, _, b in op.transfers}
        n = len(op.ranks)
        even = len(sizes) == 1 and len(op.transfers) == n * (n - 1)
        return float(op.nbytes) if even else None
    if op.transfers or op.kind == "barrier":
        return None
    return float(op.nbytes)
