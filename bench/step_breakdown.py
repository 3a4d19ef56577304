#!/usr/bin/env python3
"""GPU kernel time of one training step by kind, from a real trace and from phantom's.

Real: a torch.profiler (kineto) trace of one step (torchtitan's profiler writes
`<dump>/profiling/traces/iteration_N/rank0_trace.json.gz`). phantom: `phantom run --trace PATH
--trace-ranks 0 --trace-iters N` of the same script; its kernels are divided by the iterations
traced. Kinds: GEMM (cuBLAS/cuBLASLt/CUTLASS kernels; phantom's mm/addmm/bmm/_scaled_mm ops),
attention (flash/SDPA), generated (Inductor's Triton kernels), NCCL, other.

    python bench/step_breakdown.py --real rank0_trace.json.gz --sim sim_trace.json.gz
"""
from __future__ import annotations

import argparse
import gzip
import json

KINDS = ("gemm", "attention", "generated", "nccl", "other")
GEMM_OPS = ("mm.", "addmm.", "bmm.", "_scaled_mm.", "baddbmm.", "matmul.", "linear.", "_grouped_mm.")


def _load(path: str) -> list[dict]:
    data = json.load(gzip.open(path) if path.endswith(".gz") else open(path))
    return data["traceEvents"] if isinstance(data, dict) else data


def real_kind(name: str) -> str:
    n = name.lower()
    if "nccl" in n:
        return "nccl"
    if n.startswith("triton_"):
        return "generated"
    if "flash" in n or "fmha" in n or "attention" in n:
        return "attention"
    if any(k in n for k in ("nvjet", "gemm", "cutlass", "xmma", "cublas", "sm90_", "sm80_")):
        return "gemm"
    return "other"


def sim_kind(name: str) -> str:
    if name.startswith("nccl:"):
        return "nccl"
    if name.startswith("triton_"):
        return "generated"
    if "attention" in name or "flash" in name or "cudnn_attention" in name:
        return "attention"
    if name.startswith(GEMM_OPS):
        return "gemm"
    return "other"


def real_breakdown(path: str) -> dict[str, float]:
    out = dict.fromkeys(KINDS, 0.0)
    for e in _load(path):
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            out[real_kind(e["name"])] += e["dur"] / 1e3
    return out


def sim_breakdown(path: str) -> dict[str, float]:
    events = _load(path)
    iters = max(1, sum(1 for e in events if e.get("cat") == "iteration" and e.get("ph") == "X"))
    out = dict.fromkeys(KINDS, 0.0)
    for e in events:
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "kernel":
            out[sim_kind(e["name"])] += e["dur"] / 1e3 / iters
        elif e.get("cat") == "collective":
            out["nccl"] += e["dur"] / 1e3 / iters
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", help="kineto trace of one step")
    ap.add_argument("--sim", help="phantom's trace (its traced iterations averaged)")
    a = ap.parse_args()
    cols = [(label, fn(p)) for label, fn, p in (("real", real_breakdown, a.real), ("phantom", sim_breakdown, a.sim)) if p]
    if not cols:
        ap.error("give --real and/or --sim")
    print("| kind (ms a step) | " + " | ".join(c for c, _ in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for k in KINDS:
        print(f"| {k} | " + " | ".join(f"{b[k]:.1f}" for _, b in cols) + " |")
    print("| sum | " + " | ".join(f"{sum(b.values()):.1f}" for _, b in cols) + " |")


if __name__ == "__main__":
    main()
