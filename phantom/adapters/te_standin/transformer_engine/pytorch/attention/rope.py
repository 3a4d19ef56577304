"""transformer_engine/pytorch/attention/rope.py: rotary position embedding.

TE's fused RoPE (`FusedRoPEFunc`) is an autograd Function whose forward and backward are one
C++ call and one CUDA kernel each (read t and the angles, write the rotated t). The stand-in has
the same shape: an autograd Function whose forward and backward each call a `torch.compile`'d
pointwise function. Called with autograd off (inside the Function), phantom prices each call as
the one fused kernel Inductor makes of it, at the node's cost of a compiled call
(interception/compiled.py `install`).

The rotation is not compiled with autograd on: each call would then run Dynamo's guards and
AOTAutograd's runtime wrappers forward and backward, ~200 us of host time a call on a GPU host
(bench/probes/host_compiled_call.py --training times such calls), where TE spends one extension call;
at two calls a layer that makes large Megatron configurations host-bound.
"""
from __future__ import annotations

from typing import Any

import torch

from transformer_engine.pytorch.module.base import refuse


def _rotate_half(x: torch.Tensor, interleaved: bool) -> torch.Tensor:
    if interleaved:
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rotate_half_adjoint(y: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """The transpose of `_rotate_half` (a linear map): its gradient."""
    if interleaved:
        y1, y2 = y[..., ::2], y[..., 1::2]
        return torch.stack((y2, -y1), dim=-1).flatten(-2)
    y1, y2 = torch.chunk(y, 2, dim=-1)
    return torch.cat((y2, -y1), dim=-1)


def _on_rotary_dims(t: torch.Tensor, freqs: torch.Tensor, rotate) -> torch.Tensor:
    """`rotate(t_rot, cos, sin)` on the first rot_dim features of `t`; the rest pass through."""
    rot_dim = freqs.shape[-1]
    t_rot, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    cos, sin = torch.cos(freqs).to(t.dtype), torch.sin(freqs).to(t.dtype)
    out = rotate(t_rot, cos, sin)
    return torch.cat((out, t_pass), dim=-1) if t_pass.shape[-1] else out


def _rope_forward(t: torch.Tensor, freqs: torch.Tensor, interleaved: bool) -> torch.Tensor:
    return _on_rotary_dims(t, freqs, lambda x, cos, sin: x * cos + _rotate_half(x, interleaved) * sin)


def _rope_backward(grad: torch.Tensor, freqs: torch.Tensor, interleaved: bool) -> torch.Tensor:
    return _on_rotary_dims(grad, freqs,
                           lambda g, cos, sin: g * cos + _rotate_half_adjoint(g * sin, interleaved))


_fused_forward = torch.compile(_rope_forward, dynamic=False)
_fused_backward = torch.compile(_rope_backward, dynamic=False)


class _FusedRoPE(torch.autograd.Function):
    """TE's `FusedRoPEFunc`: one kernel forward, one backward; the angles are saved."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, freqs: torch.Tensor, interleaved: bool) -> torch.Tensor:
        ctx.save_for_backward(freqs)
        ctx.interleaved = interleaved
        return _fused_forward(t, freqs, interleaved)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (freqs,) = ctx.saved_tensors
        return _fused_backward(grad, freqs, ctx.interleaved), None, None


def apply_rotary_pos_emb(t: torch.Tensor, freqs: torch.Tensor, tensor_format: str = "sbhd",
                         interleaved: bool = False, fused: bool = False,
                         cu_seqlens: torch.Tensor | None = None, cp_size: int = 1,
                         cp_rank: int = 0, **unused: Any) -> torch.Tensor:
    """t: [s, b, h, d] (sbhd) or [b, s, h, d] (bshd); freqs: [s, 1, 1, rot_dim] angles."""
    if tensor_format not in ("sbhd", "bshd") or cu_seqlens is not None or cp_size > 1:
        refuse(f"RoPE with tensor_format={tensor_format!r}, packed sequences or context "
               "parallelism is not simulated")
    seq = t.shape[0] if tensor_format == "sbhd" else t.shape[1]
    freqs = freqs[:seq]
    if tensor_format == "bshd":
        freqs = freqs.transpose(0, 1)
    if fused:
        return _FusedRoPE.apply(t, freqs, interleaved)
    return _rope_forward(t, freqs, interleaved)
