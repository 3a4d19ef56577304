"""Train a GPT on random tokens for a few steps and report speed and memory.

A plain single-GPU training loop in the style of nanoGPT: pre-norm decoder, bf16 autocast,
fused AdamW, optional activation checkpointing. The data is random, so the loss stays near
ln(vocab_size); the point is the throughput and the memory of a realistic step.

    python examples/gpt_train.py --preset gpt2-124m --seq-len 2048 --batch-size 8
    python examples/gpt_train.py --preset 1b --seq-len 4096 --batch-size 4 --ac
    python examples/gpt_train.py --preset gpt2-350m --seq-len 2048 --batch-size 8 --compile
"""
import argparse
import math
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class GPTConfig:
    n_layer: int = 12
    n_embd: int = 768
    n_head: int = 12
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64 for faster matmuls
    block_size: int = 2048


PRESETS = {
    "gpt2-124m": dict(n_layer=12, n_embd=768, n_head=12),
    "gpt2-350m": dict(n_layer=24, n_embd=1024, n_head=16),
    "gpt2-774m": dict(n_layer=36, n_embd=1280, n_head=20),
    "1b": dict(n_layer=18, n_embd=2048, n_head=16),
    "3b": dict(n_layer=36, n_embd=2560, n_head=20),
}

# Dense bf16 tensor-core peak by device name; the first matching substring wins.
PEAK_BF16_FLOPS = [("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12)]


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, n_head, T, head_dim)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash attention
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd, bias=False)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd, bias=False)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, activation_checkpointing: bool = False):
        super().__init__()
        self.cfg = cfg
        self.ac = activation_checkpointing
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=False)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as in GPT-2
        self.apply(self._init_weights)
        # GPT-2: scale the init of the projections that write into the residual stream
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = False) -> int:
        # the tied wte/lm_head weight is counted once; position embeddings do no matmul flops
        n = sum(p.numel() for p in self.parameters())
        return n - self.wpe.weight.numel() if non_embedding else n

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            # checkpointing keeps only each block's input and recomputes the rest in backward
            x = checkpoint(block, x, use_reentrant=False) if self.ac else block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def peak_flops(device_name: str) -> float:
    for key, flops in PEAK_BF16_FLOPS:
        if key in device_name:
            return flops
    print(f"note: no bf16 peak known for {device_name!r}; MFU assumes 989 TFLOP/s (H100)")
    return 989e12


def get_batch(batch_size: int, seq_len: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    # random tokens made on the CPU, pinned so the copy to the GPU can overlap with compute
    data = torch.randint(vocab_size, (batch_size, seq_len + 1))
    x = data[:, :-1].contiguous().pin_memory()
    y = data[:, 1:].contiguous().pin_memory()
    return x.cuda(non_blocking=True), y.cuda(non_blocking=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=PRESETS, default="gpt2-124m")
    parser.add_argument("--n-layer", type=int)
    parser.add_argument("--n-embd", type=int)
    parser.add_argument("--n-head", type=int)
    parser.add_argument("--vocab-size", type=int, default=50304)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="training iterations in total")
    parser.add_argument("--warmup", type=int, default=3, help="first iterations left out of the averages")
    parser.add_argument("--ac", action="store_true", help="activation checkpointing per block")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (as nanoGPT does)")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()

    dims = dict(PRESETS[args.preset])
    for key in ("n_layer", "n_embd", "n_head"):
        if getattr(args, key) is not None:
            dims[key] = getattr(args, key)
    cfg = GPTConfig(**dims, vocab_size=args.vocab_size, block_size=args.seq_len)
    assert cfg.n_embd % cfg.n_head == 0, "n_embd must be divisible by n_head"

    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    with torch.device("cuda"):  # parameters are created and initialised on the GPU directly
        model = GPT(cfg, activation_checkpointing=args.ac)

    # weight decay on matmul weights and embeddings only, not on norms
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), fused=True)
    train_model = torch.compile(model) if args.compile else model

    device_name = torch.cuda.get_device_name()
    n_params = model.num_params()
    tokens_per_iter = args.batch_size * args.seq_len
    # PaLM appendix B: 6 flops per parameter per token (forward + backward) plus attention
    flops_per_token = 6 * model.num_params(non_embedding=True) + 12 * cfg.n_layer * cfg.n_embd * args.seq_len
    peak = peak_flops(device_name)
    print(f"device: {device_name} | torch {torch.__version__} | params {n_params / 1e6:.2f}M | "
          f"layers {cfg.n_layer} embd {cfg.n_embd} heads {cfg.n_head} vocab {cfg.vocab_size} | "
          f"batch {args.batch_size} x seq {args.seq_len} | ac {args.ac} | compile {args.compile}")

    model.train()
    times_ms = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for it in range(args.steps):
        x, y = get_batch(args.batch_size, args.seq_len, cfg.vocab_size)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = train_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        torch.cuda.synchronize()
        t1 = time.perf_counter()
        dt = t1 - t0
        t0 = t1
        if it >= args.warmup:
            times_ms.append(dt * 1e3)
        tok_s = tokens_per_iter / dt
        mfu = flops_per_token * tok_s / peak
        peak_gib = torch.cuda.max_memory_allocated() / 2**30
        print(f"iter {it} | loss {loss.item():.4f} | {dt * 1e3:.2f} ms | {tok_s:,.0f} tok/s | "
              f"MFU {mfu * 100:.1f}% | peak {peak_gib:.2f} GiB")

    if not times_ms:  # fewer steps than warmup: report the last iteration
        times_ms = [dt * 1e3]
    median_ms = statistics.median(times_ms)
    tok_s = tokens_per_iter / (median_ms / 1e3)
    print(f"summary: median_iter_ms={median_ms:.2f} mean_iter_ms={statistics.mean(times_ms):.2f} "
          f"tokens_per_s={tok_s:.0f} mfu={flops_per_token * tok_s / peak:.4f} "
          f"peak_alloc_gib={torch.cuda.max_memory_allocated() / 2**30:.2f} "
          f"peak_reserved_gib={torch.cuda.max_memory_reserved() / 2**30:.2f} "
          f"params={n_params / 1e6:.2f}M")


if __name__ == "__main__":
    main()
