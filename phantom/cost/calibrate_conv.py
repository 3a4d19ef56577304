"""Fit cuDNN convolution efficiency per precision, layout and direction.

    python -m phantom.cost.calibrate_conv bench/profile/results/sweep_nonllm_H200.json \\
        [--calibration phantom/cost/data/H200.json]

The fallback costs a convolution as the implicit GEMM it is (M = N*Ho*Wo, N = Cout,
K = Cin*R*S, input channels padded for tensor cores) at the calibrated GEMM curve, times an
efficiency scale. calibrate.py fits one scale (`conv_scale`) to the kernel sweep's bf16 NCHW
convs. The `conv_layout` group of the sweep (bench/kernels/measure.py: ResNet-50 and SD-UNet
conv shapes, bf16 and fp32 with tf32, channels_last and contiguous, forward and backward)
shows that one scale does not fit all: NHWC is cuDNN's native layout, NCHW pays transposes,
and the backward (data + weight gradients) runs at its own efficiency. This fits one scale
per "<precision>.<layout>.<fwd|bwd>" to those sweep rows (the calibration grid, not any
benchmark) and stores them in the calibration file's `gemm.conv_scales`, leaving every other
constant as it is. A full refit with calibrate.py drops them: run this again after one.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from phantom.cost.calibrate import fit, quality, sq_log_err
from phantom.cost.calibration import read_calibration, write_calibration
from phantom.cost.roofline import conv_channel_padding, gemm_time_ns
from phantom.hardware import get_gpu

PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp32": "tf32"}  # the sweep's fp32 convs run with tf32


def group_key(row: dict) -> str | None:
    p = row["params"]
    if row.get("class") != "conv" or "layout" not in p or row["dtype"] not in PRECISION:
        return None
    return f"{PRECISION[row['dtype']]}.{p['layout']}.{'bwd' if p['bwd'] else 'fwd'}"


def predict_ns(cal, gpu, row: dict, scale: float) -> float:
    p = row["params"]
    prec = PRECISION[row["dtype"]]
    m = p["N"] * p["Ho"] * p["Ho"]
    pad = conv_channel_padding(p["C"], 2 if row["dtype"] != "fp32" else 4)
    return gemm_time_ns(cal.gemm, prec, gpu, 1, m, p["K"], p["C"] * p["R"] ** 2 * pad, row["flops"] * pad,
                        row["bytes"], scale, correct=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", type=Path, help="sweep rows (measure.py format) with the conv_layout group")
    ap.add_argument("--calibration", type=Path, help="calibration file to update (default: the rows' GPU's)")
    args = ap.parse_args(argv)
    data = json.loads(args.rows.read_text())
    gpu = get_gpu(data["meta"]["gpu"])
    path = args.calibration or Path(__file__).with_name("data") / f"{gpu.name}.json"
    cal = read_calibration(path)
    groups: dict[str, list[dict]] = {}
    for r in data["rows"]:
        k = group_key(r)
        if k is not None:
            groups.setdefault(k, []).append(r)
    if not groups:
        raise SystemExit(f"{args.rows}: no conv rows with a layout (run phantom profile --sweep "
                         f"--sweep-groups conv_layout on the GPU first)")
    scales: dict[str, float] = {}
    for k, rows in sorted(groups.items()):
        params, _ = fit(("conv_scale",), {"conv_scale": cal.gemm.conv_scale},
                        lambda p, rows=rows: sum(sq_log_err(predict_ns(cal, gpu, r, p["conv_scale"]), r["median_us"])
                                                 for r in rows) / len(rows))
        scales[k] = round(params["conv_scale"], 4)
        q = quality([(predict_ns(cal, gpu, r, scales[k]), r["median_us"]) for r in rows])
        cal.fit[f"conv.{k}"] = q
        print(f"  conv.{k:<28} scale {scales[k]:.4f}  {q}")
    gemm = cal.gemm.__class__(**{**cal.gemm.__dict__, "conv_scales": scales})
    cal.notes["gemm.conv_scales"] = (f"one scale per precision.layout.direction fitted to the conv_layout sweep group "
                                     f"({args.rows.name}, {data['meta'].get('date', '')[:10]}); calibrate_conv.py")
    from dataclasses import replace
    write_calibration(replace(cal, gemm=gemm), path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
