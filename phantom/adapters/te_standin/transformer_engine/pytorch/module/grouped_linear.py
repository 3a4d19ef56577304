"""transformer_engine/pytorch/module/grouped_linear.py: `GroupedLinear`, one GEMM per group
of rows (MoE experts, Megatron's `TEGroupedMLP` with `--moe-grouped-gemm`).

TE splits its input by `m_splits` and runs each group's GEMM into its slice of one output
(cuBLAS on several streams); its backward runs each group's data- and weight-gradient GEMMs,
the latter into `main_grad` with `fuse_wgrad_accumulation`. The same GEMMs here, on the current
stream (TE's streams overlap small GEMMs; not modelled). Tensor parallelism inside the layer is
not simulated (Megatron's expert layers do their communication outside it).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from phantom.adapters.megatron import wgrad_gemm_accum
from transformer_engine.pytorch.module.base import (
    TransformerEngineBaseModule,
    get_dummy_wgrad,
    refuse,
)


class _GroupedLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp: torch.Tensor, m_splits: tuple[int, ...], layer: "GroupedLinear",
                *weights: torch.Tensor) -> torch.Tensor:
        x = inp.reshape(-1, inp.shape[-1])
        out = torch.empty((x.shape[0], weights[0].shape[0]), dtype=x.dtype, device=x.device)
        for xi, w, oi in zip(torch.split(x, m_splits), weights, torch.split(out, m_splits)):
            if xi.shape[0]:
                torch.mm(xi, w.t(), out=oi)
        ctx.m_splits, ctx.layer, ctx.input_shape = m_splits, layer, inp.shape
        ctx.save_for_backward(x, *weights)
        return out.view(*inp.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, *weights = ctx.saved_tensors
        g = grad_out.reshape(-1, grad_out.shape[-1])
        splits = ctx.m_splits
        dgrad = None
        if ctx.needs_input_grad[0]:
            dgrad = torch.empty_like(x)
            for gi, w, di in zip(torch.split(g, splits), weights, torch.split(dgrad, splits)):
                if gi.shape[0]:
                    torch.mm(gi, w, out=di)
            dgrad = dgrad.view(ctx.input_shape)
        wgrads = []
        fuse = ctx.layer.fuse_wgrad_accumulation
        for i, (gi, xi, w) in enumerate(zip(torch.split(g, splits), torch.split(x, splits), weights)):
            if not ctx.needs_input_grad[3 + i]:
                wgrads.append(None)
            elif fuse and getattr(w, "main_grad", None) is not None:
                if gi.shape[0]:
                    wgrad_gemm_accum(xi, gi, w.main_grad)
                if hasattr(w, "grad_added_to_main_grad"):
                    w.grad_added_to_main_grad = True
                    wgrads.append(get_dummy_wgrad(list(w.shape), w.dtype))
                else:
                    wgrads.append(None)
            else:
                wgrads.append(torch.mm(gi.t(), xi))
        return (dgrad, None, None, *wgrads)


class GroupedLinear(TransformerEngineBaseModule):
    def __init__(self, num_gemms: int, in_features: int, out_features: int,
                 sequence_parallel: bool = False, fuse_wgrad_accumulation: bool = False,
                 tp_group: Any = None, tp_size: int = 1, get_rng_state_tracker: Callable | None = None,
                 rng_tracker_name: str | None = None, init_method: Callable | None = None,
                 bias: bool = True, return_bias: bool = False, params_dtype: torch.dtype | None = None,
                 parallel_mode: str | None = None, device: Any = "cuda", ub_overlap_rs: bool = False,
                 ub_overlap_ag: bool = False, ub_name: str | None = None,
                 delay_wgrad_compute: bool = False, save_original_input: bool = False,
                 name: str | None = None) -> None:
        super().__init__(tp_group=tp_group, tp_size=tp_size, sequence_parallel=sequence_parallel,
                         params_dtype=params_dtype, device=device,
                         get_rng_state_tracker=get_rng_state_tracker,
                         rng_tracker_name=rng_tracker_name)
        self._check_common(delay_wgrad_compute, None, ub_overlap_ag, ub_overlap_rs)
        if parallel_mode is not None and self.tp_size > 1:
            refuse("GroupedLinear with tensor parallelism inside the layer is not simulated")
        if bias:
            refuse("GroupedLinear(bias=True) is not simulated (Megatron's experts have no bias "
                   "unless --add-bias-linear)")
        self.num_gemms, self.in_features, self.out_features = num_gemms, in_features, out_features
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        self.return_bias, self.use_bias = return_bias, False
        self.parallel_mode = parallel_mode
        self.save_original_input = save_original_input
        for i in range(num_gemms):
            self.new_parameter(f"weight{i}", (out_features, in_features), init_method)

    def forward(self, inp: torch.Tensor, m_splits: list[int], is_first_microbatch: bool | None = None):
        weights = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
        out = _GroupedLinearFunction.apply(inp, tuple(int(m) for m in m_splits), self, *weights)
        if self.return_bias:
            return out, out.new_empty(0)
        return out
