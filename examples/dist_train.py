"""Train the GPT of gpt_train.py on several GPUs: DDP, FSDP2, tensor or pipeline parallel.

Launched by torchrun, one process per GPU; random tokens, so the loss stays near ln(vocab_size)
and the point is the speed and memory of a realistic step.

    torchrun --nproc-per-node 2 examples/dist_train.py --parallel ddp  --preset 1b --seq-len 2048 --batch-size 8
    torchrun --nproc-per-node 2 examples/dist_train.py --parallel fsdp --preset 3b --seq-len 4096 --batch-size 2
    torchrun --nproc-per-node 2 examples/dist_train.py --parallel tp   --preset 1b --seq-len 2048 --batch-size 8
    torchrun --nproc-per-node 2 examples/dist_train.py --parallel pp   --preset 1b --seq-len 2048 --batch-size 8

--parallel
  ddp   DistributedDataParallel (default buckets), bf16 autocast, fused AdamW. Every rank holds
        the whole model and trains on its own batch; gradients are all-reduced in backward.
  fsdp  FSDP2: fully_shard on each block and on the root, MixedPrecisionPolicy(param_dtype=bf16,
        reduce_dtype=fp32), no autocast, AdamW (foreach) on the parameter shards.
  tp    tensor parallel with DTensor over all ranks: ColwiseParallel for attention qkv and MLP
        fc, RowwiseParallel for attention proj and MLP proj (Megatron's layout: one all-reduce
        after attention and one after the MLP, forward and backward). Each rank computes
        n_head // world heads. The tied embedding / lm_head, the position embedding and the
        norms stay replicated (plain tensors): all ranks see the same tokens, so their
        gradients agree without communication. bf16 autocast, AdamW (foreach).
  pp    torch.distributed.pipelining, blocks split evenly into one stage per rank (two ranks:
        stage 0 = embeddings + first half, stage 1 = second half + final norm + lm_head +
        loss), Schedule1F1B over --microbatches micro-batches, bf16 autocast, fused AdamW.
        The last stage gets its own copy of the embedding matrix for lm_head (the tie is
        cut; Megatron would all-reduce the two copies' gradients, this example does not).

--batch-size is the number of sequences per step of one model replica: per rank for ddp and
fsdp, for the whole group for tp (every rank sees the same batch) and pp (split into
micro-batches). No gradient clipping: under tp and pp it needs a norm across ranks, and the
four modes keep the same optimizer step.

Rank 0 prints one line per step and a final `summary:` line like gpt_train.py; peak memory is
reported for rank 0 and as the maximum over ranks.
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # examples/ holds gpt_train.py
from gpt_train import GPT, PRESETS, CausalSelfAttention, GPTConfig, get_batch, peak_flops  # noqa: E402

GIB = 2**30


def adamw(params, **kwargs) -> torch.optim.AdamW:
    """AdamW as in gpt_train.py: weight decay on matrices and embeddings, not on norms."""
    params = [p for p in params if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=3e-4, betas=(0.9, 0.95), **kwargs)


def build_gpt(cfg: GPTConfig, seed: int) -> GPT:
    torch.manual_seed(seed)  # the same weights on every rank (tp and pp rely on it)
    with torch.device("cuda"):  # parameters created on this rank's GPU directly
        return GPT(cfg)


# ---------------------------------------------------------------------------------------------
# DDP


def setup_ddp(cfg: GPTConfig, args, rank: int, world: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(build_gpt(cfg, args.seed), device_ids=[torch.cuda.current_device()])
    optimizer = adamw(model.parameters(), fused=True)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()  # DDP all-reduces the gradient buckets while backward runs
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return train_step


# ---------------------------------------------------------------------------------------------
# FSDP2


def setup_fsdp(cfg: GPTConfig, args, rank: int, world: int):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = build_gpt(cfg, args.seed)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:  # one all-gather / reduce-scatter per block
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)  # the root: embeddings, final norm (lm_head is tied to wte)
    optimizer = adamw(model.parameters(), foreach=True)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = model(x, y)  # bf16 compute from the mixed-precision policy, no autocast
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return train_step


# ---------------------------------------------------------------------------------------------
# Tensor parallel


class LocalHeadAttention(CausalSelfAttention):
    """CausalSelfAttention on this rank's heads only.

    The fused qkv weight is read head by head ([q|k|v] of head 0, then head 1, ...) instead of
    [all q | all k | all v], so that ColwiseParallel's contiguous row shard holds whole heads.
    With random initialisation both layouts are the same model. The head count in the view is
    -1: n_head // tp on a sharded qkv, n_head on a whole one.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape  # x is replicated: C is the full n_embd
        head_dim = C // self.n_head
        qkv = self.qkv(x).view(B, T, -1, 3, head_dim)  # (B, T, local heads, 3, head_dim)
        q, k, v = qkv.permute(3, 0, 2, 1, 4).unbind(0)  # each (B, local heads, T, head_dim)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))  # proj all-reduces its output


