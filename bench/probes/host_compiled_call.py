"""Host cost of calling a torch.compile'd function on a GPU host, against the same function run
eagerly: what phantom charges for a compiled call (Fusion.begin_region).

    python bench/probes/host_compiled_call.py --out compiled_call.json      # on a GPU host
    python bench/probes/host_compiled_call.py --training --out compiled_training.json

Tiny tensors (the GPU finishes each kernel long before the host issues the next), no_grad,
after warm-up: host microseconds per call, the median of 7 blocks of 500 calls. The functions
are Megatron-Core's SwiGLU forward and backward (megatron/core/fusions/fused_bias_swiglu.py,
written out here) and a one-op function (the fixed cost of a compiled call).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def swiglu(y):
    y1, y2 = torch.chunk(y, 2, -1)
    return F.silu(y1) * y2


def swiglu_back(g, y):
    y1, y2 = torch.chunk(y, 2, -1)
    return torch.cat((g * torch.sigmoid(y1) * (1 + y1 * (1 - torch.sigmoid(y1))) * y2,
                      g * F.silu(y1)), -1)


def one_op(y):
    return y * 2


def per_call_us(fn, args, calls: int = 500, blocks: int = 7) -> float:
    times = []
    with torch.no_grad():
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize()
        for _ in range(blocks):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            times.append((time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
    return statistics.median(times)


class Block(torch.nn.Module):
    """A pre-norm GeLU MLP block: LayerNorm, two GEMMs, GeLU and the residual add."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.fc, self.proj = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.proj(F.gelu(self.fc(self.norm(x)), approximate="tanh"))


def training_us(fn, x, steps: int = 300, blocks: int = 7) -> dict:
    """Host microseconds of the forward call and of `backward()`, per step."""
    fwd, bwd = [], []
    for _ in range(5):
        fn(x).sum().backward()
    torch.cuda.synchronize()
    for _ in range(blocks):
        f = b = 0.0
        for _ in range(steps):
            t0 = time.perf_counter()
            y = fn(x)
            t1 = time.perf_counter()
            loss = y.sum()
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            f, b = f + t1 - t0, b + t3 - t2
        torch.cuda.synchronize()
        fwd.append(f / steps * 1e6)
        bwd.append(b / steps * 1e6)
    return {"forward_us": statistics.median(fwd), "backward_us": statistics.median(bwd)}


def kernels_per_step(fn, x) -> dict:
    """Device events of one step (forward and backward together) from the profiler: the
    kernels, and the two phase markers, which it lists on the device too."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("phase_forward"):
            y = fn(x)
        loss = y.sum()
        with record_function("phase_backward"):
            loss.backward()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return {"kernels": len(names), "kernel_names": sorted(set(names))}


def training_rows() -> dict:
    block = Block().cuda()
    x = torch.randn(8, 64, device="cuda", requires_grad=True)
    rows = {}
    for name, fn in (("eager", block), ("compiled", torch.compile(block))):
        rows[name] = {**training_us(fn, x), **kernels_per_step(fn, x)}
        print(name, {k: v for k, v in rows[name].items() if k != "kernel_names"}, flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--training", action="store_true",
                   help="a compiled module's forward and backward (host us a step, kernels)")
    a = p.parse_args()
    if a.training:
        out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": training_rows()}
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
        return
    y = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(8, 32, device="cuda", dtype=torch.bfloat16)
    rows = {}
    for name, fn, args in (("one_op", one_op, (y,)), ("swiglu", swiglu, (y,)),
                           ("swiglu_back", swiglu_back, (g, y))):
        rows[name] = {"eager_us": per_call_us(fn, args),
                      "compiled_us": per_call_us(torch.compile(fn), args)}
        print(name, rows[name], flush=True)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
