"""What the coordinator asks for (CollectiveOp) and what it gets back (ScheduledCollective)."""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
         "gather", "scatter", "send_recv", "barrier")
ROOTED = ("broadcast", "reduce", "gather", "scatter")


@dataclass(frozen=True)
class CollectiveOp:
    kind: str
    ranks: tuple[int, ...]  # global ranks of the communicator, in group-rank order
    # nccl-tests "size": all_reduce/broadcast/reduce: the buffer; all_gather: total output;
    # reduce_scatter: total input; all_to_all: total bytes each rank sends (its own chunk
    # included); gather/scatter: total bytes at the root; barrier: 0.
    nbytes: int
    root: int | None = None  # global rank, for broadcast/reduce/gather/scatter
    # (src_global, dst_global, bytes): send_recv, and uneven all_to_all; replaces nbytes.
    transfers: tuple[tuple[int, int, int], ...] = ()
    dtype_bytes: int = 2


@dataclass(frozen=True)
class ScheduledCollective:
    start_ns: float
    end_ns: float
    algorithm: str  # "ring", "tree", "nvls", "p2p"
    protocol: str  # "LL", "LL128", "Simple"
    channels: int

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns


def bus_factor(kind: str, n: int) -> float:
    """nccl-tests' busbw / algbw (doc/PERFORMANCE.md)."""
    if n <= 1:
        return 1.0
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def validate_op(op: CollectiveOp, world_size: int) -> None:
    """Raise ValueError naming what is wrong with `op` for a cluster of `world_size` GPUs."""
    if op.kind not in KINDS:
        raise ValueError(f"collective kind {op.kind!r}: expected one of {', '.join(KINDS)}")
    if not op.ranks:
        raise ValueError(f"{op.kind}: empty communicator")
    if len(set(op.ranks)) != len(op.ranks):
        raise ValueError(f"{op.kind}: duplicate ranks in communicator {op.ranks}")
    bad = [r for r in op.ranks if not 0 <= r < world_size]
    if bad:
        raise ValueError(f"{op.kind}: ranks {bad} outside the cluster's 0..{world_size - 1}")
    if op.nbytes < 0:
        raise ValueError(f"{op.kind}: nbytes must be >= 0, got {op.nbytes}")
    if op.kind in ROOTED and op.root not in op.ranks:
        raise ValueError(f"{op.kind}: root {op.root!r} is not a member of {op.ranks}")
    members = set(op.ranks)
    for t in op.transfers:
        if len(t) != 3 or t[2] < 0:
            raise ValueError(f"{op.kind}: transfer {t!r}: expected (src, dst, bytes >= 0)")
        src, dst, _ = t
        if src not in members or dst not in members:
            raise ValueError(f"{op.kind}: transfer {t!r} between ranks outside {op.ranks}")
    if op.kind == "send_recv" and not op.transfers:
        raise ValueError("send_recv: needs `transfers` (src, dst, bytes)")
