"""Peak-memory probe of DDP (diagnosis for bench/distributed.py): run with torchrun on GPUs and under phantom; compare."""
import os, torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl"); torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
M = lambda: torch.cuda.memory_allocated() / 2**20
m = nn.Sequential(*[nn.Linear(4096, 4096, bias=False) for _ in range(4)]).cuda()  # 4 x 64 MiB
print("params", round(M()))
d = DDP(m)
print("after DDP()", round(M()))
x = torch.randn(8, 4096, device="cuda")
for i in range(3):
    d(x).sum().backward()
    print(f"iter {i} after backward", round(M()))
# autocast + fused AdamW, as examples/dist_train.py's DDP mode
opt = torch.optim.AdamW(d.parameters(), fused=True)
for i in range(3):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = d(x).float().sum()
    loss.backward()
    print(f"autocast iter {i} after backward", round(M()), "peak", round(torch.cuda.max_memory_allocated() / 2**20))
    opt.step(); opt.zero_grad(set_to_none=True)
    print(f"autocast iter {i} after step", round(M()))
