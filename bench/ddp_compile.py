"""DDP with and without torch.compile (compiled first, then wrapped, as nanoGPT does): the same
script for real (`torchrun --nproc-per-node 2`) and under phantom (`phantom run
--nproc-per-node 2`). Four pre-norm GeLU MLP blocks of width 1024, bf16 autocast, fused AdamW,
a batch of B x 1024 tokens per rank; prints the median step time of steps 3-9 and the peak.

    torchrun --nproc-per-node 2 bench/ddp_compile.py --batch 48 [--compile [--wrap-first]]
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, dim: int = 1024) -> None:
        super().__init__()
        self.norm, self.fc, self.proj = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(F.gelu(self.fc(self.norm(x))))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=48)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--wrap-first", action="store_true",
                   help="torch.compile(DDP(model)) instead of DDP(torch.compile(model))")
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    model = nn.Sequential(*[Block() for _ in range(4)]).cuda()
    if a.compile and a.wrap_first:
        ddp = torch.compile(DDP(model, bucket_cap_mb=25))
    else:
        ddp = DDP(torch.compile(model) if a.compile else model, bucket_cap_mb=25)
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(a.batch, 1024, 1024, device="cuda")
    times = []
    for step in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ddp(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    if rank == 0:
        print(f"summary: compile={int(a.compile)} wrap_first={int(a.wrap_first)} batch={a.batch} median_step_ms={statistics.median(times):.2f} "
              f"peak_alloc_gib={torch.cuda.max_memory_allocated() / 2**30:.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
