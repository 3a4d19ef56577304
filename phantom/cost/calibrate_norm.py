"""Fit training-mode batch norm per layout and direction (BatchNormCal).

    python -m phantom.cost.calibrate_norm bench/kernels/results/sweep_bn_grouped_H100.json \\
        --also phantom/cost/data/H200.json
    python -m phantom.cost.calibrate_norm bench/kernels/results/sweep_cudnn_bn_H100.json \\
        --also phantom/cost/data/H200.json          # cuDNN's kernels (fp32, fp16 inputs)

The norm class's byte curve prices batch norm like a layer norm: bytes in and out at a
bandwidth. The `batch_norm` group of the kernel sweep (bench/kernels/measure.py: 17 ResNet, VGG
and UNet shapes, bf16 and fp32, NCHW and NHWC, forward and backward) shows otherwise: the time
follows the element count whatever the dtype, and in NCHW it depends on the channel count
(ATen's statistics kernel takes one channel per block). This fits one BatchNormCal per
"<layout>.<fwd|bwd>" to those sweep rows (the calibration grid, not a benchmark) and stores
them in the calibration file's `batch_norm`, leaving every other constant as it is. A full
refit with calibrate.py drops them: run this again after one.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from phantom.cost.calibrate import fit, quality, rows_by_key, sq_log_err
from phantom.cost.calibration import BatchNormCal, read_calibration, write_calibration
from phantom.cost.roofline import batch_norm_time_ns
from phantom.hardware import get_gpu

# where the fit starts (calibrate.BOUNDS holds the bounds)
START = {"bn_floor_us": 5.0, "bn_gelems_per_s": 150.0, "bn_c_sat": 128.0}


def key(row: dict) -> str | None:
    """The "<layout>.<fwd|bwd>" of an ATen batch-norm sweep row, "cudnn.<dtype>.<layout>.<fwd|bwd>"
    of a cuDNN one (whose rate depends on the dtype), None for other rows."""
    op = row.get("op", "")
    if op not in ("native_batch_norm", "native_batch_norm_backward", "cudnn_batch_norm",
                  "cudnn_batch_norm_backward"):
        return None
    k = f"{row['params']['layout']}.{'bwd' if op.endswith('backward') else 'fwd'}"
    return f"cudnn.{row['dtype']}.{k}" if op.startswith("cudnn") else k


def predict_ns(cal: BatchNormCal, row: dict) -> float:
    p = row["params"]
    return batch_norm_time_ns(cal, p["numel"], p["C"])


def fit_batch_norm(rows: list[dict]) -> tuple[dict[str, BatchNormCal], dict[str, dict]]:
    groups = rows_by_key(rows, key)
    out, qualities = {}, {}
    for k, rows in groups.items():
        def loss(p, rows=rows):
            cal = BatchNormCal(p["bn_floor_us"], p["bn_gelems_per_s"], p["bn_c_sat"])
            return sum(sq_log_err(predict_ns(cal, r), r["median_us"]) for r in rows) / len(rows)

        params, _ = fit(tuple(START), dict(START), loss)
        cal = BatchNormCal(round(params["bn_floor_us"], 3), round(params["bn_gelems_per_s"], 3),
                           round(params["bn_c_sat"], 2))
        out[k] = cal
        qualities[k] = quality([(predict_ns(cal, r), r["median_us"]) for r in rows])
        print(f"  batch_norm.{k:<22} floor {cal.floor_us:6.2f} us, {cal.gelems_per_s:7.1f} G elements/s, "
              f"full from {cal.c_sat:7.1f} channels  {qualities[k]}")
    return out, qualities


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", type=Path, help="sweep rows (measure.py format) with the batch_norm group")
    ap.add_argument("--calibration", type=Path, help="calibration file to update (default: the rows' GPU's)")
    ap.add_argument("--also", type=Path, action="append", default=[],
                    help="another calibration file to take the fit too (a GPU of the same die and clocks)")
    args = ap.parse_args(argv)
    data = json.loads(args.rows.read_text())
    gpu = get_gpu(data["meta"]["gpu"])
    fitted, qualities = fit_batch_norm(data["rows"])
    if not fitted:
        raise SystemExit(f"{args.rows}: no batch_norm rows (run bench/kernels/measure.py --only batch_norm "
                         f"on the GPU first)")
    source = f"{args.rows.name}, {data['meta'].get('device_name', gpu.name)}, {data['meta'].get('date', '')[:10]}"
    targets = [args.calibration or Path(__file__).with_name("data") / f"{gpu.name}.json", *args.also]
    for i, path in enumerate(targets):
        cal = read_calibration(path)
        cal.notes["batch_norm"] = (f"fitted to the batch_norm sweep group ({source}); calibrate_norm.py" if i == 0 else
                                   f"the {gpu.name}'s fit ({source}): same die and clocks; calibrate_norm.py")
        if i == 0:
            cal.fit.update({f"batch_norm.{k}": q for k, q in qualities.items()})
        # a sweep of one kind of kernel (ATen's or cuDNN's) keeps the other's fit
        write_calibration(replace(cal, batch_norm={**cal.batch_norm, **fitted}), path)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
