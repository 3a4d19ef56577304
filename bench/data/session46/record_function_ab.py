import time, torch, statistics
def block(call, calls=200):
    torch.cuda.synchronize(); t0=time.perf_counter()
    for _ in range(calls): call()
    return (time.perf_counter()-t0)/calls*1e6
ps=[torch.nn.Parameter(torch.randn(1024, device='cuda')) for _ in range(64)]
rf=torch.autograd.profiler.record_function
def empty():
    with rf("x"): pass
def datas(): return [p.data for p in ps]
def datas_rf():
    with rf("x"): return [p.data for p in ps]
def datas_rf_after():
    with rf("x"): pass
    return [p.data for p in ps]
r={n:[] for n in ("empty","datas","datas_rf","rf then datas")}
for _ in range(8):
    for n,f in zip(r,(empty,datas,datas_rf,datas_rf_after)): r[n].append(block(f))
for n,v in r.items(): print(n, round(statistics.median(v),1), [round(x) for x in v])
