"""Inductor's mix-order reductions in a compiled graph, and the transposed stores they take in.

Inductor (torch/_inductor/scheduler.py `MixOrderReduction`, on by default since torch 2.10)
fuses two sibling sum reductions over one [rows, cols] input, one along each row and one down
the columns, into one persistent kernel that walks its rows one at a time: the backward of
RMSNorm and LayerNorm (the input gradient's row sum, the weight gradient's column sum) where the
forward saved its statistics. Other work over that input joins the kernel by the loads it
shares, float8 training's casts of the recomputed norm output among them; and those casts store
*transposed* (column-major, as the weight-gradient GEMM wants its operand), so the kernel writes
one byte of a different 32-byte sector for every element of a row. Sectors leave L2 before the
next rows fill them in, and each such store costs about a sector's traffic, where a plain store
costs its own bytes.

Measured by bench/kernels/mix_order_probe.py (data in
bench/kernels/results/mix_order_probe_{H100,H200}.json): a float8 block's
norm backward with 1-3 transposed casts took 13-18 ps an element a cast more than the same
kernel without them on an H100, at 3 sizes, and 13-15 ps on an H200, whose memory is 1.4x as
fast: the cost does not follow memory bandwidth but the SMs and L2, which the two share (132
SMs at 1,980 MHz). So it is charged per element in SM cycles: 15 ps x 132 SMs x 1.98 GHz = 3.9.
A transposed store in a kernel that tiles rows and columns (a pointwise kernel) costs about its
own bytes and is not charged more here.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.fx

# Inductor's thresholds for a mix-order fusion (MixOrderReduction.can_fuse, strict mode).
MIN_NUMEL = 5 * 2**20
MIN_ROWS = 4096
MAX_COLS = 16 * 1024
# SM cycles (summed over the SMs) one element a mix-order kernel stores transposed costs.
TRANSPOSED_STORE_SM_CYCLES = 3.9


@dataclasses.dataclass
class MixOrder:
    """A mix-order reduction: `row_sum` and `col_sum` reduce one [rows, cols] input."""
    group: int
    row_sum: torch.fx.Node
    col_sum: torch.fx.Node
    numel: int
    joining: list[torch.fx.Node] = dataclasses.field(default_factory=list)  # stores from other groups


def transposed_store_ns(elements: float, sm_count: int, sm_clock_mhz: float) -> float:
    """Time a mix-order kernel spends storing `elements` transposed, beyond their bytes."""
    return elements * TRANSPOSED_STORE_SM_CYCLES / (sm_count * sm_clock_mhz * 1e-3)


def _val(node: torch.fx.Node) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def meta_numel(node: torch.fx.Node) -> int:
    """Elements of a graph node's value, from its metadata (0 for anything but a tensor)."""
    v = _val(node)
    return v.numel() if v is not None else 0


