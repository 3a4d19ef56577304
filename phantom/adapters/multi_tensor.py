"""Apex's multi-tensor kernels, simulated for the frameworks that ship a copy of them.

- `multi_tensor_adam` (DeepSpeed's FusedAdam extension, deepspeed.py, and Transformer Engine's
  FusedAdam, te_standin): one launch updates every tensor of the lists in place; phantom runs
  torch's fused Adam kernel of the same mode over the same tensors, which its cost model prices
  from measured rows.
- `multi_tensor_lion` (DeepSpeed's FusedLion): torch has no Lion kernel, so each launch that
  Apex's `multi_tensor_apply` makes (`launches`) is charged as a memory-bound kernel of
  the bytes the update reads and writes.
"""
from __future__ import annotations

import torch

from phantom.interception.cuda_api import extension_kernel
from phantom.errors import SimulationError

# Apex's csrc/multi_tensor_apply.cuh (copied into deepspeed/ops/csrc/{adam,lion}): one launch
# takes at most MAX_TENSORS[depth - 1] tensors and MAX_BLOCKS chunks (a block per chunk).
MAX_TENSORS = (110, 64, 48, 36, 30)
MAX_BLOCKS = 320
# Lion's arithmetic per element (interpolation, sign, decay, two updates): far below what the
# bytes take, it only keeps the kernel's math honest in the roofline
LION_FLOPS_PER_ELEMENT = 10.0
# multi_tensor_lion.cu loads and stores one element at a time (no vector loads), and a narrower
# type does not make it faster: on an H200, 100M bf16 elements took 0.561 ms a step and
# 100M fp32 ones 0.551 ms (measured by bench/kernels/deepspeed_optimizers.py, data in
# bench/kernels/results/deepspeed_optimizers_H200.json). Each element of each list is charged at
# least this many bytes: effective bytes, the time of the memory traffic it makes, not what it
# moves.
LION_MIN_ELEMENT_BYTES = 4


def launches(numels: list[int], chunk_size: int, depth: int) -> list[tuple[int, int]]:
    """(elements, blocks) of each launch `multi_tensor_apply` makes of tensors of `numels`
    elements, by its rules: chunks of `chunk_size` (a block each) are added tensor by tensor,
    and a launch goes out when the chunks fill MAX_BLOCKS, when a tensor's last chunk fills
    the tensor slots, or at the very last chunk; a tensor split across two launches keeps its
    slot in the second."""
    max_tensors = MAX_TENSORS[depth - 1]
    out: list[tuple[int, int]] = []
    blocks = tensors = elements = 0
    for t, n in enumerate(numels):
        tensors += 1
        chunks, done = -(-n // chunk_size), 0
        while done < chunks:
            take = min(MAX_BLOCKS - blocks, chunks - done)
            last_of_tensor = done + take == chunks
            # the tensor's chunks [done, done + take): full ones, the last one partial
            elements += (n - done * chunk_size) if last_of_tensor else take * chunk_size
            blocks += take
            done += take
            tensors_full = last_of_tensor and tensors == max_tensors
            last_chunk = last_of_tensor and t == len(numels) - 1
            if blocks == MAX_BLOCKS or tensors_full or last_chunk:
                out.append((elements, blocks))
                blocks = elements = 0
                tensors = 0 if last_of_tensor else 1
    return out


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
                              "(docs/frameworks.md, 'DeepSpeed').")
    fused = torch._fused_adamw_ if mode == 1 else torch._fused_adam_
    fused(params, grads, exp_avgs, exp_avg_sqs, [], steps.get(len(params), params[0].device),
          lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=epsilon,
          amsgrad=False, maximize=False)


def _lion_bytes(t: torch.Tensor) -> int:
    return max(LION_MIN_ELEMENT_BYTES, t.element_size())


def _check_lists(name: str, tensor_lists: list[list[torch.Tensor]], depth: int) -> None:
    """multi_tensor_apply's TORCH_CHECKs, as clear errors: `depth` lists of one length, not
    empty, tensors of matching sizes."""
    if len(tensor_lists) != depth or not tensor_lists[0]:
        raise SimulationError(f"phantom: {name} takes {depth} non-empty tensor lists; got "
                              f"{[len(lst) for lst in tensor_lists]} tensors in {len(tensor_lists)} list(s)")
    lengths = {len(lst) for lst in tensor_lists}
    if len(lengths) > 1:
        raise SimulationError(f"phantom: {name}: tensor lists of different lengths {sorted(lengths)} "
                              "(the CUDA kernel checks 'Size mismatch among tensor lists')")
    for i, tensors in enumerate(zip(*tensor_lists)):
        if len({t.numel() for t in tensors}) > 1:
            raise SimulationError(f"phantom: {name}: tensor {i} has sizes {[t.numel() for t in tensors]} "
                                  "across the lists (the CUDA kernel checks 'Size mismatch')")


def multi_tensor_lion(chunk_size: int, noop_flag: torch.Tensor, tensor_lists: list[list[torch.Tensor]],
                      lr: float, beta1: float, beta2: float, step: int, weight_decay: float) -> None:
    """`multi_tensor_lion(chunk_size, noop_flag, [grads, params, exp_avgs], lr, beta1, beta2,
    step, weight_decay)` (deepspeed/ops/csrc/lion/multi_tensor_lion.cu): each element reads its
    gradient, parameter and momentum and writes the parameter and momentum back, in the
    launches multi_tensor_apply makes of the lists (depth 3). Values are not computed: the
    tensors are simulated, and the update is in place."""
    _check_lists("multi_tensor_lion", tensor_lists, depth=3)
    grads, params, exp_avgs = tensor_lists
    per_element = _lion_bytes(grads[0]) + 2 * _lion_bytes(params[0]) + 2 * _lion_bytes(exp_avgs[0])
    for elements, blocks in launches([p.numel() for p in params], chunk_size, depth=3):
        extension_kernel("multi_tensor_lion", elements * per_element, elements * LION_FLOPS_PER_ELEMENT, blocks)
