"""Kernel times of Inductor-generated (Triton) kernels: the calibration grid for what
`torch.compile` makes of reductions and float8 casts (phantom/interception/compiled.py).

    python bench/kernels/inductor_sweep.py --out inductor_H100.json      # on a GPU, ~2 min
    phantom run --gpu H100 bench/kernels/inductor_sweep.py --only fp8_fused --out sim.json
    python bench/kernels/inductor_sweep.py --compare REAL.json [REAL2.json ...] sim.json

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


# Float8 training's casts fused with their producers, with a transposed store: what Inductor
# makes of torchao's casts in a compiled block, where the weight-gradient GEMM needs an operand
# column-major (`.t().contiguous().t()`). A pointwise kernel with a transposed output, alone or
# beside row-major ones, is tiled in two dimensions by Inductor (`cast.fp8_t`, `cast_both`); a
# row reduction cannot be, and its transposed store is scattered. Each case's operands are made
# from (rows, cols) (`fused_operands`).
def _fp8(v, scale):
    return (v.float() * scale).clamp(-448.0, 448.0).to(F8)


def _col_major(v):
    return v.t().contiguous().t()


def _rms_bwd(g, x, w):
    """RMSNorm's input gradient (a row reduction), as its decomposition computes it."""
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    gw = g.float() * w.float()
    return (r * (gw - xf * r * r * (gw * xf).mean(-1, keepdim=True))).to(x.dtype)


