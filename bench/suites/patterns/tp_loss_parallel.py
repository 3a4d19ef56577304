"""Tensor + sequence parallelism over DTensor (parallelize_module), the vocabulary-parallel
loss under loss_parallel(), bf16 parameters; torchrun."""
import argparse, os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel, loss_parallel, parallelize_module)

from _common import GPT, StepTimer, model_args

p = argparse.ArgumentParser()
model_args(p, d=2048, layers=8, heads=16, seq=2048, batch=4)
a = p.parse_args()
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("cuda", (dist.get_world_size(),))
torch.manual_seed(0)
with torch.device("cuda"):
    model = GPT(a.vocab, a.d, a.layers, a.heads, a.seq).to(torch.bfloat16)
for block in model.blocks:
    parallelize_module(block, mesh, {
        "ln1": SequenceParallel(), "ln2": SequenceParallel(),
        "qkv": ColwiseParallel(input_layouts=Shard(1)), "proj": RowwiseParallel(output_layouts=Shard(1)),
        "fc1": ColwiseParallel(input_layouts=Shard(1)), "fc2": RowwiseParallel(output_layouts=Shard(1)),
    })
parallelize_module(model, mesh, {
    "wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
    "ln_f": SequenceParallel(),
    "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
})


opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
timer = StepTimer()
for step in range(a.steps):
    timer.start()
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    with loss_parallel():
        loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    ms = timer.stop()
    if dist.get_rank() == 0:
        print(f"step {step} {ms:.1f} ms", flush=True)
if dist.get_rank() == 0:
    print(timer.summary(a.warmup), flush=True)
dist.destroy_process_group()
