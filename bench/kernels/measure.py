#!/usr/bin/env python3
"""Measure CUDA kernel times on a real GPU to calibrate phantom's roofline cost model.

Standalone: needs only the standard library and a CUDA build of torch (written against
torch 2.11); it does not import phantom. Each case times one aten op (the unit phantom
costs) so that the fitted curves describe exactly what the simulator will be asked about.

Method (see METHOD.md of the workplace and the notes below):
  * random inputs (never zeros: zeros flatter tensor cores and hide bad indexing);
  * inputs rotated over several buffer sets whose total exceeds a few times the L2 cache,
    so repeated calls do not read warm L2 (small ops still fit in L2: unavoidable);
  * warm-up first (cuBLAS handles, autotuned heuristics, lazy module load, clock ramp);
  * many back-to-back calls captured in a CUDA graph and replayed, timed with CUDA events,
    so short kernels are timed on the GPU and not by Python's launch overhead; ops that
    cannot be captured fall back to an eager loop (the row's "method" says which);
  * the median over replays of (replay time / calls per replay).

Output: JSON at --out (default $OUT/kernels_<gpu>.json when OUT is set, else ./kernels_<gpu>.json)
with device, driver, torch/CUDA versions, date, and rows
{op, class, shapes, dtype, params, median_us, p10_us, p90_us, flops, bytes, method, calls}.
`--quick` runs a ~30 second subset. The full run is sized for < 4 minutes on an H100.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

aten = torch.ops.aten

BF16 = torch.bfloat16
FP16 = torch.float16
FP32 = torch.float32
KB = 1024
MB = 1024**2
GB = 1024**3


# --------------------------------------------------------------------------------------
# Case description
# --------------------------------------------------------------------------------------
@dataclass
class Case:
    op: str  # aten op name (what phantom sees), e.g. "mm", "_fused_adamw_"
    cls: str  # phantom op class: gemm, attention, elementwise, ...
    shapes: list  # input shapes, for the record
    dtype: str
    params: dict  # features the calibration fit needs (M/N/K, B/H/S/D, numel, ...)
    flops: float
    bytes: float  # minimal bytes read + written (phantom's accounting)
    make: Callable[[], Any]  # builds one input set on the GPU
    fn: Callable[[Any], Any]  # runs the op on one input set
    in_bytes: float = 0.0  # bytes of one input set, for sizing the rotation
    graph: bool = True  # capture in a CUDA graph (False: eager loop)
    quick: bool = False  # part of the --quick subset
    extra: dict = field(default_factory=dict)


def nbytes(shape: tuple, dtype: torch.dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def dname(dtype: torch.dtype) -> str:
    return {BF16: "bf16", FP16: "fp16", FP32: "fp32", torch.float8_e4m3fn: "fp8"}.get(dtype, str(dtype))


def rand(shape: tuple, dtype: torch.dtype = BF16, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, device="cuda", dtype=FP32) * scale).to(dtype)


# --------------------------------------------------------------------------------------
# GEMM
# --------------------------------------------------------------------------------------
def gemm_case(m: int, n: int, k: int, dtype: torch.dtype = BF16, tag: str = "", quick: bool = False,
              tf32: bool = False) -> Case:
    """x[M,K] @ W[N,K]^T, the layout nn.Linear hands to cuBLAS."""
    esz = torch.empty((), dtype=dtype).element_size()

    def make():
        return rand((m, k), dtype), rand((n, k), dtype)

    def fn(b):
        return torch.mm(b[0], b[1].t())

    prec = "tf32" if tf32 else dname(dtype)
    return Case("mm", "gemm", [[m, k], [k, n]], prec, {"M": m, "N": n, "K": k, "batch": 1, "tag": tag},
                2.0 * m * n * k, float(esz * (m * k + k * n + m * n)), make, fn,
                in_bytes=esz * (m * k + n * k), quick=quick, extra={"tf32": tf32})


def addmm_case(m: int, n: int, k: int, tag: str = "") -> Case:
    def make():
        return rand((n,)), rand((m, k)), rand((n, k))

    def fn(b):
        return torch.addmm(b[0], b[1], b[2].t())

    return Case("addmm", "gemm", [[n], [m, k], [k, n]], "bf16", {"M": m, "N": n, "K": k, "batch": 1, "tag": tag},
                2.0 * m * n * k, 2.0 * (n + m * k + k * n + m * n), make, fn, in_bytes=2.0 * (m * k + n * k))


def bmm_case(bsz: int, m: int, n: int, k: int) -> Case:
    def make():
        return rand((bsz, m, k)), rand((bsz, k, n))

    def fn(b):
        return torch.bmm(b[0], b[1])

    return Case("bmm", "gemm", [[bsz, m, k], [bsz, k, n]], "bf16", {"M": m, "N": n, "K": k, "batch": bsz},
                2.0 * bsz * m * n * k, 2.0 * bsz * (m * k + k * n + m * n), make, fn,
                in_bytes=2.0 * bsz * (m * k + k * n))


def scaled_mm_case(m: int, n: int, k: int) -> Case:
    f8 = torch.float8_e4m3fn

    def make():
        a = rand((m, k)).to(f8)
        b = rand((n, k)).to(f8).t()  # column-major second operand, as _scaled_mm requires
        one = torch.ones((), device="cuda", dtype=FP32)
        return a, b, one, one.clone()

    def fn(b):
        return torch._scaled_mm(b[0], b[1], b[2], b[3], out_dtype=BF16)

    return Case("_scaled_mm", "gemm", [[m, k], [k, n]], "fp8", {"M": m, "N": n, "K": k, "batch": 1},
                2.0 * m * n * k, float(m * k + k * n + 2 * m * n), make, fn, in_bytes=float(m * k + n * k))


def scaled_mm_scaled_case(m: int, n: int, k: int, scaling: str, b_dtype: torch.dtype | None = None,
                          tag: str = "") -> Case:
    """torch._scaled_mm as float8 training calls it (torchao, torchtitan): A[M,K] row-major,
    B[K,N] column-major, bf16 out; `scaling` "tensorwise" (one fp32 scale per operand) or
    "rowwise" (a scale per row of A and per column of B). `b_dtype` e5m2 for a gradient
    operand."""
    f8 = torch.float8_e4m3fn
    fb = b_dtype or f8

    def make():
        a = rand((m, k)).to(f8)
        b = rand((n, k)).to(fb).t()
        if scaling == "rowwise":
            sa = torch.rand((m, 1), device="cuda", dtype=FP32) + 0.5
            sb = torch.rand((1, n), device="cuda", dtype=FP32) + 0.5
        else:
            sa = torch.ones((), device="cuda", dtype=FP32)
            sb = sa.clone()
        return a, b, sa, sb

    def fn(b):
        return torch._scaled_mm(b[0], b[1], b[2], b[3], out_dtype=BF16)

    prec = "fp8" if scaling == "tensorwise" else "fp8_rowwise"
    return Case("_scaled_mm", "gemm", [[m, k], [k, n]], prec,
                {"M": m, "N": n, "K": k, "batch": 1, "scaling": scaling,
                 "b_dtype": str(fb).replace("torch.", ""), "tag": tag},
                2.0 * m * n * k, float(m * k + k * n + 2 * m * n), make, fn, in_bytes=float(m * k + n * k))


def gemm_fp8_cases() -> Iterator[Case]:
    """Float8 training's GEMMs: tensorwise and rowwise scaling over token counts and Llama-like
    layer shapes (forward, and the backward's transposed ones), e5m2 gradients for some."""
    dims = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (1024, 4096), (8192, 8192),
            (28672, 8192), (8192, 28672), (2048, 2048), (8192, 2048))
    for scaling in ("tensorwise", "rowwise"):
        for m in (1024, 4096, 16384):
            for n, k in dims:
                yield scaled_mm_scaled_case(m, n, k, scaling, tag="grid")
        for n, k, m in ((4096, 4096, 16384), (4096, 14336, 16384), (14336, 4096, 16384), (2048, 8192, 16384)):
            yield scaled_mm_scaled_case(n, k, m, scaling, tag="wgrad")  # dW[N,K] = dY^T[N,M] @ X[M,K]
        for m, n, k in ((16384, 4096, 4096), (16384, 4096, 14336)):
            yield scaled_mm_scaled_case(m, n, k, scaling, b_dtype=torch.float8_e5m2, tag="e5m2")
        for m, n, k in ((8192, 1008, 4096), (4000, 4096, 4096), (256, 4096, 4096), (64, 8192, 8192)):
            yield scaled_mm_scaled_case(m, n, k, scaling, tag="odd")


def linear_layer_cases(tokens: int, d_in: int, d_out: int, tag: str, quick: bool = False) -> list[Case]:
    """Forward, input-gradient and weight-gradient GEMMs of one nn.Linear."""
    return [
        gemm_case(tokens, d_out, d_in, tag=f"{tag}.fwd", quick=quick),
        gemm_case(tokens, d_in, d_out, tag=f"{tag}.dgrad"),
        gemm_case(d_out, d_in, tokens, tag=f"{tag}.wgrad"),
    ]


