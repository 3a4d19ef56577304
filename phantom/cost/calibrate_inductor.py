"""Fit the math cost of the pointwise ops Inductor inlines into its generated kernels.

    python -m phantom.cost.calibrate_inductor bench/kernels/results/inductor_math_H100.json \
        bench/kernels/results/inductor_cast_H100.json

A generated kernel takes the longer of its memory traffic and its math (engine: the fused
kernel's cost, `RooflineCostModel.fused_pointwise`). Most pointwise ops cost a few instructions
an element and hide under the traffic; erf, GELU and their gradients cost tens, and a kernel
that reads little for them (a reduction of GELU's output, as float8 training's scaling runs)
is bound by them. Each op's cost is fitted as FLOP-equivalents an element at the GPU's fp32
vector rate, from `bench/kernels/inductor_sweep.py`'s `math_amax.<op>` rows (a whole-tensor
amax of the op's output: 2 bytes read an element, no output, so the math shows) at sizes
whose split reduction loads aligned chunks; the `math.<op>` rows (the op alone) check it. An
instruction count does not depend on the GPU: other GPUs scale it by their own fp32 rate.
Writes phantom/cost/data/generated_math.json.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from phantom.cost.roofline import GENERATED_MATH_PATH, split_reduction_plan
from phantom.hardware.gpus import get_gpu

# An op's math is kept where its amax row ran at least this many times the plain amax's (the
# `add` row at the same size); below, its math hides under the kernel's traffic (fitted as
# math, the plain amax itself would come out at ~45 FLOP-equivalents: its memory time).
MIN_EXPOSED = 1.15
# Sweep case names that are aten ops (what a generated kernel's node is looked up by); the
# sweep's gelu_tanh is aten.gelu with approximate="tanh", kept as evidence only.
ATEN_NAMES = frozenset({"gelu", "gelu_backward", "erf", "tanh", "silu", "silu_backward", "exp", "sigmoid"})


def fit(paths: list[Path]) -> dict:
    files = [json.loads(p.read_text()) for p in paths]
    data = {"meta": files[0]["meta"], "rows": [r for f in files for r in f["rows"]]}
    gpu_name = next(t for t in ("H200", "H100", "A100") if t in data["meta"]["device_name"])
    gpu = get_gpu(gpu_name)
    rate = gpu.fp32_tflops * 1e12
    rows = {(r["case"], r["numel"]): r for r in data["rows"]}
    ops: dict[str, tuple[int, float]] = {}
    evidence: dict[str, list] = {}
    for (case, numel), row in sorted(rows.items()):
        if not case.startswith("math_amax.") or case == "math_amax.add":
            continue
        _, aligned = split_reduction_plan(numel, 1, gpu.sm_count, itemsize=2)
        base = rows.get(("math_amax.add", numel))
        if not aligned or base is None:
            continue  # a misaligned split's loads, not the op's math, set its time
        exposed = row["kernel_us"] / base["kernel_us"]
        op = case.split(".", 1)[1]
        evidence.setdefault(op, []).append({"numel": numel, "us": row["kernel_us"], "over_add": round(exposed, 3)})
        if op in ATEN_NAMES and numel >= ops.get(op, (0, 0.0))[0]:
            ops[op] = (numel, row["kernel_us"] * 1e-6 * rate / numel if exposed >= MIN_EXPOSED else 0.0)
    # the largest aligned size: its launch floor and last partial wave are the smallest share
    table = {op: round(f, 1) for op, (_, f) in sorted(ops.items()) if f > 0}
    # A cast to float8 (clamp, convert): hidden under a plain cast's traffic, it shows after a
    # GELU, whose math it adds to (`cast.fp8_gelu` against the fitted GELU, largest size).
    casts = [r for r in data["rows"] if r["case"] == "cast.fp8_gelu"]
    if casts and "gelu" in table:
        row = max(casts, key=lambda r: r["numel"])
        table["to_float8"] = round(row["kernel_us"] * 1e-6 * rate / row["numel"] - table["gelu"], 1)
        evidence["to_float8"] = [{"numel": row["numel"], "us": row["kernel_us"], "less": "gelu"}]
    return {"flops_per_element": table,
            "source": f"{', '.join(map(str, paths))} ({data['meta']['device_name']}, torch {data['meta']['torch']}, "
                      f"{data['meta']['date']}): the amax rows' time at the largest aligned size, at "
                      f"the fp32 rate ({gpu.fp32_tflops} TFLOP/s); ops whose amax row ran under "
                      f"{MIN_EXPOSED}x the plain amax's are left at 0 (hidden under memory)",
            "evidence": evidence}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("measured", type=Path, nargs="+", help="inductor_sweep.py files of one GPU")
    ap.add_argument("--out", type=Path, default=GENERATED_MATH_PATH)
    args = ap.parse_args(argv)
    result = fit(args.measured)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    for op, f in sorted(result["flops_per_element"].items(), key=lambda kv: -kv[1]):
        print(f"  {op:<16} {f:7.1f} FLOP-equivalents / element")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
