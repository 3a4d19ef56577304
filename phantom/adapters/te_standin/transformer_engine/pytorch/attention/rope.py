"""transformer_engine/pytorch/attention/rope.py: rotary position embedding.

TE's fused RoPE is one CUDA kernel each way (read t and the angles, write the rotated t).
Here the same arithmetic runs through `torch.compile`, which phantom prices as the one fused
kernel Inductor makes of it (interception/compiled.py), forward and backward.
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


def _rope(t: torch.Tensor, freqs: torch.Tensor, interleaved: bool) -> torch.Tensor:
    rot_dim = freqs.shape[-1]
    t_rot, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    cos, sin = torch.cos(freqs).to(t.dtype), torch.sin(freqs).to(t.dtype)
    out = t_rot * cos + _rotate_half(t_rot, interleaved) * sin
    return torch.cat((out, t_pass), dim=-1) if t_pass.shape[-1] else out


_fused_rope = torch.compile(_rope, dynamic=False)


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
    return (_fused_rope if fused else _rope)(t, freqs, interleaved)
