"""transformer_engine/pytorch/module/linear.py: `Linear`, and the tensor-parallel GEMM both
it and `LayerNormLinear` run (`_linear`).

The GPU work follows TE's `_Linear` in high precision (bf16/fp16/fp32):
- forward: with sequence parallelism a column-parallel layer all-gathers its input along the
  sequence first; one GEMM, the bias in its epilogue; a row-parallel layer then
  reduce-scatters (sequence parallel) or all-reduces its output.
- backward: a row-parallel sequence-parallel layer all-gathers the output gradient first. A
  column-parallel sequence-parallel layer starts the all-gather of its saved input shard
  asynchronously, runs the data-gradient GEMM meanwhile, starts the reduce-scatter of that
  gradient asynchronously and runs the weight-gradient GEMM meanwhile (without sequence
  parallelism, an asynchronous all-reduce of the data gradient). With
  `fuse_wgrad_accumulation` the weight-gradient GEMM accumulates into the fp32 `main_grad`
  (beta = 1) and autograd gets TE's cached dummy gradient.
One difference: TE computes the bias gradient in the weight-gradient GEMM's epilogue
(cuBLASLt BGRADB); here it is a separate column-sum kernel, a few microseconds.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from phantom.adapters.megatron import wgrad_gemm_accum  # Apex's: the same one GEMM, beta = 1
from transformer_engine.pytorch.module.base import (
    TransformerEngineBaseModule,
    allreduce,
    gather_along_first_dim,
    get_dummy_wgrad,
    reduce_scatter_along_first_dim,
    refuse,
    set_tensor_model_parallel_attributes,
)


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                layer: "LinearBase") -> torch.Tensor:
        mode, group, tp = layer.parallel_mode, layer.tp_group, layer.tp_size
        sp = layer.sequence_parallel and tp > 1
        x = inp.reshape(-1, inp.shape[-1])
        total = gather_along_first_dim(x, group)[0] if mode == "column" and sp else x
        out = torch.addmm(bias, total, weight.t()) if bias is not None else torch.mm(total, weight.t())
        if mode == "row" and tp > 1:
            out = reduce_scatter_along_first_dim(out, group)[0] if sp else allreduce(out, group)[0]
        ctx.layer = layer
        ctx.has_bias = bias is not None
        ctx.input_shape = inp.shape
        # the local shard is kept (and gathered again in the backward), as TE keeps it
        ctx.save_for_backward(x, weight)
        ctx.main_grad = getattr(weight, "main_grad", None) if layer.fuse_wgrad_accumulation else None
        return out.view(*inp.shape[:-1], out.shape[-1]) if out.shape[0] == x.shape[0] else \
            out.view(-1, *inp.shape[1:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, weight = ctx.saved_tensors
        layer = ctx.layer
        mode, group, tp = layer.parallel_mode, layer.tp_group, layer.tp_size
        sp = layer.sequence_parallel and tp > 1
        g = grad_out.reshape(-1, grad_out.shape[-1])
        if mode == "row" and sp:
            g = gather_along_first_dim(g, group)[0]
        need_dgrad, need_wgrad = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        gather = gather_along_first_dim(x, group, async_op=True) if mode == "column" and sp \
            and need_wgrad else None
        dgrad, dgrad_work = None, None
        if need_dgrad:
            dgrad = torch.mm(g, weight)
            if mode == "column" and tp > 1:
                dgrad, dgrad_work = (reduce_scatter_along_first_dim(dgrad, group, async_op=True) if sp
                                     else allreduce(dgrad, group, async_op=True))
        total = x
        if gather is not None:
            total, work = gather
            work.wait()
        wgrad = bgrad = None
        if need_wgrad:
            if ctx.main_grad is not None:
                wgrad_gemm_accum(total, g, ctx.main_grad)
                if hasattr(weight, "grad_added_to_main_grad"):
                    weight.grad_added_to_main_grad = True
                    wgrad = get_dummy_wgrad(list(weight.shape), weight.dtype,
                                            zero=getattr(weight, "zero_out_wgrad", False))
            else:
                wgrad = torch.mm(g.t(), total)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            bgrad = g.sum(0)
        if dgrad_work is not None:
            dgrad_work.wait()
        if dgrad is not None:
            dgrad = dgrad.view(ctx.input_shape)
        return dgrad, wgrad, bgrad, None


def _linear(inp: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            layer: "LinearBase") -> torch.Tensor:
    return _LinearFunction.apply(inp, weight, bias, layer)


class LinearBase(TransformerEngineBaseModule):
    """The weight, bias and parallel mode shared by Linear and LayerNormLinear."""

    def __init__(self, *, delay_wgrad_compute: bool, symmetric_ar_type: str | None,
                 ub_flags: tuple[bool, ...], **base: Any) -> None:
        super().__init__(**base)
        self._check_common(delay_wgrad_compute, symmetric_ar_type, *ub_flags)

    def _init_linear(self, in_features: int, out_features: int, *, bias: bool, return_bias: bool,
                     parallel_mode: str | None, fuse_wgrad_accumulation: bool,
                     init_method: Callable | None) -> None:
        if parallel_mode not in (None, "column", "row"):
            refuse(f"parallel_mode={parallel_mode!r} (expected None, 'column' or 'row')")
        self.in_features, self.out_features = in_features, out_features
        self.parallel_mode = parallel_mode
        self.use_bias, self.apply_bias = bias, bias
        self.return_bias = return_bias
        self.fuse_wgrad_accumulation = fuse_wgrad_accumulation
        tp = self.tp_size if parallel_mode else 1
        if parallel_mode is None:
            self.tp_size = 1
        out_local = out_features // tp if parallel_mode == "column" else out_features
        in_local = in_features // tp if parallel_mode == "row" else in_features
        self.out_features_local, self.in_features_local = out_local, in_local
        weight = self.new_parameter("weight", (out_local, in_local), init_method)
        if parallel_mode:
            set_tensor_model_parallel_attributes(weight, True, 1 if parallel_mode == "row" else 0, 1)
        if bias:
            b = self.new_parameter("bias", (out_local,), None)
            with torch.no_grad():
                b.zero_()
            if parallel_mode == "column":
                set_tensor_model_parallel_attributes(b, True, 0, 1)
            elif parallel_mode == "row":
                b.sequence_parallel = self.sequence_parallel
        else:
            self.register_parameter("bias", None)

    def _finish(self, out: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The bias a row-parallel layer adds after its reduction, or returns (return_bias)."""
        if self.return_bias:
            return out, self.bias if self.bias is not None else out.new_empty(0)
        if self.parallel_mode == "row" and self.bias is not None:
            out = out + self.bias
        return out

    def _gemm_bias(self) -> torch.Tensor | None:
        """The bias the GEMM's epilogue adds (none for a row-parallel or return_bias layer)."""
        if self.bias is None or self.return_bias or self.parallel_mode == "row":
            return None
        return self.bias


