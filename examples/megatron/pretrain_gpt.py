"""GPT pre-training with Megatron-Core (0.16), written the way Megatron-Core users write a loop.

Model: `GPTModel` with the local (pure Megatron-Core) layer spec, or with
`--transformer-impl transformer_engine` Transformer Engine's (under phantom: `phantom run
--transformer-engine simulated`), `Float16Module` + Megatron's `DistributedDataParallel`, `get_megatron_optimizer` (optionally
the distributed optimizer), the pipeline schedules from `get_forward_backward_func`, and the
mock GPT dataset. Every rank prints Megatron's own training log line (rank 0 shows it):

    [2026-...] iteration 3/ 5 | consumed samples: ... | elapsed time per iteration (ms): ... |
    throughput per GPU (TFLOP/s/GPU): ... | learning rate: ... | global batch size: ... | ...

Launch with torchrun, e.g. TP2 x PP2 on 4 GPUs:

    torchrun --nproc-per-node 4 examples/megatron/pretrain_gpt.py --preset tiny --tp 2 --pp 2

The FLOP count is Megatron-LM's `num_floating_point_operations` (megatron/training/training.py,
the r0.8 form used for its published weak-scaling table): dense GEMMs, attention scores over
the full (non-causal) sequence, logits; x3 for forward + backward; x4/3 with full recompute.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from datetime import datetime
from functools import partial

import torch
import torch.distributed as dist

from megatron.core import parallel_state, tensor_parallel
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset
from megatron.core.distributed import (
    DistributedDataParallel,
    DistributedDataParallelConfig,
    finalize_model_grads,
)
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import (
    get_gpt_layer_local_spec,
    get_gpt_layer_with_transformer_engine_spec,
)
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.timers import Timers
from megatron.core.tokenizers import MegatronTokenizer
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.moe import moe_utils
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer.transformer_block import (
    TransformerBlockSubmodules,
    get_num_layers_to_build,
)
from megatron.core.transformer.transformer_config import TransformerConfig

# Megatron-Core 0.16's MoE router (`RouterGatingLinearFunction`) tests `te_general_gemm is not
# None`, but moe_utils binds that name only when Transformer Engine imports: without TE every
# MoE forward raises NameError. Bind it to None, which selects the router's torch.mm path.
if not hasattr(moe_utils, "te_general_gemm"):
    moe_utils.te_general_gemm = None


@dataclass
class Arch:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    vocab_size: int
    seq_length: int
    num_query_groups: int | None = None  # GQA; None = MHA
    kv_channels: int | None = None
    swiglu: bool = True
    normalization: str = "RMSNorm"
    rotary_base: int = 10000
    num_experts: int | None = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    qk_layernorm: bool = False


# Published architectures (Llama 2/3, Mixtral and Qwen3 model cards; the GPT rows are the
# Megatron-LM README weak-scaling table: vocab 131072, seq 4096, GELU MLP of 4h).
PRESETS: dict[str, Arch] = {
    "tiny": Arch(4, 256, 4, 1024, 1024, 256),
    "tiny-moe": Arch(4, 256, 4, 512, 1024, 256, num_query_groups=2, num_experts=4,
                     moe_router_topk=2, moe_ffn_hidden_size=256),
    "gpt-1.7b": Arch(24, 2048, 16, 8192, 131072, 4096, swiglu=False, normalization="LayerNorm"),
    "gpt-7.1b": Arch(30, 4096, 32, 16384, 131072, 4096, swiglu=False, normalization="LayerNorm"),
    "gpt-16b": Arch(32, 6144, 48, 24576, 131072, 4096, swiglu=False, normalization="LayerNorm"),
    "llama2-7b": Arch(32, 4096, 32, 11008, 32000, 4096),
    "llama2-13b": Arch(40, 5120, 40, 13824, 32000, 4096),
    "llama2-70b": Arch(80, 8192, 64, 28672, 32000, 4096, num_query_groups=8),
    "llama3-8b": Arch(32, 4096, 32, 14336, 128256, 8192, num_query_groups=8, rotary_base=500000),
    "llama3-70b": Arch(80, 8192, 64, 28672, 128256, 8192, num_query_groups=8,
                       rotary_base=500000),
    "mixtral-8x7b": Arch(32, 4096, 32, 14336, 32000, 4096, num_query_groups=8,
                         rotary_base=1000000, num_experts=8, moe_router_topk=2),
    "qwen3-30b-a3b": Arch(48, 2048, 32, 6144, 151936, 4096, num_query_groups=4, kv_channels=128,
                          rotary_base=1000000, num_experts=128, moe_router_topk=8,
                          moe_ffn_hidden_size=768, qk_layernorm=True),
}


class SDPAttention(DotProductAttention):
    """Core attention through torch's fused `scaled_dot_product_attention` (FlashAttention on
    Hopper), for runs without Transformer Engine: the local spec's `DotProductAttention`
    materialises the [b, heads, s, s] scores. Causal self-attention only."""

    def forward(self, query, key, value, attention_mask, attn_mask_type=None,
                attention_bias=None, packed_seq_params=None):
        assert packed_seq_params is None and attention_bias is None
        # [s, b, heads, dim] -> [b, heads, s, dim]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.softmax_scale,
            enable_gqa=k.shape[1] != q.shape[1])
        return out.permute(2, 0, 1, 3).reshape(out.shape[2], out.shape[0], -1)


class SequenceParallelTorchNorm:
    """torch LayerNorm/RMSNorm for sequence parallelism without Apex or Transformer Engine
    (Megatron's `WrappedTorchNorm` refuses it): the weights are marked `sequence_parallel`, so
    `finalize_model_grads` all-reduces their gradients over the TP group, as Megatron does for
    Apex's and TE's norms."""

    def __new__(cls, config: TransformerConfig, hidden_size: int, eps: float = 1e-5, **_):
        norm_cls = torch.nn.RMSNorm if config.normalization == "RMSNorm" else torch.nn.LayerNorm
        norm = norm_cls(hidden_size, eps=eps)
        for param in norm.parameters():
            param.sequence_parallel = config.sequence_parallel
        return norm


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--num-layers", type=int, help="override the preset's layer count")
    p.add_argument("--seq-length", type=int, help="override the preset's sequence length")
    p.add_argument("--hidden-size", type=int, help="override the preset's hidden size")
    p.add_argument("--ffn-hidden-size", type=int, help="override the preset's MLP width")
    p.add_argument("--num-attention-heads", type=int, help="override the preset's head count")
    p.add_argument("--vocab-size", type=int, help="override the preset's vocabulary")
    p.add_argument("--tp", "--tensor-model-parallel-size", dest="tp", type=int, default=1)
    p.add_argument("--pp", "--pipeline-model-parallel-size", dest="pp", type=int, default=1)
    p.add_argument("--vpp", "--num-layers-per-virtual-pipeline-stage", dest="vpp", type=int,
                   help="layers per virtual pipeline stage (interleaved 1F1B)")
    p.add_argument("--ep", "--expert-model-parallel-size", dest="ep", type=int, default=1)
    p.add_argument("--etp", "--expert-tensor-parallel-size", dest="etp", type=int,
                   help="expert tensor parallel size (default: --tp)")
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--micro-batch-size", type=int, default=1)
    p.add_argument("--global-batch-size", type=int, default=None,
                   help="default: micro batch x data-parallel size")
    p.add_argument("--train-iters", type=int, default=5)
    p.add_argument("--log-interval", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--clip-grad", type=float, default=1.0)
    p.add_argument("--use-distributed-optimizer", action="store_true")
    p.add_argument("--overlap-grad-reduce", action="store_true")
    p.add_argument("--overlap-param-gather", action="store_true")
    p.add_argument("--recompute-granularity", choices=["full", "selective"])
    p.add_argument("--recompute-method", choices=["uniform", "block"], default="uniform")
    p.add_argument("--recompute-num-layers", type=int, default=1)
    p.add_argument("--core-attention", choices=["local", "sdpa"], default="local",
                   help="the local spec's DotProductAttention, or torch SDPA (flash)")
    p.add_argument("--transformer-impl", choices=["local", "transformer_engine"], default="local",
                   help="the layer spec: Megatron-Core's local one, or Transformer Engine's "
                        "(needs TE; under phantom: phantom run --transformer-engine simulated)")
    p.add_argument("--moe-grouped-gemm", action="store_true",
                   help="with --transformer-impl transformer_engine: experts as TE's GroupedLinear")
    p.add_argument("--moe-token-dispatcher-type", choices=["allgather", "alltoall"],
                   default="alltoall")
    p.add_argument("--moe-router-force-load-balancing", action="store_true",
                   help="route on random logits (Megatron's benchmarking option): balanced experts")
    p.add_argument("--make-vocab-size-divisible-by", type=int, default=128)
    p.add_argument("--disable-gloo-process-groups", action="store_true",
                   help="create no gloo (CPU) groups; they serve only checkpointing here")
    p.add_argument("--gradient-accumulation-fusion", action="store_true",
                   help="accumulate weight gradients into the fp32 main_grad inside the wgrad "
                        "GEMM (Megatron-LM's default; needs Apex's fused_weight_gradient_mlp_cuda, "
                        "which phantom simulates)")
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args()


def padded_vocab_size(vocab: int, divisible_by: int, tp: int) -> int:
    """As megatron/training/tokenizer: pad so every TP rank's slice is a multiple of 128."""
    multiple = divisible_by * tp
    return ((vocab + multiple - 1) // multiple) * multiple


def transformer_config(args: argparse.Namespace, arch: Arch) -> TransformerConfig:
    moe = {}
    if arch.num_experts:
        moe = dict(num_moe_experts=arch.num_experts, moe_router_topk=arch.moe_router_topk,
                   moe_ffn_hidden_size=arch.moe_ffn_hidden_size or arch.ffn_hidden_size,
                   moe_token_dispatcher_type=args.moe_token_dispatcher_type,
                   moe_router_force_load_balancing=args.moe_router_force_load_balancing,
                   moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-2,
                   moe_grouped_gemm=args.moe_grouped_gemm,
                   expert_model_parallel_size=args.ep,
                   expert_tensor_parallel_size=args.etp or args.tp)
    recompute = {}
    if args.recompute_granularity == "full":
        recompute = dict(recompute_granularity="full", recompute_method=args.recompute_method,
                         recompute_num_layers=args.recompute_num_layers)
    elif args.recompute_granularity == "selective":
        recompute = dict(recompute_granularity="selective")
    return TransformerConfig(
        num_layers=args.num_layers or arch.num_layers,
        hidden_size=arch.hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_query_groups=arch.num_query_groups,
        kv_channels=arch.kv_channels,
        ffn_hidden_size=arch.ffn_hidden_size,
        gated_linear_unit=arch.swiglu,
        activation_func=torch.nn.functional.silu if arch.swiglu else torch.nn.functional.gelu,
        normalization=arch.normalization,
        qk_layernorm=arch.qk_layernorm,
        add_bias_linear=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bias_activation_fusion=arch.swiglu,
        masked_softmax_fusion=False,
        # Megatron-LM's default (`--no-rope-fusion` turns it off); the fused kernel is TE's
        apply_rope_fusion=args.transformer_impl == "transformer_engine",
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        autocast_dtype=torch.bfloat16,
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=(
            (args.num_layers or arch.num_layers) // (args.pp * args.vpp) if args.vpp else None),
        sequence_parallel=args.sequence_parallel,
        variable_seq_lengths=False,
        deallocate_pipeline_outputs=True,
        gradient_accumulation_fusion=args.gradient_accumulation_fusion,
        **moe,
        **recompute,
    )


def model_provider(config: TransformerConfig, arch: Arch, vocab: int, seq: int,
                   pre_process: bool, post_process: bool, vp_stage: int | None,
                   core_attention: str = "local", transformer_impl: str = "local",
                   moe_grouped_gemm: bool = False) -> GPTModel:
    if transformer_impl == "transformer_engine":
        # TE's modules: fused norm + GEMM, TP-aware linears, fused attention; the final norm
        # is TE's too. Sequence parallelism needs nothing more.
        spec = get_gpt_layer_with_transformer_engine_spec(
            num_experts=arch.num_experts, moe_grouped_gemm=moe_grouped_gemm,
            qk_layernorm=arch.qk_layernorm)
        return GPTModel(config=config, transformer_layer_spec=spec, vocab_size=vocab,
                        max_sequence_length=seq, pre_process=pre_process,
                        post_process=post_process, share_embeddings_and_output_weights=False,
                        position_embedding_type="rope", rotary_base=arch.rotary_base,
                        vp_stage=vp_stage)
    spec = get_gpt_layer_local_spec(num_experts=arch.num_experts, qk_layernorm=arch.qk_layernorm,
                                    normalization=arch.normalization)
    if core_attention == "sdpa":
        spec.submodules.self_attention.submodules.core_attention = SDPAttention
    if config.sequence_parallel:
        # The decoder block spec with every torch norm (layers' and the final one) replaced.
        layer, attn = spec.submodules, spec.submodules.self_attention.submodules
        for owner, name in ((layer, "input_layernorm"), (layer, "pre_mlp_layernorm"),
                            (attn, "q_layernorm"), (attn, "k_layernorm")):
            if getattr(owner, name, None) is WrappedTorchNorm:
                setattr(owner, name, SequenceParallelTorchNorm)
        spec = TransformerBlockSubmodules(
            layer_specs=[spec] * get_num_layers_to_build(config, vp_stage=vp_stage),
            layer_norm=SequenceParallelTorchNorm)
    return GPTModel(config=config, transformer_layer_spec=spec, vocab_size=vocab,
                    max_sequence_length=seq, pre_process=pre_process,
                    post_process=post_process, share_embeddings_and_output_weights=False,
                    position_embedding_type="rope", rotary_base=arch.rotary_base,
                    vp_stage=vp_stage)


def build_model(args, config, arch, vocab, seq) -> list[DistributedDataParallel]:
    """megatron/training/training.py:get_model, for GPT."""
    chunks = []
    vp = config.virtual_pipeline_model_parallel_size
    for i in range(vp or 1):
        stage = i if vp else None
        pre = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage)
        post = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage)
        chunks.append(model_provider(config, arch, vocab, seq, pre, post, stage,
                                     args.core_attention, args.transformer_impl,
                                     args.moe_grouped_gemm))
    for chunk in chunks:
        for param in chunk.parameters():
            tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(param)
        chunk.cuda(torch.cuda.current_device())
    chunks = [Float16Module(config, c) for c in chunks]
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=args.overlap_grad_reduce,
        overlap_param_gather=args.overlap_param_gather,
        use_distributed_optimizer=args.use_distributed_optimizer,
        check_for_nan_in_grad=False, bucket_size=40_000_000 if args.overlap_grad_reduce else None)
    model = [DistributedDataParallel(config=config, ddp_config=ddp_config, module=chunk,
                                     disable_bucketing=(i > 0))
             for i, chunk in enumerate(chunks)]
    for m in model:
        m.broadcast_params()
    return model


