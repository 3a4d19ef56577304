import time, torch, statistics
from deepspeed.ops.lion import FusedLion
def host_us(call, calls=200, blocks=5):
    call(); torch.cuda.synchronize(); r=[]
    for _ in range(blocks):
        t0=time.perf_counter()
        for _ in range(calls): call()
        r.append((time.perf_counter()-t0)/calls*1e6); torch.cuda.synchronize()
    return statistics.median(r)
for n in (1, 64):
    ps=[torch.nn.Parameter(torch.randn(1024, device='cuda')) for _ in range(n)]
    for p in ps: p.grad=torch.randn_like(p)
    opt=FusedLion(ps, lr=1e-4)
    raw=type(opt).step
    while hasattr(raw, '__wrapped__'): raw=raw.__wrapped__
    print(n, 'step', round(host_us(opt.step),2), 'unwrapped', round(host_us(lambda: raw(opt)),2))
    gs=[p.grad for p in ps]
    print(n, 'p.grad.data x n', round(host_us(lambda: [p.grad.data for p in ps]),2), 'p.data', round(host_us(lambda: [p.data for p in ps]),2),
          'state', round(host_us(lambda: [opt.state[p] for p in ps]),2), 'dtype', round(host_us(lambda: [p.dtype == torch.float16 for p in ps]),2))
from torch.optim import optimizer as O
saved_pre, saved_post = dict(O._global_optimizer_pre_hooks), dict(O._global_optimizer_post_hooks)
O._global_optimizer_pre_hooks.clear(); O._global_optimizer_post_hooks.clear()
print(64, 'step without phantom hooks', round(host_us(opt.step),2))
O._global_optimizer_pre_hooks.update(saved_pre); O._global_optimizer_post_hooks.update(saved_post)
print(64, 'step with', round(host_us(opt.step),2))
