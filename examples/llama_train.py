"""Train a Llama-3-style model with FSDP2, tensor and pipeline parallelism in any combination.

Launched by torchrun (or `phantom run`), one process per GPU; random tokens. The ranks form a
(pp, dp, tp) DeviceMesh, as torchtitan lays them out: tp innermost (within a node), then dp,
then pp outermost.

    torchrun --nproc-per-node 8 examples/llama_train.py --preset llama3-8b            # FSDP over 8
    torchrun --nproc-per-node 8 examples/llama_train.py --preset llama3-8b --tp 8     # TP only
    phantom run --cluster h100-ib --nnodes 128 examples/llama_train.py --preset llama3-8b --tp 8
    phantom run --cluster h100-ib --nnodes 128 examples/llama_train.py --preset llama3-70b --pp 8 --tp 8

  dp (= world / (pp * tp))  FSDP2: fully_shard per block and on the root, bf16 parameters and
                             fp32 gradient reduction (MixedPrecisionPolicy), AdamW on the shards.
  --tp N                     DTensor tensor parallel inside each block: wq/wk/wv and w1/w3
                             ColwiseParallel, wo and w2 RowwiseParallel (one all-reduce after
                             attention, one after the MLP); embeddings, norms and the output
                             layer are replicated (no sequence parallel). n_kv_heads % tp == 0.
  --pp N                     torch.distributed.pipelining: the blocks split evenly into N stages
                             (stage 0 embeds, the last one has the norm, output layer and loss),
                             Schedule1F1B over --microbatches micro-batches.
  --ac                       full activation checkpointing of every block.

--local-batch-size is the number of sequences per data-parallel rank per step (split into
micro-batches under pp). Rank 0 prints one line per step and a `summary:` line with
tokens/s per GPU, MFU (6N + 12 L H T flops per token, against the GPU's dense bf16 peak) and
peak memory (rank 0's, and the maximum over ranks).
"""
import argparse
import os
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

GIB = 2**30
# Dense bf16 tensor-core peak by device name; the first matching substring wins.
PEAK_BF16_FLOPS = [("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12)]


@dataclass
class LlamaConfig:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 8
    ffn_dim: int = 14336
    vocab_size: int = 128256
    rope_theta: float = 500000.0
    max_seq_len: int = 8192


PRESETS = {
    "debug": dict(dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_dim=768, vocab_size=2048),
    "llama3-1b": dict(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_dim=8192),
    "llama3-8b": dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336),
    "llama3-70b": dict(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_dim=28672),
}


def rope_tables(cfg: LlamaConfig, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    head_dim = cfg.dim // cfg.n_heads
    inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq_len).float(), inv_freq)  # (T, head_dim / 2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, T, heads, head_dim), rotating the (even, odd) pairs of each head."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return out.type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        # -1 heads: all of them, or this rank's share under tensor parallelism
        q = apply_rope(self.wq(x).view(B, T, -1, self.head_dim), cos, sin)
        k = apply_rope(self.wk(x).view(B, T, -1, self.head_dim), cos, sin)
        v = self.wv(x).view(B, T, -1, self.head_dim)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig, ac: bool):
        super().__init__()
        self.ac = ac
        self.attention_norm = nn.RMSNorm(cfg.dim, eps=1e-5)
        self.attention = Attention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.dim, eps=1e-5)
        self.feed_forward = FeedForward(cfg)

    def _forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))

    def forward(self, x, cos, sin):
        if self.ac:
            from torch.utils.checkpoint import checkpoint

            return checkpoint(self._forward, x, cos, sin, use_reentrant=False)
        return self._forward(x, cos, sin)


