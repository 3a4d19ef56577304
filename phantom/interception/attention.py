"""`F.scaled_dot_product_attention` picks the fused kernel a real GPU would run.

SDPA's backend choice happens in C++ through a per-device stub that a CPU-only torch build
has no CUDA entry for, so on fake CUDA tensors SDPA silently takes the *math* path: a
materialised S x S score matrix, bmm + softmax. That is neither the time nor the memory of
the real run. This wrapper applies the CUDA selection rules (aten/src/ATen/native/
transformers/cuda/sdp_utils.cpp, simplified) and calls that backend's op, which has its own
autograd formula and fake implementation:
- Hopper (sm90): cuDNN attention first for fp16/bf16, head_dim <= 128, equal head counts or
  grouped K/V heads with `enable_gqa` (torch 2.11 picked cuDNN on an H100 for GPT-2 shapes,
  bench/kernels/, and on two H200s for Llama 3's GQA 32/8 under DeepSpeed, in the profile in
  bench/kernels/results/profile_deepspeed_*_H200x2.json);
- then FlashAttention-2 for fp16/bf16, head_dim <= 256, no explicit mask (GQA native);
- then memory-efficient attention (masks, fp32); math only when the user disabled the rest.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from phantom.cost.roofline import FLEX_BLOCK_COUNTS_ATTR

aten = torch.ops.aten
_original_sdpa = F.scaled_dot_product_attention


@torch._dynamo.assume_constant_result
def _enabled_backends() -> tuple[bool, bool, bool]:
    """Which fused backends the script allows (`torch.backends.cuda.enable_*_sdp`,
    `sdpa_kernel`): flash, cuDNN, memory-efficient. Under torch.compile they are read while
    tracing, as Inductor's SDPA lowering does, instead of breaking the graph."""
    cuda = torch.backends.cuda
    return cuda.flash_sdp_enabled(), cuda.cudnn_sdp_enabled(), cuda.mem_efficient_sdp_enabled()


def _flash_ok(q: torch.Tensor, k: torch.Tensor, attn_mask: Any, enable_gqa: bool) -> bool:
    head_dim = q.size(-1)
    return (
        _enabled_backends()[0]
        and attn_mask is None
        and q.dtype in (torch.float16, torch.bfloat16)
        and head_dim <= 256
        and head_dim % 8 == 0
        and q.dim() == 4
        and (q.size(1) == k.size(1) or enable_gqa)
    )


def _cudnn_ok(q: torch.Tensor, k: torch.Tensor, attn_mask: Any, dropout_p: float,
              enable_gqa: bool, major: int) -> bool:
    return (
        major == 9
        and _enabled_backends()[1]
        and attn_mask is None
        and dropout_p == 0.0
        and q.dtype in (torch.float16, torch.bfloat16)
        and q.dim() == 4
        and q.size(-1) <= 128
        and q.size(-1) % 8 == 0
        # sdp_utils.cpp: check_batch_size_and_num_heads_dense<enable_gqa=true> for cuDNN
        and (q.size(1) == k.size(1) or (enable_gqa and q.size(1) % k.size(1) == 0))
    )


def _efficient_ok(q: torch.Tensor, k: torch.Tensor, enable_gqa: bool) -> bool:
    return (
        _enabled_backends()[2]
        and q.dim() == 4
        and q.size(-1) % 8 == 0
        and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and q.size(1) == k.size(1)  # mem-efficient has no native GQA
    )


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *, sm_major: int = 9):
    # Under torch.compile, Dynamo traces this function with its own fake tensors
    # (interception/compiled.py): the choice is the same, and goes into the graph.
    simulated = isinstance(query, FakeTensor) or torch.compiler.is_compiling()
    if not simulated or query.device.type != "cuda":
        return _original_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                              is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    if torch.is_autocast_enabled("cuda"):
        # SDPA is on autocast's lower-precision list: the real op casts its floating inputs
        # before choosing a kernel. We choose above the autocast key, so cast here.
        dtype = torch.get_autocast_dtype("cuda")
        query, key, value = (t.to(dtype) for t in (query, key, value))
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(dtype)
    if _cudnn_ok(query, key, attn_mask, dropout_p, enable_gqa, sm_major):
        compute_lse = query.requires_grad or key.requires_grad or value.requires_grad
        out = aten._scaled_dot_product_cudnn_attention(
            query, key, value, None, compute_lse, dropout_p, is_causal, False, scale=scale)
        return out[0]
    if _flash_ok(query, key, attn_mask, enable_gqa):
        # FlashAttention-2 handles grouped K/V heads natively.
        out = aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale)
        return out[0]
    if enable_gqa and key.size(1) != query.size(1):
        # Like torch's math/efficient fallback: repeat the K/V heads to match the queries.
        groups = query.size(1) // key.size(1)
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    if _efficient_ok(query, key, False):
        bias = attn_mask
        if bias is not None and bias.dtype == torch.bool:
            bias = torch.zeros_like(bias, dtype=query.dtype).masked_fill_(~bias, float("-inf"))
        compute_lse = query.requires_grad or key.requires_grad or value.requires_grad
        out = aten._scaled_dot_product_efficient_attention(
            query, key, value, bias, compute_lse, dropout_p, is_causal, scale=scale)
        return out[0]
    return _original_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                          is_causal=is_causal, scale=scale, enable_gqa=False)


