"""transformer_engine/pytorch/cpp_extensions: the GEMM entry point Megatron calls directly
(`te_general_gemm`, its MoE router's fp32 logits)."""
from __future__ import annotations

from typing import Any

import torch

from transformer_engine.pytorch.module.base import refuse


def general_gemm(A: torch.Tensor, B: torch.Tensor, workspace: Any = None,
                 out_dtype: torch.dtype | None = None, quantization_params: Any = None,
                 gelu: Any = None, gelu_in: Any = None, accumulate: bool = False,
                 layout: str = "TN", out: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 use_split_accumulator: bool = False, grad: bool = False, ub: Any = None,
                 ub_type: Any = None, extra_output: Any = None, bulk_overlap: bool = False):
    """TE's cuBLASLt GEMM in row-major terms: layout "TN" gives B @ A^T, "NN" B @ A and "NT"
    B^T @ A. Returns (out, bias_grad, gelu_input, extra_output) as TE does."""
    if quantization_params is not None or gelu or ub is not None:
        refuse("general_gemm with FP8 quantization, a GELU epilogue or userbuffers")
    a = A.t() if layout[0] == "T" else A
    b = B.t() if layout[1] == "T" else B
    if b.dim() > 2:  # activations [s, b, h]: the GEMM sees [s * b, h]
        b = b.reshape(-1, b.shape[-1])
    dtype = out_dtype or B.dtype
    if accumulate and out is not None:  # out += b @ a: one GEMM with beta = 1
        if out.dtype != b.dtype:
            torch.addmm(out, b, a, out_dtype=out.dtype, out=out)
        else:
            out.addmm_(b, a)
        result = out
    else:
        result = torch.mm(b, a, out_dtype=dtype) if dtype != b.dtype else torch.mm(b, a)
        if bias is not None and not grad:
            result = result + bias
        if out is not None:
            out.copy_(result)
            result = out
    bias_grad = B.reshape(-1, B.shape[-1]).sum(0) if grad and bias is not None else None
    return result, bias_grad, None, None
