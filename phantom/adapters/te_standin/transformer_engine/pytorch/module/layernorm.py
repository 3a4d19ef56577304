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
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, dtype=self.params_dtype,
                                                     device=self.device))
        self.weight.sequence_parallel = bool(sequence_parallel)
        if self.normalization == "LayerNorm":
            self.bias = torch.nn.Parameter(torch.empty(hidden_size, dtype=self.params_dtype,
                                                       device=self.device))
            self.bias.sequence_parallel = bool(sequence_parallel)
        else:
            self.register_parameter("bias", None)
        with torch.no_grad():
            if self.weight.device.type != "meta":
                self.weight.fill_(0.0 if zero_centered_gamma else 1.0)
                if self.bias is not None:
                    self.bias.zero_()

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        return apply_normalization(inp, self.normalization, self.weight, self.bias, self.eps,
                                   self.zero_centered_gamma)


class LayerNorm(_Norm):
    normalization = "LayerNorm"


class RMSNorm(_Norm):
    normalization = "RMSNorm"
