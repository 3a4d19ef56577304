"""The cost-model contract: what a per-op GPU time estimate looks like and who produces it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

# Every op_class a cost model may report. "transfer" is a host<->device memcpy (it runs on a copy
# engine over PCIe, not as a kernel over HBM); everything else names the kind of CUDA kernel.
OP_CLASSES: tuple[str, ...] = (
    "gemm",
    "attention",
    "conv",
    "elementwise",
    "reduction",
    "norm",
    "softmax",
    "loss",
    "embedding",
    "optimizer",
    "copy",
    "random",
    "transfer",
    "other",
)


@dataclass(frozen=True, slots=True)
class KernelCost:
    """GPU time of one aten op on the simulated device, with the work it was derived from."""

    gpu_ns: float  # time the op occupies its CUDA stream, launch floor included
    op_class: str  # one of OP_CLASSES
    source: str  # "model" (roofline estimate) now; "db" later for measured rows
    flops: float  # floating-point operations the op performs (useful work, e.g. causal-halved)
    bytes: float  # minimal device-memory bytes read + written
    # Energy of one of its FLOPs relative to a bf16 tensor-core FLOP's, for the power model
    # (engine/power.py): float8 GEMMs do twice the FLOPs per tensor-core cycle (H100/H200
    # datasheets), taken at the same energy per cycle, so half per FLOP.
    energy_per_flop: float = 1.0


@runtime_checkable
class CostModel(Protocol):
    """Estimates the GPU time of one aten op.

    `args`, `kwargs` and `out` are what the dispatcher saw: tensors (FakeTensors on the simulated
    device, or any tensor; only metadata is read, never values), Python scalars, lists of
    tensors (foreach ops) and None. Returns None when the real CUDA op launches no kernel
    (views, metadata queries, allocations, CPU-only ops).
    """

    def estimate(
        self, func: torch._ops.OpOverload, args: tuple, kwargs: dict, out: object
    ) -> KernelCost | None: ...
