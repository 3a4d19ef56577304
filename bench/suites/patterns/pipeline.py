"""torch.distributed.pipelining: the GPT split into one stage per rank (or two, interleaved),
GPipe / 1F1B / Interleaved1F1B over micro-batches; torchrun."""
import argparse, os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from _common import GPT, StepTimer, model_args

p = argparse.ArgumentParser()
model_args(p, d=2048, layers=16, heads=16, seq=2048, batch=8)
p.add_argument("--schedule", default="1F1B", choices=["GPipe", "1F1B", "Interleaved1F1B"])
p.add_argument("--microbatches", type=int, default=4)
a = p.parse_args()
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(device)
stages_per_rank = 2 if a.schedule == "Interleaved1F1B" else 1
n_stages = world * stages_per_rank


def stage_module(index: int) -> nn.Module:
    """Stage `index` of the GPT: its share of the blocks; the first has the embedding, the last
    the final norm and head (the others' are deleted, as torchtitan's pipeline split does)."""
    torch.manual_seed(0)
    with torch.device(device):
        model = GPT(a.vocab, a.d, a.layers, a.heads, a.seq).to(torch.bfloat16)
    per = a.layers // n_stages
    model.blocks = nn.ModuleList(model.blocks[index * per:(index + 1) * per])
    if index != 0:
        model.wte = None
    if index != n_stages - 1:
        model.ln_f = model.head = None
    return model


class Stage(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        m = self.model
        if m.wte is not None:
            x = m.wte(x)
        for block in m.blocks:
            x = block(x)
        return m.head(m.ln_f(x)) if m.head is not None else x


indices = [rank + i * world for i in range(stages_per_rank)]
modules = [Stage(stage_module(i)) for i in indices]
stages = [PipelineStage(m, i, n_stages, device) for m, i in zip(modules, indices)]
loss_fn = lambda logits, y: F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())  # noqa: E731
if a.schedule == "Interleaved1F1B":
    schedule = ScheduleInterleaved1F1B(stages, n_microbatches=a.microbatches, loss_fn=loss_fn)
else:
    cls = ScheduleGPipe if a.schedule == "GPipe" else Schedule1F1B
    schedule = cls(stages[0], n_microbatches=a.microbatches, loss_fn=loss_fn)
params = [p for m in modules for p in m.parameters()]
opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
timer = StepTimer()
for step in range(a.steps):
    timer.start()
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=device)
    inputs = [x] if 0 in indices else []
    targets = {"target": x} if n_stages - 1 in indices else {}
    schedule.step(*inputs, **targets)
    opt.step()
    opt.zero_grad(set_to_none=True)
    ms = timer.stop()
    if rank == 0:
        print(f"step {step} {ms:.1f} ms", flush=True)
if rank == 0:
    print(timer.summary(a.warmup), flush=True)
dist.destroy_process_group()
