"""torchtitan 0.3.0's trainer running the Llama model code of torchtitan's 2024 published numbers.

    phantom run --gpu H100-96GB --nproc-per-node 8 bench/suites/torchtitan_2024.py [--rmsnorm=fused] <torchtitan flags>
    torchrun --nproc-per-node 1 bench/suites/torchtitan_entry.py --patches bench/suites/torchtitan_2024.py <flags>  # for real

Why: torchtitan's published H100 rows (benchmarks/llama3_h100_202412_torchtitan.md) name their
versions, torchtitan 9dec370 (2024-12-26) and a torch nightly of 2024-12-23; its 64 x A100 rows
(docs/performance.md) came with 395a526 and 1ea476e (April 2024). The model code of both
(torchtitan/models/llama/model.py, torchtitan/models/norms.py, parallelisms/parallelize_llama.py)
launches other kernels than 0.3.0's for the same model, the same way in April and December:

  * RMSNorm `norm_type = "rmsnorm"`: `self._norm(x.float()).type_as(x) * self.weight` with
    `_norm(x) = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)`, separate elementwise and
    reduction kernels; 0.3.0's `nn.RMSNorm` reaches torch's fused `_fused_rms_norm` (torch 2.8).
    The Llama 3 8B toml of 9dec370 and the 70B tomls of April 2024 set it; the April 13B and 8B
    tomls set `fused_rmsnorm`, a fused Triton kernel, for which `--rmsnorm=fused` (first flag)
    keeps 0.3.0's fused norm.
  * Attention: three projections `self.wq(x), self.wk(x), self.wv(x)` (0.3.0 fuses them into one
    `wqkv` GEMM); `repeat_kv` expands the 8 KV heads to 32 (a copy of K and V, and a reduction
    in backward; 0.3.0 passes `enable_gqa`); `F.scaled_dot_product_attention(q, k, v,
    is_causal=True)`, FlashAttention-2 (0.3.0's Llama runs compiled FlexAttention with a
    document mask).
  * Selective op AC saves `_save_list` = {mm, flash and efficient attention, reduce_scatter,
    abs, max} (April: the same without abs and max, which bf16 training never calls), every
    second mm recomputed; 0.3.0's list has no SDPA flash kernel (its Llama uses
    FlexAttention), so SDPA's forward would be recomputed in backward.
  * FSDP units (`apply_fsdp`): one per block, the last not resharded after forward, and the
    root holding the embeddings, final norm and output together, so one 1 GB all-gather opens
    the forward and one reduce-scatter of their gradients closes the backward. 0.3.0 shards the
    embeddings and [norm, output] as units of their own (the output's is prefetched, its
    reduce-scatter overlaps the backward).

With `--float8` (a flag of this script, before torchtitan's), the blocks' Linears train in float8
as 9dec370's Float8Handler set them up for the published "+ Float8" rows (docs/float8.md there:
`--float8.enable_float8_linear --float8.enable_fsdp_float8_all_gather
--float8.precompute_float8_dynamic_scale_for_fsdp`): torchao's tensorwise dynamic scaling on
every Linear but the output, the weights all-gathered by FSDP in float8, and their scales
computed for all parameters at once after each optimizer step. torchtitan 0.3.0's converter
offers rowwise recipes only, and builds Float8Linear from its config, which leaves the float8
all-gather off (torchao wraps the weight only in `Float8Linear.from_float`).

`--june-2025` (before `--float8`) takes the blocks back to torchtitan e7c0cae (2025-06-13)
instead, the code of the H200 rows in benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md:
the same attention, FSDP units and float8 set-up, with torch's nn.RMSNorm (0.3.0's) and a save
list without abs. Those runs compiled the loss too (0.3.0's default), as 9dec370 did not.

This entry point gives 0.3.0's Llama those four, and nothing else changes: it is
`python -m torchtitan.train` with the same flags, under phantom or for real (run by
`bench/suites/torchtitan_entry.py --patches`, it installs them with the Python norm). The dataloader still
emits per-document positions (0.3.0); with SDPA they feed RoPE only, as in 9dec370 each row is
one causal sequence. """
from __future__ import annotations

import runpy
import sys
from pathlib import Path

_RUN_AS_SCRIPT = __name__ == "__main__"
if _RUN_AS_SCRIPT:
    # torch.compile's guards find a compiled function's globals through its module's name, and
    # torchtitan's trainer becomes __main__ after this file: so this file needs its own name.
    __name__ = "torchtitan_2024"
    sys.modules[__name__] = sys.modules["__main__"]

