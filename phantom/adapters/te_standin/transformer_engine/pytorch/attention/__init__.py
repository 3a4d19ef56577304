"""transformer_engine/pytorch/attention: `DotProductAttention`, and the q/k/v split Megatron
uses when TE is present (`_SplitAlongDim`)."""
from __future__ import annotations

import torch

from transformer_engine.pytorch.attention.dot_product_attention import DotProductAttention  # noqa: F401


class _SplitAlongDim(torch.autograd.Function):
    """Split one tensor into views (the fused QKV projection's q, k, v); the backward joins
    their gradients with one concatenation, TE's path when they are not already adjacent in
    memory (separate gradient buffers, as the attention backward here returns)."""

    @staticmethod
    def forward(ctx, mixed: torch.Tensor, split_dim: int, split_size_or_sections, squeeze: bool = False):
        ctx.split_dim, ctx.squeeze = split_dim, squeeze
        parts = torch.split(mixed, split_size_or_sections, dim=split_dim)
        return tuple(p.squeeze(split_dim) for p in parts) if squeeze else parts

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        if ctx.squeeze:
            grads = tuple(g.unsqueeze(ctx.split_dim) for g in grads)
        return torch.cat(grads, dim=ctx.split_dim), None, None, None
