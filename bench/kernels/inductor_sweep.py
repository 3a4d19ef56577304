"""Kernel times of Inductor-generated (Triton) kernels: the calibration grid for what
`torch.compile` makes of reductions and float8 casts (phantom/interception/compiled.py).

    python bench/kernels/inductor_sweep.py --out inductor_H100.json      # on a GPU, ~2 min

Each case is a small function compiled on its own, over a range of sizes: a plain pointwise
kernel (the reference the elementwise memory curve was fitted to), a reduction of a whole
tensor to one value (Inductor splits it in two passes), the same after a GELU, a row-wise
reduction fused with its consumer, and float8 casts (row-major and transposed outputs), the
kernels float8 training's scaling makes. GPU time per call from CUDA events around calls queued
behind a sleep kernel (the split reduction's two passes count together; the same script runs
under `phantom run` for the simulated side).
Every row records the bytes a kernel must move at least (inputs read once, outputs written).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

F8 = getattr(torch, "float8_e4m3fn", None)
SIZES = ((1024, 1024), (4096, 2048), (8192, 4096), (16384, 4096), (16384, 8192), (32768, 8192))


def _amax(x):
    return torch.amax(torch.abs(x))


def _amax_gelu(x):
    return torch.amax(torch.abs(F.gelu(x)))


def _gelu(x):
    return F.gelu(x)


def _rms_rows(x):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)


def _cast_fp8(x, scale):
    return (x.float() * scale).clamp(-448.0, 448.0).to(F8)


def _cast_fp8_t(x, scale):
    return (x.float() * scale).clamp(-448.0, 448.0).to(F8).t().contiguous().t()


def _scale_and_cast(x):
    amax = torch.amax(torch.abs(x)).float()
    scale = 448.0 / amax.clamp(min=1e-12)
    return (x.float() * scale).clamp(-448.0, 448.0).to(F8), scale.reciprocal()


def _rowwise_cast(x):
    amax = torch.amax(torch.abs(x), dim=-1, keepdim=True).float()
    scale = 448.0 / amax.clamp(min=1e-12)
    return (x.float() * scale).clamp(-448.0, 448.0).to(F8), scale.reciprocal()


def _colwise_cast(x):
    """A rowwise recipe's operand for the transposed GEMM: a scale per column, the float8
    copy column-major (an outer reduction its cast consumes)."""
    amax = torch.amax(torch.abs(x), dim=0, keepdim=True).float()
    scale = 448.0 / amax.clamp(min=1e-12)
    return (x.float() * scale).clamp(-448.0, 448.0).to(F8).t().contiguous().t(), scale.reciprocal()


def _rowwise_cast_pow2(x):
    """The rowwise recipe's scales rounded down to a power of two (torchao's
    round_scales_to_power_of_2)."""
    amax = torch.amax(torch.abs(x), dim=-1, keepdim=True).float()
    scale = torch.exp2(torch.floor(torch.log2(448.0 / amax.clamp(min=1e-12))))
    return (x.float() * scale).clamp(-448.0, 448.0).to(F8), scale.reciprocal()


def _cast_gelu(x, scale):
    return (F.gelu(x).float() * scale).clamp(-448.0, 448.0).to(F8)


def _scale_and_cast_gelu(x):
    y = F.gelu(x)
    amax = torch.amax(torch.abs(y)).float()
    scale = 448.0 / amax.clamp(min=1e-12)
    return (y.float() * scale).clamp(-448.0, 448.0).to(F8), scale.reciprocal()


# Math-heavy pointwise ops (the ones whose instruction count per element can exceed what the
# memory traffic hides), each alone (reads 2 and writes 2 bytes an element) and under a
# whole-tensor amax (reads 2 bytes an element, writes nothing): the second exposes the math.
MATH_OPS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_backward": lambda x: torch.ops.aten.gelu_backward(x, x),
    "silu": F.silu,
    "silu_backward": lambda x: torch.ops.aten.silu_backward(x, x),
    "sigmoid": torch.sigmoid,
    "exp": torch.exp,
    "tanh": torch.tanh,
    "erf": torch.erf,
    "add": lambda x: x + 1.0,
}


def _math_case(op):
    return lambda x: op(x)


def _math_amax_case(op):
    return lambda x: torch.amax(torch.abs(op(x)))


# name -> (function, extra args, min bytes moved from (rows, cols) of a bf16 input)
CASES = {
    "pointwise.gelu": (_gelu, False, lambda n: 4 * n),
    "norm.rms_rows": (_rms_rows, False, lambda n: 4 * n),
    "reduce_all.amax": (_amax, False, lambda n: 2 * n),
    "reduce_all.amax_gelu": (_amax_gelu, False, lambda n: 2 * n),
    "cast.fp8": (_cast_fp8, True, lambda n: 3 * n),
    "cast.fp8_t": (_cast_fp8_t, True, lambda n: 3 * n),
    "scaled_cast.tensorwise": (_scale_and_cast, False, lambda n: 3 * n),
    "scaled_cast.rowwise": (_rowwise_cast, False, lambda n: 3 * n),
    "scaled_cast.colwise": (_colwise_cast, False, lambda n: 3 * n),
    "scaled_cast.rowwise_pow2": (_rowwise_cast_pow2, False, lambda n: 3 * n),
    "cast.fp8_gelu": (_cast_gelu, True, lambda n: 3 * n),
    "scaled_cast.tensorwise_gelu": (_scale_and_cast_gelu, False, lambda n: 3 * n),
}
for _name, _op in MATH_OPS.items():
    CASES[f"math.{_name}"] = (_math_case(_op), False, lambda n: 4 * n)
    CASES[f"math_amax.{_name}"] = (_math_amax_case(_op), False, lambda n: 2 * n)
MATH_SIZES = ((8192, 4096), (16384, 8192), (32768, 8192))


def kernel_us(fn, args, calls: int = 20) -> tuple[float, int]:
    """GPU time of one call (CUDA events around `calls` calls queued behind a sleep kernel, so
    the host's launch time stays out), and kernels per call (the profiler's count; 0 where the
    profiler records no CUDA activity, as under phantom)."""
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(3):
        torch.cuda._sleep(50_000_000)  # ~25 ms of queue ahead of the calls
        start.record()
        for _ in range(calls):
            fn(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return statistics.median(times), kernels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated case-name prefixes (default: all)")
    args = ap.parse_args()
    if not torch.cuda.is_available() or F8 is None:
        print("needs a CUDA GPU and a torch with float8 dtypes", file=sys.stderr)
        return 2
    rows = []
    prefixes = tuple(p for p in args.only.split(",") if p)
    for name, (fn, takes_scale, min_bytes) in CASES.items():
        if prefixes and not name.startswith(prefixes):
            continue
        compiled = torch.compile(fn, dynamic=False)
        for r, c in (MATH_SIZES if name.startswith("math") else SIZES):
            x = torch.randn(r, c, device="cuda", dtype=torch.bfloat16)
            call_args = (x, torch.tensor(2.0, device="cuda")) if takes_scale else (x,)
            try:
                us, kernels = kernel_us(compiled, call_args)
            except Exception as exc:  # one failing case must not lose the sweep
                print(f"  ! {name} {r}x{c}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            nbytes = min_bytes(r * c)
            rows.append({"case": name, "rows": r, "cols": c, "numel": r * c, "kernel_us": round(us, 2),
                         "kernels": kernels, "min_bytes": nbytes, "gbps": round(nbytes / us / 1e3, 1)})
            print(f"{name:<24} {r:>6}x{c:<5} {us:9.1f} us  {kernels} kernels  {nbytes / us / 1e3:7.1f} GB/s",
                  flush=True)
            del x
        torch._dynamo.reset()
    meta = {"device_name": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cuda": torch.version.cuda, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "method": "torch.compile of each function; CUDA events around 20 calls queued behind torch.cuda._sleep, median of 3"}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
