"""interception/mix_order.py: Inductor's mix-order reductions in a norm's backward, and the
transposed stores they take in from other kernels.

A norm backward at a size Inductor fuses (8,192 rows of 1,024: rows >= 4,096 and >= 2 x cols,
>= 5M elements), traced with make_fx as AOTAutograd hands it to phantom's backend and run on CPU
tensors against test_compiled's recording simulation."""
from __future__ import annotations

import torch
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

from phantom.interception import mix_order
from phantom.interception.compiled import GraphRunner
from test_compiled import RecordingSim, _runner

ROWS, COLS = 8192, 1024


def _inputs(rows: int = ROWS, cols: int = COLS):
    return (torch.randn(rows, cols), torch.randn(cols), torch.rand(rows, 1) + 0.5, torch.randn(rows, cols),
            torch.randn(cols, cols))


def _norm_backward(x, w, rstd, g, wq):
    """RMSNorm's backward with the forward's statistic loaded (`rstd`): the input gradient's
    row sum and the weight gradient's column sum are siblings. The recomputed norm output is
    stored transposed for a weight-gradient GEMM (float8 training's column-major cast)."""
    xhat = x * rstd
    t = (xhat * w * 2).t().contiguous()
    dw_proj = t @ g  # the weight-gradient GEMM: needs t, not needed by the norm's backward
    gi = g @ wq  # the input gradient arriving from the projection
    row = (gi * w * xhat).sum(-1, keepdim=True)
    col = (gi * xhat).sum(0)
    return rstd * (gi * w - xhat * row / x.shape[-1]), col, dw_proj


def _named(nodes) -> set[str]:
    return {n.name for n in nodes}


def test_sibling_row_and_column_sums_make_one_mix_order_kernel_that_takes_in_the_transposed_cast():
    runner, sim = _runner(_norm_backward, *_inputs())
    (mix,) = runner.mix_orders.values()
    assert mix.row_sum.name.startswith("sum") and mix.col_sum.name.startswith("sum")
    (cast,) = mix.joining
    assert mix_order.is_transposed_store(cast) and runner.joining == {cast: mix.group}
    runner(list(_inputs()))
    # one kernel: the norm's backward stores the cast, each element charged SM cycles on top of
    # its bytes; its own group launches nothing else
    numel = ROWS * COLS
    ((_, nbytes),) = sim.kernels
    assert numel * 16 <= nbytes < numel * 16.1  # x, gi read; input gradient, cast written (+ rstd, w)
    assert sim.extra_ns == [mix_order.transposed_store_ns(numel, 132, 1980)]


def test_no_mix_order_below_inductors_sizes():
    # 4,096 rows of 4,096: fewer rows than twice the columns
    runner, sim = _runner(_norm_backward, *_inputs(4096, 4096))
    assert runner.mix_orders == {} and runner.joining == {}
    runner(list(_inputs(4096, 4096)))
    assert len(sim.kernels) == 2 and not any(sim.extra_ns)  # the cast on its own, priced by its bytes


def _recomputed_statistic(early: bool):
    """The statistic recomputed in the backward, as under activation checkpointing: needed by
    a GEMM ahead of the norm's backward (`early`, the recomputed forward's projection) or only
    by the weight-gradient cast."""
    def backward(x, w, rstd_unused, g, wq):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        xhat = x * rstd
        t = (xhat * w * 2).t().contiguous()
        dw_proj = t @ g
        gi = ((xhat * w) @ wq if early else g @ wq) + g
        row = (gi * w * xhat).sum(-1, keepdim=True)
        col = (gi * xhat).sum(0)
        return rstd * (gi * w - xhat * row / x.shape[-1]), col, dw_proj
    return backward


def test_a_statistic_recomputed_for_the_backward_alone_fuses_with_the_row_sum_instead():
    runner, _ = _runner(_recomputed_statistic(early=False), *_inputs())
    assert runner.mix_orders == {}


def test_a_statistic_a_gemm_needed_earlier_leaves_the_sums_siblings():
    runner, _ = _runner(_recomputed_statistic(early=True), *_inputs())
    assert len(runner.mix_orders) == 1


def test_transposed_store_detection():
    def f(x):
        return x.t().contiguous(), x.contiguous() * 2, x.t() * 3

    runner, _ = _runner(f, torch.randn(64, 32))
    flagged = {n.name for n in runner.nodes if n.op == "call_function" and mix_order.is_transposed_store(n)}
    assert len(flagged) == 1 and next(iter(flagged)).startswith("clone")


def test_a_float8_gemm_operand_is_stored_once_per_gemm_and_recomputed_by_other_kernels():
    """Inductor gives each `_scaled_mm` its own copy of a generated operand (a norm output's
    cast, three times for q, k and v in the H100 probe's output code); a generated consumer of
    the same value (its transposed copy) computes it again from the value's inputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def f(x, wq, wk, scale):
        xf = (x * 2).clamp(-448, 448).to(torch.float8_e4m3fn)
        q = torch._scaled_mm(xf, wq.t(), scale, scale, out_dtype=torch.bfloat16)
        k = torch._scaled_mm(xf, wk.t(), scale, scale, out_dtype=torch.bfloat16)
        return q, k, xf.t().contiguous()

    with FakeTensorMode():
        args = (torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(16, 32).to(torch.float8_e4m3fn),
                torch.randn(16, 32).to(torch.float8_e4m3fn), torch.tensor(1.0))
    gm = make_fx(f, decomposition_table=select_decomp_table(), tracing_mode="fake")(*args)
    runner = GraphRunner(gm, RecordingSim())
    copies = {n.target: c for n, c in runner.copies.items()}
    assert copies[torch.ops.prims.convert_element_type.default] == 2
    assert copies[torch.ops.aten.clone.default] == 1
    (transposed,) = [n for n in runner.stored if mix_order.is_transposed_store(n)]
    assert {i.op for i in runner.reads[transposed]} == {"placeholder"}  # x, not the stored cast


def _gradient_casts(twin: bool):
    """The incoming gradient `g` cast for the input-gradient GEMM (row-major, the twin) and for
    the weight-gradient GEMM (transposed); the norm's backward adds `g` to its own result."""
    def backward(x, w, rstd, g, wq):
        xhat = x * rstd
        gt = (g * 2).t().contiguous()
        dw_proj = gt @ x
        gi = ((g * 2) if twin else g) @ wq
        row = (gi * w * xhat).sum(-1, keepdim=True)
        col = (gi * xhat).sum(0)
        return g + rstd * (gi * w - xhat * row / x.shape[-1]), col, dw_proj
    return backward


def test_a_transposed_cast_stays_with_its_row_major_twin():
    """Seen on an H100: the gradient's transposed cast was stored by the kernel that stores its
    row-major cast (same input, same scale), not by the norm's mix-order kernel."""
    alone, _ = _runner(_gradient_casts(twin=False), *_inputs())
    (mix,) = alone.mix_orders.values()
    assert len(mix.joining) == 1
    paired, _ = _runner(_gradient_casts(twin=True), *_inputs())
    (mix,) = paired.mix_orders.values()
    assert mix.joining == []
