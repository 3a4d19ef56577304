"""transformer_engine/pytorch/module/layernorm_linear.py: `LayerNormLinear`, a norm fused in
front of a (column-parallel) GEMM.

TE runs the norm on the local sequence shard, then all-gathers its output (sequence
parallelism) and runs the GEMM; the norm's output shard is what the backward keeps for the
weight gradient, the norm's input and statistics what its own backward needs. The same here:
the norm (one fused kernel each way) composed with linear.py's `_linear`.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from transformer_engine.pytorch.module.base import refuse
from transformer_engine.pytorch.module.layernorm import add_norm_parameters, apply_normalization
from transformer_engine.pytorch.module.linear import LinearBase, _linear


class LayerNormLinear(LinearBase):
    def __init__(self, in_features: int, out_features: int, eps: float = 1e-5,
                 sequence_parallel: bool = False, fuse_wgrad_accumulation: bool = False,
                 tp_group: Any = None, tp_size: int = 1, get_rng_state_tracker: Callable | None = None,
                 rng_tracker_name: str | None = None, init_method: Callable | None = None,
                 bias: bool = True, normalization: str = "LayerNorm", return_bias: bool = False,
                 params_dtype: torch.dtype | None = None, parallel_mode: str | None = None,
                 return_layernorm_output: bool = False,
                 return_layernorm_output_gathered: bool = False, parameters_split: Any = None,
                 zero_centered_gamma: bool = False, device: Any = "cuda",
                 ub_overlap_ag: bool = False, ub_overlap_rs: bool = False,
                 ub_overlap_rs_dgrad: bool = False, ub_bulk_wgrad: bool = False,
                 ub_bulk_dgrad: bool = False, ub_name: str | None = None,
                 delay_wgrad_compute: bool = False, symmetric_ar_type: str | None = None,
                 name: str | None = None) -> None:
        super().__init__(tp_group=tp_group, tp_size=tp_size, sequence_parallel=sequence_parallel,
                         params_dtype=params_dtype, device=device,
                         get_rng_state_tracker=get_rng_state_tracker,
                         rng_tracker_name=rng_tracker_name, delay_wgrad_compute=delay_wgrad_compute,
                         symmetric_ar_type=symmetric_ar_type,
                         ub_flags=(ub_overlap_ag, ub_overlap_rs, ub_overlap_rs_dgrad, ub_bulk_dgrad,
                                   ub_bulk_wgrad))
        if normalization not in ("LayerNorm", "RMSNorm"):
            refuse(f"LayerNormLinear(normalization={normalization!r}) (expected 'LayerNorm' or 'RMSNorm')")
        if return_layernorm_output or return_layernorm_output_gathered or parameters_split:
            refuse("LayerNormLinear(return_layernorm_output / parameters_split) is not simulated")
        if parallel_mode == "row":
            refuse("LayerNormLinear(parallel_mode='row') (TE allows None or 'column')")
        self.normalization, self.eps = normalization, eps
        self.zero_centered_gamma = zero_centered_gamma
        self.name = name
        add_norm_parameters(self, "layer_norm_", in_features, normalization, zero_centered_gamma,
                            sequence_parallel)
        self._init_linear(in_features, out_features, bias=bias, return_bias=return_bias,
                          parallel_mode=parallel_mode,
                          fuse_wgrad_accumulation=fuse_wgrad_accumulation, init_method=init_method)

    def forward(self, inp: torch.Tensor, is_first_microbatch: bool | None = None,
                fp8_output: bool = False, fp8_grad: bool = False):
        ln_out = apply_normalization(inp, self.normalization, self.layer_norm_weight,
                                     self.layer_norm_bias, self.eps, self.zero_centered_gamma)
        return self._finish(_linear(ln_out, self.weight, self._gemm_bias(), self))