def _rms_fwd(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


FUSED_CASES = {
    # name: (function, its operands' kinds (fused_operands), min bytes from (rows, cols))
    "fp8_fused.cast_both": (lambda x, s: (_fp8(x, s), _col_major(_fp8(x, s))),
                            ("x", "scale"), lambda r, c: 4 * r * c),
    "fp8_fused.silu_mul_cast_t": (lambda a, b, s: _col_major(_fp8(F.silu(a) * b, s)),
                                  ("x", "x", "scale"), lambda r, c: 5 * r * c),
    "fp8_fused.silu_mul_cast_both": (lambda a, b, s: (_fp8(F.silu(a) * b, s), _col_major(_fp8(F.silu(a) * b, s))),
                                     ("x", "x", "scale"), lambda r, c: 6 * r * c),
    "fp8_fused.silu_mul_store_cast_t": (lambda a, b, s: (F.silu(a) * b, _col_major(_fp8(F.silu(a) * b, s))),
                                        ("x", "x", "scale"), lambda r, c: 7 * r * c),
    "fp8_fused.rowsum_cast_t": (lambda x, s: (x.float().sum(-1), _col_major(_fp8(x, s))),
                                ("x", "scale"), lambda r, c: 3 * r * c),
    "fp8_fused.rms_fwd": (_rms_fwd, ("x", "w"), lambda r, c: 4 * r * c),
    "fp8_fused.rms_fwd_cast_both": (lambda x, w, s: (lambda y: (y, _fp8(y, s), _col_major(_fp8(y, s))))(_rms_fwd(x, w)),
                                    ("x", "w", "scale"), lambda r, c: 6 * r * c),
    "fp8_fused.rms_bwd": (_rms_bwd, ("x", "x", "w"), lambda r, c: 6 * r * c),
    "fp8_fused.rms_bwd_cast_t": (lambda g, x, w, s: (lambda gi: (gi, _col_major(_fp8(gi, s))))(_rms_bwd(g, x, w)),
                                 ("x", "x", "w", "scale"), lambda r, c: 7 * r * c),
    "fp8_fused.rms_bwd_cast_t_amax": (lambda g, x, w, s: (lambda gi: (gi, _col_major(_fp8(gi, s)), gi.abs().amax()))(_rms_bwd(g, x, w)),
                                      ("x", "x", "w", "scale"), lambda r, c: 7 * r * c),
}


def _scale_f64(amax):
    """torchao's scale (float8_training_tensor.py amax_to_scale): float8's max over the amax in
    float64. Inductor inlines it into each cast kernel, where a pointwise kernel broadcasts it to
    its block and so evaluates the float64 division once per element."""
    return (448.0 / torch.clamp(amax.to(torch.float64), min=1e-12)).to(torch.float32)


def _rms_bwd_dw(g, x, w):
    """RMSNorm's backward with its weight gradient (a sum over rows), its mean square computed
    here: the column sum then depends on the row reduction, so Inductor makes separate kernels
    of them (the sibling form, with the mean square saved, is `_rms_bwd_saved`)."""
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    xhat = xf * r
    gw = g.float() * w.float()
    gi = r * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    return gi.to(x.dtype), (g.float() * xhat).sum(0).to(w.dtype), xhat.to(x.dtype) * w


FUSED_CASES.update({
    "fp8_f64.cast": (lambda x, a: _fp8(x, _scale_f64(a)), ("x", "amax"), lambda r, c: 3 * r * c),
    "fp8_f64.silu_mul_cast": (lambda a, b, m: _fp8(F.silu(a) * b, _scale_f64(m)),
                              ("x", "x", "amax"), lambda r, c: 5 * r * c),
    "fp8_f64.cast_t": (lambda x, a: _col_major(_fp8(x, _scale_f64(a))), ("x", "amax"), lambda r, c: 3 * r * c),
    "fp8_f64.rms_bwd_dw": (lambda g, x, w, a: _rms_bwd_dw(g, x, w)[:2], ("x", "x", "w", "amax"),
                           lambda r, c: 6 * r * c),
    # the norm's output recomputed and cast transposed for one and for three weight-gradient
    # GEMMs (q, k and v each cast their input), as in a compiled Llama block's backward
    "fp8_f64.rms_bwd_dw_cast_t1": (lambda g, x, w, a: (lambda gi, dw, y: (gi, dw, _col_major(_fp8(y, _scale_f64(a)))))(*_rms_bwd_dw(g, x, w)),
                                   ("x", "x", "w", "amax"), lambda r, c: 7 * r * c),
    "fp8_f64.rms_bwd_dw_cast_t3": (lambda g, x, w, a: (lambda gi, dw, y: (gi, dw) + tuple(_col_major(_fp8(y, _scale_f64(a))) for _ in range(3)))(*_rms_bwd_dw(g, x, w)),
                                   ("x", "x", "w", "amax"), lambda r, c: 9 * r * c),
})


def _rms_bwd_saved(g, x, w, ms):
    """RMSNorm's backward from the forward's saved mean square `ms` (rows x 1, float32): the
    input gradient's row sum and the weight gradient's column sum are sibling reductions over
    the same loads, which Inductor fuses into one mix-order reduction kernel (scheduler.py
    MixOrderReduction: at least 5M elements, rows >= 4,096 and >= 2 x columns, columns <= 16K)."""
    r = torch.rsqrt(ms + 1e-5)
    xhat = x.float() * r
    gw = g.float() * w.float()
    gi = r * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    return gi.to(x.dtype), (g.float() * xhat).sum(0).to(w.dtype), xhat.to(x.dtype) * w


def _mix_case(transposed: int, row_major: int = 0):
    def case(g, x, w, ms, a):
        gi, dw, y = _rms_bwd_saved(g, x, w, ms)
        return ((gi, dw) + tuple(_col_major(_fp8(y, _scale_f64(a))) for _ in range(transposed))
                + tuple(_fp8(y, _scale_f64(a)) for _ in range(row_major)))
    return case


def _mix_like_step(inplace: bool):
    """As in a compiled Llama block's backward under float8 training: the norm's output gradient
    is the sum of the q, k and v projections' input gradients, and is added to the residual
    stream's gradient (in place when `inplace`)."""
    def case(g1, g2, g3, x, w, ms, a, resid):
        gi, dw, y = _rms_bwd_saved(g1 + g2 + g3, x, w, ms)
        casts = tuple(_col_major(_fp8(y, _scale_f64(a))) for _ in range(3))
        if inplace:
            resid.add_(gi)
            return (dw,) + casts
        return (resid + gi, dw) + casts
    return case


MIX_OPERANDS = ("x", "x", "w", "ms", "amax")
FUSED_CASES.update({
    "mix.rms_bwd": (_mix_case(0), MIX_OPERANDS, lambda r, c: 6 * r * c),
    "mix.rms_bwd_cast_t1": (_mix_case(1), MIX_OPERANDS, lambda r, c: 7 * r * c),
    "mix.rms_bwd_cast_t2": (_mix_case(2), MIX_OPERANDS, lambda r, c: 8 * r * c),
    "mix.rms_bwd_cast_t3": (_mix_case(3), MIX_OPERANDS, lambda r, c: 9 * r * c),
    "mix.rms_bwd_cast_rowmajor1": (_mix_case(0, 1), MIX_OPERANDS, lambda r, c: 7 * r * c),
    "mix.step_like": (_mix_like_step(False), ("x", "x", "x", "x", "w", "ms", "amax", "x"),
                      lambda r, c: 14 * r * c),
    "mix.step_like_inplace": (_mix_like_step(True), ("x", "x", "x", "x", "w", "ms", "amax", "x"),
                              lambda r, c: 12 * r * c),
})
MIX_SIZES = ((4096, 2048), (8192, 2048), (8192, 4096), (16384, 4096), (32768, 4096), (16384, 8192))
FUSED_SIZES = ((2048, 4096), (8192, 4096), (16384, 4096), (8192, 8192), (4096, 14336), (8192, 14336))


def fused_operands(kinds: tuple, r: int, c: int) -> tuple:
    made = {"x": lambda: torch.randn(r, c, device="cuda", dtype=torch.bfloat16),
            "w": lambda: torch.randn(c, device="cuda", dtype=torch.bfloat16),
            "scale": lambda: torch.tensor(2.0, device="cuda"),
            "amax": lambda: torch.tensor(3.0, device="cuda", dtype=torch.bfloat16),
            "ms": lambda: torch.rand(r, 1, device="cuda", dtype=torch.float32) + 0.5}
    return tuple(made[k]() for k in kinds)


def profiled_kernels(fn, args, calls: int = 5) -> list[dict]:
    """Each kernel of one call: name, mean GPU time, and its launch grid, block and registers
    (from the profiler's trace; empty where the profiler records no CUDA activity)."""
    import os
    import tempfile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    by_name: dict = {}
    for e in json.load(open(path)).get("traceEvents", []):
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        k = by_name.setdefault(e["name"], {"name": e["name"], "us": [], "grid": a.get("grid"),
                                            "block": a.get("block"), "registers": a.get("registers per thread"),
                                            "occupancy": a.get("est. achieved occupancy %")})
        k["us"].append(e["dur"])
    return [dict(k, us=round(statistics.median(k["us"]), 2), count=len(k["us"])) for k in by_name.values()]


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


def fused_rows(prefixes: tuple) -> list[dict]:
    """FUSED_CASES: each case's time per call and its kernels one by one."""
    rows = []
    for name, (fn, operands, min_bytes) in FUSED_CASES.items():
        if prefixes and not name.startswith(prefixes):
            continue
        compiled = torch.compile(fn, dynamic=False)
        for r, c in (MIX_SIZES if name.startswith("mix.") else FUSED_SIZES):
            try:
                call_args = fused_operands(operands, r, c)
                us, kernels = kernel_us(compiled, call_args)
                detail = profiled_kernels(compiled, call_args)
            except Exception as exc:  # one failing case must not lose the sweep
                print(f"  ! {name} {r}x{c}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            nbytes = min_bytes(r, c)
            rows.append({"case": name, "rows": r, "cols": c, "numel": r * c, "kernel_us": round(us, 2),
                         "kernels": kernels, "min_bytes": nbytes, "gbps": round(nbytes / us / 1e3, 1),
                         "kernel_detail": detail})
            print(f"{name:<34} {r:>6}x{c:<5} {us:9.1f} us  {kernels} kernels  {nbytes / us / 1e3:7.1f} GB/s  "
                  + "; ".join(f"{k['name'][:60]} {k['us']}us g{k['grid']} r{k['registers']}" for k in detail), flush=True)
            del call_args
        torch._dynamo.reset()
    return rows


def compare(real_paths: list[str], sim_path: str) -> str:
    """Markdown table of the real rows (one or more sweep files) against phantom's run of the
    same cases (`phantom run --gpu G bench/kernels/inductor_sweep.py --only ... --out SIM`)."""
    sim = {(r["case"], r["rows"], r["cols"]): r for r in json.load(open(sim_path))["rows"]}
    lines = ["| case | rows x cols | real us | kernels | real GB/s | phantom us | error |", "|---|---|---|---|---|---|---|"]
    errors: dict[str, list[float]] = {}
    for path in real_paths:
        for r in json.load(open(path))["rows"]:
            s = sim.get((r["case"], r["rows"], r["cols"]))
            if s is None:
                continue
            err = s["kernel_us"] / r["kernel_us"] - 1
            errors.setdefault(r["case"], []).append(err)
            lines.append(f"| {r['case']} | {r['rows']} x {r['cols']} | {r['kernel_us']:.1f} | {r['kernels']} | "
                         f"{r['gbps']:.0f} | {s['kernel_us']:.1f} | {err:+.1%} |")
    lines += ["", "| case | mean error | range |", "|---|---|---|"]
    for case, errs in errors.items():
        lines.append(f"| {case} | {statistics.mean(errs):+.1%} | {min(errs):+.1%} to {max(errs):+.1%} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", nargs="+", metavar="JSON",
                    help="REAL.json [REAL2.json ...] SIM.json: print the real rows against phantom's")
    ap.add_argument("--out")
    ap.add_argument("--only", default="", help="comma-separated case-name prefixes (default: all)")
    args = ap.parse_args()
    if args.compare:
        if len(args.compare) < 2:
            ap.error("--compare needs at least one real file and the simulated one")
        print(compare(args.compare[:-1], args.compare[-1]), end="")
        return 0
    if not args.out:
        ap.error("--out is required (or --compare)")
    if not torch.cuda.is_available() or F8 is None:
        print("needs a CUDA GPU and a torch with float8 dtypes", file=sys.stderr)
        return 2
    rows = []
    prefixes = tuple(p for p in args.only.split(",") if p)
    rows += fused_rows(prefixes)
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