# bench/suites/ holds torchtitan.py, the benchmark, which would shadow the torchtitan package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
import torchtitan.models.llama3 as llama3  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: E402
from torchtitan.distributed import activation_checkpoint  # noqa: E402
from torchtitan.distributed.fsdp import disable_fsdp_gradient_division  # noqa: E402
from torchtitan.models.llama3 import parallelize as llama3_parallelize  # noqa: E402
from torchtitan.models.common import nn_modules  # noqa: E402
from torchtitan.models.common.attention import ScaledDotProductAttention  # noqa: E402
from torch.utils.checkpoint import CheckpointPolicy  # noqa: E402
from torchtitan.components.optimizer import OptimizersContainer  # noqa: E402
from torchtitan.models.common.linear import Linear  # noqa: E402

_FLOAT8 = False  # --float8 (install)


def _rmsnorm_2024(self, x: torch.Tensor) -> torch.Tensor:
    normed = x.float()
    normed = normed * torch.rsqrt(normed.pow(2).mean(-1, keepdim=True) + self.eps)
    return normed.type_as(x) * self.weight


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (x.unsqueeze(3).expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))


def _sdpa_2024(self, q, k, v, *, attention_masks=None, scale=None, enable_gqa=False,
               is_causal=True, **kwargs):
    """9dec370's Attention.forward from RoPE on: inputs and output are (B, L, heads, head_dim)."""
    n_rep = q.shape[2] // k.shape[2]
    keys, values = _repeat_kv(k, n_rep), _repeat_kv(v, n_rep)
    # The torch of 2024 tried FlashAttention first (cuDNN's, when it came, was moved last in
    # 2.5.1); a current torch tries cuDNN's first on Hopper. Pin the kernel those rows ran.
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys.transpose(1, 2),
                                             values.transpose(1, 2), is_causal=True)
    return out.transpose(1, 2).contiguous()


_build_layers_0_3 = llama3._build_llama3_layers


def _build_layers_2024(**kwargs):
    """Separate wq/wk/wv and SDPA for every Llama 3 block (the presets call this at config time)."""
    kwargs["fuse_qkv"] = False
    layers = _build_layers_0_3(**kwargs)
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
        if _FLOAT8:
            _to_float8_2024(layer)
    return layers


def _to_float8_2024(block_config) -> None:
    """9dec370's `convert_to_float8_training(model, config, module_filter_fn=lambda mod, fqn:
    fqn != "output")` for one block's config: tensorwise dynamic scaling (torchao's default),
    float8 all-gather for FSDP."""
    from torchao.float8 import Float8LinearConfig
    from torchtitan.components.quantization.float8 import Float8Linear

    torchao_config = Float8LinearConfig(enable_fsdp_float8_all_gather=True)
    for _, linear, parent, attr in list(block_config.traverse(Linear.Config)):
        new = Float8Linear.Config(in_features=linear.in_features, out_features=linear.out_features,
                                  bias=linear.bias, param_init=linear.param_init,
                                  _torchao_config=torchao_config)
        if isinstance(parent, list):
            parent[attr] = new
        else:
            setattr(parent, attr, new)


def _wrap_float8_weights(model: torch.nn.Module) -> None:
    """What `Float8Linear.from_float` does last with FSDP float8 all-gather on: the weight becomes
    torchao's WeightWithDynamicFloat8CastTensor, which FSDP2 all-gathers as float8 bytes."""
    from torchao.float8.float8_linear import Float8Linear as TorchAOFloat8Linear
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

    for module in model.modules():
        if (isinstance(module, TorchAOFloat8Linear) and module.config.enable_fsdp_float8_all_gather
                and not isinstance(module.weight, WeightWithDynamicFloat8CastTensor)):
            module.weight = torch.nn.Parameter(
                WeightWithDynamicFloat8CastTensor(module.weight, module.linear_mm_config,
                                                  module.config.cast_config_weight.target_dtype),
                requires_grad=module.weight.requires_grad)


def _let_dtensor_rng_reach_float8_weights() -> None:
    """torchtitan 0.3.0 initialises the weights after FSDP has made them DTensors, and DTensor's
    random ops (the weights' `trunc_normal_`) run through torch's `run_dtensor_rng_op`
    higher-order op, which has no rule for torchao's weight subclass (torch raises "no rule
    registered for HOP run_dtensor_rng_op"). In 2024 the op did not exist. The rule: run the
    random op on the plain tensor the subclass wraps."""
    from torch._prims import rng_prims
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

    hop = getattr(rng_prims, "run_dtensor_rng_op", None)
    if hop is None or WeightWithDynamicFloat8CastTensor in hop.python_key_table:
        return

    def unwrap(x):
        return x._tensor if isinstance(x, WeightWithDynamicFloat8CastTensor) else x

    @hop.py_impl(WeightWithDynamicFloat8CastTensor)
    def _on_inner_tensor(start_offset_incr, end_offset_incr, op, *args, **kwargs):
        return hop(start_offset_incr, end_offset_incr, op, *map(unwrap, args),
                   **{k: unwrap(v) for k, v in kwargs.items()})


