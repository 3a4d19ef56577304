import time, torch, statistics
from deepspeed.ops.lion import FusedLion
def block(call, calls=200):
    torch.cuda.synchronize(); t0=time.perf_counter()
    for _ in range(calls): call()
    return (time.perf_counter()-t0)/calls*1e6
ps=[torch.nn.Parameter(torch.randn(1024, device='cuda')) for _ in range(64)]
for p in ps: p.grad=torch.randn_like(p)
opt=FusedLion(ps, lr=1e-4)
raw=type(opt).step
while hasattr(raw, '__wrapped__'): raw=raw.__wrapped__
opt.step()
def manual():
    with torch.autograd.profiler.record_function("x"):
        raw(opt)
a,b,c=[],[],[]
for _ in range(6):
    a.append(block(opt.step)); b.append(block(lambda: raw(opt))); c.append(block(manual))
print('wrapped', [round(x) for x in a]); print('raw', [round(x) for x in b]); print('raw+record_function', [round(x) for x in c])
