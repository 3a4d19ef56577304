"""Host cost of calling a torch.compile'd function on a GPU host, against the same function run
eagerly: what phantom charges for a compiled call (Simulation.begin_fused_region).

    python bench/host_compiled_call.py --out compiled_call.json      # on a GPU host

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    a = p.parse_args()
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
