"""Which kernels F.rms_norm runs on a CUDA build, and fused vs decomposed time (issue 6): python bench/kernels/rms_norm_check.py"""
import torch, json, statistics
from torch.utils._python_dispatch import TorchDispatchMode
class M(TorchDispatchMode):
    def __init__(s): super().__init__(); s.ops=[]
    def __torch_dispatch__(s,f,t,a=(),k=None):
        s.ops.append(str(f)); return f(*a,**(k or {}))
x=torch.randn(8192,4096,device='cuda',dtype=torch.bfloat16,requires_grad=True); w=torch.ones(4096,device='cuda',dtype=torch.bfloat16,requires_grad=True)
m=M()
with m:
    y=torch.nn.functional.rms_norm(x,(4096,),w,1e-5); y.backward(torch.ones_like(y))
print("ops:", m.ops)
def t(fn):
    for _ in range(5): fn()
    torch.cuda.synchronize(); ts=[]
    for _ in range(20):
        a,b=torch.cuda.Event(enable_timing=True),torch.cuda.Event(enable_timing=True); a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b)*1e3)
    return statistics.median(ts)
g=torch.randn_like(x)
def fused_fwd():
    with torch.no_grad(): torch.nn.functional.rms_norm(x,(4096,),w,1e-5)
def fused_fb(): torch.nn.functional.rms_norm(x,(4096,),w,1e-5).backward(g)
def manual(x):
    xf=x.float(); return (xf*torch.rsqrt(xf.pow(2).mean(-1,keepdim=True)+1e-5)).type_as(x)*w
def man_fwd():
    with torch.no_grad(): manual(x)
def man_fb(): manual(x).backward(g)
print(json.dumps({"fused_fwd_us":t(fused_fwd),"fused_fwd_bwd_us":t(fused_fb),"manual_fwd_us":t(man_fwd),"manual_fwd_bwd_us":t(man_fb), "torch":torch.__version__}))