def data_loader(args, seq: int, vocab: int, micro: int):
    tokenizer = MegatronTokenizer.from_pretrained(metadata_path={"library": "null"},
                                                  vocab_size=vocab - 1)
    dp_size = parallel_state.get_data_parallel_world_size()
    gbs = args.global_batch_size or micro * dp_size
    config = GPTDatasetConfig(
        random_seed=args.seed, sequence_length=seq, reset_position_ids=False,
        reset_attention_mask=False, eod_mask_loss=False, create_attention_mask=False,
        tokenizer=tokenizer, split="1,0,0")
    train_ds, _, _ = BlendedMegatronDatasetBuilder(
        MockGPTDataset, [gbs * (args.train_iters + 1), 0, 0], lambda: True, config).build()
    sampler = torch.utils.data.distributed.DistributedSampler(
        train_ds, num_replicas=dp_size, rank=parallel_state.get_data_parallel_rank(),
        shuffle=False, drop_last=True)
    return torch.utils.data.DataLoader(train_ds, batch_size=micro, sampler=sampler,
                                       drop_last=True, pin_memory=True)


def get_batch(data_iter):
    """Tokens and labels on the first/last pipeline stages, as pretrain_gpt.get_batch."""
    batch = next(data_iter)
    if not (parallel_state.is_pipeline_first_stage(ignore_virtual=True)
            or parallel_state.is_pipeline_last_stage(ignore_virtual=True)):
        return None, None, None, None
    cuda = {k: v.cuda(non_blocking=True) for k, v in batch.items()
            if isinstance(v, torch.Tensor)}
    return cuda["tokens"], cuda["labels"], cuda["loss_mask"], cuda["position_ids"]


