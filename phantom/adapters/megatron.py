"""Megatron-Core 0.16 under simulation: a Megatron-Core training script runs unchanged.

These patches, applied by the import hook in phantom/adapters/__init__.py only when
Megatron-Core's modules are imported, fix the few places where Megatron-Core cannot run on a
simulated GPU. Each names the Megatron code it works around and why.

Simulation policy (docs/frameworks.md, "Megatron-Core"):
- Transformer Engine and Apex need a real GPU (and TE a CUDA build of torch): the local layer
  spec (`get_gpt_layer_local_spec`) is the supported path, with Megatron's own fallbacks for
  the fused optimizer, norms and multi-tensor kernels (as on a GPU machine without TE/Apex).
- Gradient norm: Megatron reads it to the host (`.item()`-style reads in the local
  multi-tensor L2 norm). Each read costs its simulated sync, and the value is phantom's
  placeholder (0.0): no skipped/NaN-iteration path is taken, and the log's "grad norm" is that
  placeholder, not a measurement. Clipping is taken to be active: a norm phantom does not know
  counts as above `clip_grad`, so the gradients are scaled every step (`patch_clip_grads`).
- Gradient-accumulation fusion (`gradient_accumulation_fusion=True`, Megatron-LM's default):
  Apex's `fused_weight_gradient_mlp_cuda` extension is simulated (`wgrad_accumulation_extension`),
  so the weight gradient accumulates into the fp32 `main_grad` inside its GEMM instead of a
  bf16 gradient plus an add kernel, as in the published runs (TE fuses it the same way).
- MoE: experts are load-balanced. The router runs as usual on simulated logits, and the
  token dispatcher's counts (which Megatron reads to the host to size its all-to-all and the
  expert GEMMs) are an analytic uniform dispatch: each expert gets tokens x top-k / experts.
"""
from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Iterator

import numpy
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


def patch_clip_grads(module: ModuleType) -> None:
    """megatron/core/optimizer/clip_grads.py."""
    original = module.clip_grad_by_total_norm_fp32

    # `clip_grad_by_total_norm_fp32` scales the gradients only `if clip_coeff < 1.0`, i.e. when
    # the norm read to the host exceeds `max_norm`. Under simulation that norm is the
    # placeholder 0.0, so the scaling (one multi-tensor scale: without Apex, a multiply and a
    # copy per gradient tensor) would never run. On real runs it does: every real Megatron run
    # of bench/suites/megatron.py logged norms of 2.8-13.6 against clip 1.0 (early training, where norms sit above
    # the clip). So an unknown (0.0) norm counts as twice `max_norm`; optimizer.py binds this
    # function by name, so it is patched here, where it is defined, before that import.
    def clip_grad_by_total_norm_fp32(parameters, max_norm, total_norm, *args, **kwargs):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        parameters = list(parameters)
        if total_norm == 0.0 and max_norm > 0 and any(_is_phantom_tensor(p) for p in parameters):
            total_norm = 2.0 * max_norm
        return original(parameters, max_norm, total_norm, *args, **kwargs)

    module.clip_grad_by_total_norm_fp32 = clip_grad_by_total_norm_fp32


def patch_moe_utils(module: ModuleType) -> None:
    """megatron/core/transformer/moe/moe_utils.py."""
    # `RouterGatingLinearFunction.forward/backward` test `te_general_gemm is not None`, but the
    # name is only bound when Transformer Engine imports (the `try: import transformer_engine`
    # block at the top of the module), so without TE the router raises NameError, on a real
    # GPU as well. Bind it to None: the router then uses its plain torch.matmul path.
    if not hasattr(module, "te_general_gemm"):
        module.te_general_gemm = None
    _patch_permutation(module)


# -- Apex's gradient-accumulation fusion ------------------------------------------------------

