"""Tests of the roofline cost model (phantom.cost). Inputs are meta tensors: only shapes matter."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from phantom.cost import OP_CLASSES, CostModel, KernelCost, RooflineCostModel, classify, load_calibration
from phantom.cost.calibrate import _gemm_alignment, fit_gemm_residuals
from phantom.cost.calibration import Calibration, GemmCurve, GemmResiduals, scale_calibration
from phantom.cost.roofline import (
    causal_keep_fraction,
    gemm_point,
    gemm_residual,
    gemm_time_ns,
    gemm_wave_factor,
    mta_launches,
)
from phantom.hardware import get_gpu

from measured import measured_rows, sweep_rows

aten = torch.ops.aten
BF16 = torch.bfloat16
META = "meta"


@pytest.fixture(scope="module")
def h100() -> RooflineCostModel:
    return RooflineCostModel(get_gpu("H100"))


def t(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=META)


def est(model: RooflineCostModel, op, *args, **kwargs) -> KernelCost | None:
    """Run the op on meta tensors for its output, then estimate it as the simulator would."""
    out = op(*args, **kwargs)
    return model.estimate(op, args, kwargs, out)


def norm_input(p: dict, dtype: str) -> torch.Tensor:
    """A batch-norm sweep row's (N, C, H, W) input, in its dtype and layout."""
    x = t(p["N"], p["C"], p["H"], p["W"], dtype={"bf16": BF16, "fp16": torch.float16, "fp32": torch.float32}[dtype])
    return x.contiguous(memory_format=torch.channels_last) if p["layout"] == "channels_last" else x


def model_over_measured(rows: list[dict], cost_of) -> list[float]:
    """Predicted/measured time of each sweep row, `cost_of(row)` giving the model's KernelCost."""
    return [cost_of(r).gpu_ns / (r["median_us"] * 1e3) for r in rows]


def median_and_worst(ratios: list[float]) -> tuple[float, float]:
    """Of predicted/measured ratios: the median and the largest factor off, either way."""
    factors = sorted(math.exp(abs(math.log(r))) for r in ratios)
    return factors[len(factors) // 2], factors[-1]


# ---- contract ---------------------------------------------------------------------------
def test_protocol_and_fields(h100):
    assert isinstance(h100, CostModel)
    c = est(h100, aten.mm.default, t(256, 512), t(512, 1024))
    assert c.op_class == "gemm" and c.source == "model"
    assert c.flops == 2 * 256 * 512 * 1024
    assert c.bytes == 2 * (256 * 512 + 512 * 1024 + 256 * 1024)
    assert c.gpu_ns > 0
    with pytest.raises(AttributeError):
        c.gpu_ns = 1.0  # frozen


# ---- kernel-less ops ----------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: (aten.view.default, (t(4, 8), [32])),
    lambda: (aten._unsafe_view.default, (t(4, 8), [32])),
    lambda: (aten.t.default, (t(4, 8),)),
    lambda: (aten.transpose.int, (t(4, 8), 0, 1)),
    lambda: (aten.permute.default, (t(2, 4, 8), [2, 0, 1])),
    lambda: (aten.expand.default, (t(1, 8), [4, 8])),
    lambda: (aten.slice.Tensor, (t(4, 8), 1, 0, 4)),
    lambda: (aten.select.int, (t(4, 8), 0, 1)),
    lambda: (aten.unsqueeze.default, (t(4, 8), 0)),
    lambda: (aten.squeeze.dim, (t(4, 1), 1)),
    lambda: (aten.as_strided.default, (t(4, 8), [8, 4], [1, 8])),
    lambda: (aten.alias.default, (t(4, 8),)),
    lambda: (aten.detach.default, (t(4, 8),)),
    lambda: (aten.lift_fresh.default, (t(4, 8),)),
    lambda: (aten.split.Tensor, (t(4, 8), 2)),
    lambda: (aten.unbind.int, (t(4, 8),)),
    lambda: (aten.empty.memory_format, ([4, 8],)),
    lambda: (aten.empty_strided.default, ([4, 8], [8, 1])),
    lambda: (aten.empty_like.default, (t(4, 8),)),
    lambda: (aten.new_empty.default, (t(4, 8), [3])),
    lambda: (aten.view_as_real.default, (torch.empty(4, dtype=torch.complex64, device=META),)),
])
def test_views_and_allocations_launch_no_kernel(h100, make):
    op, args = make()
    kwargs = {"device": META} if op in (aten.empty.memory_format, aten.empty_strided.default) else {}
    assert est(h100, op, *args, **kwargs) is None


def test_zero_element_ops_launch_nothing(h100):
    assert est(h100, aten.mm.default, t(0, 64), t(64, 64)) is None
    assert est(h100, aten.add.Tensor, t(0, 8), t(0, 8)) is None


def test_unknown_argument_layout_falls_back_to_bytes(h100):
    model = RooflineCostModel(get_gpu("H100"))
    x = t(64, 64)
    c = model.estimate(aten.mm.default, (x,), {}, x)  # malformed: one operand
    assert c is not None and c.gpu_ns > 0 and model.fallbacks == {"mm": 1}


def test_metadata_ops_are_kernelless(h100):
    x = t(4, 8)
    assert h100.estimate(aten.sym_size.int, (x, 0), {}, 4) is None
    assert h100.estimate(aten.sym_stride.int, (x, 0), {}, 8) is None
    assert h100.estimate(torch.ops.prim.device.default, (x,), {}, x.device) is None
    assert h100.estimate(aten.resize_.default, (x, [2, 16]), {}, x) is None