def loss_func(loss_mask: torch.Tensor, output_tensor: torch.Tensor):
    losses = output_tensor.float()
    loss_mask = loss_mask.view(-1).float()
    loss = torch.sum(losses.view(-1) * loss_mask) / loss_mask.sum()
    averaged = loss.clone().detach().view(1)
    dist.all_reduce(averaged, group=parallel_state.get_data_parallel_group())
    return loss, {"lm loss": averaged / parallel_state.get_data_parallel_world_size()}


def forward_step(data_iter, model):
    tokens, labels, loss_mask, position_ids = get_batch(data_iter)
    output = model(tokens, position_ids, None, labels=labels)
    return output, partial(loss_func, loss_mask)


def num_floating_point_operations(arch: Arch, config: TransformerConfig, vocab: int, seq: int,
                                  batch: int) -> float:
    """Megatron-LM r0.8 megatron/training/training.py:num_floating_point_operations."""
    kv = config.kv_channels * config.num_attention_heads
    q_ratio = kv / config.hidden_size
    groups = config.num_query_groups or config.num_attention_heads
    experts_routed = 1 if not arch.num_experts else arch.moe_router_topk
    ffn = config.moe_ffn_hidden_size if arch.num_experts else config.ffn_hidden_size
    glu = 3 / 2 if arch.swiglu else 1
    recompute = 4 if config.recompute_granularity == "full" else 3
    return (4 * recompute * batch * seq * config.num_layers * config.hidden_size ** 2 * (
        (1 + groups / config.num_attention_heads + seq / config.hidden_size) * q_ratio
        + (ffn / config.hidden_size) * experts_routed * glu
        + vocab / (2 * config.num_layers * config.hidden_size)))