def wgrad_gemm_accum(input: torch.Tensor, d_output: torch.Tensor, d_weight: torch.Tensor) -> None:
    """apex csrc/megatron/fused_weight_gradient_dense.cpp `wgrad_gemm_accum_fp32/fp16(input,
    d_output, d_weight)`: d_weight += d_output^T @ input, one cuBLAS GEMM with beta = 1 whose C
    is `d_weight` itself (fp32 for the fp32 variant, the inputs' dtype for the fp16 one).
    Simulated as the same GEMM: `addmm` with `out=d_weight`, so the cost model charges one GEMM
    that reads and writes C at its dtype, and no separate gradient tensor or add kernel."""
    input_2d = input.reshape(-1, input.shape[-1])
    d_output_2d = d_output.reshape(-1, d_output.shape[-1])
    if d_weight.dtype == input.dtype:
        d_weight.addmm_(d_output_2d.t(), input_2d)
    else:
        torch.addmm(d_weight, d_output_2d.t(), input_2d, out_dtype=d_weight.dtype, out=d_weight)


# The extension call's own host work on the node: pybind11's conversion of three tensors and
# the cuBLAS call's set-up, less the launch, which is charged with the GEMM as for any matmul
# (HOST_KERNEL_LAUNCH_NS + GEMM_EXTRA_HOST_NS). Not measured, as no GPU host measured had Apex;
# bounded by a whole eager torch op on CPU tensors (Python argument parsing, dispatch and a tiny
# kernel) on an H200 host, 2.9 us (bench/host/data/host_h200.json, as for HOST_KERNEL_LAUNCH_NS).
APEX_WGRAD_CALL_NS = 2_900.0


def wgrad_accumulation_extension() -> ModuleType:
    """The simulated `fused_weight_gradient_mlp_cuda` module (Apex's CUDA extension).
    megatron/core/tensor_parallel/layers.py imports it at module load and, with
    `gradient_accumulation_fusion=True`, calls it in `LinearWithGradAccumulationAndAsync
    Communication.backward` instead of `grad_output.t().matmul(total_input)`; Megatron's DDP
    hook then skips its `main_grad.add_(grad)` (`grad_added_to_main_grad`). Without the module
    Megatron-Core refuses the option and Megatron-LM turns it off with a warning."""
    from phantom.interception.cuda_api import node_call

    module = ModuleType("fused_weight_gradient_mlp_cuda",
                        "phantom: Apex's fused weight-gradient accumulation, simulated")
    # One C++ call on the node, not the handful of torch ops that simulate it here: what
    # phantom spends answering them is its own time (node_call), the node pays the call.
    for name in ("wgrad_gemm_accum_fp32", "wgrad_gemm_accum_fp16"):
        site = f"fused_weight_gradient_mlp_cuda.{name}"
        setattr(module, name, node_call(site, APEX_WGRAD_CALL_NS)(wgrad_gemm_accum))
    return module


# -- MoE: load-balanced experts ---------------------------------------------------------------

@contextlib.contextmanager
def _masked_select_of(count: int) -> Iterator[None]:
    """`Tensor.masked_select` on simulated tensors, given the number of selected elements.

    Its output size depends on the mask's values, which a simulated tensor does not have.
    In Megatron's dropless permutation the mask is the routing map, which holds exactly
    top-k ones per token, so the count is known from shapes alone. The GPU work (read the
    source and the mask, write `count` elements) is charged as a `where` over the mask and a
    copy of `count` elements; autograd follows the same ops."""
    real = torch.Tensor.masked_select

    def masked_select(self, mask):
        if not (_is_phantom_tensor(self) or _is_phantom_tensor(mask)):
            return real(self, mask)
        picked = torch.where(mask, self, torch.zeros((), dtype=self.dtype, device=self.device))
        return picked.reshape(-1).narrow(0, 0, count).clone()

    torch.Tensor.masked_select = masked_select
    try:
        yield
    finally:
        torch.Tensor.masked_select = real


