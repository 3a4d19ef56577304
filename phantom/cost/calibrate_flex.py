"""Fit FlexAttention's kernel curves (`flex.fwd`, `flex.bwd`) to a measured grid.

    python -m phantom.cost.calibrate_flex bench/kernels/results/flex_sweep_H200.json \\
        [--calibration phantom/cost/data/H200.json]

FlexAttention's generated Triton kernel is costed as flash attention over the blocks its mask
keeps (roofline.py `_flex_attention`), with an efficiency curve of the same form as the SDPA
backends' (calibration.AttnCurve). Its own curve, because the kernel is not FlashAttention-2:
on an H100 and an H200 (torch 2.11) it ran 15-30% faster forward than the flash curve
predicted at 4-8k tokens (bench/kernels/results/flex_sweep_H100.json, flex_sweep_H200.json). The rows are bench/kernels/flex_sweep.py's grid (dense and causal
masks at shapes the benchmark bench/probes/flex_attention.py does not use); the benchmark's other
masks check the block-sparse part. Every other constant of the calibration file stays as it
is; a full refit with calibrate.py drops these curves: run this again after one.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from phantom.cost.calibrate import fit_attention
from phantom.cost.calibration import read_calibration, write_calibration
from phantom.hardware import get_gpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", type=Path, help="bench/kernels/flex_sweep.py's output")
    ap.add_argument("--calibration", type=Path, help="calibration file to update (default: the rows' GPU's)")
    args = ap.parse_args(argv)
    data = json.loads(args.rows.read_text())
    rows = [r for r in data["rows"] if r["params"].get("backend") == "flex" and r["median_us"] > 0]
    if not rows:
        raise SystemExit(f"{args.rows}: no FlexAttention rows (bench/kernels/flex_sweep.py writes them)")
    gpu = get_gpu(data["meta"]["gpu"])
    path = args.calibration or Path(__file__).with_name("data") / f"{gpu.name}.json"
    cal = read_calibration(path)
    attention = dict(cal.attention)
    quality: dict = {}
    for bwd in (False, True):
        seed = cal.attn_curve("flash", bwd)
        curve = fit_attention(rows, gpu, seed, "flex", bwd, seed.mem_eff, quality)
        if curve is not None:
            attention[f"flex.{'bwd' if bwd else 'fwd'}"] = curve
    source = f"{args.rows.name}, {data['meta'].get('device_name', gpu.name)}, {data['meta'].get('date', '')[:10]}"
    notes = dict(cal.notes)
    notes["attention.flex"] = f"fitted to {len(rows)} rows ({source}); calibrate_flex.py"
    fit = dict(cal.fit or {})
    fit.update(quality)
    write_calibration(replace(cal, attention=attention, notes=notes, fit=fit), path)
    for key, q in quality.items():
        print(f"{key}: {q}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
