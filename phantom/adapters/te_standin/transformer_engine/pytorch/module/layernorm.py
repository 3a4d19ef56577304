"""transformer_engine/pytorch/module/layernorm.py: `LayerNorm` and `RMSNorm`.

One fused normalisation kernel forward and one backward (plus its weight-gradient
reduction), as TE's. `zero_centered_gamma` (weights stored as gamma - 1) adds the 1 to the
small weight vector in a separate kernel here; TE does it inside the norm kernel.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from transformer_engine.pytorch.module.base import TransformerEngineBaseModule, refuse


def add_norm_parameters(module: TransformerEngineBaseModule, prefix: str, hidden_size: int,
                        normalization: str, zero_centered_gamma: bool, sequence_parallel: bool) -> None:
    """`{prefix}weight` (gamma, or gamma - 1 when zero-centred) and, for LayerNorm,
    `{prefix}bias`, marked `sequence_parallel` so Megatron all-reduces their gradients over TP."""
    def make(value: float) -> torch.nn.Parameter:
        param = torch.nn.Parameter(torch.empty(hidden_size, dtype=module.params_dtype,
                                               device=module.device))
        if param.device.type != "meta":
            with torch.no_grad():
                param.fill_(value)
        param.sequence_parallel = sequence_parallel
        return param

    module.register_parameter(prefix + "weight", make(0.0 if zero_centered_gamma else 1.0))
    module.register_parameter(prefix + "bias", make(0.0) if normalization == "LayerNorm" else None)


def apply_normalization(x: torch.Tensor, normalization: str, weight: torch.Tensor,
                        bias: torch.Tensor | None, eps: float, zero_centered_gamma: bool) -> torch.Tensor:
    gamma = weight + 1 if zero_centered_gamma else weight
    shape = (x.shape[-1],)
    if normalization == "RMSNorm":
        return F.rms_norm(x, shape, gamma, eps)
    return F.layer_norm(x, shape, gamma, bias, eps)


class _Norm(TransformerEngineBaseModule):
    normalization = "LayerNorm"

    def __init__(self, hidden_size: int, eps: float = 1e-5, sequence_parallel: bool | None = None,
                 params_dtype: torch.dtype | None = None, zero_centered_gamma: bool = False,
                 device: Any = "cuda", normalization: str | None = None, **unused: Any) -> None:
        super().__init__(sequence_parallel=bool(sequence_parallel), params_dtype=params_dtype,
                         device=device)
        if unused.get("sm_margin"):
            refuse(f"{type(self).__name__}(sm_margin=...) is not simulated")
        self.eps, self.hidden_size = eps, hidden_size
        self.zero_centered_gamma = zero_centered_gamma
        add_norm_parameters(self, "", hidden_size, self.normalization, zero_centered_gamma,
                            bool(sequence_parallel))

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        return apply_normalization(inp, self.normalization, self.weight, self.bias, self.eps,
                                   self.zero_centered_gamma)


class LayerNorm(_Norm):
    normalization = "LayerNorm"


class RMSNorm(_Norm):
    normalization = "RMSNorm"
