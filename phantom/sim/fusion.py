"""torch.compile'd code on the simulated GPU: the kernels Inductor would generate
(interception/compiled.py opens the regions; engine/fusion.py sums what a fused kernel moves)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from phantom.cost import KernelCost
from phantom.engine.fusion import FusedKernel

if TYPE_CHECKING:
    from phantom.sim.simulation import Simulation


class Fusion:
    """Generated code and fused regions of one rank."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        # Inside a torch.compile'd function (interception/compiled.py `install`): its fusable
        # ops are gathered into one kernel (`kernel`, open until flushed) and launched when it
        # returns. Simulation.on_op reads both on every op.
        self.depth = 0
        # The op running now is inside a generated kernel and its outputs never leave it
        # (interception/compiled.py): they live in registers, not in device memory.
        self.in_registers = False
        self.generated_code = False
        self.kernel: FusedKernel | None = None

    # -- Inductor's generated kernels -----------------------------------------------------
    def begin_generated_code(self) -> None:
        """The ops that follow compute what Inductor-generated kernels compute: they make their
        outputs (and allocate the stored ones) but launch nothing; `launch_generated_kernel`
        charges the kernels."""
        self.generated_code = True

    def end_generated_code(self) -> None:
        self.generated_code = False

    def launch_generated_kernel(self, name: str, nbytes: float, math_flops: float = 0.0,
                                load_efficiency: float = 1.0, extra_ns: float = 0.0) -> None:
        """One generated kernel moving `nbytes`, on the elementwise memory curve, or longer where
        its math (`math_flops`, cost.roofline.generated_math_flops) is; `extra_ns` on top (a
        mix-order kernel's transposed stores, interception/mix_order.py)."""
        sim = self.sim
        cost = sim.cost_model.fused_pointwise(nbytes, math_flops, load_efficiency)
        if extra_ns > 0:
            cost = dataclasses.replace(cost, gpu_ns=cost.gpu_ns + extra_ns)
        sim.launch(name, cost, sim.streams.current_id())

    # -- fused regions (eager ops inside a compiled function) -----------------------------
    def begin_region(self) -> None:
        """A torch.compile'd function starts (interception/compiled.py `install`); regions
        nest, the outermost one decides."""
        self.depth += 1

    def end_region(self, leaving: Any) -> None:
        """It returned `leaving` (None if it raised): launch the kernel its fusable ops make."""
        self.depth -= 1
        if self.depth == 0:
            self.flush(leaving)

    def add(self, func: Any, args: tuple, kwargs: dict, out: Any, cost: KernelCost,
            stream_id: int) -> None:
        if self.kernel is not None and self.kernel.stream_id != stream_id:
            self.flush()
        if self.kernel is None:
            self.kernel = FusedKernel(stream_id)
        self.kernel.add(func.__name__, args, kwargs, out, cost)

    def flush(self, leaving: Any = None) -> None:
        """Launch the fused kernel gathered so far, if any (a GEMM, a read or a capture
        boundary splits a compiled function); `leaving`: what the function returns."""
        fused, self.kernel = self.kernel, None
        if fused is None or not fused.ops:
            return
        sim = self.sim
        if fused.single_cost is not None:  # one op: its own kernel (and database row)
            sim.launch(fused.ops[0], fused.single_cost, fused.stream_id)
            return
        nbytes = fused.nbytes(leaving)
        name = "fused_" + "_".join(sorted(set(fused.ops)))[:120]
        sim.launch(name, sim.cost_model.fused_pointwise(nbytes, fused.flops), fused.stream_id)
