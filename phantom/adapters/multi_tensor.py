"""Apex's multi-tensor Adam kernel (`multi_tensor_adam`), simulated for the frameworks that
ship a copy of it: DeepSpeed's FusedAdam extension (deepspeed.py) and Transformer Engine's
FusedAdam (te_standin). One launch updates every tensor of the lists in place; phantom runs
torch's fused Adam kernel of the same mode over the same tensors, which its cost model prices
from measured rows.
"""
from __future__ import annotations

import torch

from phantom.interception.mode import SimulationError


class StepCounters:
    """`aten._fused_adamw_` takes one float32 step tensor per parameter (it increments them);
    Apex's kernel takes the step as a host int. The counters are device tensors made once per
    list length and reused, so steady-state steps launch only the fused update kernel, as the
    real multi_tensor_adam does (it launches nothing but the update)."""

    def __init__(self) -> None:
        self._lists: dict[tuple[int, torch.device], list[torch.Tensor]] = {}

    def get(self, n: int, device: torch.device) -> list[torch.Tensor]:
        key = (n, device)
        if key not in self._lists:
            self._lists[key] = [torch.zeros((), dtype=torch.float32, device=device) for _ in range(n)]
        return self._lists[key]


def multi_tensor_adam(chunk_size: int, noop_flag: torch.Tensor, tensor_lists: list[list[torch.Tensor]],
                      lr: float, beta1: float, beta2: float, epsilon: float, step: int, mode: int,
                      bias_correction: int, weight_decay: float, *, steps: StepCounters) -> None:
    """`multi_tensor_adam(chunk_size, noop_flag, [grads, params, exp_avgs, exp_avg_sqs], lr,
    beta1, beta2, eps, step, mode, bias_correction, weight_decay)` (Apex's csrc, copied into
    deepspeed/ops/csrc/adam and transformer_engine/common/multi_tensor): one multi-tensor-apply
    launch (mode 1: AdamW, decoupled weight decay; mode 0: Adam with L2)."""
    grads, params, exp_avgs, exp_avg_sqs = tensor_lists
    if not params:
        return
    if not bias_correction:
        raise SimulationError("phantom: FusedAdam(bias_correction=False) is not simulated "
                              "(README, 'DeepSpeed').")
    fused = torch._fused_adamw_ if mode == 1 else torch._fused_adam_
    fused(params, grads, exp_avgs, exp_avg_sqs, [], steps.get(len(params), params[0].device),
          lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=epsilon,
          amsgrad=False, maximize=False)
