"""Two GPUs, float8 training with torchao's distributed paths: FSDP2 with float8 weight
all-gather (`enable_fsdp_float8_all_gather`, the scales precomputed after each step), or tensor
parallelism with torchao's float8 parallel styles; MLP blocks of a GPT width, compiled."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh

from _common import StepTimer

p = argparse.ArgumentParser()
p.add_argument("--parallel", choices=["fsdp", "tp"], default="fsdp")
p.add_argument("--d", type=int, default=4096)
p.add_argument("--blocks", type=int, default=8)
p.add_argument("--tokens", type=int, default=16384)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=4)
a = p.parse_args()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),))


class MLP(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x)))


from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: E402

torch.manual_seed(0)
model = nn.Sequential(*[MLP(a.d) for _ in range(a.blocks)]).cuda()
if a.parallel == "fsdp":
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
else:
    from torch.distributed.tensor.parallel import parallelize_module
    from torchao.float8.float8_tensor_parallel import Float8ColwiseParallel, Float8RowwiseParallel

    model = model.bfloat16()
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"))
    for block in model:
        parallelize_module(block, mesh, {"up": Float8ColwiseParallel(), "down": Float8RowwiseParallel()})
for block in model:
    block.compile()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
x = torch.randn(a.tokens, a.d, device="cuda", dtype=torch.bfloat16)
timer = StepTimer()
for step in range(a.steps):
    timer.start()
    model(x).float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if a.parallel == "fsdp":
        precompute_float8_dynamic_scale_for_fsdp(model)
    ms = timer.stop()
    if dist.get_rank() == 0:
        print(f"step {step} {ms:.1f} ms", flush=True)
if dist.get_rank() == 0:
    print(timer.summary(a.warmup), flush=True)
dist.destroy_process_group()