class Linear(LinearBase):
    """TE's Linear (high precision)."""

    def __init__(self, in_features: int, out_features: int, sequence_parallel: bool = False,
                 fuse_wgrad_accumulation: bool = False, tp_group: Any = None, tp_size: int = 1,
                 get_rng_state_tracker: Callable | None = None, rng_tracker_name: str | None = None,
                 init_method: Callable | None = None, bias: bool = True, return_bias: bool = False,
                 params_dtype: torch.dtype | None = None, parallel_mode: str | None = None,
                 parameters_split: Any = None, device: Any = "cuda", ub_overlap_ag: bool = False,
                 ub_overlap_rs: bool = False, ub_overlap_rs_dgrad: bool = False,
                 ub_bulk_dgrad: bool = False, ub_bulk_wgrad: bool = False, ub_name: str | None = None,
                 delay_wgrad_compute: bool = False, symmetric_ar_type: str | None = None,
                 save_original_input: bool = False, name: str | None = None) -> None:
        super().__init__(tp_group=tp_group, tp_size=tp_size, sequence_parallel=sequence_parallel,
                         params_dtype=params_dtype, device=device,
                         get_rng_state_tracker=get_rng_state_tracker,
                         rng_tracker_name=rng_tracker_name, delay_wgrad_compute=delay_wgrad_compute,
                         symmetric_ar_type=symmetric_ar_type,
                         ub_flags=(ub_overlap_ag, ub_overlap_rs, ub_overlap_rs_dgrad, ub_bulk_dgrad,
                                   ub_bulk_wgrad))
        if parameters_split is not None:
            refuse("Linear(parameters_split=...) is not simulated")
        self.save_original_input = save_original_input
        self.name = name
        self._init_linear(in_features, out_features, bias=bias, return_bias=return_bias,
                          parallel_mode=parallel_mode,
                          fuse_wgrad_accumulation=fuse_wgrad_accumulation, init_method=init_method)

    def forward(self, inp: torch.Tensor, is_first_microbatch: bool | None = None,
                fp8_output: bool = False, fp8_grad: bool = False):
        return self._finish(_linear(inp, self.weight, self._gemm_bias(), self))