@pytest.mark.parametrize("make,cls", [
    (lambda: (aten.clone.default, (t(64, 64),)), "copy"),
    (lambda: (aten.clone.default, (t(64, 64).t(),)), "copy"),
    (lambda: (aten.copy_.default, (t(64, 64), t(64, 64))), "copy"),
    (lambda: (aten._to_copy.default, (t(64, 64),), {"dtype": torch.float32}), "copy"),
    (lambda: (aten.cat.default, ([t(8, 64), t(8, 64)], 0)), "copy"),
    (lambda: (aten.zeros.default, ([64, 64],), {"device": META}), "elementwise"),
    (lambda: (aten.fill_.Scalar, (t(64, 64), 1.0)), "elementwise"),
    (lambda: (aten.zero_.default, (t(64, 64),)), "elementwise"),
    (lambda: (aten.add.Tensor, (t(64, 64), t(64, 64))), "elementwise"),
    (lambda: (aten.gelu_backward.default, (t(64, 64), t(64, 64))), "elementwise"),
    (lambda: (aten.sum.dim_IntList, (t(64, 64), [1])), "reduction"),
    (lambda: (aten.amax.default, (t(64, 64), [1])), "reduction"),
    (lambda: (aten.native_layer_norm.default, (t(64, 64), [64], t(64), t(64), 1e-5)), "norm"),
    (lambda: (aten._softmax.default, (t(64, 64), -1, False)), "softmax"),
    (lambda: (aten.nll_loss_forward.default, (t(64, 100, dtype=torch.float32),
                                              torch.empty(64, dtype=torch.long, device=META), None, 1, -100)), "loss"),
    (lambda: (aten.embedding.default, (t(100, 64), torch.empty(8, dtype=torch.long, device=META))), "embedding"),
    (lambda: (aten.native_dropout.default, (t(64, 64), 0.1, True)), "random"),
    (lambda: (aten.uniform_.default, (t(64, 64),)), "random"),
    (lambda: (aten.cumsum.default, (t(64, 64), 1)), "other"),
])
def test_kernel_ops_are_costed(h100, make, cls):
    op, args, *kw = make()
    c = est(h100, op, *args, **(kw[0] if kw else {}))
    assert c is not None and c.op_class == cls and c.gpu_ns > 0
    assert c.op_class in OP_CLASSES


def test_copy_bytes_do_not_double_count(h100):
    x, y = t(1024, 1024), t(1024, 1024)
    copy = est(h100, aten.copy_.default, x, y)
    assert copy.bytes == 2 * x.numel() * 2  # dst written once, src read once
    add_ = est(h100, aten.add_.Tensor, x, y)
    assert add_.bytes == 3 * x.numel() * 2  # self read+written, other read
    out = t(1024, 1024)
    add_out = est(h100, aten.add.out, x, y, out=out)
    assert add_out.bytes == 3 * x.numel() * 2  # out= written once, not read
    bias = t(1024).expand(1024, 1024)  # broadcast view: its distinct elements are read once
    assert est(h100, aten.add.Tensor, x, bias).bytes == (2 * x.numel() + 1024) * 2


def test_transposed_copy_is_slower_than_contiguous(h100):
    contiguous = est(h100, aten.clone.default, t(8192, 8192))
    transposed = est(h100, aten.clone.default, t(8192, 8192).t(), memory_format=torch.contiguous_format)
    assert transposed.bytes == contiguous.bytes
    assert transposed.gpu_ns > 2 * contiguous.gpu_ns


# ---- GEMM ---------------------------------------------------------------------------------
def held_out_gemm_ns(gpu_name: str, row: dict) -> float:
    """The model's time for a measured GEMM row with the residuals at its shape left out: the
    curve and the other shapes' corrections only (leave-one-shape-out, as calibrate.py
    cross-validates)."""
    gpu = get_gpu(gpu_name)
    cal = load_calibration(gpu).gemm
    p = row["params"]
    batch, align = p.get("batch", 1), _gemm_alignment("bf16", p)
    curve = gemm_time_ns(cal, "bf16", gpu, batch, p["M"], p["N"], p["K"], row["flops"], row["bytes"],
                         align_bytes=align, correct=False)
    at = tuple(round(v, 4) for v in gemm_point(batch, p["M"], p["N"], p["K"]))
    return curve * gemm_residual(cal.residuals["bf16"], batch, p["M"], p["N"], p["K"], align, skip=at)


def test_big_bf16_gemm_near_measured_peak_fraction(h100):
    n = 8192
    c = est(h100, aten.mm.default, t(n, n), t(n, n))
    assert c.flops == 2 * n**3
    # Measured on an H100 (bench/kernels/results/kernels_H100.json): 734 TFLOP/s at 8192^3 (989
    # peak), 737-798 in other sweeps. The fitted model reproduces its own rows, so the check is
    # on the prediction with this shape's residual left out.
    row = next(r for r in measured_rows("H100", "mm", "bf16")
               if (r["params"]["M"], r["params"]["N"], r["params"]["K"]) == (n, n, n))
    achieved = c.flops / held_out_gemm_ns("H100", row) / 1e3
    assert 0.65 * 989.4 < achieved < 0.85 * 989.4


