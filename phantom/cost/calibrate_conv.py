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

Grouped convolutions (the `conv_grouped` group: depthwise 3x3/5x5/7x7 and ResNeXt's 32 groups,
depthwise causal conv1d) are not implicit GEMMs at all; they get their own model per
"<precision>.<layout|conv1d>.<fwd|bwd>" (`gemm.grouped_conv`, GroupedConvCal):

    python -m phantom.cost.calibrate_conv bench/kernels/results/sweep_grouped_H100.json \
        --also phantom/cost/data/H200.json
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from phantom.cost.calibrate import fit, quality, rows_by_key, sq_log_err
from phantom.cost.calibration import GroupedConvCal, read_calibration, write_calibration
from phantom.cost.roofline import conv_channel_padding, gemm_time_ns, grouped_conv_time_ns
from phantom.hardware import get_gpu

PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp32": "tf32"}  # the sweep's fp32 convs run with tf32


def group_key(row: dict) -> str | None:
    """The dense-conv key of a sweep row ("<precision>.<layout>.<fwd|bwd>"), None for others."""
    p = row["params"]
    if row.get("class") != "conv" or "layout" not in p or row["dtype"] not in PRECISION or p.get("groups", 1) > 1:
        return None
    return f"{PRECISION[row['dtype']]}.{p['layout']}.{'bwd' if p['bwd'] else 'fwd'}"


def grouped_key(row: dict) -> str | None:
    """The grouped-conv key ("<precision>.<layout|conv1d>.<fwd|bwd>") of a conv_grouped row."""
    p = row["params"]
    if row.get("class") != "conv" or p.get("groups", 1) <= 1 or row["dtype"] not in PRECISION:
        return None
    layout = "conv1d" if p.get("dims") == 1 else p["layout"]
    return f"{PRECISION[row['dtype']]}.{layout}.{'bwd' if p['bwd'] else 'fwd'}"


def predict_ns(cal, gpu, row: dict, scale: float) -> float:
    p = row["params"]
    prec = PRECISION[row["dtype"]]
    m = p["N"] * p["Ho"] * p["Ho"]
    pad = conv_channel_padding(p["C"], 2 if row["dtype"] != "fp32" else 4)
    return gemm_time_ns(cal.gemm, prec, gpu, 1, m, p["K"], p["C"] * p["R"] ** 2 * pad, row["flops"] * pad,
                        row["bytes"], scale, correct=False)


def predict_grouped_ns(cal, gpu, row: dict, g: GroupedConvCal) -> float:
    p = row["params"]
    return grouped_conv_time_ns(g, gpu, row["flops"], row["bytes"], p["C"] // p["groups"], cal.gemm.floor_us)


def fit_dense(cal, gpu, rows: list[dict]) -> dict[str, float]:
    groups = rows_by_key(rows, group_key)
    scales: dict[str, float] = {}
    for k, rows in groups.items():
        params, _ = fit(("conv_scale",), {"conv_scale": cal.gemm.conv_scale},
                        lambda p, rows=rows: sum(sq_log_err(predict_ns(cal, gpu, r, p["conv_scale"]), r["median_us"])
                                                 for r in rows) / len(rows))
        scales[k] = round(params["conv_scale"], 4)
        q = quality([(predict_ns(cal, gpu, r, scales[k]), r["median_us"]) for r in rows])
        cal.fit[f"conv.{k}"] = q
        print(f"  conv.{k:<28} scale {scales[k]:.4f}  {q}")
    return scales


def fit_grouped(cal, gpu, rows: list[dict]) -> dict[str, GroupedConvCal]:
    groups = rows_by_key(rows, grouped_key)
    out: dict[str, GroupedConvCal] = {}
    names = ("grouped_tflops", "grouped_alpha", "grouped_mem_eff")
    for k, rows in groups.items():
        # a depthwise kernel's rate: ~10 TFLOP/s on CUDA cores; the alpha only matters where
        # the rows have several channels per group (conv1d rows have one: alpha stays put)
        start = {"grouped_tflops": 5.0, "grouped_alpha": 1.0, "grouped_mem_eff": 0.6}

        def loss(p, rows=rows):
            g = GroupedConvCal(p["grouped_tflops"], p["grouped_alpha"], p["grouped_mem_eff"])
            return sum(sq_log_err(predict_grouped_ns(cal, gpu, r, g), r["median_us"]) for r in rows) / len(rows)

        params, _ = fit(names, start, loss)
        g = GroupedConvCal(round(params["grouped_tflops"], 4), round(params["grouped_alpha"], 4),
                           round(params["grouped_mem_eff"], 4))
        out[k] = g
        q = quality([(predict_grouped_ns(cal, gpu, r, g), r["median_us"]) for r in rows])
        cal.fit[f"conv_grouped.{k}"] = q
        print(f"  conv_grouped.{k:<28} {g.tflops:7.3f} TFLOP/s x cin_g^{g.alpha:.3f}, mem_eff {g.mem_eff:.3f}  {q}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", type=Path, help="sweep rows (measure.py format) with the conv_layout or conv_grouped group")
    ap.add_argument("--calibration", type=Path, help="calibration file to update (default: the rows' GPU's)")
    ap.add_argument("--also", type=Path, action="append", default=[],
                    help="another calibration file to take the grouped-conv fit too (a GPU of the same "
                         "die and clocks: the H200 from the H100's rows; its own HBM bandwidth applies)")
    args = ap.parse_args(argv)
    data = json.loads(args.rows.read_text())
    gpu = get_gpu(data["meta"]["gpu"])
    path = args.calibration or Path(__file__).with_name("data") / f"{gpu.name}.json"
    cal = read_calibration(path)
    scales = fit_dense(cal, gpu, data["rows"])
    grouped = fit_grouped(cal, gpu, data["rows"])
    if not scales and not grouped:
        raise SystemExit(f"{args.rows}: no conv rows with a layout (run bench/kernels/measure.py --only "
                         f"conv_layout,conv_grouped on the GPU first)")
    source = f"({args.rows.name}, {data['meta'].get('device_name', gpu.name)}, {data['meta'].get('date', '')[:10]})"
    gemm = cal.gemm
    if scales:
        gemm = replace(gemm, conv_scales=scales)
        cal.notes["gemm.conv_scales"] = (f"one scale per precision.layout.direction fitted to the conv_layout "
                                         f"sweep group {source}; calibrate_conv.py")
    if grouped:
        gemm = replace(gemm, grouped_conv=grouped)
        cal.notes["gemm.grouped_conv"] = f"fitted to the conv_grouped sweep group {source}; calibrate_conv.py"
    write_calibration(replace(cal, gemm=gemm), path)
    print(f"wrote {path}")
    for other in args.also:
        if not grouped:
            break
        oc = read_calibration(other)
        oc.notes["gemm.grouped_conv"] = (f"the {gpu.name}'s fit (same die and clocks; this GPU's HBM bandwidth "
                                         f"applies), conv_grouped sweep group {source}; calibrate_conv.py")
        write_calibration(replace(oc, gemm=replace(oc.gemm, grouped_conv=grouped)), other)
        print(f"wrote {other}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