def gemm_cases() -> Iterator[Case]:
    for s in (64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384):
        yield gemm_case(s, s, s, tag="square", quick=s in (512, 4096, 8192))
    for m in (16, 64, 256, 1024, 4096, 16384):
        for n in (1024, 4096, 14336):
            for k in (512, 1024, 4096, 8192):
                yield gemm_case(m, n, k, tag="grid")
    for m, n, k in ((4095, 4095, 4095), (1000, 1000, 1000), (8192, 1000, 4096), (2048, 50257, 768)):
        yield gemm_case(m, n, k, tag="unaligned")
    for m in (1, 8, 32):
        yield gemm_case(m, 8192, 8192, tag="skinny", quick=m == 8)
    yield gemm_case(256, 256, 65536, tag="deepk")
    yield gemm_case(1024, 1024, 32768, tag="deepk")
    # GPT-2 small, 8 x 1024 tokens.
    for name, din, dout in (("gpt2.qkv", 768, 2304), ("gpt2.proj", 768, 768), ("gpt2.fc1", 768, 3072),
                            ("gpt2.fc2", 3072, 768), ("gpt2.lm_head", 768, 50257)):
        yield from linear_layer_cases(8192, din, dout, name, quick=name == "gpt2.fc1")
    # Llama-3-8B, 4096 tokens (GQA: q 4096 + k,v 2x1024).
    for name, din, dout in (("llama8b.qkv", 4096, 6144), ("llama8b.o", 4096, 4096),
                            ("llama8b.gate_up", 4096, 28672), ("llama8b.down", 14336, 4096),
                            ("llama8b.lm_head", 4096, 128256)):
        yield from linear_layer_cases(4096, din, dout, name, quick=name == "llama8b.gate_up")
    for args in ((96, 1024, 1024, 64), (96, 1024, 64, 1024), (32, 512, 512, 128), (256, 128, 128, 64)):
        yield bmm_case(*args)
    for m, n, k in ((8192, 3072, 768), (4096, 4096, 4096), (1024, 1024, 1024)):
        yield addmm_case(m, n, k, tag="bias")
    for s in (512, 1024, 2048, 4096, 8192):
        yield gemm_case(s, s, s, FP32, tag="fp32", quick=s == 2048)
        yield gemm_case(s, s, s, FP32, tag="tf32", tf32=True, quick=s == 2048)
    yield gemm_case(4096, 14336, 4096, FP32, tag="fp32.llama")
    yield gemm_case(4096, 14336, 4096, FP32, tag="tf32.llama", tf32=True)
    for s in (1024, 2048, 4096, 8192):
        yield gemm_case(s, s, s, FP16, tag="fp16")
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 28672, 4096), (1024, 1024, 1024)):
        yield scaled_mm_case(m, n, k)


def wgrad_case(m: int, n: int, k: int, wide_c: bool) -> Case:
    """A weight-gradient GEMM, dY^T[M,K] @ X[K,N] (K: tokens), as Megatron's wgrad runs it:
    into a fresh bf16 gradient, or (`wide_c`) accumulated into an fp32 C in the same call
    (beta = 1, C read and written in fp32), the cuBLAS call of Apex's
    fused_weight_gradient_mlp_cuda (Megatron's gradient_accumulation_fusion), through torch's
    out_dtype addmm. The pair gives what the wider epilogue costs beyond the mainloop."""
    def make():
        g, x = rand((k, m)), rand((k, n))
        return (g, x, rand((m, n), FP32, 0.01)) if wide_c else (g, x)

    if wide_c:
        def fn(b):
            return torch.addmm(b[2], b[0].t(), b[1], out_dtype=FP32, out=b[2])
        c_bytes = 8.0 * m * n  # fp32 C read and D written
    else:
        def fn(b):
            return torch.mm(b[0].t(), b[1])
        c_bytes = 2.0 * m * n
    in_bytes = 2.0 * k * (m + n) + (4.0 * m * n if wide_c else 0.0)
    return Case("addmm" if wide_c else "mm", "gemm", [[m, k], [k, n]] + ([[m, n]] if wide_c else []),
                "bf16", {"M": m, "N": n, "K": k, "batch": 1, "tag": "wgrad_fp32_c" if wide_c else "wgrad_bf16"},
                2.0 * m * n * k, 2.0 * k * (m + n) + c_bytes, make, fn, in_bytes=in_bytes)


def gemm_wide_c_cases() -> Iterator[Case]:
    """Weight-gradient GEMMs with a bf16 output and with an fp32 accumulated C, pairwise, over
    a grid of layer widths and token counts (not the Megatron rows' own shapes)."""
    for m in (1024, 3072, 5120, 12288):
        for n in (1024, 2560, 4096, 10240):
            for k in (2048, 8192, 16384):
                yield wgrad_case(m, n, k, wide_c=False)
                yield wgrad_case(m, n, k, wide_c=True)


def gemm_alignment_cases() -> Iterator[Case]:
    """GEMMs whose leading dimensions are 8-, 4- or 2-byte aligned (not the 16 bytes cuBLAS's
    TMA kernels need), batched GEMMs of non-power-of-two sizes, and M off multiples of the tile.
    The main grid has aligned shapes and four odd (2-byte) ones only, so without these the
    fallback knew one slow rate for every misalignment (issue 3's hold-out: 8-byte aligned shapes
    ran 2-3x faster than that rate). Sizes chosen on a regular pattern, none equal to a
    `fallback_holdout.py` case (it refuses to report if one is)."""
    k8, k4, k2 = (1500, 3004, 6148), (1498, 2502, 4098), (1001, 3001)  # 8-, 4-, 2-byte aligned bf16 K
    for m in (1024, 4096, 16384):
        for n in (1024, 4096):
            for k in k8 + k4 + k2:
                yield gemm_case(m, n, k, tag="align.k")
        for n in (1500, 3004, 1498, 2502, 1001):
            yield gemm_case(m, n, 4096, tag="align.n")
    for m in (600, 1100, 1700, 2900, 5000):
        yield gemm_case(m, 4096, 4096, tag="offtile")
        yield gemm_case(m, 8192, 2048, tag="offtile")
    for bsz in (16, 32, 64):
        for mn in (660, 900, 1204, 1536):
            for k in (64, 128):
                yield bmm_case(bsz, mn, mn, k)


def gemm_alignment_both_cases() -> Iterator[Case]:
    """Both K (the inputs' leading dimension) and N (the output's) misaligned, and aligned
    batched GEMMs of non-power-of-two M = N with short K (output-write bound). Measured after
    gemm_align showed that one misaligned side costs ~3x and both more."""
    for m in (1024, 4096, 16384):
        for n, k in ((1500, 3004), (3004, 1500), (2502, 2502), (1500, 1500), (6148, 3004)):
            yield gemm_case(m, n, k, tag="align.nk")
    for m in (1024, 16384):
        for n, k in ((1001, 3001), (3001, 1001)):
            yield gemm_case(m, n, k, tag="align.nk")
    for bsz in (16, 32, 64):
        for mn in (768, 1200, 1800, 2400):
            for k in (64, 128):
                yield bmm_case(bsz, mn, mn, k)


def gemm_dense_cases() -> Iterator[Case]:
    """A denser regular grid of aligned x@W^T shapes (the main grid steps M by 4x and N, K by
    up to 4x): M from 320 to 20480, N from 512 to 6144, K from 640 to 6144, doubling steps
    offset from the main grid's powers of two."""
    for m in (320, 640, 1280, 2560, 5120, 10240, 20480):
        for n in (512, 1536, 3072, 6144):
            for k in (640, 1280, 3072, 6144):
                yield gemm_case(m, n, k, tag="dense")


# --------------------------------------------------------------------------------------
# Attention (flash, through the aten op phantom sees)
# --------------------------------------------------------------------------------------
def causal_fraction(sq: int, sk: int) -> float:
    """Fraction of (q, k) pairs a top-left-aligned causal mask keeps (PyTorch's is_causal)."""
    m = min(sq, sk)
    kept = m * (m + 1) / 2 + max(0, sq - sk) * sk  # row i keeps keys 0..i
    return kept / (sq * sk)


