"""Calibrated roofline: per-op GPU time from FLOPs, bytes and measured efficiency curves.

time = floor + max(flops / (peak(dtype) * eff_compute(class, shape)),
                   bytes / (HBM * eff_mem(class, bytes)))

The efficiency curves are physics-shaped (wave quantisation over SMs, pipeline fill along K or
the sequence, Little's-law bandwidth saturation) with constants fitted to kernel times measured
on real GPUs (calibration.py holds them, calibrate.py fits them). The pure `*_time_ns` functions
below are shared with the fitter so that the fit and the estimate use one formula. GEMMs then
take a measured correction: the sweep rows' residuals against the curve, interpolated in
log2(batch*M, N, K) (`gemm_residual`, GemmResiduals), so a shape between grid points inherits
what its neighbours measured beyond the physics terms, and a shape far from any keeps the curve.

Hot path: `RooflineCostModel.estimate` memoises by a signature of the arguments (shapes, strides,
dtypes, devices, ints/bools/strings; floats only as zero/non-zero, since a learning rate or a
dropout probability changes values, not the kernel). Per-op metadata (class, schema read/write
roles) is computed once per OpOverload.
"""
from __future__ import annotations

import functools
import heapq
import json
import math
import operator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
from torch.utils.flop_counter import flop_registry

from phantom.cost.base import KernelCost
from phantom.cost.calibration import (
    AttnCurve,
    BatchNormCal,
    Calibration,
    GemmCal,
    GroupedConvCal,
    MemCurve,
    TransferCal,
    load_calibration,
)
from phantom.hardware.gpus import GPUSpec

# --------------------------------------------------------------------------------------
# Op tables
# --------------------------------------------------------------------------------------
# Ops that never launch a kernel on CUDA: allocation, metadata, views the schema does not
# annotate as views (_unsafe_view), and storage re-pointing. Views the schema annotates
# (OpOverload.is_view) and inplace_view-tagged ops are recognised generically.
KERNELLESS = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "_unsafe_view", "_reshape_alias", "alias", "detach", "detach_", "lift_fresh", "lift",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "dim", "numel",
    "storage_offset", "is_contiguous", "is_strides_like_format", "is_non_overlapping_and_dense",
    "is_same_size", "resize_", "resize_as_", "_resize_output_", "set_", "record_stream",
    "_assert_scalar", "_assert_tensor_metadata", "sym_constrain_range", "sym_constrain_range_for_size",
    "_functional_sym_constrain_range", "_functional_sym_constrain_range_for_size", "_make_dep_token",
    "_nested_tensor_size", "_nested_tensor_strides", "_has_same_storage_numel", "_version",
    "_conj", "_neg_view", "view", "_unsafe_view_copy",
    # a query (FSDP2's float8 all-gather path asks it of device tensors): was charged a kernel
    "is_pinned",
})
# Composite ops that alias when they can and copy when they must (reached only when a trace
# stops above decomposition): a kernel iff the output is a fresh tensor.
MAYBE_COPY = frozenset({"contiguous", "reshape", "reshape_as", "to", "type_as", "flatten", "_reshape_copy"})

GEMM_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "_scaled_mm", "_int_mm", "_addmm_activation", "mv", "addmv",
    "dot", "vdot", "addr", "linear", "_grouped_mm", "_scaled_grouped_mm",
})
CONV_OPS = frozenset({
    "convolution", "_convolution", "cudnn_convolution", "cudnn_convolution_transpose", "convolution_overrideable",
    "convolution_backward", "convolution_backward_overrideable", "_conv_depthwise2d", "conv_depthwise3d",
})
# name -> (query arg, layout, is_backward). Layout BHSD: (batch, heads, seq, dim); BSHD: flash-native.
ATTENTION_OPS: dict[str, tuple[str, bool]] = {
    "_scaled_dot_product_flash_attention": ("BHSD", False),
    "_scaled_dot_product_flash_attention_backward": ("BHSD", True),
    "_scaled_dot_product_efficient_attention": ("BHSD", False),
    "_scaled_dot_product_efficient_attention_backward": ("BHSD", True),
    "_scaled_dot_product_cudnn_attention": ("BHSD", False),
    "_scaled_dot_product_cudnn_attention_backward": ("BHSD", True),
    "_scaled_dot_product_fused_attention_overrideable": ("BHSD", False),
    "_scaled_dot_product_fused_attention_overrideable_backward": ("BHSD", True),
    "_flash_attention_forward": ("BSHD", False),
    "_flash_attention_backward": ("BSHD", True),
    "_efficient_attention_forward": ("BSHD", False),
    "_efficient_attention_backward": ("BSHD", True),
}
# FlexAttention's higher-order ops (torch._higher_order_ops.flex_attention): name -> backward.
# Arguments: query, key, value, then (forward) score_mod, block_mask or (backward) out,
# logsumexp, grad_out, grad_logsumexp, fw_graph, joint_graph, block_mask.
FLEX_ATTENTION_OPS = {"flex_attention": False, "flex_attention_backward": True}
NORM_OPS = frozenset({
    "native_layer_norm", "native_layer_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward", "rms_norm",
    "native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training", "cudnn_batch_norm",
    "cudnn_batch_norm_backward", "native_group_norm", "native_group_norm_backward", "batch_norm_stats",
    "batch_norm_elemt", "batch_norm_gather_stats", "batch_norm_gather_stats_with_counts",
    "batch_norm_backward_reduce", "batch_norm_backward_elemt", "_batch_norm_with_update",
    "_batch_norm_with_update_functional", "_batch_norm_no_update", "batch_norm_backward",
})
SOFTMAX_OPS = frozenset({
    "_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "_masked_softmax",
    "_masked_softmax_backward", "softmax", "log_softmax", "_safe_softmax",
})
LOSS_OPS = frozenset({
    "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward", "mse_loss",
    "mse_loss_backward", "binary_cross_entropy", "binary_cross_entropy_backward",
    "binary_cross_entropy_with_logits", "smooth_l1_loss", "smooth_l1_loss_backward", "huber_loss",
    "huber_loss_backward", "l1_loss", "kl_div", "soft_margin_loss", "soft_margin_loss_backward",
    "multilabel_margin_loss_forward", "multi_margin_loss", "cross_entropy_loss",
})
EMBEDDING_OPS = frozenset({
    "embedding", "embedding_dense_backward", "_embedding_bag", "_embedding_bag_forward_only",
    "_embedding_bag_backward", "_embedding_bag_dense_backward", "_embedding_bag_per_sample_weights_backward",
    "embedding_renorm_",
})
# Multi-tensor-apply kernels besides the _foreach_* family.
FUSED_OPTIMIZER_OPS = frozenset({
    "_fused_adamw_", "_fused_adam_", "_fused_sgd_", "_fused_adagrad_", "_fused_adamw", "_fused_adam",
    "_fused_sgd", "_fused_adagrad", "_amp_foreach_non_finite_check_and_unscale_",
})
GATHER_OPS = frozenset({"index_select", "gather", "index", "_unsafe_index", "take", "_unsafe_masked_index"})
SCATTER_OPS = frozenset({
    "scatter", "scatter_add", "scatter_reduce", "index_put", "_index_put_impl", "index_add", "index_copy",
    "masked_scatter", "put", "_unsafe_index_put", "_unsafe_masked_index_put_accumulate",
})
COPY_OPS = frozenset({
    "copy_", "copy", "_to_copy", "clone", "cat", "stack", "_copy_from", "_copy_from_and_resize", "lift_fresh_copy",
    "repeat", "constant_pad_nd", "reflection_pad1d", "reflection_pad2d", "reflection_pad3d",
    "replication_pad1d", "replication_pad2d", "replication_pad3d", "flip", "roll", "slice_scatter",
    "select_scatter", "diagonal_scatter", "as_strided_scatter", "narrow_copy", "expand_copy", "permute_copy",
    "view_copy", "t_copy", "transpose_copy", "unsqueeze_copy", "squeeze_copy", "detach_copy", "alias_copy",
    "slice_copy", "select_copy", "split_with_sizes_copy", "split_copy", "unbind_copy", "unfold_copy",
    "diagonal_copy", "as_strided_copy", "col2im", "im2col", "pixel_shuffle", "pixel_unshuffle",
    "channel_shuffle", "masked_select", "index_fill", "index_fill_", "_local_scalar_dense",
} | GATHER_OPS | SCATTER_OPS | {n + "_" for n in SCATTER_OPS})
RANDOM_OPS = frozenset({
    "native_dropout", "uniform_", "normal_", "random_", "bernoulli_", "bernoulli", "exponential_", "geometric_",
    "log_normal_", "cauchy_", "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
    "normal", "multinomial", "_fused_dropout", "rrelu_with_noise", "native_dropout_",
})
# Fills and other non-pointwise-tagged elementwise kernels.
ELEMENTWISE_EXTRA = frozenset({
    "all_gather_copy_in", "chunk_cat",  # FSDP2's copy kernels (fsdp:: namespace)
    "fill", "fill_", "zero_", "zeros", "ones", "full", "scalar_tensor", "new_zeros", "new_ones", "new_full",
    "zeros_like", "ones_like", "full_like", "arange", "linspace", "logspace", "tril", "triu", "tril_", "triu_",
    "_amp_update_scale_", "_masked_scale", "mish_backward", "hardtanh_backward", "leaky_relu_backward",
    "elu_backward", "softplus_backward", "hardswish_backward", "hardsigmoid_backward", "glu", "glu_backward",
    "_prelu_kernel", "_prelu_kernel_backward", "polar", "complex", "eye",
})
REDUCTION_EXTRA = frozenset({"_foreach_norm", "_foreach_max", "aminmax", "median", "nanmedian", "mode"})
OTHER_SCANS = frozenset({"cumsum", "cumprod", "sort", "topk", "argsort", "unique", "_unique2", "nonzero",
                         "kthvalue", "searchsorted", "bucketize", "histc", "bincount"})