_optimizers_step_0_3 = OptimizersContainer.step


def _step_then_precompute_scales(self, *args, **kwargs):
    """9dec370's train loop: `optimizers.step(); lr_schedulers.step();
    float8_handler.precompute_float8_dynamic_scale_for_fsdp(model_parts)`: one all-reduce of
    every float8 weight's amax for the next step's all-gathers."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    out = _optimizers_step_0_3(self, *args, **kwargs)
    for part in self.model_parts:
        precompute_float8_dynamic_scale_for_fsdp(part)
    return out


_SAVE_LIST_2024 = (
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops.aten.abs.default,
    torch.ops.aten.max.default,
)


_SAVE_LIST = _SAVE_LIST_2024  # install(june_2025=True): e7c0cae's, without abs


def _save_ops_2024() -> dict:
    return {op: CheckpointPolicy.MUST_SAVE for op in _SAVE_LIST}


_apply_fsdp_0_3 = llama3_parallelize.apply_fsdp_to_decoder


def _apply_fsdp_2024(model, dp_mesh, param_dtype, reduce_dtype, pp_enabled, cpu_offload=False,
                     **options):
    """9dec370's apply_fsdp for the plain FSDP/HSDP it covered; 0.3.0's for anything else."""
    if cpu_offload or options.get("dp_mesh_dims") is not None or options.get("enable_symm_mem"):
        return _apply_fsdp_0_3(model, dp_mesh, param_dtype, reduce_dtype, pp_enabled,
                               cpu_offload, **options)
    if _FLOAT8:
        if model.layers and any(isinstance(p, torch.distributed.tensor.DTensor)
                                for p in next(iter(model.layers.values())).parameters()):
            raise SystemExit("torchtitan_2024.py --float8: tensor parallelism needs 9dec370's "
                             "float8 TP styles, which this script does not reproduce")
        _wrap_float8_weights(model)
    config = {"mesh": dp_mesh,
              "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)}
    n_layers = len(model.layers)
    for layer_id, block in model.layers.items():
        last = int(layer_id) == n_layers - 1  # prefetched for backward at once: kept
        fully_shard(block, **config, reshard_after_forward=not pp_enabled and not last)
    fully_shard(model, **config, reshard_after_forward=not pp_enabled)
    # 0.3.0's loss is normalised by the global token count and expects undivided gradients.
    disable_fsdp_gradient_division(model)


def install(rmsnorm: str = "python", float8: bool = False, june_2025: bool = False) -> None:
    global _FLOAT8, _SAVE_LIST
    if rmsnorm not in ("python", "fused"):
        raise SystemExit(f"torchtitan_2024.py: --rmsnorm={rmsnorm}: expected python or fused")
    _FLOAT8 = float8
    if june_2025:
        rmsnorm = "fused"  # e7c0cae's blocks use torch's nn.RMSNorm, as 0.3.0 does
        _SAVE_LIST = tuple(op for op in _SAVE_LIST_2024 if op != torch.ops.aten.abs.default)
    if float8:
        OptimizersContainer.step = _step_then_precompute_scales
        _let_dtensor_rng_reach_float8_weights()
    if rmsnorm == "python":
        nn_modules.RMSNorm.forward = _rmsnorm_2024
    ScaledDotProductAttention.forward = _sdpa_2024
    llama3._build_llama3_layers = _build_layers_2024
    activation_checkpoint._get_default_save_ops = _save_ops_2024
    llama3_parallelize.apply_fsdp_to_decoder = _apply_fsdp_2024


def take_own_flags(args: list[str]) -> list[str]:
    """Install the patches with this script's own leading flags (`--rmsnorm=python|fused`,
    `--float8`, `--june-2025`); return torchtitan's flags, the rest."""
    args = list(args)
    norm, float8, june_2025 = "python", False, False
    while args and (args[0] in ("--float8", "--june-2025") or args[0].startswith("--rmsnorm=")):
        flag = args.pop(0)
        if flag == "--float8":
            float8 = True
        elif flag == "--june-2025":
            june_2025 = True
        else:
            norm = flag.partition("=")[2]
    install(norm, float8, june_2025)
    return args


if _RUN_AS_SCRIPT:
    sys.argv = [sys.argv[0], *take_own_flags(sys.argv[1:])]
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
# bench/suites/torchtitan_entry.py --patches calls take_own_flags