def _sdpa_autograd_make(b: int, hq: int, hkv: int, s: int, d: int, causal: bool, backend: str) -> Callable:
    """Inputs for timing a backend's backward through autograd (its backward op takes a non-optional
    attn_bias that Python cannot pass undefined): forward once, then grad with retain_graph."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = {"cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]

    def make():
        q, k, v = (rand((b, h, s, d)).requires_grad_() for h in (hq, hkv, hkv))
        with sdpa_kernel(which):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return o, (q, k, v), rand((b, hq, s, d))
    return make


def attn_case(b: int, hq: int, hkv: int, s: int, d: int, causal: bool, bwd: bool, quick: bool = False,
              backend: str = "flash") -> Case:
    flops_fwd = 4.0 * b * hq * s * s * d * (causal_fraction(s, s) if causal else 1.0)
    q_b, kv_b = 2.0 * b * hq * s * d, 2.0 * b * hkv * s * d
    lse_b = 4.0 * b * hq * s

    def make():
        q = rand((b, hq, s, d))
        k = rand((b, hkv, s, d))
        v = rand((b, hkv, s, d))
        if not bwd:
            return q, k, v
        o = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)
        return (rand((b, hq, s, d)), q, k, v, o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7])

    prefix = {"flash": "_scaled_dot_product_flash_attention", "cudnn": "_scaled_dot_product_cudnn_attention",
              "efficient": "_scaled_dot_product_efficient_attention"}[backend]
    if bwd and backend == "flash":
        def fn(t):
            return aten._scaled_dot_product_flash_attention_backward(
                t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], 0.0, causal, t[10], t[11])
    elif bwd:
        make = _sdpa_autograd_make(b, hq, hkv, s, d, causal, backend)

        def fn(t):
            return torch.autograd.grad(t[0], t[1], t[2], retain_graph=True)
    elif backend == "flash":
        def fn(t):
            return aten._scaled_dot_product_flash_attention(t[0], t[1], t[2], 0.0, causal)
    elif backend == "cudnn":
        def fn(t):
            return aten._scaled_dot_product_cudnn_attention(t[0], t[1], t[2], None, True, 0.0, causal)
    else:
        def fn(t):
            return aten._scaled_dot_product_efficient_attention(t[0], t[1], t[2], None, True, 0.0, causal)
    if bwd:
        op, flops = prefix + "_backward", 2.5 * flops_fwd
        bts = 2 * q_b + 2 * kv_b + q_b + lse_b + q_b + 2 * kv_b  # read do,q,k,v,o,lse; write dq,dk,dv
    else:
        op, flops = prefix, flops_fwd
        bts = q_b + 2 * kv_b + q_b + lse_b
    # cuDNN and memory-efficient attention draw philox offsets even without dropout, which breaks
    # CUDA-graph capture (and, once a capture fails, every later RNG call): time them eagerly.
    return Case(op, "attention", [[b, hq, s, d], [b, hkv, s, d], [b, hkv, s, d]], "bf16",
                {"B": b, "Hq": hq, "Hkv": hkv, "Sq": s, "Sk": s, "D": d, "causal": causal, "bwd": bwd,
                 "backend": backend},
                flops, bts, make, fn, in_bytes=q_b + 2 * kv_b + (2 * q_b if bwd else 0), quick=quick,
                graph=backend == "flash")


def attention_cases() -> Iterator[Case]:
    shapes = [(1, 16, 16, 512, 64), (4, 16, 16, 1024, 64), (8, 12, 12, 1024, 64), (8, 16, 16, 2048, 64),
              (64, 12, 12, 128, 64), (32, 16, 16, 256, 64), (1, 12, 12, 4096, 64),
              (16, 16, 16, 512, 128), (4, 32, 32, 1024, 128), (2, 32, 32, 2048, 128), (1, 32, 32, 4096, 128),
              (2, 8, 8, 1024, 128), (1, 4, 4, 2048, 128), (8, 32, 32, 256, 128),
              (1, 8, 8, 8192, 128), (1, 16, 16, 16384, 128), (2, 16, 16, 2048, 256), (8, 8, 8, 512, 256)]
    for b, hq, hkv, s, d in shapes:
        for causal in (False, True):
            for bwd in (False, True):
                yield attn_case(b, hq, hkv, s, d, causal, bwd, quick=(s == 4096 and d == 128))
    for b, hq, hkv, s, d in ((1, 32, 8, 4096, 128), (4, 32, 8, 2048, 128), (8, 32, 4, 1024, 128)):
        for bwd in (False, True):
            yield attn_case(b, hq, hkv, s, d, True, bwd)
    # cuDNN (PyTorch's H100 choice for many shapes) and memory-efficient (masks, fp32) backends.
    others = [(4, 16, 1024, 64), (8, 12, 1024, 64), (32, 16, 256, 64), (1, 12, 4096, 64), (4, 32, 1024, 128),
              (1, 32, 4096, 128), (1, 8, 8192, 128), (2, 8, 1024, 128)]
    for backend in ("cudnn", "efficient"):
        for b, h, s, d in others:
            for causal in (False, True):
                for bwd in (False, True):
                    yield attn_case(b, h, h, s, d, causal, bwd, backend=backend,
                                    quick=(b, h, s, d) == (1, 32, 4096, 128) and causal)


# --------------------------------------------------------------------------------------
# Memory-bound ops
# --------------------------------------------------------------------------------------
def unary_case(op: str, cls: str, numel: int, dtype: torch.dtype, f: Callable, quick: bool = False,
               out_dtype: torch.dtype | None = None) -> Case:
    esz_in = torch.empty((), dtype=dtype).element_size()
    esz_out = torch.empty((), dtype=out_dtype or dtype).element_size()
    return Case(op, cls, [[numel]], dname(dtype), {"numel": numel, "out_dtype": dname(out_dtype or dtype)}, float(numel),
                float(numel * (esz_in + esz_out)), lambda: (rand((numel,), dtype),), lambda b: f(b[0]),
                in_bytes=numel * esz_in, quick=quick)


def binary_case(op: str, numel: int, dtype: torch.dtype, f: Callable, quick: bool = False) -> Case:
    esz = torch.empty((), dtype=dtype).element_size()
    return Case(op, "elementwise", [[numel], [numel]], dname(dtype), {"numel": numel}, float(numel),
                float(3 * numel * esz), lambda: (rand((numel,), dtype), rand((numel,), dtype)),
                lambda b: f(b[0], b[1]), in_bytes=2 * numel * esz, quick=quick)


SIZES_BYTES = [4 * KB, 16 * KB, 64 * KB, 256 * KB, 1 * MB, 4 * MB, 16 * MB, 64 * MB, 256 * MB, 1 * GB]


def elementwise_cases() -> Iterator[Case]:
    for sz in SIZES_BYTES:
        n = sz // 2
        q = sz in (64 * KB, 16 * MB, 256 * MB)
        yield binary_case("add", n, BF16, torch.add, quick=q)
        if sz <= 256 * MB:
            yield binary_case("mul", n, BF16, torch.mul)
            yield unary_case("gelu", "elementwise", n, BF16, F.gelu, quick=q)
            yield unary_case("silu", "elementwise", n, BF16, F.silu)
    for sz in (1 * MB, 64 * MB, 512 * MB):
        yield binary_case("add", sz // 4, FP32, torch.add)


def reduction_cases() -> Iterator[Case]:
    for rows, cols in ((1024, 1024), (8192, 4096), (32768, 4096), (4096, 128256)):
        def make(rows=rows, cols=cols):
            return (rand((rows, cols)),)
        yield Case("sum", "reduction", [[rows, cols]], "bf16", {"numel": rows * cols, "rows": rows, "cols": cols},
                   float(rows * cols), 2.0 * rows * cols + 2.0 * rows, make, lambda b: b[0].sum(-1),
                   in_bytes=2.0 * rows * cols, quick=rows == 8192)
    for rows, cols in ((8192, 768), (8192, 2304), (8192, 3072), (32768, 4096)):  # bias gradients
        yield Case("sum", "reduction", [[rows, cols]], "bf16",
                   {"numel": rows * cols, "rows": rows, "cols": cols, "dim": 0}, float(rows * cols),
                   2.0 * rows * cols + 2.0 * cols, lambda r=rows, c=cols: (rand((r, c)),), lambda b: b[0].sum(0),
                   in_bytes=2.0 * rows * cols)
    for sz in (64 * KB, 4 * MB, 64 * MB, 1 * GB):
        n = sz // 4
        yield Case("sum", "reduction", [[n]], "fp32", {"numel": n, "rows": 1, "cols": n}, float(n),
                   4.0 * n + 4, lambda n=n: (rand((n,), FP32),), lambda b: b[0].sum(), in_bytes=4.0 * n)
    for rows, cols in ((8192, 4096), (4096, 50257)):
        yield Case("amax", "reduction", [[rows, cols]], "bf16", {"numel": rows * cols, "rows": rows, "cols": cols},
                   float(rows * cols), 2.0 * rows * cols + 2.0 * rows, lambda r=rows, c=cols: (rand((r, c)),),
                   lambda b: b[0].amax(-1), in_bytes=2.0 * rows * cols)


NORM_SHAPES = ((512, 1024), (8192, 768), (4096, 4096), (16384, 4096), (32768, 8192))


def norm_cases() -> Iterator[Case]:
    for rows, h in NORM_SHAPES:
        x_b, p_b, stat_b = 2.0 * rows * h, 2.0 * h, 4.0 * rows
        q = (rows, h) == (16384, 4096)

        def make_ln(rows=rows, h=h):
            return rand((rows, h)), rand((h,)), rand((h,))

        yield Case("native_layer_norm", "norm", [[rows, h], [h], [h]], "bf16", {"rows": rows, "hidden": h},
                   8.0 * rows * h, 2 * x_b + 2 * p_b + 2 * stat_b, make_ln,
                   lambda b, h=h: aten.native_layer_norm(b[0], [h], b[1], b[2], 1e-5), in_bytes=x_b, quick=q)

        def make_ln_bwd(rows=rows, h=h):
            x, w, bias = rand((rows, h)), rand((h,)), rand((h,))
            _, mean, rstd = aten.native_layer_norm(x, [h], w, bias, 1e-5)
            return rand((rows, h)), x, mean, rstd, w, bias

        yield Case("native_layer_norm_backward", "norm", [[rows, h], [rows, h]], "bf16", {"rows": rows, "hidden": h},
                   16.0 * rows * h, 3 * x_b + 2 * stat_b + 4 * p_b, make_ln_bwd,
                   lambda b, h=h: aten.native_layer_norm_backward(b[0], b[1], [h], b[2], b[3], b[4], b[5],
                                                                  [True, True, True]),
                   in_bytes=2 * x_b, quick=q)

        def make_rms(rows=rows, h=h):
            return rand((rows, h)), rand((h,))

        yield Case("_fused_rms_norm", "norm", [[rows, h], [h]], "bf16", {"rows": rows, "hidden": h},
                   6.0 * rows * h, 2 * x_b + p_b + stat_b, make_rms,
                   lambda b, h=h: aten._fused_rms_norm(b[0], [h], b[1], 1e-6), in_bytes=x_b)

        def make_rms_bwd(rows=rows, h=h):
            x, w = rand((rows, h)), rand((h,))
            _, rstd = aten._fused_rms_norm(x, [h], w, 1e-6)
            return rand((rows, h)), x, rstd, w

        yield Case("_fused_rms_norm_backward", "norm", [[rows, h], [rows, h]], "bf16", {"rows": rows, "hidden": h},
                   12.0 * rows * h, 3 * x_b + stat_b + 2 * p_b, make_rms_bwd,
                   lambda b, h=h: aten._fused_rms_norm_backward(b[0], b[1], [h], b[2], b[3], [True, True]),
                   in_bytes=2 * x_b)


def softmax_cases() -> Iterator[Case]:
    for rows, cols, dtype in ((8192, 1024, BF16), (16384, 2048, BF16), (8192, 50257, BF16), (4096, 128256, BF16),
                              (8192, 32000, FP32)):
        esz = torch.empty((), dtype=dtype).element_size()
        x_b = float(esz * rows * cols)
        q = (rows, cols) == (8192, 50257)
        for op, fwd, bwd in (("_softmax", aten._softmax, aten._softmax_backward_data),
                             ("_log_softmax", aten._log_softmax, aten._log_softmax_backward_data)):
            shp = [[rows, cols]]
            yield Case(op, "softmax", shp, dname(dtype), {"rows": rows, "cols": cols}, 5.0 * rows * cols, 2 * x_b,
                       lambda r=rows, c=cols, d=dtype: (rand((r, c), d),), lambda b, f=fwd: f(b[0], -1, False),
                       in_bytes=x_b, quick=q)

            def make_bwd(r=rows, c=cols, d=dtype, f=fwd):
                y = f(rand((r, c), d), -1, False)
                return rand((r, c), d), y

            yield Case(f"{op}_backward_data", "softmax", shp * 2, dname(dtype), {"rows": rows, "cols": cols},
                       4.0 * rows * cols, 3 * x_b, make_bwd, lambda b, f=bwd, d=dtype: f(b[0], b[1], -1, d),
                       in_bytes=2 * x_b, quick=q)


def loss_cases() -> Iterator[Case]:
    for rows, cols, dtype in ((8192, 50257, BF16), (4096, 128256, BF16), (8192, 32000, FP32), (1024, 1000, FP32)):
        esz = torch.empty((), dtype=dtype).element_size()
        tgt_b = 8.0 * rows
        q = (rows, cols) == (8192, 50257)

        def make(r=rows, c=cols, d=dtype):
            return rand((r, c), d), torch.randint(0, c, (r,), device="cuda")

        # Forward reads only the target column of each row (phantom counts it so).
        yield Case("nll_loss_forward", "loss", [[rows, cols], [rows]], dname(dtype), {"rows": rows, "cols": cols},
                   float(rows), tgt_b + esz * rows + 2 * esz, make,
                   lambda b: aten.nll_loss_forward(b[0], b[1], None, 1, -100), in_bytes=tgt_b, quick=q)

        def make_bwd(r=rows, c=cols, d=dtype):
            x, t = rand((r, c), d), torch.randint(0, c, (r,), device="cuda")
            _, tw = aten.nll_loss_forward(x, t, None, 1, -100)
            return rand((), d), x, t, tw

        yield Case("nll_loss_backward", "loss", [[rows, cols], [rows]], dname(dtype), {"rows": rows, "cols": cols},
                   float(rows), tgt_b + esz * rows * cols, make_bwd,
                   lambda b: aten.nll_loss_backward(b[0], b[1], b[2], None, 1, -100, b[3]),
                   in_bytes=tgt_b, quick=q)


def embedding_cases() -> Iterator[Case]:
    for vocab, dim, tokens in ((50257, 768, 1024), (50257, 768, 8192), (32000, 4096, 16384), (128256, 4096, 4096)):
        out_b, idx_b, w_b = 2.0 * tokens * dim, 8.0 * tokens, 2.0 * vocab * dim
        q = vocab == 50257 and tokens == 8192

        def make(v=vocab, d=dim, t=tokens):
            return rand((v, d)), torch.randint(0, v, (t,), device="cuda")

        yield Case("embedding", "embedding", [[vocab, dim], [tokens]], "bf16",
                   {"vocab": vocab, "dim": dim, "tokens": tokens}, 0.0, idx_b + 2 * out_b, make,
                   lambda b: aten.embedding(b[0], b[1]), in_bytes=idx_b + out_b, quick=q)

        def make_bwd(v=vocab, d=dim, t=tokens):
            return rand((t, d)), torch.randint(0, v, (t,), device="cuda")

        # grad rows read, fp32 partial sums written and read back (8 B/element), table written.
        yield Case("embedding_dense_backward", "embedding", [[tokens, dim], [tokens]], "bf16",
                   {"vocab": vocab, "dim": dim, "tokens": tokens}, float(tokens * dim),
                   out_b + 8.0 * tokens * dim + idx_b + w_b,
                   make_bwd, lambda b, v=vocab: aten.embedding_dense_backward(b[0], b[1], v, -1, False),
                   in_bytes=out_b + idx_b, quick=q)


def copy_cases() -> Iterator[Case]:
    for sz in SIZES_BYTES:
        n = sz // 2
        q = sz in (64 * KB, 16 * MB, 1 * GB)

        def make(n=n):
            return rand((n,)), torch.empty((n,), device="cuda", dtype=BF16)

        yield Case("copy_", "copy", [[n], [n]], "bf16", {"numel": n}, 0.0, 2.0 * sz, make,
                   lambda b: b[1].copy_(b[0]), in_bytes=2.0 * sz, quick=q)
    for sz in (64 * KB, 1 * MB, 16 * MB, 256 * MB):
        n = sz // 2
        yield unary_case("_to_copy", "copy", n, BF16, lambda x: x.to(FP32), out_dtype=FP32, quick=sz == 16 * MB)
        yield unary_case("_to_copy", "copy", n, FP32, lambda x: x.to(BF16), out_dtype=BF16)
    for sz in (1 * MB, 64 * MB):
        yield unary_case("clone", "copy", sz // 2, BF16, torch.clone)
    for rows, cols in ((1024, 1024), (8192, 4096), (16384, 16384)):
        yield Case("clone", "copy", [[cols, rows]], "bf16", {"numel": rows * cols, "transposed": True},
                   0.0, 4.0 * rows * cols, lambda r=rows, c=cols: (rand((r, c)).t(),),
                   lambda b: b[0].clone(memory_format=torch.contiguous_format), in_bytes=2.0 * rows * cols)
    for n_parts, rows, cols in ((2, 8192, 4096), (3, 4096, 4096), (8, 1024, 1024)):
        yield Case("cat", "copy", [[rows, cols]] * n_parts, "bf16", {"numel": n_parts * rows * cols},
                   0.0, 4.0 * n_parts * rows * cols,
                   lambda p=n_parts, r=rows, c=cols: tuple(rand((r, c)) for _ in range(p)),
                   lambda b: torch.cat(b, dim=-1), in_bytes=2.0 * n_parts * rows * cols)


def transfer_cases() -> Iterator[Case]:
    for pinned in (True, False):
        for sz in ((64 * KB, 1 * MB, 16 * MB, 256 * MB) if pinned else (1 * MB, 64 * MB)):
            n = sz // 4

            def make_h2d(n=n, pinned=pinned):
                src = torch.randn(n).pin_memory() if pinned else torch.randn(n)
                return src, torch.empty(n, device="cuda")

            def make_d2h(n=n, pinned=pinned):
                dst = torch.empty(n).pin_memory() if pinned else torch.empty(n)
                return rand((n,), FP32), dst

            for op, make in (("h2d", make_h2d), ("d2h", make_d2h)):
                yield Case(op, "transfer", [[n]], "fp32", {"numel": n, "pinned": pinned}, 0.0, float(sz), make,
                           lambda b, nb=pinned: b[1].copy_(b[0], non_blocking=nb), in_bytes=float(sz),
                           graph=False, quick=sz == 16 * MB)


def random_cases() -> Iterator[Case]:
    for sz in (256 * KB, 16 * MB, 256 * MB):
        n = sz // 2
        q = sz == 16 * MB
        yield Case("native_dropout", "random", [[n]], "bf16", {"numel": n}, float(n), 2.0 * n + 2.0 * n + n,
                   lambda n=n: (rand((n,)),), lambda b: aten.native_dropout(b[0], 0.1, True),
                   in_bytes=2.0 * n, quick=q)
        yield Case("uniform_", "random", [[n]], "bf16", {"numel": n}, float(n), 2.0 * n,
                   lambda n=n: (torch.empty((n,), device="cuda", dtype=BF16),), lambda b: b[0].uniform_(),
                   in_bytes=2.0 * n)
        yield Case("normal_", "random", [[n]], "bf16", {"numel": n}, float(n), 2.0 * n,
                   lambda n=n: (torch.empty((n,), device="cuda", dtype=BF16),), lambda b: b[0].normal_(),
                   in_bytes=2.0 * n)


# --------------------------------------------------------------------------------------
# Optimizer (multi-tensor apply)
# --------------------------------------------------------------------------------------
def param_shapes(total: int) -> list[tuple]:
    """Shapes of a GPT-like parameter list with about `total` elements (weights and small vectors)."""
    d = 256 if total <= 2_000_000 else 512 if total <= 20_000_000 else 1024 if total <= 200_000_000 else 2048
    block = [(3 * d, d), (3 * d,), (d, d), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,), (d,), (d,), (d,), (d,)]
    per_block = sum(math.prod(s) for s in block)
    return block * max(1, round(total / per_block))


def many_small_shapes(count: int, numel: int) -> list[tuple]:
    return [(numel,)] * count


def _list(shapes: list[tuple], fill: str = "randn") -> list[torch.Tensor]:
    if fill == "pos":  # second moments must be positive for sqrt/addcdiv
        return [torch.rand(s, device="cuda") + 0.01 for s in shapes]
    return [torch.randn(s, device="cuda") for s in shapes]


def opt_params(shapes: list[tuple], op: str) -> dict:
    numels = [math.prod(s) for s in shapes]  # the launch count of multi_tensor_apply depends on each size
    return {"numel": sum(numels), "n_tensors": len(shapes), "op": op, "tensor_numels": numels}


def fused_adamw_case(shapes: list[tuple], quick: bool = False, dtype: torch.dtype = FP32) -> Case:
    numel = sum(math.prod(s) for s in shapes)
    esz = torch.empty((), dtype=dtype).element_size()

    def make():
        steps = [torch.full((), 10.0, device="cuda") for _ in shapes]
        lists = _list(shapes), _list(shapes), _list(shapes), _list(shapes, "pos")
        return (*[[t.to(dtype) for t in lst] for lst in lists], steps)

    def fn(b):
        torch._fused_adamw_(b[0], b[1], b[2], b[3], [], b[4], lr=1e-3, beta1=0.9, beta2=0.999,
                            weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)

    # params, exp_avg, exp_avg_sq read+written; grads and steps read.
    return Case("_fused_adamw_", "optimizer", [[numel]], dname(dtype), {**opt_params(shapes, "_fused_adamw_"), "depth": 4},
                20.0 * numel, 7.0 * esz * numel + 4.0 * len(shapes), make, fn, in_bytes=4.0 * esz * numel, quick=quick)


def foreach_cases_for(shapes: list[tuple], quick: bool) -> Iterator[Case]:
    numel = sum(math.prod(s) for s in shapes)
    nt = len(shapes)
    specs = [  # op, lists made, depth, bytes per element, fn
        ("_foreach_add_", ("randn", "randn"), 2, 12.0, lambda b: torch._foreach_add_(b[0], b[1], alpha=0.1)),
        ("_foreach_mul_", ("randn",), 1, 8.0, lambda b: torch._foreach_mul_(b[0], 0.999)),
        ("_foreach_lerp_", ("randn", "randn"), 2, 12.0, lambda b: torch._foreach_lerp_(b[0], b[1], 0.1)),
        ("_foreach_addcmul_", ("pos", "randn", "randn"), 3, 16.0,
         lambda b: torch._foreach_addcmul_(b[0], b[1], b[2], value=0.001)),
        ("_foreach_addcdiv_", ("randn", "randn", "pos"), 3, 16.0,
         lambda b: torch._foreach_addcdiv_(b[0], b[1], b[2], value=-1e-3)),
        ("_foreach_sqrt", ("pos",), 2, 8.0, lambda b: torch._foreach_sqrt(b[0])),
        ("_foreach_norm", ("randn",), 1, 4.0, lambda b: torch._foreach_norm(b[0])),
    ]
    for op, fills, depth, bpe, fn in specs:
        yield Case(op, "optimizer", [[numel]], "fp32", {**opt_params(shapes, op), "depth": depth},
                   float(numel * len(fills)), bpe * numel, lambda f=fills: tuple(_list(shapes, x) for x in f), fn,
                   in_bytes=4.0 * numel * len(fills), quick=quick and op in ("_foreach_add_", "_foreach_norm"))


def optimizer_step_case(shapes: list[tuple], fused: bool) -> Case:
    """Whole torch.optim.AdamW step, eager (includes CPU launch overhead; kept for validation)."""
    numel = sum(math.prod(s) for s in shapes)

    def make():
        ps = [torch.nn.Parameter(t) for t in _list(shapes)]
        for p in ps:
            p.grad = torch.randn_like(p)
        kw = {"fused": True} if fused else {"foreach": True}
        opt = torch.optim.AdamW(ps, lr=1e-3, **kw)
        opt.step()  # creates state
        return opt

    op = "adamw_step_fused" if fused else "adamw_step_foreach"
    return Case(op, "optimizer_step", [[numel]], "fp32", opt_params(shapes, op), 20.0 * numel, 28.0 * numel,
                make, lambda opt: opt.step(), in_bytes=32.0 * numel, graph=False)


def optimizer_cases() -> Iterator[Case]:
    for total in (1_000_000, 10_000_000, 100_000_000, 1_000_000_000):
        shapes = param_shapes(total)
        yield fused_adamw_case(shapes, quick=total == 100_000_000)
        yield fused_adamw_case(shapes, dtype=BF16)  # bf16 params keep bf16 moments
        if total <= 100_000_000:
            yield from foreach_cases_for(shapes, quick=total == 100_000_000)
    for count, numel in ((1000, 1024), (200, 65536)):
        shapes = many_small_shapes(count, numel)
        yield fused_adamw_case(shapes)
        yield from (c for c in foreach_cases_for(shapes, False) if c.op in ("_foreach_add_", "_foreach_norm"))
    for total in (10_000_000, 100_000_000):
        for fused in (True, False):
            yield optimizer_step_case(param_shapes(total), fused)


# --------------------------------------------------------------------------------------
# Convolution and other ops
# --------------------------------------------------------------------------------------
def conv_case(n: int, c: int, hw: int, k: int, r: int, stride: int, bwd: bool) -> Case:
    pad = r // 2
    ho = (hw + 2 * pad - r) // stride + 1
    flops = 2.0 * n * k * ho * ho * c * r * r
    x_b, w_b, y_b = 2.0 * n * c * hw * hw, 2.0 * k * c * r * r, 2.0 * n * k * ho * ho
    params = {"N": n, "C": c, "H": hw, "W": hw, "K": k, "R": r, "stride": stride, "Ho": ho, "bwd": bwd}
    shapes = [[n, c, hw, hw], [k, c, r, r]]
    if not bwd:
        return Case("convolution", "conv", shapes, "bf16", params, flops, x_b + w_b + y_b,
                    lambda: (rand((n, c, hw, hw)), rand((k, c, r, r), scale=0.05)),
                    lambda b: F.conv2d(b[0], b[1], stride=stride, padding=pad), in_bytes=x_b + w_b)

    def make():
        return rand((n, k, ho, ho)), rand((n, c, hw, hw)), rand((k, c, r, r), scale=0.05)

    def fn(b):
        return aten.convolution_backward(b[0], b[1], b[2], None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1,
                                         [True, True, False])

    return Case("convolution_backward", "conv", shapes, "bf16", params, 2 * flops, 2 * (x_b + w_b) + y_b,
                make, fn, in_bytes=x_b + w_b + y_b)


def conv_cases() -> Iterator[Case]:
    for n, c, hw, k, r, s in ((32, 64, 56, 64, 3, 1), (32, 256, 14, 256, 3, 1), (32, 3, 224, 64, 7, 2),
                              (32, 512, 7, 512, 3, 1)):
        yield conv_case(n, c, hw, k, r, s, False)
        if c != 3:
            yield conv_case(n, c, hw, k, r, s, True)


def other_cases() -> Iterator[Case]:
    for n in (1 << 16, 1 << 20, 1 << 24, 1 << 26):
        yield Case("cumsum", "other", [[n]], "fp32", {"numel": n}, float(n), 8.0 * n,
                   lambda n=n: (rand((n,), FP32),), lambda b: torch.cumsum(b[0], 0), in_bytes=4.0 * n)
        yield Case("sort", "other", [[n]], "fp32", {"numel": n}, float(n), 4.0 * n + 4.0 * n + 8.0 * n,
                   lambda n=n: (rand((n,), FP32),), lambda b: torch.sort(b[0]), in_bytes=4.0 * n)
    for rows in (64, 1024, 8192):
        yield Case("topk", "other", [[rows, 50257]], "bf16", {"numel": rows * 50257}, rows * 50257.0,
                   2.0 * rows * 50257 + rows * 50 * 10.0, lambda r=rows: (rand((r, 50257)),),
                   lambda b: torch.topk(b[0], 50, dim=-1), in_bytes=2.0 * rows * 50257)


# --------------------------------------------------------------------------------------
# Vision, diffusion and graph workloads (issue 10): convolutions over layouts and dtypes, the
# norms, pooling and upsampling around them, and the gather/scatter ops of message passing
# --------------------------------------------------------------------------------------
def _fmt(t: torch.Tensor, channels_last: bool) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last) if channels_last and t.dim() == 4 else t


def conv_layout_case(n: int, c: int, hw: int, k: int, r: int, stride: int, bwd: bool, dtype: torch.dtype,
                     channels_last: bool) -> Case:
    """A conv2d (forward, or backward for input and weight) in one memory format and dtype."""
    pad = r // 2
    ho = (hw + 2 * pad - r) // stride + 1
    es = 2 if dtype != FP32 else 4
    flops = 2.0 * n * k * ho * ho * c * r * r
    x_b, w_b, y_b = es * n * c * hw * hw, es * k * c * r * r, es * n * k * ho * ho
    layout = "channels_last" if channels_last else "contiguous"
    params = {"N": n, "C": c, "H": hw, "W": hw, "K": k, "R": r, "stride": stride, "Ho": ho, "bwd": bwd,
              "layout": layout}
    shapes = [[n, c, hw, hw], [k, c, r, r]]
    dn = dname(dtype)
    extra = {"tf32": dtype == FP32}  # fp32 convs on tensor cores, as scripts that allow tf32 get
    if not bwd:
        return Case("convolution", "conv", shapes, dn, params, flops, x_b + w_b + y_b,
                    lambda: (_fmt(rand((n, c, hw, hw), dtype), channels_last),
                             _fmt(rand((k, c, r, r), dtype, scale=0.05), channels_last)),
                    lambda b: F.conv2d(b[0], b[1], stride=stride, padding=pad), in_bytes=x_b + w_b, extra=extra)

    def make():
        return (_fmt(rand((n, k, ho, ho), dtype), channels_last), _fmt(rand((n, c, hw, hw), dtype), channels_last),
                _fmt(rand((k, c, r, r), dtype, scale=0.05), channels_last))

    def fn(b):
        return aten.convolution_backward(b[0], b[1], b[2], None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1,
                                         [True, True, False])

    return Case("convolution_backward", "conv", shapes, dn, params, 2 * flops, 2 * (x_b + w_b) + y_b,
                make, fn, in_bytes=x_b + w_b + y_b, extra=extra)


# (N, C, H, K, R, stride): ResNet-50 stages at batch 128 (stem, 1x1 and 3x3 of each stage) and SD
# UNet levels at batch 8 (64x64 latents: 320, 640, 1280 channels).
CONV_LAYOUT_SHAPES = ((128, 3, 224, 64, 7, 2), (128, 64, 56, 64, 3, 1), (128, 256, 56, 64, 1, 1),
                      (128, 128, 28, 128, 3, 1), (128, 1024, 14, 256, 1, 1), (128, 512, 7, 512, 3, 1),
                      (8, 320, 64, 320, 3, 1), (8, 640, 32, 640, 3, 1), (8, 1280, 16, 1280, 3, 1),
                      (8, 1280, 8, 1280, 3, 1))


def conv_layout_cases() -> Iterator[Case]:
    for n, c, hw, k, r, s in CONV_LAYOUT_SHAPES:
        for dtype in (BF16, FP32):
            for cl in (True, False):
                yield conv_layout_case(n, c, hw, k, r, s, False, dtype, cl)
                if c != 3:
                    yield conv_layout_case(n, c, hw, k, r, s, True, dtype, cl)


def grouped_conv_case(n: int, c: int, hw: int, r: int, stride: int, groups: int, bwd: bool, dtype: torch.dtype,
                      channels_last: bool, dims: int = 2) -> Case:
    """A grouped conv with as many output as input channels: depthwise (groups == C, as in
    MobileNet, EfficientNet, ConvNeXt; `dims=1`: Mamba's causal conv1d) or ResNeXt-style."""
    pad = r // 2 if dims == 2 else r - 1
    ho = (hw + 2 * pad - r) // stride + 1
    es = 2 if dtype != FP32 else 4
    cg = c // groups
    spatial_in, spatial_out, window = (hw * hw, ho * ho, r * r) if dims == 2 else (hw, ho, r)
    flops = 2.0 * n * c * spatial_out * cg * window
    x_b, w_b, y_b = es * n * c * spatial_in, es * c * cg * window, es * n * c * spatial_out
    layout = "channels_last" if channels_last and dims == 2 else "contiguous"
    params = {"N": n, "C": c, "H": hw, "W": hw if dims == 2 else 1, "K": c, "R": r, "stride": stride, "Ho": ho,
              "groups": groups, "dims": dims, "bwd": bwd, "layout": layout}
    xs, ws, ys = ((n, c, hw, hw), (c, cg, r, r), (n, c, ho, ho)) if dims == 2 else ((n, c, hw), (c, cg, r), (n, c, ho))
    conv = F.conv2d if dims == 2 else F.conv1d
    extra = {"tf32": dtype == FP32}
    if not bwd:
        return Case("convolution", "conv", [list(xs), list(ws)], dname(dtype), params, flops, x_b + w_b + y_b,
                    lambda: (_fmt(rand(xs, dtype), channels_last), _fmt(rand(ws, dtype, scale=0.05), channels_last)),
                    lambda b: conv(b[0], b[1], stride=stride, padding=pad, groups=groups),
                    in_bytes=x_b + w_b, extra=extra)

    def make():
        return (_fmt(rand(ys, dtype), channels_last), _fmt(rand(xs, dtype), channels_last),
                _fmt(rand(ws, dtype, scale=0.05), channels_last))

    def fn(b):
        return aten.convolution_backward(b[0], b[1], b[2], None, [stride] * dims, [pad] * dims, [1] * dims, False,
                                         [0] * dims, groups, [True, True, False])

    return Case("convolution_backward", "conv", [list(xs), list(ws)], dname(dtype), params, 2 * flops,
                2 * (x_b + w_b) + y_b, make, fn, in_bytes=x_b + w_b + y_b, extra=extra)


# (N, C, H, R, stride, groups): depthwise convs of MobileNetV2 (3x3), EfficientNet (5x5) and
# ConvNeXt-S/B-like widths (7x7) at several batches, and ResNeXt-50 32x4d's grouped 3x3 convs;
# then (N, C, L, R) depthwise causal conv1d as in Mamba blocks.
GROUPED_CONV_SHAPES = ((128, 32, 112, 3, 1, 32), (128, 144, 56, 3, 2, 144), (128, 192, 28, 3, 1, 192),
                       (128, 576, 14, 3, 1, 576), (128, 960, 7, 3, 1, 960), (64, 240, 28, 5, 1, 240),
                       (64, 672, 14, 5, 1, 672), (32, 128, 56, 7, 1, 128), (32, 256, 28, 7, 1, 256),
                       (32, 512, 14, 7, 1, 512), (32, 1024, 7, 7, 1, 1024), (256, 128, 56, 7, 1, 128),
                       (128, 128, 56, 3, 1, 32), (128, 256, 28, 3, 1, 32), (128, 512, 14, 3, 1, 32))
CONV1D_DEPTHWISE_SHAPES = ((8, 4096, 2048, 4), (16, 2048, 4096, 4))


def grouped_conv_cases() -> Iterator[Case]:
    for n, c, hw, r, s, g in GROUPED_CONV_SHAPES:
        for dtype in (BF16, FP32):
            for cl in (True, False):
                for bwd in (False, True):
                    yield grouped_conv_case(n, c, hw, r, s, g, bwd, dtype, cl)
    for n, c, length, r in CONV1D_DEPTHWISE_SHAPES:
        for dtype in (BF16, FP32):
            for bwd in (False, True):
                yield grouped_conv_case(n, c, length, r, 1, c, bwd, dtype, False, dims=1)


def batch_norm_case(n: int, c: int, hw: int, dtype: torch.dtype, channels_last: bool, bwd: bool,
                    cudnn: bool = False) -> Case:
    """Training-mode batch norm (statistics + normalisation, or its backward) in one layout:
    ATen's kernel (native_batch_norm), or cuDNN's (`cudnn`)."""
    numel = n * c * hw * hw
    x_b = (2 if dtype != FP32 else 4) * numel
    prm = {"N": n, "C": c, "H": hw, "W": hw, "layout": "channels_last" if channels_last else "contiguous",
           "numel": numel, "bwd": bwd}
    if cudnn:
        return _cudnn_batch_norm_case(n, c, hw, dtype, channels_last, bwd, prm, numel, x_b)
    if not bwd:
        def make():
            return (_fmt(rand((n, c, hw, hw), dtype), channels_last), rand((c,), FP32), rand((c,), FP32),
                    rand((c,), FP32), rand((c,), FP32))
        return Case("native_batch_norm", "norm", [[n, c, hw, hw], [c]], dname(dtype), prm, 8.0 * numel, 2 * x_b,
                    make, lambda b: aten.native_batch_norm(b[0], b[1], b[2], b[3], b[4], True, 0.1, 1e-5),
                    in_bytes=x_b)

    def make_bwd():
        x, w = _fmt(rand((n, c, hw, hw), dtype), channels_last), rand((c,), FP32)
        _, mean, invstd = aten.native_batch_norm(x, w, rand((c,), FP32), None, None, True, 0.1, 1e-5)
        return _fmt(rand((n, c, hw, hw), dtype), channels_last), x, w, mean, invstd

    return Case("native_batch_norm_backward", "norm", [[n, c, hw, hw], [n, c, hw, hw]], dname(dtype), prm,
                12.0 * numel, 3 * x_b, make_bwd,
                lambda b: aten.native_batch_norm_backward(b[0], b[1], b[2], None, None, b[3], b[4], True, 1e-5,
                                                          [True, True, True]), in_bytes=2 * x_b)


def _cudnn_batch_norm_case(n: int, c: int, hw: int, dtype: torch.dtype, channels_last: bool, bwd: bool, prm: dict,
                           numel: int, x_b: int) -> Case:
    """fp32 and fp16 inputs: what F.batch_norm dispatches to on a GPU (cuDNN's kernels; bf16
    inputs take ATen's native_batch_norm)."""
    def make():
        return (_fmt(rand((n, c, hw, hw), dtype), channels_last), rand((c,), FP32), rand((c,), FP32),
                rand((c,), FP32), rand((c,), FP32))
    if not bwd:
        return Case("cudnn_batch_norm", "norm", [[n, c, hw, hw], [c]], dname(dtype), prm, 8.0 * numel, 2 * x_b,
                    make, lambda b: aten.cudnn_batch_norm(b[0], b[1], b[2], b[3], b[4], True, 0.1, 1e-5),
                    in_bytes=x_b)

    def make_bwd():
        x, w, bias, rm, rv = make()
        _, mean, var, reserve = aten.cudnn_batch_norm(x, w, bias, rm, rv, True, 0.1, 1e-5)
        return _fmt(rand((n, c, hw, hw), dtype), channels_last), x, w, rm, rv, mean, var, reserve

    return Case("cudnn_batch_norm_backward", "norm", [[n, c, hw, hw], [n, c, hw, hw]], dname(dtype), prm,
                12.0 * numel, 3 * x_b, make_bwd,
                lambda b: aten.cudnn_batch_norm_backward(b[1], b[0], b[2], b[3], b[4], b[5], b[6], 1e-5, b[7]),
                in_bytes=2 * x_b)


# (N, C, H): the batch-norm layers of ResNets and VGG-style nets at batches 32-256 and of a UNet
BATCH_NORM_SHAPES = ((128, 64, 112), (128, 64, 56), (128, 128, 56), (128, 256, 56), (128, 128, 28), (128, 512, 28),
                     (128, 256, 14), (128, 1024, 14), (128, 512, 7), (128, 2048, 7), (32, 64, 112), (32, 256, 56),
                     (8, 320, 64), (8, 640, 32), (8, 1280, 16), (256, 64, 56), (64, 32, 112))


def batch_norm_cases() -> Iterator[Case]:
    for n, c, hw in BATCH_NORM_SHAPES:
        for dtype in (BF16, FP32):
            for cl in (True, False):
                for bwd in (False, True):
                    yield batch_norm_case(n, c, hw, dtype, cl, bwd)


def cudnn_batch_norm_cases() -> Iterator[Case]:
    """cuDNN's batch norm, which fp32 and fp16 inputs take (the batch_norm group's fp32 rows
    timed ATen's kernel, which only bf16 inputs take on a GPU)."""
    for n, c, hw in BATCH_NORM_SHAPES:
        for dtype in (FP32, FP16):
            for cl in (True, False):
                for bwd in (False, True):
                    yield batch_norm_case(n, c, hw, dtype, cl, bwd, cudnn=True)


def spatial_cases() -> Iterator[Case]:
    """Batch and group norm, pooling and upsampling on NCHW activations (bytes-bound kernels)."""
    for n, c, hw, cl in ((128, 64, 112, True), (128, 256, 56, True), (128, 1024, 14, True), (128, 64, 112, False),
                         (8, 320, 64, False), (8, 1280, 16, False)):
        numel = n * c * hw * hw
        es = 2
        x_b = es * numel
        prm = {"N": n, "C": c, "H": hw, "W": hw, "layout": "channels_last" if cl else "contiguous", "numel": numel}

        def make_bn(n=n, c=c, hw=hw, cl=cl):
            return (_fmt(rand((n, c, hw, hw)), cl), rand((c,), FP32), rand((c,), FP32), rand((c,), FP32),
                    rand((c,), FP32))

        yield Case("native_batch_norm", "norm", [[n, c, hw, hw], [c]], "bf16", prm, 8.0 * numel, 2 * x_b, make_bn,
                   lambda b: aten.native_batch_norm(b[0], b[1], b[2], b[3], b[4], True, 0.1, 1e-5), in_bytes=x_b)

        def make_bn_bwd(n=n, c=c, hw=hw, cl=cl):
            x, w = _fmt(rand((n, c, hw, hw)), cl), rand((c,), FP32)
            _, mean, invstd = aten.native_batch_norm(x, w, rand((c,), FP32), None, None, True, 0.1, 1e-5)
            return _fmt(rand((n, c, hw, hw)), cl), x, w, mean, invstd

        yield Case("native_batch_norm_backward", "norm", [[n, c, hw, hw], [n, c, hw, hw]], "bf16", prm, 12.0 * numel,
                   3 * x_b, make_bn_bwd,
                   lambda b: aten.native_batch_norm_backward(b[0], b[1], b[2], None, None, b[3], b[4], True, 1e-5,
                                                             [True, True, True]), in_bytes=2 * x_b)
        if not cl:
            def make_gn(n=n, c=c, hw=hw):
                return rand((n, c, hw, hw)), rand((c,)), rand((c,))

            yield Case("native_group_norm", "norm", [[n, c, hw, hw], [c]], "bf16", prm, 8.0 * numel, 2 * x_b, make_gn,
                       lambda b, n=n, c=c, hw=hw: aten.native_group_norm(b[0], b[1], b[2], n, c, hw * hw, 32, 1e-5),
                       in_bytes=x_b)

            def make_gn_bwd(n=n, c=c, hw=hw):
                x, w = rand((n, c, hw, hw)), rand((c,))
                _, mean, rstd = aten.native_group_norm(x, w, rand((c,)), n, c, hw * hw, 32, 1e-5)
                return rand((n, c, hw, hw)), x, mean, rstd, w

            yield Case("native_group_norm_backward", "norm", [[n, c, hw, hw], [n, c, hw, hw]], "bf16", prm,
                       12.0 * numel, 3 * x_b, make_gn_bwd,
                       lambda b, n=n, c=c, hw=hw: aten.native_group_norm_backward(b[0], b[1], b[2], b[3], b[4], n, c,
                                                                                  hw * hw, 32, [True, True, True]),
                       in_bytes=2 * x_b)

            yield Case("upsample_nearest2d", "other", [[n, c, hw, hw]], "bf16", prm, float(4 * numel), 5 * x_b,
                       lambda n=n, c=c, hw=hw: (rand((n, c, hw, hw)),),
                       lambda b: F.interpolate(b[0], scale_factor=2.0, mode="nearest"), in_bytes=x_b)
            yield Case("upsample_nearest2d_backward", "other", [[n, c, 2 * hw, 2 * hw]], "bf16", prm, float(4 * numel),
                       5 * x_b, lambda n=n, c=c, hw=hw: (rand((n, c, 2 * hw, 2 * hw)),),
                       lambda b, n=n, c=c, hw=hw: aten.upsample_nearest2d_backward(b[0], [2 * hw, 2 * hw],
                                                                                   [n, c, hw, hw], 2.0, 2.0),
                       in_bytes=4 * x_b)
        if hw >= 56:
            ho = hw // 2
            yield Case("max_pool2d_with_indices", "other", [[n, c, hw, hw]], "bf16", prm, 9.0 * n * c * ho * ho,
                       x_b + es * n * c * ho * ho + 8 * n * c * ho * ho,
                       lambda n=n, c=c, hw=hw, cl=cl: (_fmt(rand((n, c, hw, hw)), cl),),
                       lambda b: aten.max_pool2d_with_indices(b[0], [3, 3], [2, 2], [1, 1]), in_bytes=x_b)

            def make_mp_bwd(n=n, c=c, hw=hw, cl=cl, ho=ho):
                x = _fmt(rand((n, c, hw, hw)), cl)
                y, idx = aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])
                return torch.randn_like(y), x, idx

            yield Case("max_pool2d_with_indices_backward", "other", [[n, c, ho, ho], [n, c, hw, hw]], "bf16", prm,
                       float(numel), 2 * x_b + 10 * n * c * ho * ho, make_mp_bwd,
                       lambda b: aten.max_pool2d_with_indices_backward(b[0], b[1], [3, 3], [2, 2], [1, 1], [1, 1],
                                                                       False, b[2]), in_bytes=2 * x_b)
        else:
            yield Case("mean", "reduction", [[n, c, hw, hw]], "bf16", prm, float(numel), x_b,
                       lambda n=n, c=c, hw=hw, cl=cl: (_fmt(rand((n, c, hw, hw)), cl),),
                       lambda b: b[0].mean((-2, -1), keepdim=True), in_bytes=x_b)