# The first argument of these is written, never read.
WRITE_ONLY_SELF = frozenset({
    "copy_", "fill_", "zero_", "uniform_", "normal_", "random_", "bernoulli_", "exponential_", "geometric_",
    "log_normal_", "cauchy_", "_foreach_copy_", "_foreach_zero_", "_copy_from", "_copy_from_and_resize",
})
# The first argument of these only supplies dtype/device/shape.
TEMPLATE_SELF = frozenset({
    "new_zeros", "new_ones", "new_full", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
    "randint_like",
})
TRANSFER_OPS = frozenset({"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "copy", "_local_scalar_dense"})

# Useful flops per element of the largest tensor for non-matrix classes (reported, and the
# compute side of the roofline against the non-tensor-core fp32 rate; these ops are memory-bound).
FLOPS_PER_ELEMENT = {"elementwise": 1.0, "reduction": 1.0, "norm": 8.0, "softmax": 5.0, "loss": 2.0,
                     "random": 4.0, "optimizer": 4.0, "copy": 0.0, "embedding": 0.0, "other": 1.0,
                     "transfer": 0.0}
FUSED_ADAM_FLOPS_PER_PARAM = 16.0

# Multi-tensor apply (aten/src/ATen/native/cuda/MultiTensorApply.cuh): chunk of 65536 elements
# per block, at most 320 blocks and depth_to_max_tensors[depth-1] tensors per launch.
MTA_CHUNK = 65536
MTA_MAX_BLOCKS = 320
MTA_MAX_TENSORS = (110, 64, 48, 36, 30)

FP8_DTYPES = frozenset(d for d in (getattr(torch, n, None) for n in (
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")) if d is not None)
# Share of a GEMM epilogue's extra bytes (_epilogue_bytes) that adds to the kernel's time at
# the HBM's nominal bandwidth: the epilogue runs after its tile's mainloop, not beside it. On a
# real H100 an fp32 C accumulated into (beta = 1) added a median 0.98x (quartiles 0.76-1.30x)
# of its 6 extra bytes per element at 3.35 TB/s to 48 wgrad GEMMs of 1-12k x 1-10k x 2-16k
# (measured by bench/kernels/measure.py --only gemm_wide_c, data in
# bench/kernels/results/gemm_wide_c_H100_{a,b}.json); the mainloop's overlap
# with it was never more than this noise.
EPILOGUE_EXPOSED = 1.0
FLASH_TILE = 128  # flash-attention q/k block: causal work is counted at this granularity


# Math an element of the pointwise ops Inductor inlines into generated kernels, in
# FLOP-equivalents at the fp32 vector rate (phantom/cost/calibrate_inductor.py fits it from
# bench/kernels/inductor_sweep.py); ops not listed hide under any kernel's memory traffic.
GENERATED_MATH_PATH = Path(__file__).resolve().parent / "data" / "generated_math.json"


@functools.lru_cache(maxsize=1)
def _generated_math_table() -> dict[str, float]:
    try:
        return dict(json.loads(GENERATED_MATH_PATH.read_text())["flops_per_element"])
    except (OSError, ValueError, KeyError):
        return {}


def generated_math_flops(op_name: str, numel: int, dtype: torch.dtype | None = None) -> float:
    """FLOP-equivalents a generated kernel spends computing `op_name` over `numel` elements
    (`dtype`: the value's; a conversion to float8 is "to_float8")."""
    name = op_name.split(".")[0]
    if dtype in FP8_DTYPES and name in ("convert_element_type", "_to_copy"):
        name = "to_float8"
    per = _generated_math_table().get(name)
    return per * numel if per else 0.0


# Inductor's split of a reduction with few outputs (torch/_inductor/choices.py,
# reduction_split_factor, inner reductions, Hopper): its threads, a reduction's elements an
# output below which it does not split, and the per-thread element targets.
SPLIT_THREADS = 256
SPLIT_MIN_ELEMENTS = 8192
MAX_THREADS_PER_SM = 2048
# A split whose chunks do not start on 16-byte boundaries (or do not divide the reduction)
# loads element by element: on the H100 such an amax moved 1.55 TB/s against 2.63-2.84 for
# aligned splits of the same op (bench/kernels/results/inductor_math_H100.json, `math_amax.add`).
MISALIGNED_SPLIT_EFFICIENCY = 0.55
# ... and its math no longer hides under its loads: over seven math-heavy ops (erf, GELU and its
# gradient, SiLU and its gradient, sigmoid, tanh) at that misaligned size, the time beyond the
# misaligned loads was a median 0.64 of the op's math time (0.47-0.82; the same file).
MISALIGNED_MATH_EXPOSED = 0.64


def _divisor_near(n: int, target: int, window: int) -> int | None:
    best = None
    for d in range(max(1, target - window), target + window + 1):
        if n % d == 0 and (best is None or abs(d - target) < abs(best - target)):
            best = d
    return best


def split_reduction_plan(reduction_numel: int, outputs: int, sm_count: int,
                         itemsize: int = 2) -> tuple[int, bool]:
    """(splits, aligned) of an Inductor reduction of `outputs` values over `reduction_numel`
    elements each: 1 split when it is not split; `aligned` whether each split's chunk starts on
    a 16-byte boundary (vector loads)."""
    outputs = max(1, outputs)
    if outputs >= 2 * sm_count or reduction_numel <= SPLIT_MIN_ELEMENTS:
        return 1, True
    total = reduction_numel * outputs
    min_per_device = 32 * sm_count * MAX_THREADS_PER_SM
    max_per_device = 512 * sm_count * MAX_THREADS_PER_SM
    if total <= min_per_device:
        split_size = 32
    elif total < max_per_device:
        target_blocks = sm_count * MAX_THREADS_PER_SM // (2 * SPLIT_THREADS)
        per_output = -(-target_blocks // outputs)
        tmp = -(-reduction_numel // (SPLIT_THREADS * per_output))
        closest = _divisor_near(reduction_numel, tmp, 29)
        split_size = max(closest, 32) if closest is not None else tmp
    else:
        closest = _divisor_near(reduction_numel, 512, 49)
        split_size = closest if closest is not None else 512
    splits = -(-reduction_numel // (split_size * SPLIT_THREADS))
    chunk, rest = divmod(reduction_numel, splits)
    return splits, rest == 0 and (chunk * itemsize) % 16 == 0


# --------------------------------------------------------------------------------------
# Pure time formulas (shared with calibrate.py)
# --------------------------------------------------------------------------------------
def wave_util(units: float, sms: int) -> float:
    """Fraction of SM-slots busy when `units` equal work units run in waves over `sms` SMs."""
    if units <= 0:
        return 1.0
    return units / (math.ceil(units / sms) * sms)


def gemm_wave_factor(curve: Any, units: int, sms: int, align_bytes: int = 16) -> float:
    """wave_util ** gamma: fill_gamma for fewer units than SMs (one partial wave), else wave_gamma
    (the tail of the last of several waves; see GemmCurve), or misaligned_wave_gamma for the
    4/8-byte kernels."""
    gamma = curve.wave_gamma
    if units < sms and getattr(curve, "fill_gamma", None) is not None:
        gamma = curve.fill_gamma
    elif 4 <= align_bytes < 16 and getattr(curve, "misaligned_wave_gamma", None) is not None:
        gamma = curve.misaligned_wave_gamma
    return wave_util(units, sms) ** gamma


def gemm_efficiency(curve: Any, sms: int, batch: int, m: int, n: int, k: int, align_bytes: int = 16) -> float:
    tiles_m, tiles_n = math.ceil(m / curve.tile_m), math.ceil(n / curve.tile_n)
    tiles = max(1, batch * tiles_m * tiles_n)
    split = 1
    if tiles < sms and k > curve.split_k_min:  # cuBLAS splits K to fill idle SMs
        split = max(1, min(sms // tiles, int(k // curve.split_k_min)))
    k_eff = k / split
    pad = (m / (tiles_m * curve.tile_m)) * (n / (tiles_n * curve.tile_n))
    return (curve.eff_max * gemm_wave_factor(curve, tiles * split, sms, align_bytes)
            * k_eff / (k_eff + curve.k_half_for(align_bytes)) * pad * curve.alignment_scale(align_bytes))


def gemm_point(batch: int, m: int, n: int, k: int) -> tuple[float, float, float]:
    """Where a GEMM sits in the residual interpolation: (log2(batch*M), log2 N, log2 K)."""
    return (math.log2(max(1, batch * m)), math.log2(max(1, n)), math.log2(max(1, k)))


def gemm_residual(res: Any, batch: int, m: int, n: int, k: int, align_bytes: int = 16,
                  skip: tuple[float, float, float] | None = None) -> float:
    """Multiplicative correction of the analytic GEMM time, interpolated from the sweep's
    residuals (see GemmResiduals); `skip` leaves out the points at one location (cross-validation)."""
    if res is None:
        return 1.0
    points = res.aligned if align_bytes >= 16 else res.unaligned
    if not points:
        return 1.0
    x, y, z = gemm_point(batch, m, n, k)
    inv = -0.5 / (res.h * res.h)
    num, den = 0.0, res.w0
    for px, py, pz, r in points:
        if skip is not None and (px, py, pz) == skip:
            continue
        d2 = (x - px) ** 2 + (y - py) ** 2 + (z - pz) ** 2
        if d2 < 36.0 * res.h * res.h:  # beyond 6 h the weight is below 1e-7
            w = math.exp(d2 * inv)
            num += w * r
            den += w
    return math.exp(num / den) if den > 0 else 1.0


# Curves that run at another precision's tensor-core peak: a row-wise scaled float8 GEMM
# (torch._scaled_mm with a scale per row of A and per column of B; cuBLASLt's outer-vector-scaled
# kernels in torch 2.11's profile) has its own efficiency, 5-15% below the tensor-wise one at
# training sizes on the H100 (bench/kernels/results/sweep_fp8_H100.json).
_PEAK_PRECISION = {"fp8_rowwise": "fp8"}


def gemm_time_ns(cal: GemmCal, prec: str, gpu: GPUSpec, batch: int, m: int, n: int, k: int,
                 flops: float, nbytes: float, eff_scale: float = 1.0, align_bytes: int = 16,
                 correct: bool = True) -> float:
    """Analytic time (launch floor + the slower of compute and memory) times the residual
    correction interpolated from the sweep (`correct`: off for convolutions and while fitting)."""
    curve = cal.curves.get(prec) or cal.curves.get(_PEAK_PRECISION.get(prec, "bf16")) or cal.curves["bf16"]
    rate = _PEAK_PRECISION.get(prec, prec)
    peak = gpu.peak_tflops(rate if rate in ("bf16", "fp16", "tf32", "fp32", "fp8") else "fp32") * 1e12
    eff = max(gemm_efficiency(curve, gpu.sm_count, batch, m, n, k, align_bytes) * eff_scale, 1e-4)
    t_compute = flops / (peak * eff) if flops > 0 else 0.0
    t_memory = nbytes / (gpu.hbm_gbps * 1e9 * cal.mem_eff)
    ns = cal.floor_us * 1e3 + max(t_compute, t_memory) * 1e9
    if correct and cal.residuals:
        ns *= gemm_residual(cal.residuals.get(prec), batch, m, n, k, align_bytes)
    return ns


# The grouped-conv model is fitted up to ResNeXt's 16 input channels per group (the sweep's
# widest); wider groups run tensor-core kernels the implicit-GEMM model prices (its rate,
# extrapolated, put a 2-group conv's backward at 707 TFLOP/s).
GROUPED_CONV_MAX_CIN = 16


def grouped_conv_time_ns(cal: GroupedConvCal, gpu: GPUSpec, flops: float, nbytes: float, cin_per_group: int,
                         floor_us: float) -> float:
    """A grouped or depthwise convolution (see GroupedConvCal)."""
    rate = cal.tflops * 1e12 * max(1, cin_per_group) ** cal.alpha
    t = max(flops / rate, nbytes / (gpu.hbm_gbps * 1e9 * cal.mem_eff))
    return floor_us * 1e3 + t * 1e9


def conv_channel_padding(cin: int, element_size: int) -> float:
    """Work factor of cuDNN padding input channels to a 16-byte multiple for tensor cores (3 -> 8)."""
    per = max(1, 16 // element_size)
    return math.ceil(cin / per) * per / cin if cin > 0 else 1.0


def conv_layout(x: torch.Tensor) -> str:
    """'channels_last' for a 4-d NHWC-strided input (not also plain contiguous), else 'contiguous'."""
    if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    return "contiguous"


def causal_keep_fraction(sq: int, sk: int, block: int = 1) -> float:
    """Fraction of (q, k) pairs (or block x block tiles) a top-left causal mask computes."""
    nq, nk = math.ceil(sq / block), math.ceil(sk / block)
    m = min(nq, nk)
    kept = m * (m + 1) / 2 + max(0, nq - nk) * nk
    return kept / (nq * nk)


def attention_work(batch: int, heads: int, sq: int, sk: int, d: int, dv: int, causal: bool,
                   bwd: bool) -> tuple[float, float]:
    """(useful flops, executed flops) of flash attention; bwd = 2.5x fwd when d == dv.

    Useful flops halve under a causal mask (exact pair count); executed flops count whole
    FLASH_TILE x FLASH_TILE tiles, which is what the kernel runs.
    """
    per_pair = 2.0 * (3 * d + 2 * dv) if bwd else 2.0 * (d + dv)
    full = batch * heads * sq * sk * per_pair
    if not causal:
        return full, full
    return full * causal_keep_fraction(sq, sk), full * causal_keep_fraction(sq, sk, FLASH_TILE)


FLEX_BLOCK_COUNTS_ATTR = "_phantom_block_counts"  # interception/attention.py sets it


def _flex_counts(mask: tuple) -> dict | None:
    return getattr(mask[2], FLEX_BLOCK_COUNTS_ATTR, None) if len(mask) > 2 else None


def flex_cta_blocks(mask: tuple, bwd: bool) -> list[float] | None:
    """Blocks each CTA of one (batch, head) walks under a FlexAttention block mask, averaged
    over the mask's batch and head dimensions: forward CTAs own a query block and walk its
    partial and full key blocks, backward CTAs own a key block and walk query blocks. None
    where the mask's counts are unknown."""
    counts = _flex_counts(mask)
    if counts is None:
        return None
    names = ("q_num_blocks", "full_q_num_blocks") if bwd else ("kv_num_blocks", "full_kv_num_blocks")
    per_row = None
    for name in names:
        t = counts.get(name)
        if t is not None:
            t = t.double().reshape(-1, t.shape[-1]).mean(0)
            per_row = t if per_row is None else per_row + t
    return None if per_row is None else per_row.tolist()


def flex_mask_key(mask: tuple) -> Any:
    counts = _flex_counts(mask)
    if counts is None:
        return None
    key = counts.get("key")
    if key is None:
        key = counts["key"] = hash(tuple(tuple(t.flatten().tolist()) for _, t in sorted(counts.items())
                                         if isinstance(t, torch.Tensor)))
    return key


SCHEDULE_SIM_LIMIT = 4096  # CTAs up to which the causal schedule is simulated exactly


def attention_cta_work(nq: int, nk: int, causal: bool, bwd: bool) -> list[int]:
    """Tiles each CTA of one (batch, head) processes, in launch order.

    Forward CTAs own a q-block and walk k-blocks; backward CTAs own a k-block and walk q-blocks.
    Under a top-left causal mask forward CTAs grow light to heavy, backward ones heavy to light.
    """
    if not causal:
        return [nk] * nq if not bwd else [nq] * nk
    if not bwd:
        return [min(m + 1, nk) for m in range(nq)]
    return [max(0, nq - j) for j in range(nk)]


def schedule_util(per_head: list[int], heads: int, sms: int) -> tuple[float, float]:
    """(SM utilisation, mean tiles per CTA) of CTAs placed in launch order on the first free SM.

    Uniform CTAs reduce to wave quantisation; causal CTAs of unequal length leave a tail that
    only a long list of CTAs hides (measured: 2 x 8 heads x 1024 causal runs no faster than
    non-causal on H100, 16 heads x 16384 runs at ~0.54 of it).
    """
    n = heads * len(per_head)
    total = heads * sum(per_head)
    if n == 0 or total == 0:
        return 1.0, 1.0
    mean = total / n
    if min(per_head) == max(per_head):
        return wave_util(n, sms), mean
    if n <= SCHEDULE_SIM_LIMIT:
        free = [0] * sms
        for _ in range(heads):
            for w in per_head:
                heapq.heapreplace(free, free[0] + w)
        makespan = max(free)
    else:  # long lists: the tail is about half of the longest CTA
        makespan = total / sms + max(per_head) / 2
    return total / (sms * makespan), mean


def attention_efficiency(curve: AttnCurve, sms: int, batch: int, heads: int, sq: int, sk: int, d: int,
                         causal: bool, bwd: bool, cta_work: list[float] | None = None) -> float:
    """cta_work: tiles each CTA of one (batch, head) walks, where a block mask decides them."""
    nq, nk = math.ceil(sq / curve.tile), math.ceil(sk / curve.tile)
    if cta_work is None:
        cta_work = attention_cta_work(nq, nk, causal, bwd)
    util, mean_tiles = schedule_util(cta_work, batch * heads, sms)
    loop_len = mean_tiles * curve.tile  # sequence length one CTA walks
    return (curve.eff_max * util ** curve.wave_gamma
            * loop_len / (loop_len + curve.s_half) * d / (d + curve.d_half))


def attention_time_ns(curve: AttnCurve, gpu: GPUSpec, prec: str, batch: int, heads: int, sq: int, sk: int,
                      d: int, causal: bool, bwd: bool, work_flops: float, nbytes: float,
                      cta_work: list[float] | None = None) -> float:
    """work_flops: flops the kernel executes (causal counted at tile granularity)."""
    eff = max(attention_efficiency(curve, gpu.sm_count, batch, heads, sq, sk, d, causal, bwd,
                                   cta_work), 1e-4)
    peak = gpu.peak_tflops(prec) * 1e12
    t_compute = work_flops / (peak * eff)
    t_memory = nbytes / (gpu.hbm_gbps * 1e9 * curve.mem_eff)
    return curve.floor_us * 1e3 + max(t_compute, t_memory) * 1e9


def mem_time_ns(curve: MemCurve, gpu: GPUSpec, nbytes: float, launches: int = 1, flops: float = 0.0) -> float:
    t = 0.0
    if nbytes > 0:
        bw = gpu.hbm_gbps * 1e9 * curve.bw_eff * -math.expm1(-nbytes / curve.b_sat)
        t = nbytes / bw
    t = max(t, flops / (gpu.fp32_tflops * 1e12))
    return launches * curve.floor_us * 1e3 + t * 1e9


def transfer_time_ns(cal: TransferCal, nbytes: float, h2d: bool, pinned: bool) -> float:
    gbps = ((cal.h2d_pinned_gbps if pinned else cal.h2d_pageable_gbps) if h2d
            else (cal.d2h_pinned_gbps if pinned else cal.d2h_pageable_gbps))
    return cal.floor_us * 1e3 + nbytes / (gbps * 1e9) * 1e9


def mta_launch_plan(numels: Iterable[int], depth: int) -> list[tuple[int, int]]:
    """(blocks, elements) of each launch multi_tensor_apply makes for tensors of these sizes.

    Same packing rule as MultiTensorApply.cuh: one block per 65536-element chunk; a launch is
    flushed when it holds MTA_MAX_BLOCKS chunks or its tensor table is full at a tensor's end.
    """
    max_tensors = MTA_MAX_TENSORS[min(max(depth, 1), 5) - 1]
    plan: list[tuple[int, int]] = []
    tensors = blocks = elems = 0
    for numel in numels:
        if numel <= 0:
            continue
        tensors += 1
        chunks, last = divmod(numel, MTA_CHUNK)
        chunks, last = (chunks + 1, last) if last else (chunks, MTA_CHUNK)
        while chunks > 0:
            take = min(chunks, MTA_MAX_BLOCKS - blocks)
            blocks += take
            chunks -= take
            elems += take * MTA_CHUNK - (MTA_CHUNK - last if chunks == 0 else 0)
            if blocks == MTA_MAX_BLOCKS or (tensors == max_tensors and chunks == 0):
                plan.append((blocks, elems))
                blocks = elems = 0
                tensors = 0 if chunks == 0 else 1  # a tensor split across launches carries over
    if blocks:
        plan.append((blocks, elems))
    return plan


def mta_launches(numels: Iterable[int], depth: int) -> int:
    return len(mta_launch_plan(numels, depth))


def mta_time_ns(curve: MemCurve, gpu: GPUSpec, nbytes: float, plan: list[tuple[int, int]], flops: float = 0.0) -> float:
    """Sum over launches of floor + the launch's bytes at a bandwidth its block count can reach."""
    elems = sum(e for _, e in plan)
    if elems == 0:
        return len(plan) * curve.floor_us * 1e3
    per_elem = nbytes / elems
    hbm = gpu.hbm_gbps * 1e9 * curve.bw_eff
    sat = curve.sat_blocks if curve.sat_blocks > 0 else gpu.sm_count
    t = sum(per_elem * e / (hbm * min(1.0, b / sat)) for b, e in plan)
    return len(plan) * curve.floor_us * 1e3 + max(t, flops / (gpu.fp32_tflops * 1e12)) * 1e9


# --------------------------------------------------------------------------------------
# Argument helpers
# --------------------------------------------------------------------------------------
def _as_int(v: Any) -> int:
    try:
        return int(v)
    except Exception:  # an unbacked SymInt: use its hint when it has one
        hint = getattr(getattr(v, "node", None), "hint", None)
        return int(hint) if hint is not None else 1


def _dims(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(_as_int(s) for s in t.shape)


def _tensor_bytes(t: torch.Tensor) -> float:
    """Bytes of the distinct elements a tensor addresses (stride-0 broadcast dims count once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        size = _as_int(size)
        if size == 0:
            return 0.0
        if _as_int(stride) != 0:
            n *= size
    return float(n * t.element_size())


def _tensors(x: Any) -> Iterator[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)


def _numel(t: torch.Tensor) -> int:
    return math.prod(_dims(t))


_SHAPE = operator.attrgetter("shape")


def _sig(x: Any) -> Any:
    """Hashable signature of one argument: what the kernel's cost can depend on.

    Devices are left out (the estimate is device-agnostic); `_sig_dev` adds them for the ops
    whose cost depends on them (host<->device copies).
    """
    if isinstance(x, torch.Tensor):
        return (x.shape, x.stride(), x.dtype)
    tx = type(x)
    if tx is float:
        return x != 0.0  # values (lr, eps, alpha) don't change the kernel; zero vs non-zero can (dropout)
    if tx is int or tx is bool or tx is str or x is None:
        return x
    if tx is list or tx is tuple:
        if x and isinstance(x[0], torch.Tensor):
            try:  # tensor lists (foreach): shapes of every tensor, dtype of the first
                return (len(x), tuple(map(_SHAPE, x)), x[0].dtype)
            except AttributeError:  # a None among tensors (index lists)
                pass
        return tuple(_sig(v) for v in x)
    if isinstance(x, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return x
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return _as_int(x) if isinstance(x, torch.SymInt) else str(x)
    return tx.__name__  # generators and other objects don't change the cost


def _sig_args(args: tuple) -> tuple:
    return tuple(map(_sig, args))


def _mta_sig(args: tuple) -> tuple:
    """Multi-tensor-apply arguments: the lists run in lockstep (same shapes), so the first tensor
    list's shapes identify them all; the others only add their length and dtype."""
    out: list[Any] = []
    seen_list = False
    for v in args:
        if type(v) is list and v and isinstance(v[0], torch.Tensor):
            out.append((len(v), v[0].dtype) if seen_list else _sig(v))
            seen_list = True
        else:
            out.append(_sig(v))
    return tuple(out)


def _sig_dev(args: tuple) -> tuple:
    return tuple(t.device.type for t in _tensors(args))


# --------------------------------------------------------------------------------------
# Per-op metadata
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OpInfo:
    name: str  # packet name without namespace, e.g. "mm"
    op_class: str | None  # None: kernel-less
    arg_names: tuple[str, ...]
    arg_roles: tuple[str, ...]  # per schema argument: "r" read, "w" written only, "rw" both
    maybe_copy: bool = False
    mta: bool = False  # multi-tensor-apply kernel
    tf32_sensitive: bool = False  # fp32 inputs take tf32 when the backend flag allows


def _op_name(func: Any) -> tuple[str, str]:
    schema = getattr(func, "_schema", None)
    if schema is None:
        return "", getattr(func, "__name__", str(func))
    ns, _, name = schema.name.partition("::")
    return ns, name


def _arg_roles(func: Any, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    schema = getattr(func, "_schema", None)
    if schema is None:
        return (), ()
    names, roles = [], []
    for i, a in enumerate(schema.arguments):
        written = a.alias_info is not None and a.alias_info.is_write
        if not written:
            role = "r"
        elif a.is_out or (i == 0 and name in WRITE_ONLY_SELF):
            role = "w"
        else:
            role = "rw"
        if i == 0 and name in TEMPLATE_SELF:
            role = "-"
        names.append(a.name)
        roles.append(role)
    return tuple(names), tuple(roles)


def classify(func: Any) -> OpInfo:
    """Op class of an OpOverload (None: launches no kernel)."""
    ns, name = _op_name(func)
    names, roles = _arg_roles(func, name)
    tags = set(getattr(func, "tags", ()))
    base = name[:-1] if name.endswith("_") and not name.startswith("_foreach") else name

    def info(cls: str | None, **kw: Any) -> OpInfo:
        return OpInfo(name, cls, names, roles, **kw)

    if ns == "prim" or name in KERNELLESS or torch.Tag.inplace_view in tags:
        return info(None)
    if name in MAYBE_COPY:
        return info("copy", maybe_copy=True)
    if getattr(func, "is_view", False):
        return info(None)
    if name in GEMM_OPS:
        return info("gemm", tf32_sensitive=True)
    if name in ATTENTION_OPS or name in FLEX_ATTENTION_OPS:
        return info("attention")
    if name in CONV_OPS:
        return info("conv", tf32_sensitive=True)
    if name.startswith("_foreach_") or name in FUSED_OPTIMIZER_OPS:
        return info("reduction" if name in REDUCTION_EXTRA else "optimizer", mta=True)
    for cls, table in (("norm", NORM_OPS), ("softmax", SOFTMAX_OPS), ("loss", LOSS_OPS),
                       ("embedding", EMBEDDING_OPS), ("random", RANDOM_OPS), ("copy", COPY_OPS)):
        if name in table or base in table:
            return info(cls)
    if name in OTHER_SCANS:
        return info("other")
    if name in ELEMENTWISE_EXTRA or base in ELEMENTWISE_EXTRA or torch.Tag.pointwise in tags:
        return info("elementwise")
    if torch.Tag.reduction in tags or name in REDUCTION_EXTRA:
        return info("reduction")
    return info("other")  # anything unknown: costed on the "other" class's fitted curve


class _Args:
    """Schema-aware access to one call's arguments by name."""

    __slots__ = ("info", "args", "kwargs")

    def __init__(self, info: OpInfo, args: tuple, kwargs: dict):
        self.info, self.args, self.kwargs = info, args, kwargs

    def get(self, name: str, default: Any = None) -> Any:
        try:
            i = self.info.arg_names.index(name)
        except ValueError:
            return self.kwargs.get(name, default)
        if i < len(self.args):
            return self.args[i]
        return self.kwargs.get(name, default)

    def by_role(self) -> Iterator[tuple[str, str, Any]]:
        """(name, role, value) for every argument given, positional or keyword."""
        names, roles = self.info.arg_names, self.info.arg_roles
        for i, v in enumerate(self.args):
            yield (names[i], roles[i], v) if i < len(names) else ("", "r", v)
        for k, v in self.kwargs.items():
            i = names.index(k) if k in names else -1
            yield k, (roles[i] if i >= 0 else "r"), v


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------
_MISS = object()


class RooflineCostModel:
    """Calibrated roofline CostModel for one GPU (see module docstring)."""

    source = "model"

    def __init__(self, gpu: GPUSpec, calibration: Calibration | None = None, max_cache_entries: int = 1 << 17):
        self.gpu = gpu
        self.cal = calibration or load_calibration(gpu)
        self._info: dict[Any, OpInfo] = {}
        self._cache: dict[Any, KernelCost | None] = {}
        self._max_cache = max_cache_entries
        self.hits = 0
        self.misses = 0
        self.fallbacks: dict[str, int] = {}  # ops whose class handler failed on unexpected arguments
        self._handlers: dict[str, Callable[[Any, OpInfo, _Args, Any], KernelCost | None]] = {
            "gemm": self._gemm, "attention": self._attention, "conv": self._conv,
        }

    # ---- public API ------------------------------------------------------------------
    def estimate(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict, out: object) -> KernelCost | None:
        info = self._info.get(func)
        if info is None:
            info = self._info[func] = classify(func)
        if info.op_class is None:
            return None
        key = self._key(func, info, args, kwargs)
        if key is not None:
            try:
                hit = self._cache.get(key, _MISS)
            except TypeError:  # unhashable (e.g. symbolic shapes): don't memoise
                key, hit = None, _MISS
            if hit is not _MISS:
                self.hits += 1
                return hit  # type: ignore[return-value]
        self.misses += 1
        cost = self._estimate_uncached(func, info, args, kwargs or {}, out)
        if key is not None:
            if len(self._cache) >= self._max_cache:
                self._cache.clear()  # bounded: a training loop revisits a small set of signatures
            self._cache[key] = cost
        return cost

    def fused_pointwise(self, nbytes: float, flops: float, load_efficiency: float = 1.0) -> KernelCost:
        """One generated kernel that reads and writes `nbytes` in all (a torch.compile'd chain
        of pointwise ops: engine/fusion.py), on the elementwise class's memory curve, or its
        math (`flops`, FLOP-equivalents at the fp32 rate: generated_math_flops) where that is
        longer. `load_efficiency`: the share of the curve's bandwidth its loads reach (a
        misaligned split reduction's: MISALIGNED_SPLIT_EFFICIENCY; a grid of fewer blocks than
        SMs: Simulation.launch_extension_kernel), with part of its math exposed."""
        curve = self.cal.mem_curve("elementwise")
        if load_efficiency >= 1.0:
            ns = mem_time_ns(curve, self.gpu, nbytes, flops=flops)
        else:
            ns = mem_time_ns(curve, self.gpu, nbytes / max(load_efficiency, 1e-3)) \
                + MISALIGNED_MATH_EXPOSED * flops / (self.gpu.fp32_tflops * 1e12) * 1e9
        return self._cost(ns, "elementwise", flops, nbytes)

    def clear_cache(self) -> None:
        self._cache.clear()
        self.hits = self.misses = 0

    # ---- memo key ----------------------------------------------------------------------
    def _key(self, func: Any, info: OpInfo, args: tuple, kwargs: dict) -> Any:
        if info.maybe_copy:
            return None  # depends on whether the output aliases the input: recompute
        sig = _mta_sig if info.mta else _sig_args
        key: tuple = (func, sig(args), tuple((k, _sig(v)) for k, v in kwargs.items()) if kwargs else None)
        if info.name in TRANSFER_OPS:
            key += (_sig_dev((args, tuple(kwargs.values()) if kwargs else ())),)
        if info.name in FLEX_ATTENTION_OPS:  # same shapes, another mask: other work
            key += (flex_mask_key(args[9] if FLEX_ATTENTION_OPS[info.name] else args[4]),)
        if info.tf32_sensitive and _has_fp32(key[1]):
            key += (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        return key

    # ---- dispatch ----------------------------------------------------------------------
    def _estimate_uncached(self, func: Any, info: OpInfo, args: tuple, kwargs: dict, out: Any) -> KernelCost | None:
        a = _Args(info, args, kwargs)
        if info.maybe_copy:
            src = args[0] if args else None
            if out is src or getattr(out, "_base", None) is not None:
                return None
        if info.name == "copy_" and len(args) > 1 and args[0] is args[1]:
            return None
        outs = list(_tensors(out))
        if outs and not info.mta and all(_numel(t) == 0 for t in outs):
            return None  # zero-element outputs: CUDA kernels return before launching
        try:
            if info.name in TRANSFER_OPS:
                cost = self._transfer(info, a, out)
                if cost is not None:
                    return cost
            if info.mta:
                return self._mta(func, info, a, out)
            handler = self._handlers.get(info.op_class or "")
            if handler is not None:
                return handler(func, info, a, out)
        except Exception:  # an argument layout the handler does not know: cost it by its bytes
            self.fallbacks[info.name] = self.fallbacks.get(info.name, 0) + 1
        return self._memory_bound(info, a, out)

    # ---- bytes -------------------------------------------------------------------------
    def _io_bytes(self, info: OpInfo, a: _Args, out: Any) -> float:
        special = _SPECIAL_BYTES.get(info.name)
        if special is not None:
            b = special(a, out)
            if b is not None:
                return b
        read_only = {"grads"} if info.name.startswith("_fused_") and a.get("grad_scale") is None else ()
        seen: set[int] = set()
        total = 0.0
        for name, role, value in a.by_role():
            if role == "-":
                continue
            mult = 1.0 if (role != "rw" or name in read_only) else 2.0
            for t in _tensors(value):
                if id(t) not in seen:
                    seen.add(id(t))
                    total += mult * _tensor_bytes(t)
        for t in _tensors(out):
            if id(t) not in seen:
                seen.add(id(t))
                total += _tensor_bytes(t)
        return total

    # ---- classes -----------------------------------------------------------------------
    def _cost(self, ns: float, cls: str, flops: float, nbytes: float) -> KernelCost:
        return KernelCost(gpu_ns=float(ns), op_class=cls, source=self.source, flops=float(flops), bytes=float(nbytes))

    def _gemm(self, func: Any, info: OpInfo, a: _Args, out: Any) -> KernelCost:
        batch, m, n, k, x = _gemm_dims(info.name, a, out)
        flops = _registry_flops(func, a, out)
        if flops is None:
            flops = 2.0 * batch * m * n * k
        nbytes = self._io_bytes(info, a, out)
        prec = _precision(x.dtype if x is not None else torch.float32, "matmul")
        if info.name == "_scaled_mm" and prec == "fp8" and _is_rowwise_scaled(a):
            prec = "fp8_rowwise"
        align = leading_dim_alignment(_tensors((a.args, out)))
        ns = gemm_time_ns(self.cal.gemm, prec, self.gpu, batch, m, n, k, flops, nbytes, align_bytes=align)
        ns += _epilogue_bytes(info.name, a, out, x) / self.gpu.hbm_gbps * EPILOGUE_EXPOSED
        cost = self._cost(ns, "gemm", flops, nbytes)
        if _PEAK_PRECISION.get(prec, prec) == "fp8" and self.gpu.fp8_tflops:
            cost = replace(cost, energy_per_flop=self.gpu.bf16_tflops / self.gpu.fp8_tflops)
        return cost

    def _conv(self, func: Any, info: OpInfo, a: _Args, out: Any) -> KernelCost:
        bwd = info.name.startswith("convolution_backward")
        x = a.get("input", a.get("self", a.args[0]))
        w = a.get("weight", a.args[1])
        grad = a.get("grad_output") if bwd else None
        y = grad if bwd else (out[0] if isinstance(out, (tuple, list)) else out)
        flops = _registry_flops(func, a, out)
        groups = max(1, _as_int(a.get("groups", 1) or 1))
        n_img = _dims(x)[0]
        out_spatial = math.prod(_dims(y)[2:]) if y is not None else 1
        cout, cin_g = _dims(w)[0], _dims(w)[1]
        window = math.prod(_dims(w)[2:])
        m, n, k = n_img * out_spatial, max(1, cout // groups), cin_g * window
        if flops is None or (bwd and groups > 1):
            # torch.utils.flop_counter counts a grouped conv's weight gradient as dense (its
            # transposed-conv trick drops the groups): a depthwise backward came out ~C times
            # its forward. Each gradient the backward computes costs one forward.
            grads = sum(1 for g in (a.get("output_mask") or (True, True))[:2] if g) if bwd else 1
            flops = 2.0 * groups * m * n * k * grads
        nbytes = self._io_bytes(info, a, out)
        prec = _precision(x.dtype, "conv")
        transposed = bool(a.get("transposed", False))
        if 1 < groups and cin_g <= GROUPED_CONV_MAX_CIN and not transposed:
            grouped = self._grouped_conv_cal(prec, x, bwd)
            if grouped is not None:
                ns = grouped_conv_time_ns(grouped, self.gpu, flops, nbytes, cin_g, self.cal.gemm.floor_us)
                return self._cost(ns, "conv", flops, nbytes)
        pad = conv_channel_padding(cin_g, x.element_size())
        # cuDNN's efficiency differs by layout (NCHW is transposed to NHWC around the kernel),
        # precision and direction: a measured scale for the combination where there is one.
        key = f"{prec}.{conv_layout(x)}.{'bwd' if bwd else 'fwd'}"
        scale = self.cal.gemm.conv_scales.get(key, self.cal.gemm.conv_scale)
        ns = gemm_time_ns(self.cal.gemm, prec, self.gpu, groups, m, n, k * pad, flops * pad, nbytes,
                          eff_scale=scale, correct=False)
        return self._cost(ns, "conv", flops, nbytes)

    def _grouped_conv_cal(self, prec: str, x: torch.Tensor, bwd: bool) -> GroupedConvCal | None:
        layout = "conv1d" if x.dim() == 3 else conv_layout(x)
        direction = "bwd" if bwd else "fwd"
        table = self.cal.gemm.grouped_conv
        # The sweep measured bf16 and fp32-with-tf32: fp16 runs the same 16-bit kernels as bf16,
        # and fp32 without tf32 the same direct (non-tensor-core) kernels for depthwise convs.
        for p in (prec, {"fp16": "bf16", "fp32": "tf32"}.get(prec, prec)):
            cal = table.get(f"{p}.{layout}.{direction}")
            if cal is not None:
                return cal
        return None

    def _attention(self, func: Any, info: OpInfo, a: _Args, out: Any) -> KernelCost:
        if info.name in FLEX_ATTENTION_OPS:
            return self._flex_attention(info, a, out)
        layout, bwd = ATTENTION_OPS[info.name]
        q, k, v = a.get("query"), a.get("key"), a.get("value")
        causal = bool(a.get("is_causal", False)) or _as_int(a.get("custom_mask_type", 0) or 0) != 0
        qd, kd, vd = _dims(q), _dims(k), _dims(v)
        if len(qd) == 3:  # varlen / packed (total_tokens, heads, dim): sequences of max length
            s_max = _as_int(a.get("max_q") or a.get("max_seqlen_q") or qd[0]) or qd[0]
            b, sq, hq, d = max(1, math.ceil(qd[0] / s_max)), s_max, qd[1], qd[2]
            sk, hkv, dv = s_max, kd[1], vd[2]
        elif layout == "BHSD":
            b, hq, sq, d = qd
            hkv, sk, dv = kd[1], kd[2], vd[3]
        else:
            b, sq, hq, d = qd
            sk, hkv, dv = kd[1], kd[2], vd[3]
        del hkv  # GQA shares K/V across query heads: work and CTAs follow the query heads
        flops, work = attention_work(b, hq, sq, sk, d, dv, causal, bwd)
        nbytes = self._io_bytes(info, a, out)
        prec = _precision(q.dtype, "attention")
        curve = self.cal.attn_curve(_attention_backend(info.name), bwd)
        ns = attention_time_ns(curve, self.gpu, prec, b, hq, sq, sk, d, causal, bwd, work, nbytes)
        return self._cost(ns, "attention", flops, nbytes)

    def _flex_attention(self, info: OpInfo, a: _Args, out: Any) -> KernelCost:
        """FlexAttention's generated kernel: flash attention over the blocks its block mask
        keeps, on the flash curve (FlexAttention's Triton kernel reaches about 90% of
        FlashAttention-2 forward and 85% backward on Hopper, PyTorch's FlexAttention post;
        bench/probes/flex_attention.py checks it against the real kernel). Per-CTA work comes from the
        mask's block counts where they are known (interception/attention.py computes them);
        an unknown mask (none given, or one built from the data) is charged dense."""
        bwd = FLEX_ATTENTION_OPS[info.name]
        q, k, v = a.args[0], a.args[1], a.args[2]
        mask = a.args[9] if bwd else a.args[4]
        b, hq, sq, d = _dims(q)
        sk, dv = _dims(k)[2], _dims(v)[3]
        per_pair = 2.0 * (3 * d + 2 * dv) if bwd else 2.0 * (d + dv)
        full = b * hq * sq * sk * per_pair
        curve = self.cal.attn_curve("flex", bwd)  # flash's where no flex curve was measured
        rows = flex_cta_blocks(mask, bwd)
        cta_work, density = None, 1.0
        if rows is not None:
            block = mask[-2] if not bwd else mask[-3]  # the walked dimension's block size
            other = math.ceil((sk if not bwd else sq) / block)
            density = sum(rows) / (len(rows) * other) if rows and other else 1.0
            cta_work = [r * block / curve.tile for r in rows]
        flops = full * density
        read = (q, k, v, a.args[3], a.args[5]) if bwd else (q, k, v)  # backward: out, grad_out
        nbytes = sum(_tensor_bytes(t) for t in _tensors(read)) + sum(_tensor_bytes(t) for t in _tensors(out))
        ns = attention_time_ns(curve, self.gpu, _precision(q.dtype, "attention"), b, hq, sq, sk, d,
                               False, bwd, flops, nbytes, cta_work)
        return self._cost(ns, "attention", flops, nbytes)

    def _mta(self, func: Any, info: OpInfo, a: _Args, out: Any) -> KernelCost | None:
        lists = [v for _, _, v in a.by_role() if isinstance(v, (list, tuple)) and v
                 and isinstance(v[0], torch.Tensor)]
        if not lists:
            return self._memory_bound(info, a, out)
        numels = [_numel(t) for t in lists[0]]
        total = sum(numels)
        if total == 0:
            return None
        returns_list = isinstance(out, (list, tuple)) and len(out) > 0 and not info.name.endswith("_")
        depth = len(lists) + (1 if returns_list else 0)
        if info.name.startswith("_fused_adam"):
            depth = 5 if a.get("amsgrad") else 4  # params, grads, exp_avg, exp_avg_sq (+ max_exp_avg_sq)
        elif info.name in ("_foreach_norm", "_foreach_max"):
            depth = 1  # results go to a side buffer, not a tensor list
        plan = mta_launch_plan(numels, depth)
        if info.name in ("_foreach_norm", "_foreach_max"):
            plan.append((1, 0))  # second pass: per-tensor reduction of the per-chunk partials
        nbytes = self._io_bytes(info, a, out)
        per_el = FUSED_ADAM_FLOPS_PER_PARAM if info.name.startswith("_fused_adam") else FLOPS_PER_ELEMENT["optimizer"]
        flops = per_el * total
        dtype = lists[0][0].dtype
        curve = self.cal.mem_curve("optimizer", f"{info.name}.{_DTYPE_NAMES.get(dtype, dtype)}", info.name)
        ns = mta_time_ns(curve, self.gpu, nbytes, plan, flops=flops)
        return self._cost(ns, info.op_class or "optimizer", flops, nbytes)

    def _transfer(self, info: OpInfo, a: _Args, out: Any) -> KernelCost | None:
        if info.name == "_local_scalar_dense":
            src = a.args[0]
            nbytes = float(src.element_size())
            return self._cost(transfer_time_ns(self.cal.transfer, nbytes, False, False), "transfer", 0.0, nbytes)
        if info.name == "_to_copy":
            src, dst = a.args[0], out
        elif info.name.startswith("_copy_from"):  # _copy_from(self=src, dst)
            src, dst = a.args[0], a.args[1] if len(a.args) > 1 else a.get("dst")
        else:  # copy_(self=dst, src) and friends
            dst, src = a.args[0], a.get("src", a.args[1] if len(a.args) > 1 else None)
        if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor):
            return None
        src_cpu, dst_cpu = src.device.type == "cpu", dst.device.type == "cpu"
        if src_cpu == dst_cpu:
            return None  # same side: an ordinary device copy (or a CPU op, filtered earlier)
        host = src if src_cpu else dst
        nbytes = _tensor_bytes(dst)
        ns = transfer_time_ns(self.cal.transfer, nbytes, h2d=src_cpu, pinned=_is_pinned(host))
        return self._cost(ns, "transfer", 0.0, nbytes)

    def _memory_bound(self, info: OpInfo, a: _Args, out: Any) -> KernelCost | None:
        cls = info.op_class or "other"
        nbytes = self._io_bytes(info, a, out)
        if info.name in BATCH_NORM_TRAINING:
            cost = self._batch_norm(info, a, nbytes)
            if cost is not None:
                return cost
        largest = max((_numel(t) for t in _tensors((a.args, tuple(a.kwargs.values()), out))), default=0)
        if largest == 0 and nbytes == 0:
            return None  # zero-element ops return before launching
        flops = FLOPS_PER_ELEMENT.get(cls, 1.0) * largest
        key = (_copy_key(info.name, a, out) if cls == "copy" else
               _reduction_key(info.name, a) if cls == "reduction" else info.name)
        curve = self.cal.mem_curve(cls, key, info.name)
        return self._cost(mem_time_ns(curve, self.gpu, nbytes, flops=flops), cls, flops, nbytes)

    def _batch_norm(self, info: OpInfo, a: _Args, nbytes: float) -> KernelCost | None:
        """Training-mode batch norm (BatchNormCal): ATen's kernel (bf16 inputs) or cuDNN's (fp32
        and fp16 inputs); None where it is not measured, in eval mode, or for zero elements."""
        bwd = info.name.endswith("_backward")
        x = a.get("input")
        training = a.get("training", a.get("train", True))
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or not training:
            return None
        key = f"{_batch_norm_layout(x)}.{'bwd' if bwd else 'fwd'}"
        if info.name.startswith("cudnn"):  # cuDNN's kernels read bytes: their rate depends on the dtype
            key = f"cudnn.{_DTYPE_NAMES.get(x.dtype, 'fp32')}.{key}"
        cal = self.cal.batch_norm.get(key)
        numel = _numel(x)
        if cal is None or numel == 0:
            return None
        ns = batch_norm_time_ns(cal, numel, max(1, _dims(x)[1]))
        flops = FLOPS_PER_ELEMENT.get("norm", 1.0) * numel
        return self._cost(ns, "norm", flops, nbytes)


BATCH_NORM_TRAINING = frozenset({"native_batch_norm", "native_batch_norm_backward", "cudnn_batch_norm",
                                 "cudnn_batch_norm_backward"})


def _batch_norm_layout(x: torch.Tensor) -> str:
    """Which of ATen's batch-norm kernels runs (batch_norm_use_channels_last_kernels): the
    channels-last ones for NHWC/NDHWC inputs and for any input whose channel dimension is the
    innermost (a BatchNorm1d over (N, C)), the per-channel NCHW ones otherwise."""
    if x.dim() == 2 or (x.dim() > 2 and x.stride(1) == 1):
        return "channels_last"
    if x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d):
        return "channels_last"
    return conv_layout(x)


def batch_norm_time_ns(cal: BatchNormCal, numel: int, channels: int) -> float:
    """Training-mode batch norm over `numel` elements in `channels` channels (BatchNormCal)."""
    rate = cal.gelems_per_s * 1e9 * min(1.0, channels / cal.c_sat)
    return cal.floor_us * 1e3 + numel / rate * 1e9


# --------------------------------------------------------------------------------------
# Helpers used by the model
# --------------------------------------------------------------------------------------
_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _reduction_key(name: str, a: _Args) -> str:
    """"<op>.outer" when the innermost (contiguous) dimension is kept: a column reduction, as in bias
    gradients, which strides through memory and runs slower than a row reduction."""
    x = a.args[0] if a.args and isinstance(a.args[0], torch.Tensor) else None
    dims = a.get("dim")
    if x is None or x.dim() < 2 or dims is None or dims == []:
        return name
    dims = [dims] if isinstance(dims, int) else list(dims)
    last = x.dim() - 1
    return name if any(_as_int(d) % x.dim() == last for d in dims) else f"{name}.outer"


def _copy_key(name: str, a: _Args, out: Any) -> str:
    """Curve key of a copy: "permute" when it transposes, "<op>.widen"/".narrow" when it casts."""
    if _changes_layout(a, out):
        return "permute"
    src = next((t for t in _tensors(a.args) if t is not out), None)
    dst = out if isinstance(out, torch.Tensor) else None
    if name == "copy_" and len(a.args) > 1 and isinstance(a.args[1], torch.Tensor):
        src, dst = a.args[1], a.args[0]
    if src is not None and dst is not None and src.dtype != dst.dtype:
        return f"{name}.{'widen' if dst.element_size() > src.element_size() else 'narrow'}"
    return name


def _changes_layout(a: _Args, out: Any) -> bool:
    """A copy whose source and destination strides differ (a transpose/permute): strided access."""
    dst = out if isinstance(out, torch.Tensor) else None
    if dst is None:
        return False
    for t in _tensors(a.args):
        if t is not dst and t.dim() == dst.dim() and t.dim() > 1 and t.shape == dst.shape:
            return tuple(t.stride()) != tuple(dst.stride()) and 0 not in tuple(t.stride())
    return False


def _attention_backend(name: str) -> str:
    if "cudnn" in name:
        return "cudnn"
    if "efficient" in name:
        return "efficient"
    return "flash"  # flash, and the overrideable/unknown fused kernels


def byte_alignment(nbytes: int) -> int:
    """The largest of 16, 8, 4, 2, 1 dividing `nbytes` (cuBLAS's fast path needs 16)."""
    for a in (16, 8, 4, 2):
        if nbytes % a == 0:
            return a
    return 1


def leading_dim_alignment(tensors: Iterable[torch.Tensor]) -> int:
    """Byte alignment of the worst matrix operand's leading dimension (16 = cuBLAS fast path)."""
    worst = 16
    for t in tensors:
        if t.dim() < 2:
            continue
        sizes, strides = _dims(t)[-2:], tuple(_as_int(s) for s in t.stride()[-2:])
        if 1 in sizes:
            continue  # a vector: no leading dimension to align
        lead = strides[0] if strides[1] == 1 else strides[1]
        worst = min(worst, byte_alignment(lead * t.element_size()))
    return worst


def _has_fp32(sig: Any) -> bool:
    """Whether any tensor signature (shape, stride, dtype) among the arguments is float32."""
    for s in sig:
        if type(s) is tuple and len(s) == 3 and s[2] is torch.float32:
            return True
    return False


def _is_pinned(t: torch.Tensor) -> bool:
    try:
        return bool(t.is_pinned())
    except Exception:  # CPU-only builds or fake tensors may refuse: assume pageable
        return False


def _precision(dtype: torch.dtype, kind: str) -> str:
    if dtype is torch.bfloat16:
        return "bf16"
    if dtype is torch.float16:
        return "fp16"
    if dtype in FP8_DTYPES or dtype in (torch.int8, torch.uint8):
        return "fp8"  # int8 tensor-core rate equals fp8's on Hopper
    if dtype is torch.float32:
        if kind == "matmul" and torch.backends.cuda.matmul.allow_tf32:
            return "tf32"
        if kind == "conv" and torch.backends.cudnn.allow_tf32:
            return "tf32"
    # fp32 (and fp64: H100 fp64 tensor-core 67 and A100 19.5 TFLOP/s equal their fp32 vector rate)
    return "fp32"


def _is_rowwise_scaled(a: _Args) -> bool:
    """torch._scaled_mm(a, b, scale_a, scale_b, ...) with a scale per row (not one scalar)."""
    scale_a = a.args[2] if len(a.args) > 2 else a.get("scale_a")
    return isinstance(scale_a, torch.Tensor) and scale_a.numel() > 1


def _registry_flops(func: Any, a: _Args, out: Any) -> float | None:
    """PyTorch's own flop formula, called as FlopCounterMode does (shapes, out_val=out)."""
    f = flop_registry.get(getattr(func, "_overloadpacket", func))
    if f is None:
        return None
    try:
        return float(f(*a.args, **a.kwargs, out_val=out))
    except Exception:
        return None


def _epilogue_bytes(name: str, a: _Args, out: Any, x: torch.Tensor | None) -> float:
    """Bytes a GEMM's epilogue moves beyond a plain GEMM's (D written in the inputs' dtype,
    which the fitted curves include): a full C matrix read (addmm / baddbmm with beta != 0,
    not a broadcast bias) and D written wider than the inputs (an out_dtype GEMM's fp32 D).
    Megatron's fused weight-gradient accumulation (bf16 A and B, fp32 C read and written)
    is the common case."""
    if x is None or not isinstance(out, torch.Tensor):
        return 0.0
    extra = out.numel() * max(0, out.element_size() - x.element_size())
    c = a.get("self") if name in ("addmm", "baddbmm") else None
    if isinstance(c, torch.Tensor) and c.numel() == out.numel() and a.get("beta", 1) != 0:
        extra += c.numel() * c.element_size()
    return float(extra)


def _gemm_dims(name: str, a: _Args, out: Any) -> tuple[int, int, int, int, torch.Tensor | None]:
    """(batch, M, N, K, first operand) of a matrix op."""
    args = a.args
    if name in ("mm", "_scaled_mm", "_int_mm"):
        x, y = args[0], args[1]
        (m, k), n = _dims(x), _dims(y)[1]
        return 1, m, n, k, x
    if name in ("addmm", "_addmm_activation"):
        x, y = args[1], args[2]
        (m, k), n = _dims(x), _dims(y)[1]
        return 1, m, n, k, x
    if name in ("bmm", "baddbmm", "addbmm"):
        x, y = (args[0], args[1]) if name == "bmm" else (args[1], args[2])
        (b, m, k), n = _dims(x), _dims(y)[2]
        return b, m, n, k, x
    if name in ("mv", "addmv"):
        x = args[0] if name == "mv" else args[1]
        m, k = _dims(x)
        return 1, m, 1, k, x
    if name in ("dot", "vdot"):
        return 1, 1, 1, _dims(args[0])[0], args[0]
    if name == "addr":
        return 1, _dims(args[1])[0], _dims(args[2])[0], 1, args[1]
    if name == "linear":
        x, w = args[0], args[1]
        xd = _dims(x)
        return 1, math.prod(xd[:-1]), _dims(w)[0], xd[-1], x
    if name in ("_grouped_mm", "_scaled_grouped_mm"):
        x, y = args[0], args[1]
        xd, yd = _dims(x), _dims(y)
        if len(xd) == 3:
            return xd[0], xd[1], yd[-1], xd[2], x
        offs = a.get("offs")
        groups = _dims(offs)[0] if isinstance(offs, torch.Tensor) else 1
        if len(yd) == 3:  # 2D x 3D: groups of rows of x
            return yd[0], max(1, xd[0] // yd[0]), yd[2], xd[1], x
        return groups, xd[0], yd[1], max(1, xd[1] // groups), x  # 2D x 2D: groups along K
    xd = _dims(args[0])
    return 1, xd[0] if xd else 1, 1, xd[-1] if xd else 1, args[0]


def _gathered_bytes(a: _Args, out: Any) -> float:
    idx = sum(_tensor_bytes(t) for t in _tensors(a.args[1:]))
    return idx + 2.0 * sum(_tensor_bytes(t) for t in _tensors(out))


def _scatter_bytes(inplace: bool) -> Callable[[_Args, Any], float | None]:
    def f(a: _Args, out: Any) -> float | None:
        self_t = a.args[0]
        src = next((a.get(n) for n in ("src", "source", "values", "value") if isinstance(a.get(n), torch.Tensor)), None)
        idx = sum(_tensor_bytes(t) for t in _tensors(a.get("index", a.get("indices", a.get("mask")))))
        if src is None:
            return None
        moved = _tensor_bytes(src) + idx + 2.0 * _numel(src) * self_t.element_size()  # read-modify-write
        return moved if inplace else moved + 2.0 * _tensor_bytes(self_t)  # out-of-place clones self first
    return f


def _nll_forward_bytes(a: _Args, out: Any) -> float:
    x, target = a.args[0], a.args[1]
    weight = a.get("weight")
    read = _tensor_bytes(target) + _numel(target) * x.element_size()  # only the target column is read
    if isinstance(weight, torch.Tensor):
        read += _tensor_bytes(weight)
    return read + sum(_tensor_bytes(t) for t in _tensors(out))


def _nll_backward_bytes(a: _Args, out: Any) -> float:
    grad, target = a.args[0], a.get("target")
    weight = a.get("weight")
    b = _tensor_bytes(grad) + _tensor_bytes(target) + sum(_tensor_bytes(t) for t in _tensors(out))
    return b + (_tensor_bytes(weight) if isinstance(weight, torch.Tensor) else 0.0)


def _embedding_bwd_bytes(a: _Args, out: Any) -> float:
    """Zero-filled table written + gradient rows read, accumulated through fp32 partial sums
    (written and read back: 8 bytes per gradient element) + the indices."""
    grad = a.args[0]
    partials = 8.0 * _numel(grad)
    return _tensor_bytes(grad) + partials + _tensor_bytes(a.args[1]) + sum(_tensor_bytes(t) for t in _tensors(out))


def _fsdp_copy_in_bytes(a: _Args, out: Any) -> float | None:
    # Reads this rank's shards, writes them (cast to the output dtype) into its slice of the
    # all-gather buffer: not the whole world-size buffer the output tuple spans.
    inputs, dst = a.args[0], a.args[1]
    numel = sum(_numel(t) for t in inputs)
    return sum(_tensor_bytes(t) for t in inputs) + numel * dst.element_size()


def _fsdp_chunk_cat_bytes(a: _Args, out: Any) -> float | None:
    # Reads every gradient, writes the padded reduce-scatter input.
    return sum(_tensor_bytes(t) for t in a.args[0]) + _tensor_bytes(a.get("out"))


def _fsdp_split_copy_bytes(a: _Args, out: Any) -> float | None:
    # Reads the gathered buffer, writes each parameter's unsharded tensor.
    return _tensor_bytes(a.args[0]) + sum(_tensor_bytes(t) for t in a.get("out"))


_SPECIAL_BYTES: dict[str, Callable[[_Args, Any], float | None]] = {
    # FSDP2's custom copy kernels (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py)
    "all_gather_copy_in": _fsdp_copy_in_bytes,
    "chunk_cat": _fsdp_chunk_cat_bytes,
    "split_with_sizes_copy": _fsdp_split_copy_bytes,
    "embedding": _gathered_bytes,
    "embedding_dense_backward": _embedding_bwd_bytes,
    "nll_loss_forward": _nll_forward_bytes,
    "nll_loss2d_forward": _nll_forward_bytes,
    "nll_loss_backward": _nll_backward_bytes,
    "nll_loss2d_backward": _nll_backward_bytes,
    **{n: _gathered_bytes for n in GATHER_OPS},
    **{n: _scatter_bytes(False) for n in SCATTER_OPS},
    **{n + "_": _scatter_bytes(True) for n in SCATTER_OPS},
}