def main() -> None:
    args = parse_args()
    arch = dataclasses.replace(PRESETS[args.preset], **{
        k: v for k in ("hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size")
        if (v := getattr(args, k)) is not None})
    seq = args.seq_length or arch.seq_length

    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=None, expert_model_parallel_size=args.ep,
        expert_tensor_parallel_size=args.etp,
        create_gloo_process_groups=not args.disable_gloo_process_groups)
    model_parallel_cuda_manual_seed(args.seed)

    config = transformer_config(args, arch)
    if config.virtual_pipeline_model_parallel_size:
        parallel_state.set_virtual_pipeline_model_parallel_world_size(
            config.virtual_pipeline_model_parallel_size)
    vocab = padded_vocab_size(arch.vocab_size, args.make_vocab_size_divisible_by, args.tp)
    model = build_model(args, config, arch, vocab, seq)

    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=args.lr, weight_decay=0.1, adam_beta1=0.9,
                        adam_beta2=0.95, bf16=True, params_dtype=torch.bfloat16,
                        clip_grad=args.clip_grad,
                        use_distributed_optimizer=args.use_distributed_optimizer,
                        overlap_param_gather=args.overlap_param_gather),
        model, use_gloo_process_groups=not args.disable_gloo_process_groups)

    # megatron/training/training.py:train: hooks the schedules call for overlapped DP comms.
    config.no_sync_func = [m.no_sync for m in model]
    config.finalize_model_grads_func = finalize_model_grads
    if args.overlap_grad_reduce:
        config.grad_sync_func = [m.start_grad_sync for m in model]
    if args.overlap_param_gather:
        config.param_sync_func = [m.start_param_sync for m in model]
    if len(model) == 1:
        config.no_sync_func = config.no_sync_func[0]
        if args.overlap_grad_reduce:
            config.grad_sync_func = config.grad_sync_func[0]
        if args.overlap_param_gather:
            config.param_sync_func = config.param_sync_func[0]

    micro = args.micro_batch_size
    dp_size = parallel_state.get_data_parallel_world_size()
    gbs = args.global_batch_size or micro * dp_size
    if gbs % (micro * dp_size):
        raise SystemExit(f"--global-batch-size {gbs} is not a multiple of micro batch x DP "
                         f"({micro} x {dp_size})")
    num_micro = gbs // (micro * dp_size)
    loader = data_loader(args, seq, vocab, micro)
    # One iterator per model chunk with the interleaved schedule, as megatron/training does.
    data_iters = [iter(loader) for _ in model] if len(model) > 1 else iter(loader)
    forward_backward = get_forward_backward_func()
    timers = Timers(log_level=0, log_option="minmax")
    world = dist.get_world_size()
    flops_per_iter = num_floating_point_operations(arch, config, vocab, seq, gbs)

    if dist.get_rank() == 0:
        params = sum(p.numel() for p in model[0].parameters())
        print(f"> Megatron-Core GPT {args.preset}: layers {config.num_layers} hidden "
              f"{config.hidden_size} heads {config.num_attention_heads} vocab {vocab} seq {seq} "
              f"| TP {args.tp} PP {args.pp} VPP {len(model)} EP {args.ep} DP {dp_size} "
              f"| micro {micro} global {gbs} ({num_micro} microbatches) "
              f"| params on rank 0: {params / 1e6:.1f}M", flush=True)

    timers("interval-time", log_level=0).start(barrier=True)
    for iteration in range(1, args.train_iters + 1):
        for m in model:
            m.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(forward_step_func=forward_step, data_iterator=data_iters,
                                  model=model, num_microbatches=num_micro, seq_length=seq,
                                  micro_batch_size=micro, decoder_seq_length=seq,
                                  forward_only=False)
        update_successful, grad_norm, num_zeros = optimizer.step()
        if iteration % args.log_interval == 0:
            elapsed = timers("interval-time").elapsed(barrier=True) / args.log_interval
            throughput = flops_per_iter / (elapsed * 10 ** 12 * world)
            if dist.get_rank() == 0:
                line = (f" [{datetime.now().strftime('%Y-%m-%d %H:%M:%S')}] iteration "
                        f"{iteration:8d}/{args.train_iters:8d} |"
                        f" consumed samples: {iteration * gbs:12d} |"
                        f" elapsed time per iteration (ms): {elapsed * 1000.0:.1f} |"
                        f" throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |"
                        f" learning rate: {optimizer.param_groups[0]['lr']:.6E} |"
                        f" global batch size: {gbs:5d} |")
                if losses:
                    lm = torch.stack([x["lm loss"] for x in losses]).mean().item()
                    line += f" lm loss: {lm:.6E} |"
                line += f" loss scale: {optimizer.get_loss_scale().item():.1f} |"
                if grad_norm is not None:
                    line += f" grad norm: {grad_norm:.3f} |"
                line += (f" number of skipped iterations: {0 if update_successful else 1:3d} |"
                         f" number of nan iterations: {0:3d} |")
                print(line, flush=True)
    if dist.get_rank() == 0:
        print(f"> memory (rank 0): max allocated "
              f"{torch.cuda.max_memory_allocated() / 2 ** 30:.2f} GiB, max reserved "
              f"{torch.cuda.max_memory_reserved() / 2 ** 30:.2f} GiB", flush=True)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
