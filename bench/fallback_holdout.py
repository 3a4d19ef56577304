"""Held-out check of the fallback model: ops at shapes OFF the sweep grid, predicted by the
calibrated roofline (what `phantom run` uses on a database miss) vs timed on this machine's GPU.

    python bench/fallback_holdout.py --out $OUT/holdout_H100.json     # on the GPU machine

Each case is one aten call, captured under a dispatch mode while it runs on real CUDA tensors;
the same call is then estimated on meta tensors of the same shapes, strides and dtypes. Timing
is phantom profile's (CUDA-graph replay of rotated random inputs, median). Targets (issue 3):
median |error| GEMM <= 10%, attention <= 15%, memory-bound <= 15%.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from phantom.cost import RooflineCostModel, classify
from phantom.cost.profile.timing import Timer, device_header, warm_up_clocks
from phantom.hardware import get_gpu

BF16 = torch.bfloat16
TARGETS = {"gemm": 0.10, "attention": 0.15, "memory": 0.15}


def r(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.randn(shape, device="cuda", dtype=torch.float32).to(dtype)


def cases() -> list[tuple[str, str, Callable[[], Any], Callable[[Any], Any]]]:
    """(group, label, make, fn). Shapes chosen between and beyond the sweep's grid points."""
    out: list = []
    for m, n, k in ((3000, 5000, 1500), (6144, 2560, 10240), (777, 4096, 4096), (12000, 1000, 3000),
                    (2500, 2500, 2500), (9000, 7000, 640), (1536, 11008, 4096), (40960, 896, 896),
                    (320, 320, 8192), (5120, 5120, 1280)):
        out.append(("gemm", f"mm {m}x{n}x{k} x@W^T", lambda m=m, n=n, k=k: (r(m, k), r(n, k)),
                    lambda b: torch.mm(b[0], b[1].t())))
    for bsz, m, n, k in ((24, 700, 700, 96), (40, 1000, 1000, 128)):
        out.append(("gemm", f"bmm {bsz}x{m}x{n}x{k}", lambda bsz=bsz, m=m, n=n, k=k: (r(bsz, m, k), r(bsz, k, n)),
                    lambda b: torch.bmm(b[0], b[1])))
    for bsz, h, s, d, causal in ((3, 24, 1536, 64, True), (2, 20, 3000, 128, True), (6, 14, 1000, 64, False),
                                 (1, 40, 6144, 128, True), (5, 12, 2500, 96, False), (4, 16, 1280, 64, True)):
        out.append(("attention", f"sdpa b{bsz} h{h} s{s} d{d} {'causal' if causal else 'full'}",
                    lambda bsz=bsz, h=h, s=s, d=d: tuple(r(bsz, h, s, d) for _ in range(3)),
                    lambda b, causal=causal: F.scaled_dot_product_attention(*b, is_causal=causal)))
    for numel in (300_000, 3_000_000, 20_000_000, 90_000_000, 450_000_000):
        out.append(("memory", f"add bf16 {numel}", lambda numel=numel: (r(numel), r(numel)),
                    lambda b: torch.add(b[0], b[1])))
        out.append(("memory", f"gelu bf16 {numel}", lambda numel=numel: (r(numel),),
                    lambda b: F.gelu(b[0], approximate="tanh")))
        out.append(("memory", f"to fp32 {numel}", lambda numel=numel: (r(numel),), lambda b: b[0].float()))
    for rows, cols in ((6000, 1536), (20000, 2560), (3000, 5120)):
        out.append(("memory", f"layer_norm f32 {rows}x{cols}",
                    lambda rows=rows, cols=cols: (r(rows, cols, dtype=torch.float32), r(cols, dtype=torch.float32)),
                    lambda b: F.layer_norm(b[0], (b[0].shape[-1],), b[1])))
        out.append(("memory", f"softmax bf16 {rows}x{cols}", lambda rows=rows, cols=cols: (r(rows, cols),),
                    lambda b: torch.softmax(b[0], -1)))
    return out


class _Capture(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if classify(func).op_class is not None:
            self.calls.append((func, args, kwargs))
        return func(*args, **kwargs)


def _to_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_to_meta(v) for v in x)
    return x


def predict(model: RooflineCostModel, fn: Callable, bufs: Any) -> tuple[float, str]:
    cap = _Capture()
    with cap:
        fn(bufs)
    torch.cuda.synchronize()
    total, names = 0.0, []
    for func, args, kwargs in cap.calls:
        margs, mkw = _to_meta(args), {k: _to_meta(v) for k, v in kwargs.items()}
        cost = model.estimate(func, margs, mkw, func(*margs, **mkw))
        if cost is not None:
            total += cost.gpu_ns
            names.append(str(func))
    return total, "+".join(names)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write rows and summary as JSON here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a real NVIDIA GPU and a CUDA build of torch", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    header = device_header()
    model = RooflineCostModel(get_gpu(header["gpu"]))
    timer = Timer(int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20)))
    warm_up_clocks(1.0)
    rows = []
    for group, label, make, fn in cases():
        try:
            one = make()
            pred_ns, ops = predict(model, fn, one)
            del one
            tm = timer.time(fn, make, 0.0 + sum(t.numel() * t.element_size() for t in make()))
        except Exception as exc:  # report and go on
            print(f"  ! {label}: {type(exc).__name__}: {str(exc)[:150]}", flush=True)
            continue
        err = pred_ns / tm.ns - 1.0
        rows.append({"group": group, "case": label, "ops": ops, "real_us": tm.ns / 1e3, "pred_us": pred_ns / 1e3,
                     "err": err, "method": tm.method})
        print(f"{group:<10} {label:<40} real {tm.ns / 1e3:10.2f} us  pred {pred_ns / 1e3:10.2f} us  {100 * err:+6.1f}%",
              flush=True)
    summary = {}
    for group, target in TARGETS.items():
        errs = [abs(x["err"]) for x in rows if x["group"] == group]
        if errs:
            med = statistics.median(errs)
            summary[group] = {"n": len(errs), "median_abs_err": med, "max_abs_err": max(errs), "target": target,
                              "met": med <= target}
            print(f"{group:<10} n={len(errs):<3} median |err| {100 * med:5.1f}%  max {100 * max(errs):5.1f}%  "
                  f"target <= {100 * target:.0f}%  {'met' if med <= target else 'NOT met'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"header": header, "rows": rows, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
