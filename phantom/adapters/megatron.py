"""Megatron-Core 0.16 under simulation: a Megatron-Core training script runs unchanged.

These patches, applied by the import hook in phantom/adapters/__init__.py only when
Megatron-Core's modules are imported, fix the few places where Megatron-Core cannot run on a
simulated GPU. Each names the Megatron code it works around and why.

Simulation policy (README, "Megatron-Core"):
- Transformer Engine and Apex need a real GPU (and TE a CUDA build of torch): the local layer
  spec (`get_gpt_layer_local_spec`) is the supported path, with Megatron's own fallbacks for
  the fused optimizer, norms and multi-tensor kernels (as on a GPU machine without TE/Apex).
- Gradient norm: Megatron reads it to the host (`.item()`-style reads in the local
  multi-tensor L2 norm). Each read costs its simulated sync, and the value is phantom's
  placeholder (0.0): clipping never scales the gradients and no skipped/NaN-iteration path is
  taken; the log's "grad norm" is that placeholder, not a measurement.
- MoE: experts are load-balanced. The router runs as usual on simulated logits, and the
  token dispatcher's counts (which Megatron reads to the host to size its all-to-all and the
  expert GEMMs) are an analytic uniform dispatch: each expert gets tokens x top-k / experts.
"""
from __future__ import annotations

from types import ModuleType

import torch
from torch._subclasses.fake_tensor import FakeTensor


def _is_phantom_tensor(x: object) -> bool:
    return isinstance(x, FakeTensor) and x.device.type == "cuda"


def patch_utils(module: ModuleType) -> None:
    """megatron/core/utils.py."""
    original = module.local_multi_tensor_l2_norm

    # `local_multi_tensor_l2_norm` (the fallback for Apex's amp_C.multi_tensor_l2norm, which
    # clip_grads.get_grad_norm_fp32 uses without TE/Apex) builds `torch.tensor(l2)` from a list
    # of 0-d CUDA tensors: on a GPU each element is read to the host (one sync each); under
    # simulation that read bypasses the dispatch mode and fails. Same work here, with the
    # reads made explicit (`float(t)`: a simulated sync and the placeholder value each).
    def local_multi_tensor_l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
        if not any(_is_phantom_tensor(t) for tl in tensor_lists for t in tl):
            return original(chunk_size, noop_flag, tensor_lists, per_tensor, *args)
        l2 = [[float(torch.norm(t)) for t in tl] for tl in tensor_lists]
        l2_reduced = torch.norm(torch.tensor(l2))
        return torch.tensor([float(l2_reduced)], dtype=torch.float, device="cuda"), None

    module.local_multi_tensor_l2_norm = local_multi_tensor_l2_norm