class Llama(nn.Module):
    """The whole model, or one pipeline stage of it (the blocks [first, last))."""

    def __init__(self, cfg: LlamaConfig, seq_len: int, first: int = 0, last: int | None = None,
                 ac: bool = False):
        super().__init__()
        last = cfg.n_layers if last is None else last
        self.is_first, self.is_last = first == 0, last == cfg.n_layers
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim) if self.is_first else None
        self.layers = nn.ModuleList(Block(cfg, ac) for _ in range(first, last))
        self.norm = nn.RMSNorm(cfg.dim, eps=1e-5) if self.is_last else None
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False) if self.is_last else None
        cos, sin = rope_tables(cfg, seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_embeddings is not None:  # x: token ids
            x = self.tok_embeddings(x)
        for layer in self.layers:
            x = layer(x, self.rope_cos, self.rope_sin)
        if self.output is not None:
            x = self.output(self.norm(x))  # logits
        return x


def parallelize(model: Llama, mesh, tp: int) -> None:
    """TP inside each block (over mesh["tp"]), then FSDP2 over mesh["dp"]."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if tp > 1:
        plan = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
                "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel()}
        for block in model.layers:
            parallelize_module(block, mesh["tp"], plan)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers:  # one all-gather / reduce-scatter per block
        fully_shard(block, mesh=mesh["dp"], mp_policy=mp)
    fully_shard(model, mesh=mesh["dp"], mp_policy=mp)


def adamw(model: nn.Module) -> torch.optim.AdamW:
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters() if p.requires_grad]
    # one foreach call per group, and foreach cannot mix DTensor (dp x tp) with plain ones
    dt = [p for p in params if isinstance(p, DTensor)]
    plain = [p for p in params if not isinstance(p, DTensor)]
    groups = [{"params": g} for g in (dt, plain) if g]
    return torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=PRESETS, default="llama3-8b")
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--local-batch-size", type=int, default=1, help="sequences per dp rank per step")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--microbatches", type=int, default=0,
                        help="pp micro-batches per step (default: --local-batch-size, one sequence each)")
    parser.add_argument("--ac", action="store_true", help="full activation checkpointing")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2, help="first iterations left out of the averages")
    args = parser.parse_args()

    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    if world % (args.tp * args.pp):
        raise SystemExit(f"world size {world} is not a multiple of tp x pp = {args.tp * args.pp}")
    dp = world // (args.tp * args.pp)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cuda", (args.pp, dp, args.tp), mesh_dim_names=("pp", "dp", "tp"))
    cfg = LlamaConfig(**PRESETS[args.preset], max_seq_len=args.seq_len)
    if cfg.n_kv_heads % args.tp:
        raise SystemExit(f"n_kv_heads={cfg.n_kv_heads} must be divisible by --tp {args.tp}")
    pp_rank = mesh["pp"].get_local_rank()
    bounds = [round(i * cfg.n_layers / args.pp) for i in range(args.pp + 1)]
    with torch.device("cuda"):
        model = Llama(cfg, args.seq_len, bounds[pp_rank], bounds[pp_rank + 1], ac=args.ac)
    parallelize(model, mesh, args.tp)
    optimizer = adamw(model)

    def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))

    schedule = None
    if args.pp > 1:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        n_micro = args.microbatches or args.local_batch_size
        if args.local_batch_size % n_micro:
            raise SystemExit(f"--local-batch-size {args.local_batch_size} is not a multiple of "
                             f"--microbatches {n_micro}")
        stage = PipelineStage(model, pp_rank, args.pp, torch.device("cuda", local_rank),
                              group=mesh["pp"].get_group())
        schedule = Schedule1F1B(stage, n_microbatches=n_micro, loss_fn=loss_fn)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> None:
        if schedule is None:
            loss_fn(model(x), y).backward()
        elif model.is_first:
            schedule.step(x)
        elif model.is_last:
            schedule.step(target=y, losses=[])
        else:
            schedule.step()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    n_params = _count_params(cfg)
    n_embedding = cfg.vocab_size * cfg.dim
    flops_per_token = 6 * (n_params - n_embedding) + 12 * cfg.n_layers * cfg.dim * args.seq_len
    peak = next(f for name, f in PEAK_BF16_FLOPS if name in torch.cuda.get_device_name())
    tokens_per_gpu = args.local_batch_size * args.seq_len * dp / world
    if rank == 0:
        print(f"device: {world} x {torch.cuda.get_device_name()} | {args.preset} {n_params / 1e9:.2f}B | "
              f"pp {args.pp} dp {dp} tp {args.tp} | local batch {args.local_batch_size} x seq {args.seq_len}"
              + (" | full AC" if args.ac else ""), flush=True)

    g = torch.Generator().manual_seed(1234 + mesh["dp"].get_local_rank())
    times = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for it in range(args.steps):
        x = torch.randint(cfg.vocab_size, (args.local_batch_size, args.seq_len), generator=g).cuda()
        y = torch.randint(cfg.vocab_size, (args.local_batch_size, args.seq_len), generator=g).cuda()
        train_step(x, y)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        dt, t0 = t1 - t0, t1
        if it >= args.warmup:
            times.append(dt)
        if rank == 0:
            tps = tokens_per_gpu / dt
            print(f"iter {it} | {dt * 1e3:.1f} ms | {tps:,.0f} tok/s/GPU | MFU {flops_per_token * tps / peak * 100:.1f}% | "
                  f"peak {torch.cuda.max_memory_allocated() / GIB:.2f} GiB", flush=True)

    mine = torch.cuda.max_memory_allocated() / GIB
    peaks: list = [None] * world
    dist.all_gather_object(peaks, mine)
    if rank == 0:
        median = statistics.median(times or [dt])
        tps = tokens_per_gpu / median
        print(f"summary: median_iter_ms={median * 1e3:.1f} tokens_per_s_per_gpu={tps:.0f} "
              f"mfu={flops_per_token * tps / peak:.4f} peak_alloc_gib={mine:.2f} "
              f"max_peak_alloc_gib={max(peaks):.2f} world_size={world}", flush=True)
    dist.destroy_process_group()


def _count_params(cfg: LlamaConfig) -> int:
    head_dim = cfg.dim // cfg.n_heads
    attention = cfg.dim * head_dim * (2 * cfg.n_heads + 2 * cfg.n_kv_heads)
    block = attention + 3 * cfg.dim * cfg.ffn_dim + 2 * cfg.dim
    return cfg.n_layers * block + 2 * cfg.vocab_size * cfg.dim + cfg.dim


if __name__ == "__main__":
    main()
