"""transformer_engine/pytorch/optimizers: `FusedAdam` and the multi-tensor kernels.

Each multi-tensor call is one C++ extension call on the node that launches one fused kernel
over chunks of all its tensors; here the same memory traffic through torch's multi-tensor
(`_foreach_*`, `_fused_adam(w)_`) kernels, and the call charged as one extension call
(`node_call`, the cost phantom charges Apex's extension calls).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from phantom.adapters.multi_tensor import StepCounters
from phantom.adapters.multi_tensor import multi_tensor_adam as _adam_kernel
from phantom.adapters.megatron import APEX_WGRAD_CALL_NS
from phantom.interception.cuda_api import node_call

_CHUNK = 2048 * 32


def _extension_call(name: str) -> Callable[[Callable], Callable]:
    return node_call(f"transformer_engine_torch.{name}", APEX_WGRAD_CALL_NS)


@_extension_call("multi_tensor_l2norm")
def multi_tensor_l2norm(chunk_size: int, noop_flag: torch.Tensor, tensor_lists: list[list[torch.Tensor]],
                        per_tensor: bool = False, *args: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The L2 norm of all tensors of tensor_lists[0] (fp32, shape [1]), and each tensor's if
    per_tensor."""
    tensors = tensor_lists[0]
    if not tensors:
        return torch.zeros(1, dtype=torch.float32, device="cuda"), None
    norms = torch._foreach_norm(tensors, 2.0, dtype=torch.float32)
    stacked = torch.stack(norms)
    total = torch.linalg.vector_norm(stacked).reshape(1)
    return total, (stacked if per_tensor else None)


@_extension_call("multi_tensor_scale")
def multi_tensor_scale(chunk_size: int, noop_flag: torch.Tensor, tensor_lists: list[list[torch.Tensor]],
                       scale: float) -> None:
    """tensor_lists[1][i] = tensor_lists[0][i] * scale (in place when the lists are the same)."""
    src, dst = tensor_lists
    if not src:
        return
    if all(s is d for s, d in zip(src, dst)):
        torch._foreach_mul_(src, scale)
    elif scale == 1.0:
        torch._foreach_copy_(dst, src)
    else:
        torch._foreach_copy_(dst, torch._foreach_mul(src, scale))


_steps = StepCounters()


@_extension_call("multi_tensor_adam")
def multi_tensor_adam(chunk_size: int, noop_flag: torch.Tensor, tensor_lists: list[list[torch.Tensor]],
                      lr: float, beta1: float, beta2: float, eps: float, step: int, mode: int,
                      bias_correction: int, weight_decay: float) -> None:
    _adam_kernel(chunk_size, noop_flag, tensor_lists, lr, beta1, beta2, eps, step, mode,
                 bias_correction, weight_decay, steps=_steps)


def multi_tensor_applier(op: Callable, noop_flag_buffer: torch.Tensor,
                         tensor_lists: list[list[torch.Tensor]], *args: Any) -> Any:
    return op(_CHUNK, noop_flag_buffer, tensor_lists, *args)


class FusedAdam(torch.optim.Optimizer):
    """TE's FusedAdam: Adam/AdamW over every parameter of a group in one multi-tensor launch
    (per dtype). Precision-aware options (fp32 master weights kept by the optimizer, bf16
    moments, `store_param_remainders`) are not simulated and refused when turned on."""

    def __init__(self, params: Iterable, lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 adam_w_mode: bool = True, weight_decay: float = 0.0, amsgrad: bool = False,
                 set_grad_none: bool = True, capturable: bool = False, master_weights: bool = False,
                 master_weight_dtype: torch.dtype = torch.float32,
                 exp_avg_dtype: torch.dtype = torch.float32,
                 exp_avg_sq_dtype: torch.dtype = torch.float32, use_decoupled_grad: bool = False,
                 store_param_remainders: bool = False) -> None:
        from transformer_engine.pytorch.module.base import refuse

        if amsgrad:
            refuse("FusedAdam(amsgrad=True) (TE does not support it either)")
        if master_weights or exp_avg_dtype != torch.float32 or exp_avg_sq_dtype != torch.float32:
            refuse("FusedAdam's precision-aware options (master_weights, exp_avg_dtype, "
                   "exp_avg_sq_dtype; Megatron's --use-precision-aware-optimizer)")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps,
                        weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none
        self._dummy_overflow_buf = torch.zeros(1, dtype=torch.int, device="cuda")

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)

    def initialize_state(self, param: torch.Tensor) -> None:
        state = self.state[param]
        state["exp_avg"] = torch.zeros_like(param, dtype=torch.float32)
        state["exp_avg_sq"] = torch.zeros_like(param, dtype=torch.float32)

    @torch.no_grad()
    def step(self, closure: Callable | None = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            by_dtype: dict[torch.dtype, list[list[torch.Tensor]]] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if len(self.state[p]) == 0:
                    self.initialize_state(p)
                lists = by_dtype.setdefault(p.dtype, [[], [], [], []])
                for i, t in enumerate((p.grad, p, self.state[p]["exp_avg"], self.state[p]["exp_avg_sq"])):
                    lists[i].append(t)
            beta1, beta2 = group["betas"]
            for lists in by_dtype.values():
                multi_tensor_applier(multi_tensor_adam, self._dummy_overflow_buf, lists, group["lr"],
                                     beta1, beta2, group["eps"], group["step"], self.adam_w_mode,
                                     1 if group["bias_correction"] else 0, group["weight_decay"])
        return loss


class FusedSGD(torch.optim.SGD):
    """TE's FusedSGD: torch's SGD with its fused (multi-tensor) implementation."""

    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 wd_after_momentum: bool = False, materialize_master_grads: bool = True,
                 set_grad_none: bool = False) -> None:
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening,
                         weight_decay=weight_decay, nesterov=nesterov, foreach=True)