def test_gemms_predicted_without_their_own_rows():
    """Every bf16 GEMM the H100 sweep measured (mm, addmm, bmm; aligned and not), each predicted
    with its own shape's residual left out. Tolerances from the fit's own cross-validation over
    all 516 of its rows (H100.json fit "gemm.bf16.cross_validated": median 4.95%, p90 13.8%,
    worst 39.8%); these 132 came out 4.8%, 11.7%, 28%. Every GEMM 1.5x off fails the median."""
    rows = [r for r in sweep_rows("kernels_H100.json") if r["class"] == "gemm" and r["dtype"] == "bf16"]
    errors = sorted(abs(held_out_gemm_ns("H100", r) / (r["median_us"] * 1e3) - 1.0) for r in rows)
    assert len(errors) == 132
    assert errors[len(errors) // 2] < 0.06
    assert errors[int(0.9 * len(errors))] < 0.15
    assert errors[-1] < 0.40


def test_gemm_time_monotonic_in_size(h100):
    times = [est(h100, aten.mm.default, t(n, n), t(n, n)).gpu_ns for n in (64, 256, 1024, 2048, 4096, 8192)]
    assert times == sorted(times) and times[0] < times[-1] / 100
    ks = [est(h100, aten.mm.default, t(1024, k), t(k, 1024)).gpu_ns for k in (128, 512, 2048, 8192, 32768)]
    assert ks == sorted(ks)


def test_small_gemm_hits_launch_floor(h100):
    c = est(h100, aten.mm.default, t(16, 16), t(16, 16))
    assert 1_000 < c.gpu_ns < 6_000  # a few microseconds, not nanoseconds


def test_skinny_gemm_is_memory_bound(h100):
    c = est(h100, aten.mm.default, t(8, 8192), t(8192, 8192))
    t_mem = c.bytes / (get_gpu("H100").hbm_gbps * 1e9) * 1e9
    assert t_mem < c.gpu_ns < 2.0 * t_mem


def test_unaligned_gemm_is_slow(h100):
    aligned = est(h100, aten.mm.default, t(4096, 4096), t(4096, 4096))
    odd = est(h100, aten.mm.default, t(4095, 4095), t(4095, 4095))
    assert odd.gpu_ns > 3 * aligned.gpu_ns  # measured 6x on H100 (no 16-byte-aligned fast path)


def test_fp32_vs_bf16_vs_tf32(h100):
    n = 4096
    bf16 = est(h100, aten.mm.default, t(n, n), t(n, n)).gpu_ns
    prev = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        fp32 = est(h100, aten.mm.default, t(n, n, dtype=torch.float32), t(n, n, dtype=torch.float32)).gpu_ns
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = est(h100, aten.mm.default, t(n, n, dtype=torch.float32), t(n, n, dtype=torch.float32)).gpu_ns
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    assert 8 < fp32 / bf16 < 25  # peak ratio 989/67 = 14.8 (measured 15.9 at 4096^3)
    assert 1.3 < tf32 / bf16 < 3.5  # tf32 peak is half of bf16's (measured 1.95)


def test_addmm_bmm_and_scaled_mm(h100):
    addmm = est(h100, aten.addmm.default, t(1024), t(4096, 1024), t(1024, 1024))
    assert addmm.op_class == "gemm" and addmm.flops == 2 * 4096 * 1024 * 1024
    bmm = est(h100, aten.bmm.default, t(32, 512, 64), t(32, 64, 512))
    assert bmm.flops == 2 * 32 * 512 * 64 * 512
    f8 = torch.float8_e4m3fn
    a = torch.empty(4096, 4096, dtype=f8, device=META)
    b = torch.empty(4096, 4096, dtype=f8, device=META).t()
    one = torch.empty((), dtype=torch.float32, device=META)
    fp8 = h100.estimate(aten._scaled_mm.default, (a, b, one, one), {"out_dtype": BF16},
                        torch.empty(4096, 4096, dtype=BF16, device=META))
    bf16 = est(h100, aten.mm.default, t(4096, 4096), t(4096, 4096))
    assert fp8.gpu_ns < bf16.gpu_ns  # fp8 tensor cores are twice as fast


def test_gemm_epilogue_reading_c_or_writing_wider_adds_its_bytes_at_hbm_speed(h100):
    """A GEMM accumulated into an fp32 C (Megatron's fused wgrad: bf16 A and B, beta = 1)
    costs the plain GEMM plus its epilogue's 6 extra bytes per element at the HBM's bandwidth
    (measured fully exposed on an H100: bench/kernels/measure.py --only gemm_wide_c); a
    broadcast bias, or beta = 0, reads no C."""
    m, n, k = 4096, 4096, 8192
    g, x = t(k, m).t(), t(k, n)
    plain = est(h100, aten.mm.default, g, x)
    c = t(m, n, dtype=torch.float32)
    wide = h100.estimate(aten.addmm.dtype_out, (c, g, x, torch.float32), {"out": c}, c)
    epilogue_ns = 6 * m * n / h100.gpu.hbm_gbps
    assert wide.gpu_ns == pytest.approx(plain.gpu_ns + epilogue_ns, rel=1e-6)
    wide_d = est(h100, aten.mm.dtype, g, x, torch.float32)  # fp32 D, no C
    assert wide_d.gpu_ns == pytest.approx(plain.gpu_ns + 2 * m * n / h100.gpu.hbm_gbps, rel=1e-6)
    bias = est(h100, aten.addmm.default, t(n), g, x)
    no_c = est(h100, aten.baddbmm.default, t(1, m, n), g[None], x[None], beta=0.0)
    assert bias.gpu_ns < plain.gpu_ns + 0.01 * epilogue_ns
    assert no_c.gpu_ns < plain.gpu_ns + 0.01 * epilogue_ns


def test_wave_exponents_split_one_partial_wave_from_a_tail():
    curve = GemmCurve(eff_max=0.8, k_half=200.0, tile_m=128, tile_n=128, wave_gamma=0.1, split_k_min=4096.0,
                      fill_gamma=0.6)
    assert gemm_wave_factor(curve, 66, 132) == pytest.approx(0.5 ** 0.6)  # half the SMs idle
    assert gemm_wave_factor(curve, 198, 132) == pytest.approx(0.75 ** 0.1)  # 1.5 waves: a tail
    assert gemm_wave_factor(curve, 264, 132) == 1.0
    old = GemmCurve(eff_max=0.8, k_half=200.0, tile_m=128, tile_n=128, wave_gamma=0.5, split_k_min=4096.0)
    assert gemm_wave_factor(old, 66, 132) == pytest.approx(0.5 ** 0.5)  # files without fill_gamma


def test_gemm_residual_interpolates_and_fades():
    at = gemm_point(1, 4096, 4096, 4096)
    res = GemmResiduals(h=1.0, w0=0.1, aligned=((*at, math.log(0.8)),), unaligned=((*at, math.log(2.0)),))
    on = gemm_residual(res, 1, 4096, 4096, 4096)
    assert on == pytest.approx(math.exp(math.log(0.8) / 1.1))  # the point, shrunk by the prior weight
    near = gemm_residual(res, 1, 5000, 4096, 4096)
    assert on < near < 1.0  # a neighbour gets part of the correction
    assert gemm_residual(res, 1, 2**20, 4096, 4096) == pytest.approx(1.0)  # far away: the curve alone
    assert gemm_residual(res, 1, 4096, 4096, 4096, align_bytes=8) > 1.5  # its own alignment class
    assert gemm_residual(res, 1, 4096, 4096, 4096, skip=at) == 1.0  # left out (cross-validation)
    assert gemm_residual(res, 4, 1024, 4096, 4096) == pytest.approx(on)  # batch counts as rows of M
    assert gemm_residual(None, 1, 4096, 4096, 4096) == 1.0


def test_shipped_gemm_residuals_are_small_and_cross_validated():
    for name in ("H100", "H200"):
        cal = load_calibration(get_gpu(name))
        res = cal.gemm.residuals["bf16"]
        assert len(res.aligned) > 100 and res.unaligned  # the sweep's grid, both alignment classes
        # Corrections, not a second model: the largest is a short-K bmm at M = N = 1800 (H200,
        # 1.52x: off the 128-tile grid, output-write bound), the rest stay within 1.35x.
        assert max(abs(p[3]) for p in res.aligned) < math.log(1.6)
        cv = cal.fit["gemm.bf16.cross_validated"]
        assert cv["median_abs_rel_err"] < 0.06 and cv["h"] == res.h and cv["w0"] == res.w0
        assert cal.gemm.curves["bf16"].fill_gamma is not None


def test_residuals_roundtrip_and_stay_within_an_architecture():
    h100 = load_calibration(get_gpu("H100"))
    again = Calibration.from_dict(h100.to_dict())
    assert again.gemm.residuals == h100.gemm.residuals and again.gemm.curves == h100.gemm.curves
    assert scale_calibration(h100, get_gpu("H100"), get_gpu("H200")).gemm.residuals == h100.gemm.residuals
    assert scale_calibration(h100, get_gpu("H100"), get_gpu("A100")).gemm.residuals == {}


def test_conv_gets_no_gemm_residuals(h100):
    bare = RooflineCostModel(get_gpu("H100"), dataclasses.replace(
        h100.cal, gemm=dataclasses.replace(h100.cal.gemm, residuals={})))
    x, w = t(8, 64, 56, 56), t(128, 64, 3, 3)
    args = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    assert est(h100, aten.convolution.default, *args).gpu_ns == est(bare, aten.convolution.default, *args).gpu_ns
    mm = (t(3000, 1024), t(1024, 4096))
    assert est(h100, aten.mm.default, *mm).gpu_ns != est(bare, aten.mm.default, *mm).gpu_ns


def test_grouped_conv_backward_counts_one_forward_per_gradient(h100):
    # torch.utils.flop_counter counts a depthwise conv's weight gradient as if it were dense
    # (~C times too many flops): the backward is costed from the forward's work instead
    x, w = t(32, 96, 56, 56), t(96, 1, 7, 7)
    conv = (x, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 96)
    fwd = est(h100, aten.convolution.default, *conv)
    g = t(32, 96, 56, 56)
    both = est(h100, aten.convolution_backward.default, g, x, w, [96], [1, 1], [3, 3], [1, 1], False, [0, 0], 96,
               [True, True, False])
    grad_input = est(h100, aten.convolution_backward.default, g, x, w, [96], [1, 1], [3, 3], [1, 1], False, [0, 0],
                     96, [True, False, False])
    assert both.flops == pytest.approx(2 * fwd.flops) and grad_input.flops == pytest.approx(fwd.flops)
    assert fwd.gpu_ns < both.gpu_ns < 20 * fwd.gpu_ns


def test_grouped_convs_match_the_grouped_sweep(h100):
    # the fallback's grouped-conv model against every row of the H100's conv_grouped sweep
    # (depthwise 3x3/5x5/7x7, ResNeXt's 32 groups, conv1d; bf16 and tf32, both layouts, fwd
    # and bwd): its calibration grid, so this checks the wiring and the fit's spread, and that
    # no row is off by the orders of magnitude the implicit-GEMM model gave (5-250x)
    rows = sweep_rows("sweep_grouped_H100.json")
    dtypes = {"bf16": BF16, "fp32": torch.float32}

    def cost(r):
        p, dt = r["params"], dtypes[r["dtype"]]
        dims, g, c, hw, k = p["dims"], p["groups"], p["C"], p["H"], p["R"]
        pad = k // 2 if dims == 2 else k - 1
        x = t(p["N"], c, hw, hw, dtype=dt) if dims == 2 else t(p["N"], c, hw, dtype=dt)
        if p["layout"] == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        w = t(c, c // g, k, k, dtype=dt) if dims == 2 else t(c, c // g, k, dtype=dt)
        geo = ([p["stride"]] * dims, [pad] * dims, [1] * dims, False, [0] * dims, g)
        y = aten.convolution.default(x, w, None, *geo)
        if p["bwd"]:
            return est(h100, aten.convolution_backward.default, torch.empty_like(y), x, w, None, *geo,
                       [True, True, False])
        return est(h100, aten.convolution.default, x, w, None, *geo)

    errors = model_over_measured(rows, cost)
    assert len(errors) == 128
    median, worst = median_and_worst(errors)
    assert median < 1.35  # median within 35%
    # the worst: fp32 channels_last backward, which cuDNN runs 4x slower at 7x7 than its 3x3 and
    # 5x5 rate says (one rate per key cannot follow that); every other row is within 2.6x
    assert worst < 4.5


def held_out_factors(rows: list[dict], key, fit_rows, predict) -> list[float]:
    """Two-fold cross-validation of a per-key fit: the sweep's shapes split in two halves (every
    dtype, layout and direction of a shape in the same half), each half predicted by the model
    fitted to the other, as the calibration script fits it (`fit_rows(rows)` gives a key's
    constants, `predict(constants, row)` its time in ns). Returns each row's factor off."""
    import contextlib
    import io

    def shape(r):
        return tuple(sorted((k, v) for k, v in r["params"].items() if k not in ("layout", "bwd")))

    rows = [r for r in rows if key(r)]
    shapes = sorted({shape(r) for r in rows})
    factors = []
    for fold in (0, 1):
        train = [r for r in rows if shapes.index(shape(r)) % 2 != fold]
        with contextlib.redirect_stdout(io.StringIO()):  # the fits print their quality
            fitted = fit_rows(train)
        factors += [math.exp(abs(math.log(predict(fitted[key(r)], r) / (r["median_us"] * 1e3))))
                    for r in rows if shapes.index(shape(r)) % 2 == fold]
    return sorted(factors)


def test_grouped_convs_held_out():
    """The grouped-conv model (calibrate_conv.py) predicts sweep shapes it was not fitted to."""
    from phantom.cost import calibrate_conv as cc
    from phantom.cost.calibration import read_calibration

    gpu = get_gpu("H100")
    cal = read_calibration(Path(__file__).parents[1] / "phantom/cost/data/H100.json")
    factors = held_out_factors(sweep_rows("sweep_grouped_H100.json"), cc.grouped_key,
                               lambda rows: cc.fit_grouped(cal, gpu, rows),
                               lambda g, r: cc.predict_grouped_ns(cal, gpu, r, g))
    assert len(factors) == 128
    # The in-sample test above allows a median of 1.35x; held out the median is 1.22x and the
    # 90th percentile 2.0x. The tail is the fp32 channels-last 7x7 backward (cuDNN 4x slower
    # there than its 3x3 and 5x5 rate, which one rate per key cannot follow): held out, with
    # half its 7x7 rows gone, up to 7.3x; 8x bounds it.
    assert factors[len(factors) // 2] < 1.35
    assert factors[int(0.9 * len(factors))] < 2.3 and factors[-1] < 8.0


@pytest.mark.parametrize("sweep", ["sweep_bn_grouped_H100.json", "sweep_cudnn_bn_H100.json"])
def test_batch_norm_held_out(sweep):
    """The batch-norm model (calibrate_norm.py) predicts sweep shapes it was not fitted to, at
    the median within the bound its in-sample tests allow (1.25x; held out: 1.18x ATen, 1.10x
    cuDNN). The worst, held out: ATen's NCHW forward at batch 8 with 640-1280 channels, 2.6x
    (in-sample 2.3x); 2.8x bounds it."""
    from phantom.cost import calibrate_norm as cn

    factors = held_out_factors(sweep_rows(sweep), cn.key, lambda rows: cn.fit_batch_norm(rows)[0],
                               cn.predict_ns)
    assert len(factors) == 136
    assert factors[len(factors) // 2] < 1.25 and factors[-1] < 2.8


def test_batch_norm_follows_elements_and_nchw_channels(h100):
    # training-mode batch norm against the H100's batch_norm sweep (its calibration grid): time
    # follows the element count whatever the dtype, and NCHW with few channels runs slower
    rows = sweep_rows("sweep_bn_grouped_H100.json")
    def cost(r):
        p = r["params"]
        x = norm_input(p, r["dtype"])
        w, stats = t(p["C"], dtype=torch.float32), t(p["C"], dtype=torch.float32)
        if p["bwd"]:
            return est(h100, aten.native_batch_norm_backward.default, torch.empty_like(x), x, w, None, None, stats,
                       stats, True, 1e-5, [True, True, True])
        return est(h100, aten.native_batch_norm.default, x, w, w, None, None, True, 0.1, 1e-5)

    errors = model_over_measured([r for r in rows if r["class"] == "norm"], cost)
    assert len(errors) == 136
    median, worst = median_and_worst(errors)
    # median within 25%; the worst, NCHW forward at 7x7 with 512-2048 channels (ATen's
    # statistics kernel is 2-4x slower there than its backward), within 2.3x
    assert median < 1.25 and worst < 2.3
    nchw = est(h100, aten.native_batch_norm.default, t(128, 64, 112, 112), t(64), t(64), None, None, True, 0.1, 1e-5)
    nhwc = est(h100, aten.native_batch_norm.default, t(128, 64, 112, 112).contiguous(memory_format=torch.channels_last),
               t(64), t(64), None, None, True, 0.1, 1e-5)
    assert nchw.gpu_ns > 2 * nhwc.gpu_ns  # measured: 1571 against 621 us


def test_cudnn_batch_norm_against_its_sweep(h100):
    # fp32 and fp16 inputs dispatch to cuDNN's batch norm, whose rate depends on the dtype
    rows = sweep_rows("sweep_cudnn_bn_H100.json")
    def cost(r):
        p = r["params"]
        x = norm_input(p, r["dtype"])
        w = t(p["C"], dtype=torch.float32)
        if p["bwd"]:
            return est(h100, aten.cudnn_batch_norm_backward.default, x, torch.empty_like(x), w, w, w, w, w, 1e-5,
                       torch.empty(0, dtype=torch.uint8, device=META))
        return est(h100, aten.cudnn_batch_norm.default, x, w, w, w, w, True, 0.1, 1e-5)

    errors = model_over_measured(rows, cost)
    assert len(errors) == 136
    median, worst = median_and_worst(errors)
    assert median < 1.2 and worst < 2.3


def test_grouped_model_stays_within_its_sweep(h100):
    # 2 groups of 64 channels: a tensor-core conv, priced by the implicit-GEMM model (the
    # grouped model, fitted up to 16 channels per group, made its backward faster than its forward)
    x, w = t(32, 128, 56, 56), t(128, 64, 3, 3)
    geo = ([1, 1], [1, 1], [1, 1], False, [0, 0], 2)
    fwd = est(h100, aten.convolution.default, x, w, None, *geo)
    bwd = est(h100, aten.convolution_backward.default, t(32, 128, 56, 56), x, w, None, *geo, [True, True, False])
    assert bwd.gpu_ns > fwd.gpu_ns


def test_batch_norm_1d_takes_the_channels_last_kernels(h100):
    # ATen runs (N, C) batch norm with its channels-last kernels: no per-channel penalty
    x2d = t(65536, 64)
    x4d = t(1024, 64, 8, 8)  # as many elements in NCHW: one block per channel
    a = est(h100, aten.native_batch_norm.default, x2d, t(64), t(64), None, None, True, 0.1, 1e-5)
    b = est(h100, aten.native_batch_norm.default, x4d, t(64), t(64), None, None, True, 0.1, 1e-5)
    assert a.gpu_ns < b.gpu_ns


def test_other_architectures_drop_the_grouped_and_batch_norm_tables():
    from phantom.cost.calibration import load_calibration as load

    h100, a100 = load(get_gpu("H100")), load(get_gpu("A100"))
    assert h100.gemm.grouped_conv and h100.batch_norm
    assert not a100.gemm.grouped_conv and not a100.batch_norm


def test_fit_gemm_residuals_recovers_a_known_correction():
    """Rows made from the shipped curve times a known smooth factor: the stored residuals are that
    factor, and the cross-validated error is small."""
    gpu = get_gpu("H100")
    cal = load_calibration(gpu).gemm
    bare = dataclasses.replace(cal, residuals={})
    rows = []
    for m in (256, 1024, 4096):
        for n in (1024, 4096):
            for k in (512, 2048, 8192):
                p = {"M": m, "N": n, "K": k, "batch": 1}
                flops, nbytes = 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n)
                factor = 1.0 + 0.1 * math.log2(k / 512) / 4  # up to +10% at deep K
                ns = gemm_time_ns(bare, "bf16", gpu, 1, m, n, k, flops, nbytes, align_bytes=_gemm_alignment("bf16", p),
                                  correct=False) * factor
                rows.append({"class": "gemm", "op": "mm", "dtype": "bf16", "params": p, "flops": flops,
                             "bytes": nbytes, "median_us": ns / 1e3})
    quality: dict = {}
    res = fit_gemm_residuals(rows, gpu, bare, {}, quality)["bf16"]
    assert len(res.aligned) == len(rows) and not res.unaligned
    for x, y, z, r in res.aligned:
        assert r == pytest.approx(math.log(1.0 + 0.1 * (z - 9) / 4), abs=1e-3)
    assert quality["gemm.bf16.cross_validated"]["median_abs_rel_err"] < 0.03


# ---- attention ----------------------------------------------------------------------------
def sdpa(h100, b, h, s, d, causal, hkv=None):
    q, k, v = t(b, h, s, d), t(b, hkv or h, s, d), t(b, hkv or h, s, d)
    fwd = est(h100, aten._scaled_dot_product_flash_attention.default, q, k, v, 0.0, causal)
    return fwd


def test_flash_attention_flops_and_causal_half(h100):
    b, h, s, d = 8, 16, 4096, 128
    full = sdpa(h100, b, h, s, d, False)
    causal = sdpa(h100, b, h, s, d, True)
    assert full.op_class == "attention"
    assert full.flops == 4 * b * h * s * s * d
    assert causal.flops == pytest.approx(full.flops * (s + 1) / (2 * s))
    assert 0.45 < causal.gpu_ns / full.gpu_ns < 0.7  # measured 0.54-0.64 at long sequences


def test_flash_attention_backward_is_2_5x_forward_flops(h100):
    b, h, s, d = 2, 8, 2048, 128
    q, k, v = t(b, h, s, d), t(b, h, s, d), t(b, h, s, d)
    out = aten._scaled_dot_product_flash_attention.default(q, k, v, 0.0, True)
    fwd = h100.estimate(aten._scaled_dot_product_flash_attention.default, (q, k, v, 0.0, True), {}, out)
    args = (t(b, h, s, d), q, k, v, out[0], out[1], out[2], out[3], out[4], out[5], 0.0, True, out[6], out[7])
    bwd = est(h100, aten._scaled_dot_product_flash_attention_backward.default, *args)
    assert bwd.flops == pytest.approx(2.5 * fwd.flops)
    assert 1.5 < bwd.gpu_ns / fwd.gpu_ns < 5.0


def test_gqa_counts_query_heads_and_reads_fewer_bytes(h100):
    mha = sdpa(h100, 1, 32, 4096, 128, True)
    gqa = sdpa(h100, 1, 32, 4096, 128, True, hkv=8)
    assert gqa.flops == mha.flops and gqa.bytes < mha.bytes


def test_causal_fraction_is_exact():
    assert causal_keep_fraction(4, 4) == pytest.approx(10 / 16)
    assert causal_keep_fraction(4096, 4096, 128) == pytest.approx(33 / 64)


# ---- memory-bound and optimizer -----------------------------------------------------------
def test_memory_bound_scales_with_bytes(h100):
    small = est(h100, aten.add.Tensor, t(64 << 20), t(64 << 20))
    big = est(h100, aten.add.Tensor, t(256 << 20), t(256 << 20))
    assert big.bytes == 4 * small.bytes
    assert 3.6 < big.gpu_ns / small.gpu_ns < 4.1
    achieved = big.bytes / (big.gpu_ns * 1e-9) / 1e9
    assert 0.75 * 3350 < achieved < 1.0 * 3350  # measured 3.05-3.18 TB/s on H100


def test_memory_bound_monotonic_and_floored(h100):
    sizes = [1 << k for k in range(8, 30, 2)]
    times = [est(h100, aten.gelu.default, t(n)).gpu_ns for n in sizes]
    assert times == sorted(times)
    assert 500 < times[0] < 5_000  # a tiny kernel still costs its launch floor


def test_h200_memory_bound_faster_than_h100(h100):
    h200 = RooflineCostModel(get_gpu("H200"))
    a = est(h100, aten.add.Tensor, t(256 << 20), t(256 << 20)).gpu_ns
    b = est(h200, aten.add.Tensor, t(256 << 20), t(256 << 20)).gpu_ns
    assert 1.2 < a / b < 1.6  # HBM 4.8 vs 3.35 TB/s


def _adamw(h100, n_params: int, n_tensors: int = 64):
    shapes = [(n_params // n_tensors,)] * n_tensors
    lists = [[t(*s, dtype=torch.float32) for s in shapes] for _ in range(4)]
    steps = [torch.empty((), device=META) for _ in shapes]
    args = (lists[0], lists[1], lists[2], lists[3], [], steps)
    kwargs = dict(lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)
    return est(h100, aten._fused_adamw_.default, *args, **kwargs)


def test_fused_adamw_scales_with_parameter_count(h100):
    small, big = _adamw(h100, 10_000_000), _adamw(h100, 100_000_000)
    assert small.op_class == "optimizer"
    assert big.bytes == pytest.approx(10 * small.bytes, rel=1e-3)
    assert big.bytes == pytest.approx(100_000_000 * 28 + 64 * 4, rel=1e-3)  # 4 lists read, 3 written (fp32)
    assert 5 < big.gpu_ns / small.gpu_ns < 12


def test_many_small_tensors_pay_per_launch(h100):
    few = _adamw(h100, 1_024_000, n_tensors=8)
    many = _adamw(h100, 1_024_000, n_tensors=1000)
    assert many.gpu_ns > 2 * few.gpu_ns  # 1000 tensors: 28 launches of <= 36 tensors each


def test_mta_launch_packing():
    assert mta_launches([65536 * 320], depth=4) == 1
    assert mta_launches([65536 * 320 + 1], depth=4) == 2
    assert mta_launches([1024] * 36, depth=4) == 1
    assert mta_launches([1024] * 37, depth=4) == 2
    assert mta_launches([1024] * 110, depth=1) == 1


def test_foreach_ops(h100):
    xs = [t(4096, 4096, dtype=torch.float32) for _ in range(8)]
    ys = [t(4096, 4096, dtype=torch.float32) for _ in range(8)]
    add = est(h100, aten._foreach_add_.List, xs, ys, alpha=0.1)
    assert add.op_class == "optimizer" and add.bytes == 3 * 8 * 4096 * 4096 * 4
    norm = est(h100, aten._foreach_norm.Scalar, xs)
    assert norm.op_class == "reduction" and norm.gpu_ns < add.gpu_ns


def test_embedding_reads_rows_not_table(h100):
    table, idx = t(128256, 4096), torch.empty(4096, dtype=torch.long, device=META)
    fwd = est(h100, aten.embedding.default, table, idx)
    assert fwd.bytes == 4096 * 8 + 2 * 4096 * 4096 * 2


def test_transfer_detected(h100):
    host = torch.empty(1 << 24, dtype=torch.float32)  # a real CPU tensor
    dev = torch.empty(1 << 24, dtype=torch.float32, device=META)
    c = h100.estimate(aten.copy_.default, (dev, host), {}, dev)
    assert c.op_class == "transfer" and c.bytes == 64 << 20
    assert 0.5e6 < c.gpu_ns < 20e6  # PCIe: ~1.2 ms pinned at ~55 GB/s, longer pageable


# ---- memoisation --------------------------------------------------------------------------
def test_cache_hits_identical(h100):
    model = RooflineCostModel(get_gpu("H100"))
    a, b = t(2048, 2048), t(2048, 2048)
    out = aten.mm.default(a, b)
    first = model.estimate(aten.mm.default, (a, b), {}, out)
    again = model.estimate(aten.mm.default, (t(2048, 2048), t(2048, 2048)), {}, out)
    assert again is first and model.hits == 1 and model.misses == 1
    other = model.estimate(aten.mm.default, (t(2048, 1024), t(1024, 2048)), {}, aten.mm.default(t(2048, 1024),
                                                                                                 t(1024, 2048)))
    assert other != first and model.misses == 2


def test_cache_ignores_float_values_but_not_dtype_or_strides(h100):
    model = RooflineCostModel(get_gpu("H100"))
    x = t(1024, 1024)
    r1 = model.estimate(aten.mul.Scalar, (x, 0.5), {}, x)
    r2 = model.estimate(aten.mul.Scalar, (x, 0.25), {}, x)
    assert r1 is r2  # a different learning rate / scale is the same kernel
    y = t(1024, 1024, dtype=torch.float32)
    assert model.estimate(aten.mul.Scalar, (y, 0.5), {}, y) != r1
    xt = t(1024, 1024).t()
    model.estimate(aten.clone.default, (x,), {}, x)
    model.estimate(aten.clone.default, (xt,), {}, x)
    assert model.misses == 4


def test_fake_tensor_inputs_on_cpu():
    model = RooflineCostModel(get_gpu("H100"))
    with FakeTensorMode():
        a = torch.empty(4096, 4096, dtype=BF16)
        b = torch.empty(4096, 4096, dtype=BF16)
        out = aten.mm.default(a, b)
    fake = model.estimate(aten.mm.default, (a, b), {}, out)
    meta = model.estimate(aten.mm.default, (t(4096, 4096), t(4096, 4096)), {}, t(4096, 4096))
    assert fake.op_class == "gemm" and fake.gpu_ns == meta.gpu_ns


# ---- calibration --------------------------------------------------------------------------
def test_calibration_files_and_scaling():
    h100 = load_calibration(get_gpu("H100"))
    h200 = load_calibration(get_gpu("H200"))
    assert h100.origin == "measured" and h200.origin == "measured"
    assert "H100" in h100.source and "H200" in h200.source
    a100 = load_calibration(get_gpu("A100"))
    assert a100.origin.startswith("scaled from")
    assert a100.gemm.curves["bf16"].eff_max == pytest.approx(267.9 / 312.0)  # MAMF override for Ampere
    assert a100.gemm.residuals == {}  # H100's kernel residuals do not carry over to Ampere
    model = RooflineCostModel(get_gpu("A100"))
    c = est(model, aten.mm.default, t(8192, 8192), t(8192, 8192))
    achieved = c.flops / (c.gpu_ns * 1e-9) / 1e12
    assert 0.6 * 312 < achieved < 0.9 * 312


@pytest.mark.parametrize("op,cls", [
    (aten.mm.default, "gemm"), (aten._scaled_dot_product_efficient_attention.default, "attention"),
    (aten._flash_attention_backward.default, "attention"), (aten.convolution.default, "conv"),
    (aten.convolution_backward.default, "conv"), (aten._fused_rms_norm_backward.default, "norm"),
    (aten._log_softmax_backward_data.default, "softmax"), (aten.nll_loss_backward.default, "loss"),
    (aten.embedding_dense_backward.default, "embedding"), (aten._fused_adam_.default, "optimizer"),
    (aten._foreach_mul_.Scalar, "optimizer"), (aten.index_select.default, "copy"),
    (aten.index_put_.default, "copy"), (aten.normal_.default, "random"), (aten.mean.dim, "reduction"),
    (aten.where.self, "elementwise"), (aten.sort.default, "other"), (aten.view.default, None),
    (aten.contiguous.default, "copy"),
])
def test_classification(op, cls):
    assert classify(op).op_class == cls


def test_conv_uses_pytorch_flop_formula(h100):
    x, w = t(32, 64, 56, 56), t(64, 64, 3, 3)
    c = est(h100, aten.convolution.default, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    assert c.op_class == "conv" and c.flops == 2 * 32 * 64 * 56 * 56 * 64 * 9
    assert math.isfinite(c.gpu_ns) and c.gpu_ns > 0
