"""DDP with gradient accumulation under no_sync, bf16 autocast, fused AdamW; torchrun."""
import argparse, contextlib, os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from _common import GPT, StepTimer, model_args

p = argparse.ArgumentParser()
model_args(p, d=1024, layers=24, heads=16, seq=1024, batch=8)
p.add_argument("--accum", type=int, default=4)
a = p.parse_args()
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.manual_seed(0)
model = DDP(GPT(a.vocab, a.d, a.layers, a.heads, a.seq).cuda(), device_ids=[torch.cuda.current_device()])
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
timer = StepTimer()
for step in range(a.steps):
    timer.start()
    for micro in range(a.accum):
        x = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
        # gradients all-reduced on the last micro-batch only
        with contextlib.nullcontext() if micro == a.accum - 1 else model.no_sync():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x).flatten(0, 1).float(), x.flatten()) / a.accum
            loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    ms = timer.stop()
    if dist.get_rank() == 0:
        print(f"step {step} {ms:.1f} ms", flush=True)
if dist.get_rank() == 0:
    print(timer.summary(a.warmup), flush=True)
dist.destroy_process_group()