def reduced_input(node: torch.fx.Node) -> tuple[int, int] | None:
    """(numel, cols) of a sum's input, or None for anything but a sum over an input of 2+ dims."""
    if node.target is not torch.ops.aten.sum.dim_IntList or not node.args:
        return None
    v = _val(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else None
    if v is None or v.dim() < 2:
        return None
    return v.numel(), v.shape[-1]


def _summed_dims(node: torch.fx.Node) -> tuple[list[int], int] | None:
    """The dimensions a sum over a 2+ dim input reduces (sorted, non-negative) and its rank."""
    dims = node.args[1] if len(node.args) > 1 else None
    if reduced_input(node) is None or not isinstance(dims, (list, tuple)):
        return None
    rank = _val(node.args[0]).dim()
    return sorted(d % rank for d in dims), rank


def is_row_sum(node: torch.fx.Node) -> bool:
    summed = _summed_dims(node)
    return summed is not None and summed[0] == [summed[1] - 1]


def is_col_sum(node: torch.fx.Node) -> bool:
    """A sum over every dimension but the last: each column's total."""
    summed = _summed_dims(node)
    return summed is not None and summed[0] == list(range(summed[1] - 1))


def is_transposed_store(node: torch.fx.Node) -> bool:
    """A contiguous copy of a transposed view: float8 training's column-major cast
    (`clone(permute(cast))`), written across the rows its kernel walks."""
    if node.target not in (torch.ops.aten.clone.default, torch.ops.aten._to_copy.default):
        return False
    out = _val(node)
    src = _val(node.args[0]) if node.args and isinstance(node.args[0], torch.fx.Node) else None
    if out is None or src is None or out.dim() < 2 or out.numel() != src.numel():
        return False
    return out.is_contiguous() and src.stride(-1) != 1


def _one_batch_dim(node: torch.fx.Node) -> bool:
    """Whether the reduced input is [rows, cols] (leading dimensions of size 1 aside). Seen on
    an H100 with torch 2.11: torchtitan's float8 blocks made mix-order kernels at local batch 1
    ([1, 8192, 4096]) and none at local batch 2 ([2, 8192, 4096]), while the same sizes
    flattened ([16384, 4096], mix_order_probe.py) made them; which of Inductor's checks
    turns the batched case down was not found, so this follows what was seen."""
    shape = _val(node.args[0]).shape
    return all(d == 1 for d in shape[:-2])


def qualifies(numel: int, cols: int) -> bool:
    """Inductor's size rules: enough work, at least 4,096 rows and twice as many rows as
    columns, and a row short enough to stay in registers."""
    rows = numel // max(cols, 1)
    return numel >= MIN_NUMEL and rows >= MIN_ROWS and rows >= 2 * cols and cols <= MAX_COLS


def find_mix_orders(nodes: list[torch.fx.Node], group_of: dict[torch.fx.Node, int],
                    stored: set[torch.fx.Node], reads: dict[torch.fx.Node, frozenset],
                    computed_with: dict[torch.fx.Node, frozenset],
                    is_reduction: Callable[[torch.fx.Node], bool],
                    is_extern: Callable[[torch.fx.Node], bool],
                    ancestors_of: Callable[[torch.fx.Node], set[torch.fx.Node]]) -> dict[int, MixOrder]:
    """The mix-order reduction of each group that has one: a stored row sum and a stored column
    sum over inputs of the same size, siblings (neither computed from the other) with a
    full-size load in common. A reduction the graph computes and both read (a norm's statistic
    recomputed under activation checkpointing) must be needed earlier too: Inductor first
    fuses a row reduction with the reduction it consumes (one loop over the row), and the
    column sum, which reads that statistic as well, is then a consumer of the fused kernel, no
    longer a sibling; where a library call ahead of the norm's backward needs the statistic
    (the recomputed forward's GEMMs under selective checkpointing), it is computed in an
    earlier kernel and the two sums stay siblings. Seen on an H100 (mix_order_probe.py): no
    mix-order kernel when only the weight-gradient casts needed the recomputed statistic, one
    without checkpointing; one in torchtitan's float8 step with selective checkpointing."""
    found: dict[int, MixOrder] = {}
    rows = [n for n in nodes if n in stored and n in group_of and is_row_sum(n)]
    cols = [n for n in nodes if n in stored and n in group_of and is_col_sum(n)]
    for r in rows:
        numel, width = reduced_input(r)
        if not qualifies(numel, width) or group_of[r] in found or not _one_batch_dim(r):
            continue
        for c in cols:
            if group_of[c] != group_of[r] or reduced_input(c) != (numel, width):
                continue
            if r in computed_with[c] or r in reads[c] or c in computed_with[r] or c in reads[r]:
                continue  # producer and consumer (a statistic recomputed): not siblings
            stats = _statistics((r, c), is_reduction, is_extern)
            if stats and not _needed_earlier(stats, ancestors_of(r) | ancestors_of(c), is_extern):
                continue
            if any(meta_numel(i) == numel for i in reads[r] & reads[c]):
                found[group_of[r]] = MixOrder(group_of[r], r, c, numel)
                break
    return found


def _statistics(sums: tuple[torch.fx.Node, ...], is_reduction: Callable[[torch.fx.Node], bool],
                is_extern: Callable[[torch.fx.Node], bool]) -> list[torch.fx.Node]:
    """Reductions the sums are computed from in generated code (through views and aliases,
    not through a library call's output or a graph input)."""
    found, seen = [], set(sums)
    todo = [i for s in sums for i in s.all_input_nodes]
    while todo:
        n = todo.pop()
        if n in seen or n.op != "call_function" or is_extern(n):
            continue
        seen.add(n)
        if is_reduction(n):
            found.append(n)
        todo.extend(n.all_input_nodes)
    return found


def _needed_earlier(stats: list[torch.fx.Node], upstream: set[torch.fx.Node],
                    is_extern: Callable[[torch.fx.Node], bool]) -> bool:
    """Whether each statistic feeds a library call (a GEMM) that the reductions depend on."""
    calls = {n for n in upstream if is_extern(n)}
    for stat in stats:
        seen, todo = set(), list(stat.users)
        while todo:
            n = todo.pop()
            if n in seen or n not in upstream:
                continue  # only paths that lead to the reductions matter
            seen.add(n)
            todo.extend(n.users)
        if not seen & calls:
            return False
    return True


def assign_joining_stores(mix_orders: dict[int, MixOrder], group_writes: dict[int, list[torch.fx.Node]],
                          reads: dict[torch.fx.Node, frozenset],
                          ancestors_of: Callable[[torch.fx.Node], set[torch.fx.Node]],
                          base_of: Callable[[torch.fx.Node], torch.fx.Node]) -> dict[torch.fx.Node, int]:
    """Transposed stores of other groups that Inductor moves into a mix-order kernel: over its
    input's size, loading nothing but scalars that the kernel does not load too, not needed
    before it runs, and with no row-major twin elsewhere (the same value, read from the same
    inputs with the same scale: a gradient's two casts are stored by one kernel, seen on an
    H100). A norm output's cast for the weight gradient, scaled by an amax of its own, joins."""
    moved: dict[torch.fx.Node, int] = {}
    bases = {w: frozenset(base_of(i) for i in reads[w]) for ws in group_writes.values() for w in ws}
    for mix in mix_orders.values():
        loads = {base_of(i) for w in group_writes.get(mix.group, ()) for i in reads[w]}  # views: their value
        upstream = ancestors_of(mix.row_sum) | ancestors_of(mix.col_sum)
        others = [w for g, ws in group_writes.items() if g != mix.group for w in ws]
        for t in others:
            if t in moved or not is_transposed_store(t) or meta_numel(t) != mix.numel or t in upstream:
                continue
            if not any(meta_numel(i) == mix.numel for i in reads[t]):
                continue
            if not {b for b in bases[t] if meta_numel(b) > 1} <= loads:
                continue  # a value the kernel does not load (another norm's statistic, say)
            if any(w is not t and not is_transposed_store(w) and meta_numel(w) == mix.numel and bases[w] == bases[t]
                   for w in others):
                continue  # its row-major twin (same value, same scale) is stored elsewhere: it fuses there
            moved[t] = mix.group
            mix.joining.append(t)
    return moved
