"""Which object keeps DDP's first gradient bucket allocated after the bucket rebuild?

DistributedDataParallel builds its Reducer with one bucket for all parameters, then rebuilds
the buckets in the gradients' arrival order before the second forward. On torch 2.11 + NCCL the
first bucket stays allocated for the rest of the run (bench/data/mem/: one extra fp32 copy of
the parameters at the peak). This script trains a ~100M-parameter MLP with DDP for a few steps,
then drops one candidate holder at a time and prints the allocated memory after each, in units
of the parameters' fp32 size:

    torchrun --nproc-per-node 2 bench/ddp_bucket_probe.py
"""
import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(24)]).cuda()
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ddp = DDP(model, device_ids=[torch.cuda.current_device()])
    opt = torch.optim.AdamW(ddp.parameters(), fused=True)

    def show(stage: str) -> None:
        torch.cuda.synchronize()
        if rank == 0:
            alloc = torch.cuda.memory_allocated()
            print(f"{stage:40s} allocated {alloc / 2**20:9.1f} MiB = {alloc / param_bytes:5.2f} x params",
                  flush=True)

    show("after DDP()")
    for step in range(4):
        x = torch.randn(64, 2048, device="cuda")
        ddp(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        show(f"after step {step}")
    del opt
    gc.collect()
    show("optimizer deleted")
    reducer = ddp.reducer
    del ddp
    gc.collect()
    show("DDP wrapper deleted (reducer kept)")
    del reducer
    gc.collect()
    show("reducer deleted")
    del model, x
    gc.collect()
    show("model deleted")
    dist.barrier()
    dist.destroy_process_group()
    show("process group destroyed")


if __name__ == "__main__":
    main()