def setup_tp(cfg: GPTConfig, args, rank: int, world: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    assert cfg.n_head % world == 0, f"n_head={cfg.n_head} must be divisible by the TP size {world}"
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("tp",))
    model = build_gpt(cfg, args.seed)
    plan = {
        "attn.qkv": ColwiseParallel(),  # Replicate in -> Shard(-1) out: this rank's heads
        "attn.proj": RowwiseParallel(),  # Shard(-1) in -> partial sums -> all-reduce -> Replicate
        "mlp.fc": ColwiseParallel(),
        "mlp.proj": RowwiseParallel(),
    }
    for block in model.blocks:
        block.attn.__class__ = LocalHeadAttention  # same parameters, head-sharded forward
        parallelize_module(block, mesh, plan)
    # One optimizer, with DTensor and plain parameters in separate groups: each group is one
    # foreach call, and a foreach op cannot mix the two kinds.
    params = list(model.parameters())
    optimizer = torch.optim.AdamW([
        {"params": [p for p in params if isinstance(p, DTensor)], "weight_decay": 0.1},
        {"params": [p for p in params if not isinstance(p, DTensor) and p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if not isinstance(p, DTensor) and p.dim() < 2], "weight_decay": 0.0},
    ], lr=3e-4, betas=(0.9, 0.95), foreach=True)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return train_step


# ---------------------------------------------------------------------------------------------
# Pipeline parallel