def graph_cases() -> Iterator[Case]:
    """Message passing on a graph of `nodes` nodes and `edges` edges, `f` features per edge."""
    for nodes, edges, f in ((100_000, 1_700_000, 512), (100_000, 1_700_000, 8), (100_000, 1_700_000, 47),
                            (20_000, 340_000, 512), (1_000_000, 16_000_000, 64)):
        prm = {"nodes": nodes, "edges": edges, "features": f}
        e_b, n_b = 4.0 * edges * f, 4.0 * nodes * f

        def make_gather(nodes=nodes, edges=edges, f=f):
            return rand((nodes, f), FP32), torch.randint(0, nodes, (edges,), device="cuda")

        yield Case("index_select", "copy", [[nodes, f], [edges]], "fp32", prm, 0.0, e_b + n_b + 8 * edges,
                   make_gather, lambda b: b[0].index_select(0, b[1]), in_bytes=n_b)

        def make_scatter(nodes=nodes, edges=edges, f=f):
            return (torch.zeros(nodes, f, device="cuda"), torch.randint(0, nodes, (edges,), device="cuda"),
                    rand((edges, f), FP32))

        yield Case("index_add", "copy", [[nodes, f], [edges], [edges, f]], "fp32", prm, float(edges * f),
                   e_b + 2 * n_b + 8 * edges, make_scatter, lambda b: b[0].index_add(0, b[1], b[2]), in_bytes=e_b)

        def make_scatter2(nodes=nodes, edges=edges, f=f):
            idx = torch.randint(0, nodes, (edges, 1), device="cuda").expand(edges, f)
            return torch.zeros(nodes, f, device="cuda"), idx, rand((edges, f), FP32)

        yield Case("scatter_add", "copy", [[nodes, f], [edges, f], [edges, f]], "fp32", prm, float(edges * f),
                   2 * e_b + 2 * n_b, make_scatter2, lambda b: b[0].scatter_add(0, b[1], b[2]), in_bytes=2 * e_b)
        yield Case("scatter_reduce", "copy", [[nodes, f], [edges, f], [edges, f]], "fp32", prm, float(edges * f),
                   2 * e_b + 2 * n_b, make_scatter2,
                   lambda b: b[0].scatter_reduce(0, b[1], b[2], "amax", include_self=False), in_bytes=2 * e_b)
        if f <= 64:
            def make_segment(nodes=nodes, edges=edges, f=f):
                lengths = torch.full((nodes,), edges // nodes, device="cuda")
                return rand((nodes * (edges // nodes), f), FP32), lengths

            yield Case("segment_reduce", "other", [[edges, f], [nodes]], "fp32", prm, float(edges * f), e_b + n_b,
                       make_segment, lambda b: torch.segment_reduce(b[0], "sum", lengths=b[1]), in_bytes=e_b,
                       graph=False)

            def make_spmm(nodes=nodes, edges=edges, f=f):
                idx = torch.randint(0, nodes, (2, edges), device="cuda")
                adj = torch.sparse_coo_tensor(idx, torch.rand(edges, device="cuda"), (nodes, nodes)).coalesce()
                return adj.to_sparse_csr(), rand((nodes, f), FP32)

            yield Case("_sparse_mm", "other", [[nodes, nodes], [nodes, f]], "fp32", {**prm, "sparse": "csr"},
                       2.0 * edges * f, 12.0 * edges + 2 * n_b, make_spmm, lambda b: torch.sparse.mm(b[0], b[1]),
                       in_bytes=12.0 * edges + n_b, graph=False)


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------
class Timer:
    def __init__(self, quick: bool, l2_bytes: int):
        self.reps = 5 if quick else 15
        self.target_ms = 1.0 if quick else 3.0  # GPU time per timed replay
        self.rotate_bytes = 3 * l2_bytes  # inputs spread over this many bytes defeat L2 reuse
        self.max_buf = 32
        self.mem_cap = 12 * GB  # never hold more than this in rotated input sets
        self.cpm = self.cycles_per_ms()  # GPU sleep cycles per millisecond

    def n_buffers(self, case: Case) -> int:
        per = max(case.in_bytes, 1.0)
        n = min(self.max_buf, math.ceil(self.rotate_bytes / per))
        return max(1, min(n, int(self.mem_cap // per)))

    def _events(self, n: int) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
        return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]

    def _estimate_ms(self, case: Case, bufs: list) -> float:
        (s, e), = self._events(1)
        s.record()
        case.fn(bufs[0])
        e.record()
        torch.cuda.synchronize()
        return max(s.elapsed_time(e), 1e-3)

    def _time_graph(self, case: Case, bufs: list, calls: int) -> list[float]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph requires
            for i in range(3):
                case.fn(bufs[i % len(bufs)])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(calls):
                case.fn(bufs[i % len(bufs)])
        g.replay()
        torch.cuda.synchronize()
        evs = self._events(self.reps)
        for s, e in evs:
            s.record()
            g.replay()
            e.record()
        torch.cuda.synchronize()
        out = [s.elapsed_time(e) * 1e3 / calls for s, e in evs]
        del g
        return out

    def cycles_per_ms(self) -> float:
        (s, e), = self._events(1)
        s.record()
        torch.cuda._sleep(2_000_000)
        e.record()
        torch.cuda.synchronize()
        return 2_000_000 / max(s.elapsed_time(e), 1e-3)

    def _time_eager(self, case: Case, bufs: list, calls: int) -> list[float]:
        """Eager loop. A GPU sleep queued first lets the CPU enqueue every call before the timed
        region starts, so Python's launch overhead stays out of the kernel time (not for host
        transfers, whose pageable path blocks the CPU)."""
        hide_cpu = case.cls != "transfer"
        sleep_cycles = 0
        if hide_cpu:
            t0 = time.perf_counter()
            for i in range(calls):
                case.fn(bufs[i % len(bufs)])
            torch.cuda.synchronize()
            enqueue_ms = (time.perf_counter() - t0) * 1e3  # upper bound: includes the GPU time
            sleep_cycles = int(min(enqueue_ms * 2.0 + 0.2, 200.0) * self.cpm)  # margin: enqueue time varies
        evs = self._events(self.reps)
        for s, e in evs:
            if sleep_cycles:
                torch.cuda._sleep(sleep_cycles)
            s.record()
            for i in range(calls):
                case.fn(bufs[i % len(bufs)])
            e.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 / calls for s, e in evs]

    def run(self, case: Case) -> dict:
        nbuf = self.n_buffers(case)
        bufs = [case.make() for _ in range(nbuf)]
        for b in bufs[:2]:
            case.fn(b)
        torch.cuda.synchronize()
        est_ms = min(self._estimate_ms(case, bufs), self._estimate_ms(case, bufs))
        calls = int(min(200, max(1, round(self.target_ms / est_ms))))
        if calls > 1:
            calls = max(calls, min(nbuf, 200))
        method = "graph" if case.graph else "eager"
        times: list[float] = []
        if case.graph:
            try:
                times = self._time_graph(case, bufs, calls)
            except Exception as exc:  # not capturable: fall back to an eager loop
                method = f"eager (graph failed: {type(exc).__name__})"
                torch.cuda.synchronize()
        if not times:
            times = self._time_eager(case, bufs, calls)
        del bufs
        times.sort()
        return {"median_us": statistics.median(times), "p10_us": times[max(0, len(times) // 10)],
                "p90_us": times[min(len(times) - 1, (9 * len(times)) // 10)], "method": method, "calls": calls,
                "buffers": nbuf}


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------
GROUPS: list[tuple[str, Callable[[], Iterator[Case]]]] = [
    ("gemm", gemm_cases), ("gemm_align", gemm_alignment_cases), ("gemm_align2", gemm_alignment_both_cases), ("gemm_dense", gemm_dense_cases),
    ("attention", attention_cases), ("elementwise", elementwise_cases),
    ("reduction", reduction_cases), ("norm", norm_cases), ("softmax", softmax_cases), ("loss", loss_cases),
    ("embedding", embedding_cases), ("copy", copy_cases), ("random", random_cases),
    ("optimizer", optimizer_cases), ("conv", conv_cases), ("other", other_cases), ("transfer", transfer_cases),
    ("conv_layout", conv_layout_cases), ("spatial", spatial_cases), ("graph", graph_cases),
    ("conv_grouped", grouped_conv_cases), ("batch_norm", batch_norm_cases),
    ("cudnn_batch_norm", cudnn_batch_norm_cases), ("gemm_wide_c", gemm_wide_c_cases),
    ("gemm_fp8", gemm_fp8_cases),
]


def driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"
    except Exception as exc:  # nvidia-smi missing or refused
        return f"unknown ({type(exc).__name__})"


def gpu_tag(name: str) -> str:
    for tag in ("H200", "H100", "A100", "B200", "L40S", "L4", "A10"):
        if tag in name:
            return tag
    return "".join(ch for ch in name if ch.isalnum())[:24] or "gpu"


def default_out(tag: str) -> str:
    base = os.environ.get("OUT") or "."
    return os.path.join(base, f"kernels_{tag}.json")


def warm_up_clocks(seconds: float) -> None:
    """Run big GEMMs so the SM clock has ramped up before the first timed case."""
    a, b = rand((8192, 8192)), rand((8192, 8192))
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(10):
            torch.mm(a, b)
        torch.cuda.synchronize()
    del a, b


def row_for(case: Case, res: dict) -> dict:
    us = res["median_us"]
    return {"op": case.op, "class": case.cls, "shapes": case.shapes, "dtype": case.dtype, "params": case.params,
            "flops": case.flops, "bytes": case.bytes, **res,
            "tflops": case.flops / us / 1e6 if us > 0 else 0.0, "gbps": case.bytes / us / 1e3 if us > 0 else 0.0}


def summary(rows: list[dict]) -> str:
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["class"], []).append(r)
    lines = [f"{'class':<15}{'rows':>5}{'best TFLOP/s':>14}{'median TFLOP/s':>16}{'best GB/s':>11}"
             f"{'median GB/s':>13}{'min us':>9}"]
    for cls, rs in by.items():
        tf = sorted(r["tflops"] for r in rs)
        gb = sorted(r["gbps"] for r in rs)
        lines.append(f"{cls:<15}{len(rs):>5}{tf[-1]:>14.1f}{statistics.median(tf):>16.1f}{gb[-1]:>11.0f}"
                     f"{statistics.median(gb):>13.0f}{min(r['median_us'] for r in rs):>9.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="output JSON path (default $OUT/kernels_<gpu>.json)")
    ap.add_argument("--quick", action="store_true", help="a ~30 second subset")
    ap.add_argument("--only", default="", help="comma-separated groups to run (default: all)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="stop starting new cases after this many seconds (default 225, quick 40)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: this script measures real GPU kernels", file=sys.stderr)
        return 2
    budget = args.budget_s if args.budget_s is not None else (40.0 if args.quick else 225.0)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    props = torch.cuda.get_device_properties(0)
    name = torch.cuda.get_device_name(0)
    tag = gpu_tag(name)
    out_path = args.out or default_out(tag)
    l2 = int(getattr(props, "L2_cache_size", 50 * MB))
    timer = Timer(args.quick, l2)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    t_start = time.time()
    print(f"device {name}, {props.multi_processor_count} SMs, L2 {l2 / MB:.0f} MB, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}", flush=True)
    warm_up_clocks(0.5 if args.quick else 1.5)
    rows: list[dict] = []
    errors: list[dict] = []
    skipped = 0
    for group, gen in GROUPS:
        if only and group not in only:
            continue
        t_group = time.time()
        n_group = 0
        for case in gen():
            if args.quick and not case.quick:
                continue
            if time.time() - t_start > budget:
                skipped += 1
                continue
            prev_tf32 = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = bool(case.extra.get("tf32", False))
            try:
                res = timer.run(case)
                rows.append(row_for(case, res))
                n_group += 1
            except Exception as exc:  # one broken case must not lose the run
                errors.append({"op": case.op, "shapes": case.shapes, "params": case.params,
                               "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                print(f"  ! {case.op} {case.shapes}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = prev_tf32
                torch.cuda.synchronize()
        torch.cuda.empty_cache()
        print(f"[{time.time() - t_start:6.1f}s] {group}: {n_group} cases in {time.time() - t_group:.1f}s", flush=True)
    meta = {
        "device_name": name, "gpu": tag, "driver": driver_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "sm_count": props.multi_processor_count, "l2_cache_bytes": l2, "memory_bytes": props.total_memory,
        "host": platform.node(), "quick": args.quick, "elapsed_s": round(time.time() - t_start, 1),
        "skipped_for_budget": skipped, "method": "CUDA-graph replay of rotated random inputs, CUDA events, median",
    }
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump({"meta": meta, "rows": rows, "errors": errors}, f, indent=1)
    print(f"\n{len(rows)} rows, {len(errors)} errors, {skipped} skipped for budget, "
          f"{meta['elapsed_s']} s -> {out_path}")
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