BLOCK_MASK_CPU_LIMIT = 1 << 28  # mask elements (B x H x Q x KV) evaluated here at most


class _UnknownValues(Exception):
    pass


class _KnownValues(TorchDispatchMode):
    """Ops on simulated tensors run on the real values phantom knows for them (their shadows:
    data copied from the CPU, as a batch's attention mask or document ids are); a simulated
    tensor without them ends the evaluation."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        from phantom.sim import values

        def real(x: Any) -> Any:
            if isinstance(x, FakeTensor):
                shadow = values.shadow_of(x)
                if shadow is None:
                    raise _UnknownValues(func)
                return shadow
            return x

        args, kwargs = tree_map(real, (args, kwargs or {}))
        with unset_fake_temporarily():
            return func(*args, **kwargs)


def _block_counts(create: Any, bound: Any) -> dict | None:
    """The block counts of the mask `create_block_mask` builds, computed for real on the CPU.

    On a GPU the mask function is evaluated on the device and the counts are real; here its
    values would be unknown. Mask functions of positions alone (causal, sliding window,
    prefix) evaluate on the CPU the same; one that reads device tensors (a padding mask, the
    document ids of a batch) evaluates on their real values where phantom has them (data
    copied from the CPU), and stays unknown otherwise (flex_attention charged dense)."""
    args = bound.arguments
    elements = (args.get("B") or 1) * (args.get("H") or 1) * args["Q_LEN"] * args["KV_LEN"]
    if elements > BLOCK_MASK_CPU_LIMIT:
        return None
    try:
        with _KnownValues():
            mask = create(**{**args, "device": "cpu", "_compile": False})
    except Exception:  # noqa: BLE001 - a mask function that reads device values phantom lacks
        return None
    counts = {}
    for name in ("kv_num_blocks", "full_kv_num_blocks", "q_num_blocks", "full_q_num_blocks"):
        t = getattr(mask, name, None)
        if t is not None:
            if isinstance(t, FakeTensor):
                return None
            counts[name] = t.clone()
    return counts


def _patch_create_block_mask() -> None:
    """`create_block_mask` on the simulated device runs as on a GPU (its kernels and memory are
    simulated, its values unknown) and once more on the CPU for the block counts, which decide
    FlexAttention's work. The CPU pass is phantom's time, not the script's."""
    import inspect

    from torch.nn.attention import flex_attention as flex

    from phantom.interception.cuda_api import node_call

    create = flex.create_block_mask
    signature = inspect.signature(create)
    counts_on_cpu = node_call("create_block_mask (phantom's CPU pass)", 0.0)(_block_counts)

    @functools.wraps(create)
    def create_block_mask(*args: Any, **kwargs: Any) -> Any:
        mask = create(*args, **kwargs)
        if isinstance(mask.kv_num_blocks, FakeTensor):
            bound = signature.bind(*args, **kwargs)
            counts = counts_on_cpu(create, bound)
            if counts is not None:
                # an attribute of the simulated kv_num_blocks tensor, which flex_attention's
                # higher-order ops receive, eagerly and as a compiled graph's input alike
                setattr(mask.kv_num_blocks, FLEX_BLOCK_COUNTS_ATTR, counts)
        return mask

    flex.create_block_mask = create_block_mask


def install() -> None:
    _patch_create_block_mask()
    # the simulated GPU's architecture, read once: Dynamo cannot trace phantom's torch.cuda
    major = torch.cuda.get_device_capability()[0]

    @functools.wraps(_original_sdpa)  # torch.overrides and Dynamo read F's functions' names
    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        return scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                            scale, enable_gqa, sm_major=major)

    F.scaled_dot_product_attention = sdpa
    torch.nn.functional.scaled_dot_product_attention = sdpa