def _patch_permutation(module: ModuleType) -> None:
    """moe_utils.permute / unpermute (the non-fused path; the fused one needs TE)."""
    real_permute, real_unpermute = module.permute, module.unpermute

    # permute(): `token_indices.masked_select(routing_map)` and
    # `probs.T.contiguous().masked_select(routing_map)`: data-dependent output sizes. With
    # dropless routing the count is num_out_tokens (tokens x top-k), which the dispatcher
    # passes in.
    def permute(tokens, routing_map, probs=None, num_out_tokens=None, fused=False,
                drop_and_pad=False):
        if fused or drop_and_pad or not _is_phantom_tensor(routing_map):
            return real_permute(tokens, routing_map, probs, num_out_tokens, fused, drop_and_pad)
        count = int(num_out_tokens) if num_out_tokens is not None else tokens.shape[0]
        with _masked_select_of(count):
            return real_permute(tokens, routing_map, probs, num_out_tokens, fused, drop_and_pad)

    # unpermute(): `probs.T.contiguous().masked_select(routing_map.T.contiguous())`, one per
    # permuted token.
    def unpermute(permuted_tokens, sorted_indices, restore_shape, probs=None, routing_map=None,
                  fused=False, drop_and_pad=False):
        if fused or drop_and_pad or routing_map is None or not _is_phantom_tensor(routing_map):
            return real_unpermute(permuted_tokens, sorted_indices, restore_shape, probs,
                                  routing_map, fused, drop_and_pad)
        with _masked_select_of(permuted_tokens.shape[0]):
            return real_unpermute(permuted_tokens, sorted_indices, restore_shape, probs,
                                  routing_map, fused, drop_and_pad)

    module.permute, module.unpermute = permute, unpermute


def uniform_expert_counts(tokens: int, topk: int, experts: int) -> list[int]:
    """Routed token copies per expert from one rank when experts are load-balanced."""
    base, extra = divmod(tokens * topk, experts)
    return [base + (1 if e < extra else 0) for e in range(experts)]


def patch_token_dispatcher(module: ModuleType) -> None:
    """megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher.

    Assumption (docs/frameworks.md, "Megatron-Core"): experts are load-balanced. The router runs as usual
    (its GEMM, softmax, top-k and aux loss are timed) and `preprocess` computes the counts on
    the GPU and all-gathers them over TP x EP, as on a real GPU; but the router's choices come
    from simulated logits with no values, so the counts have none either.
    `_maybe_dtoh_and_synchronize` copies them to the host (a real device-to-host copy and
    sync, kept) to size the all-to-all, the TP all-gather and the per-expert GEMMs; the host
    values it leaves are replaced by the uniform dispatch (`uniform_expert_counts`, the same
    on every rank, so what one rank sends another receives)."""
    cls = module.MoEAlltoAllTokenDispatcher
    real_preprocess = cls.preprocess
    real_dtoh = cls._maybe_dtoh_and_synchronize

    def preprocess(self, routing_map):
        out = real_preprocess(self, routing_map)
        self._phantom_counts = None
        if _is_phantom_tensor(routing_map) and not self.drop_and_pad:
            self._phantom_counts = uniform_expert_counts(
                routing_map.size(0), self.config.moe_router_topk, self.num_experts)
        return out

    def _maybe_dtoh_and_synchronize(self, point, tokens_per_expert=None):
        out = real_dtoh(self, point, tokens_per_expert)
        counts = getattr(self, "_phantom_counts", None)
        if counts is None or point != self.cuda_dtoh_point:
            return out
        local = [counts[i] for i in self.local_expert_indices]
        nle, ep, tp = self.num_local_experts, self.ep_size, self.tp_size
        if self.input_splits is not None:
            self.input_splits = numpy.array(
                [sum(counts[r * nle:(r + 1) * nle]) for r in range(ep)], dtype=numpy.int64)
        if self.output_splits is not None:
            self.output_splits = numpy.full(ep, sum(local), dtype=numpy.int64)
        if self.output_splits_tp is not None:
            self.output_splits_tp = numpy.full(tp, ep * sum(local), dtype=numpy.int64)
        if nle > 1 and torch.is_tensor(getattr(self, "num_global_tokens_per_local_expert", None)):
            self.num_global_tokens_per_local_expert = torch.tensor(
                [local] * (tp * ep), dtype=torch.int64)
        if torch.is_tensor(out):
            out = torch.tensor([tp * ep * c for c in local], dtype=torch.int64)
        return out

    cls.preprocess = preprocess
    cls._maybe_dtoh_and_synchronize = _maybe_dtoh_and_synchronize