class GPTStage(nn.Module):
    """A contiguous slice of the GPT's blocks; the first stage embeds, the last one predicts."""

    def __init__(self, gpt: GPT, first: int, last: int, is_first: bool, is_last: bool):
        super().__init__()
        self.wte = gpt.wte if is_first else None
        self.wpe = gpt.wpe if is_first else None
        self.blocks = nn.ModuleList(gpt.blocks[first:last])
        self.ln_f = gpt.ln_f if is_last else None
        self.lm_head = None
        if is_last:  # its own copy of the (tied) embedding matrix
            self.lm_head = nn.Linear(gpt.cfg.n_embd, gpt.cfg.vocab_size, bias=False)
            self.lm_head.weight = nn.Parameter(gpt.wte.weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.wte is not None:  # x: token ids
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            x = block(x)
        if self.lm_head is not None:
            x = self.lm_head(self.ln_f(x))  # logits; the schedule calls loss_fn on them
        return x


def setup_pp(cfg: GPTConfig, args, rank: int, world: int):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    assert args.batch_size % args.microbatches == 0, "--batch-size must be a multiple of --microbatches"
    gpt = build_gpt(cfg, args.seed)  # built whole, then each rank keeps its slice
    bounds = [round(i * cfg.n_layer / world) for i in range(world + 1)]
    is_first, is_last = rank == 0, rank == world - 1
    stage_module = GPTStage(gpt, bounds[rank], bounds[rank + 1], is_first, is_last)
    del gpt  # the other stages' layers are freed here
    device = torch.device("cuda", torch.cuda.current_device())
    stage = PipelineStage(stage_module, stage_index=rank, num_stages=world, device=device)

    def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    schedule = Schedule1F1B(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)
    optimizer = adamw(stage_module.parameters(), fused=True)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        losses: list[torch.Tensor] = []
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if is_first:
                schedule.step(x)  # sends activations on; gets their gradients back
            elif is_last:
                schedule.step(target=y, losses=losses)
            else:
                schedule.step()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        # only the last stage has the loss: the mean over micro-batches
        return torch.stack(losses).mean() if is_last else torch.zeros((), device="cuda")

    return train_step


SETUP = {"ddp": setup_ddp, "fsdp": setup_fsdp, "tp": setup_tp, "pp": setup_pp}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parallel", choices=SETUP, default="ddp")
    parser.add_argument("--preset", choices=PRESETS, default="gpt2-124m")
    parser.add_argument("--vocab-size", type=int, default=50304)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per step per model replica (see above)")
    parser.add_argument("--microbatches", type=int, default=4, help="pp: micro-batches per step")
    parser.add_argument("--steps", type=int, default=10, help="training iterations in total")
    parser.add_argument("--warmup", type=int, default=3, help="first iterations left out of the averages")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()

    # torchrun sets these for every process it starts
    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    cfg = GPTConfig(**PRESETS[args.preset], vocab_size=args.vocab_size, block_size=args.seq_len)
    with torch.device("meta"):  # counted on a shapes-only copy: no memory, no time
        counter = GPT(cfg)
    n_params, n_matmul_params = counter.num_params(), counter.num_params(non_embedding=True)
    del counter

    train_step = SETUP[args.parallel](cfg, args, rank, world)

    data_parallel = args.parallel in ("ddp", "fsdp")
    # ddp/fsdp: each rank its own data; tp/pp: every rank draws the same batch
    torch.manual_seed(args.seed + 1 + (rank if data_parallel else 0))
    tokens_per_iter = args.batch_size * args.seq_len * (world if data_parallel else 1)
    # PaLM appendix B: 6 flops per parameter per token (forward + backward) plus attention
    flops_per_token = 6 * n_matmul_params + 12 * cfg.n_layer * cfg.n_embd * args.seq_len
    device_name = torch.cuda.get_device_name()
    peak = peak_flops(device_name) * world
    if rank == 0:
        print(f"device: {world} x {device_name} | torch {torch.__version__} | parallel {args.parallel} | "
              f"params {n_params / 1e6:.2f}M | layers {cfg.n_layer} embd {cfg.n_embd} heads {cfg.n_head} "
              f"vocab {cfg.vocab_size} | batch {args.batch_size} x seq {args.seq_len} | "
              f"{tokens_per_iter} tokens/step" + (f" | {args.microbatches} micro-batches" if args.parallel == "pp" else ""))

    times_ms = []
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for it in range(args.steps):
        x, y = get_batch(args.batch_size, args.seq_len, cfg.vocab_size)
        loss = train_step(x, y).detach().float()
        # the loss to print: averaged over the data-parallel ranks, sent from the last pp stage
        if data_parallel:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        elif args.parallel == "pp":
            dist.broadcast(loss, src=world - 1)

        torch.cuda.synchronize()  # every rank waits for its GPU at the end of the step
        t1 = time.perf_counter()
        dt = t1 - t0
        t0 = t1
        if it >= args.warmup:
            times_ms.append(dt * 1e3)
        if rank == 0:
            tok_s = tokens_per_iter / dt
            print(f"iter {it} | loss {loss.item():.4f} | {dt * 1e3:.2f} ms | {tok_s:,.0f} tok/s | "
                  f"MFU {flops_per_token * tok_s / peak * 100:.1f}% | "
                  f"peak {torch.cuda.max_memory_allocated() / GIB:.2f} GiB", flush=True)

    # peak memory of every rank, gathered on all of them as Python objects
    mine = (torch.cuda.max_memory_allocated() / GIB, torch.cuda.max_memory_reserved() / GIB)
    peaks: list = [None] * world
    dist.all_gather_object(peaks, mine)
    if rank == 0:
        if not times_ms:  # fewer steps than warmup: report the last iteration
            times_ms = [dt * 1e3]
        median_ms = statistics.median(times_ms)
        tok_s = tokens_per_iter / (median_ms / 1e3)
        print("peak allocated GiB per rank: " + " ".join(f"{a:.2f}" for a, _ in peaks))
        print(f"summary: median_iter_ms={median_ms:.2f} mean_iter_ms={statistics.mean(times_ms):.2f} "
              f"tokens_per_s={tok_s:.0f} mfu={flops_per_token * tok_s / peak:.4f} "
              f"peak_alloc_gib={mine[0]:.2f} peak_reserved_gib={mine[1]:.2f} "
              f"max_peak_alloc_gib={max(a for a, _ in peaks):.2f} "
              f"max_peak_reserved_gib={max(r for _, r in peaks):.2f} "
              f"world_size={world} params={n_params / 1e6:.2f}M", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
