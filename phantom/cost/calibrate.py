"""Fit the roofline's efficiency curves to kernel times measured by bench/kernels/measure.py.

    python -m phantom.cost.calibrate bench/kernels/results/kernels_H100.json \
        [--gemm-rows bench/profile/results/kernels_H100.json] [--out phantom/cost/data/H100.json]

Each group is fitted to the physics-shaped curve the estimator evaluates (the same `*_time_ns`
functions from roofline.py), minimising the squared log error of the predicted time, so every
row weighs by its relative error whatever its size. Parameters are bounded to physical ranges and
searched with Nelder-Mead (pure Python: this runs anywhere phantom runs). Groups:
  gemm       bf16 rows fit all shape parameters of the analytic curve (tile shape chosen over a
             small grid; separate wave exponents for an under-filled single wave and for the
             tail of several); other precisions refit eff_max (and k_half with enough rows);
             convs fit conv_scale. Then every row's residual ln(measured / curve) is stored
             and interpolated in log2(batch*M, N, K) space at estimate time (GemmResiduals),
             with the kernel width chosen by leave-one-shape-out cross-validation; `fit`
             reports that cross-validated error ("gemm.bf16.cross_validated") next to the
             curve's own and the in-sample one.
  attention  per backend (flash, cudnn, efficient) and direction: eff_max, s_half, d_half,
             wave_gamma, floor.
  memory     one MemCurve per class, and one per op key ("class:key") measured at >= 2 sizes
             (bandwidth only) or >= 4 sizes (floor and saturation too). Keys split regimes the
             estimator can see: "copy:permute" (transposing copies), "copy:_to_copy.widen/.narrow"
             (casts), "reduction:sum.outer" (column reductions such as bias gradients).
  optimizer  multi-tensor-apply ops: launches and blocks per launch from the packing rule; floor
             per launch, bandwidth and blocks-to-saturate fitted; ".bf16" keys for bf16 lists.
  transfer   per direction and pinned/pageable: floor + bytes / bandwidth.
Constants with no rows (e.g. fp16 when unmeasured) are carried from the closest measured group
and say so in `notes`.
"""
from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from phantom.cost.calibration import (
    GEMM_PRECISIONS,
    AttnCurve,
    Calibration,
    GemmCal,
    GemmCurve,
    GemmResiduals,
    MemCurve,
    TransferCal,
    calibration_path,
    seed_calibration,
    write_calibration,
)
from phantom.cost.roofline import (
    attention_time_ns,
    attention_work,
    byte_alignment,
    conv_channel_padding,
    gemm_point,
    gemm_residual,
    gemm_time_ns,
    mem_time_ns,
    mta_launch_plan,
    mta_time_ns,
    transfer_time_ns,
)
from phantom.hardware.gpus import GPUSpec, get_gpu

Row = dict[str, Any]

# (low, high, log-scale) bounds of every fitted parameter.
BOUNDS: dict[str, tuple[float, float, bool]] = {
    "floor_us": (0.5, 50.0, True),
    "mem_eff": (0.2, 1.0, False),
    "eff_max": (0.05, 1.0, False),
    "k_half": (1.0, 16384.0, True),
    "wave_gamma": (0.0, 1.0, False),
    "split_k_min": (64.0, 16384.0, True),
    "s_half": (1.0, 16384.0, True),
    "d_half": (0.1, 1024.0, True),
    "bw_eff": (0.02, 1.0, False),
    "b_sat": (1e3, 1e9, True),
    "sat_blocks": (4.0, 4096.0, True),
    "h2d_pinned_gbps": (0.5, 500.0, True),
    "h2d_pageable_gbps": (0.5, 500.0, True),
    "d2h_pinned_gbps": (0.5, 500.0, True),
    "d2h_pageable_gbps": (0.5, 500.0, True),
    "conv_scale": (0.05, 2.0, True),
    "grouped_tflops": (0.05, 500.0, True),
    "bn_floor_us": (0.5, 50.0, True),
    "bn_gelems_per_s": (5.0, 2000.0, True),
    "bn_c_sat": (1.0, 8192.0, True),
    "grouped_alpha": (0.0, 2.0, False),
    "grouped_mem_eff": (0.02, 1.0, False),
    "unaligned_scale": (0.02, 1.0, True),
    "misaligned_scale": (0.02, 1.0, True),
    "misaligned_k_half": (1.0, 16384.0, True),
    "misaligned_wave_gamma": (0.0, 1.0, False),
    "fill_gamma": (0.0, 1.0, False),
}
TILES = (64, 128, 256)
MIN_ROWS_PER_OP = 2  # an op measured at this many sizes gets its own bandwidth
MIN_ROWS_FULL_FIT = 4  # ... and its own floor and saturation scale from this many


# --------------------------------------------------------------------------------------
# Optimiser
# --------------------------------------------------------------------------------------
def _to_param(name: str, z: float) -> float:
    lo, hi, log = BOUNDS[name]
    s = 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))
    return math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * s) if log else lo + (hi - lo) * s


def _to_z(name: str, p: float) -> float:
    lo, hi, log = BOUNDS[name]
    s = (math.log(p) - math.log(lo)) / (math.log(hi) - math.log(lo)) if log else (p - lo) / (hi - lo)
    s = min(max(s, 1e-6), 1 - 1e-6)
    return math.log(s / (1 - s))


def nelder_mead(f: Callable[[list[float]], float], x0: Sequence[float], step: float = 0.7,
                iters: int = 1500, tol: float = 1e-12) -> tuple[list[float], float]:
    n = len(x0)
    pts = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=vals.__getitem__)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < tol:
            break
        c = [sum(p[i] for p in pts[:-1]) / n for i in range(n)]
        w = pts[-1]
        xr = [ci + (ci - wi) for ci, wi in zip(c, w)]
        fr = f(xr)
        if fr < vals[0]:
            xe = [ci + 2.0 * (ci - wi) for ci, wi in zip(c, w)]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = [ci + 0.5 * (wi - ci) for ci, wi in zip(c, w)]
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:  # shrink towards the best point
                best = pts[0]
                pts = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, p)] for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    i = min(range(n + 1), key=vals.__getitem__)
    return pts[i], vals[i]


def fit(names: Sequence[str], start: dict[str, float], loss: Callable[[dict[str, float]], float],
        restarts: int = 3) -> tuple[dict[str, float], float]:
    """Minimise loss over the named parameters within BOUNDS, from `start`."""
    def f(z: list[float]) -> float:
        return loss({n: _to_param(n, zi) for n, zi in zip(names, z)})

    z = [_to_z(n, start[n]) for n in names]
    best = math.inf
    for _ in range(restarts):
        z, val = nelder_mead(f, z)
        if best - val < 1e-9:
            break
        best = val
    return {n: _to_param(n, zi) for n, zi in zip(names, z)}, f(z)


def rows_by_key(rows: Sequence[dict], key: Callable[[dict], str | None]) -> dict[str, list[dict]]:
    """Sweep rows grouped by `key(row)`, in key order; rows whose key is None are left out."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        k = key(r)
        if k is not None:
            groups.setdefault(k, []).append(r)
    return dict(sorted(groups.items()))


def sq_log_err(pred_ns: float, meas_us: float) -> float:
    return (math.log(max(pred_ns, 1e-3) / (meas_us * 1e3))) ** 2


def quality(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """Fit quality over (predicted ns, measured us) pairs: relative errors of predicted time."""
    errs = sorted(abs(p / (m * 1e3) - 1.0) for p, m in pairs)
    if not errs:
        return {"n": 0}
    return {"n": len(errs), "median_abs_rel_err": round(statistics.median(errs), 4),
            "p90_abs_rel_err": round(errs[min(len(errs) - 1, int(0.9 * len(errs)))], 4),
            "max_abs_rel_err": round(errs[-1], 4)}


# --------------------------------------------------------------------------------------
# GEMM
# --------------------------------------------------------------------------------------
def _gemm_rows(rows: list[Row], prec: str) -> list[Row]:
    return [r for r in rows if r["class"] == "gemm" and r["dtype"] == prec]


ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4, "fp8": 1, "fp8_rowwise": 1}


def _gemm_alignment(prec: str, p: dict[str, Any]) -> int:
    """Byte alignment of the worse leading dimension of x[M,K] @ W[N,K]^T -> [M,N] (or bmm's
    [B,K,N]): K and N."""
    esz = ELEMENT_BYTES.get(prec, 2)
    return min(byte_alignment(p["K"] * esz), byte_alignment(p["N"] * esz))


def _gemm_pred(cal: GemmCal, prec: str, gpu: GPUSpec, r: Row, eff_scale: float = 1.0, correct: bool = False) -> float:
    p = r["params"]
    return gemm_time_ns(cal, prec, gpu, p.get("batch", 1), p["M"], p["N"], p["K"], r["flops"], r["bytes"], eff_scale,
                        align_bytes=_gemm_alignment(prec, p), correct=correct)


GEMM_SHAPE_PARAMS = ("eff_max", "k_half", "wave_gamma", "fill_gamma", "split_k_min", "floor_us", "mem_eff",
                     "unaligned_scale")
# (wave_gamma, fill_gamma) starts: the two exponents, the floor and split_k_min trade off against
# each other, and Nelder-Mead stops in the nearest valley.
GAMMA_STARTS = ((0.1, 0.5), (0.5, 0.5), (0.8, 0.8))
# Residual interpolation: kernel widths (log2 units) and prior weights tried by cross-validation.
RESIDUAL_H = (0.5, 0.75, 1.0, 1.5)
RESIDUAL_W0 = (0.03, 0.1, 0.3, 1.0)


def fit_gemm(rows: list[Row], gpu: GPUSpec, seed: GemmCal, notes: dict[str, str],
             quality_out: dict[str, Any]) -> GemmCal:
    bf16 = _gemm_rows(rows, "bf16")
    if not bf16:
        notes["gemm"] = "no bf16 GEMM rows: seed kept"
        return seed
    base = seed.curves["bf16"]
    # 4- and 8-byte aligned shapes get their own factor only where the sweep measured some.
    names = GEMM_SHAPE_PARAMS
    if any(4 <= _gemm_alignment("bf16", r["params"]) < 16 for r in bf16):
        names += ("misaligned_scale", "misaligned_k_half", "misaligned_wave_gamma")
    else:
        notes["gemm.misaligned_scale"] = "no 4/8-byte aligned rows: unaligned_scale for every misalignment"
    best: tuple[float, GemmCal] | None = None
    for tm in TILES:
        for tn in TILES:
            def make(p: dict[str, float], tm: int = tm, tn: int = tn) -> GemmCal:
                curve = GemmCurve(p["eff_max"], p["k_half"], tm, tn, p["wave_gamma"], p["split_k_min"],
                                  p["unaligned_scale"], p["fill_gamma"], p.get("misaligned_scale"),
                                  p.get("misaligned_k_half"), p.get("misaligned_wave_gamma"))
                return GemmCal(p["floor_us"], p["mem_eff"], seed.conv_scale, {"bf16": curve})

            def loss(p: dict[str, float], make: Callable = make) -> float:
                cal = make(p)
                return sum(sq_log_err(_gemm_pred(cal, "bf16", gpu, r), r["median_us"]) for r in bf16) / len(bf16)

            for wave, fill in GAMMA_STARTS:
                start = {"eff_max": base.eff_max, "k_half": base.k_half, "wave_gamma": wave, "fill_gamma": fill,
                         "split_k_min": base.split_k_min, "floor_us": seed.floor_us, "mem_eff": seed.mem_eff,
                         "unaligned_scale": base.unaligned_scale,
                         "misaligned_scale": base.misaligned_scale or 0.3,
                         "misaligned_k_half": base.misaligned_k_half or base.k_half,
                         "misaligned_wave_gamma": 0.5}
                params, val = fit(names, start, loss)
                if best is None or val < best[0]:
                    best = (val, make(params))
    assert best is not None
    cal = best[1]
    curves = {"bf16": cal.curves["bf16"]}
    quality_out["gemm.bf16.curve"] = quality([(_gemm_pred(cal, "bf16", gpu, r), r["median_us"]) for r in bf16])
    for prec in ("fp16", "tf32", "fp32", "fp8", "fp8_rowwise"):
        prows = _gemm_rows(rows, prec)
        if not prows:
            like = "fp8" if prec == "fp8_rowwise" else "bf16"
            curves[prec] = curves[like]
            notes[f"gemm.{prec}"] = f"unmeasured: {like} curve (same fraction of this precision's peak)"
            continue
        names = ("eff_max", "k_half") if len(prows) >= 5 else ("eff_max",)

        def loss_p(p: dict[str, float], prec: str = prec, prows: list[Row] = prows) -> float:
            c = replace(curves["bf16"], **p)
            trial = replace(cal, curves={prec: c})
            return sum(sq_log_err(_gemm_pred(trial, prec, gpu, r), r["median_us"]) for r in prows) / len(prows)

        params, _ = fit(names, {"eff_max": curves["bf16"].eff_max, "k_half": curves["bf16"].k_half}, loss_p)
        curves[prec] = replace(curves["bf16"], **params)
    cal = replace(cal, curves=curves)
    cal = replace(cal, residuals=fit_gemm_residuals(rows, gpu, cal, notes, quality_out))
    for prec in GEMM_PRECISIONS:
        prows = _gemm_rows(rows, prec)
        if prows:
            quality_out[f"gemm.{prec}"] = quality([(_gemm_pred(cal, prec, gpu, r, correct=True), r["median_us"])
                                                   for r in prows])
    return replace(cal, conv_scale=fit_conv_scale(rows, gpu, cal, notes, quality_out))


def _residual_points(rows: list[Row], prec: str, gpu: GPUSpec, cal: GemmCal) -> dict[bool, list[tuple]]:
    """(log2(batch*M), log2 N, log2 K, ln(measured / curve)) of each row, by alignment; rows
    measured more than once (two sweeps) are averaged in log space."""
    acc: dict[tuple, list[float]] = {}
    for r in rows:
        p = r["params"]
        at = gemm_point(p.get("batch", 1), p["M"], p["N"], p["K"])
        res = math.log(r["median_us"] * 1e3 / _gemm_pred(cal, prec, gpu, r))
        acc.setdefault((_gemm_alignment(prec, p) >= 16, *at), []).append(res)
    out: dict[bool, list[tuple]] = {True: [], False: []}
    for (aligned, *at), rs in sorted(acc.items()):
        out[aligned].append((*(round(v, 4) for v in at), round(sum(rs) / len(rs), 4)))
    return out


def fit_gemm_residuals(rows: list[Row], gpu: GPUSpec, cal: GemmCal, notes: dict[str, str],
                       quality_out: dict[str, Any]) -> dict[str, GemmResiduals]:
    """Residual tables per precision; kernel width and prior weight by leave-one-shape-out
    cross-validation on the bf16 rows (every row predicted from the other shapes only)."""
    bf16 = _gemm_rows(rows, "bf16")
    points = {prec: _residual_points(_gemm_rows(rows, prec), prec, gpu, cal) for prec in GEMM_PRECISIONS
              if _gemm_rows(rows, prec)}

    def cv_errors(h: float, w0: float) -> list[float]:
        res = {prec: GemmResiduals(h, w0, tuple(pts[True]), tuple(pts[False])) for prec, pts in points.items()}
        trial = replace(cal, residuals=res)
        errs = []
        for r in bf16:
            p = r["params"]
            at = gemm_point(p.get("batch", 1), p["M"], p["N"], p["K"])
            corr = gemm_residual(res["bf16"], p.get("batch", 1), p["M"], p["N"], p["K"],
                                 _gemm_alignment("bf16", p), skip=tuple(round(v, 4) for v in at))
            errs.append(abs(_gemm_pred(trial, "bf16", gpu, r) * corr / (r["median_us"] * 1e3) - 1.0))
        return errs

    h, w0 = min(((h, w0) for h in RESIDUAL_H for w0 in RESIDUAL_W0),
                key=lambda hw: statistics.mean(cv_errors(*hw)))
    errs = sorted(cv_errors(h, w0))
    quality_out["gemm.bf16.cross_validated"] = {
        "n": len(errs), "median_abs_rel_err": round(statistics.median(errs), 4),
        "p90_abs_rel_err": round(errs[min(len(errs) - 1, int(0.9 * len(errs)))], 4),
        "max_abs_rel_err": round(errs[-1], 4), "h": h, "w0": w0,
        "curve_only_median_abs_rel_err": quality_out.get("gemm.bf16.curve", {}).get("median_abs_rel_err")}
    notes["gemm.residuals"] = (f"ln(measured/curve) of every sweep row, interpolated in log2(batch*M, N, K) with a "
                               f"Gaussian of width h={h} and prior weight w0={w0} on no correction (chosen by "
                               f"leave-one-shape-out cross-validation on the bf16 rows)")
    return {prec: GemmResiduals(h, w0, tuple(pts[True]), tuple(pts[False])) for prec, pts in points.items()}


def fit_conv_scale(rows: list[Row], gpu: GPUSpec, cal: GemmCal, notes: dict[str, str],
                   quality_out: dict[str, Any]) -> float:
    convs = [r for r in rows if r["class"] == "conv" and r["dtype"] == "bf16"]
    if not convs:
        notes["gemm.conv_scale"] = "no conv rows: seed kept"
        return cal.conv_scale

    def pred(r: Row, scale: float) -> float:
        p = r["params"]
        m = p["N"] * p["Ho"] * p["Ho"]
        pad = conv_channel_padding(p["C"], 2)
        return gemm_time_ns(cal, "bf16", gpu, 1, m, p["K"], p["C"] * p["R"] ** 2 * pad, r["flops"] * pad, r["bytes"],
                            scale, correct=False)

    params, _ = fit(("conv_scale",), {"conv_scale": cal.conv_scale},
                    lambda p: sum(sq_log_err(pred(r, p["conv_scale"]), r["median_us"]) for r in convs) / len(convs))
    quality_out["conv"] = quality([(pred(r, params["conv_scale"]), r["median_us"]) for r in convs])
    return params["conv_scale"]


# --------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------
def _attn_pred(curve: AttnCurve, gpu: GPUSpec, r: Row) -> float:
    p = r["params"]
    _, work = attention_work(p["B"], p["Hq"], p["Sq"], p["Sk"], p["D"], p["D"], p["causal"], p["bwd"])
    return attention_time_ns(curve, gpu, r["dtype"], p["B"], p["Hq"], p["Sq"], p["Sk"], p["D"], p["causal"],
                             p["bwd"], work, r["bytes"])


def fit_attention(rows: list[Row], gpu: GPUSpec, seed: AttnCurve, backend: str, bwd: bool, mem_eff: float,
                  quality_out: dict[str, Any]) -> AttnCurve | None:
    arows = [r for r in rows if r["class"] == "attention" and bool(r["params"].get("bwd")) == bwd
             and r["params"].get("backend", "flash") == backend]
    if not arows:
        return None
    names = ("eff_max", "s_half", "d_half", "wave_gamma", "floor_us")
    start = {n: getattr(seed, n) for n in names}

    def loss(p: dict[str, float]) -> float:
        c = replace(seed, mem_eff=mem_eff, **p)
        return sum(sq_log_err(_attn_pred(c, gpu, r), r["median_us"]) for r in arows) / len(arows)

    params, _ = fit(names, start, loss)
    curve = replace(seed, mem_eff=mem_eff, **params)
    quality_out[f"attention.{backend}.{'bwd' if bwd else 'fwd'}"] = quality(
        [(_attn_pred(curve, gpu, r), r["median_us"]) for r in arows])
    return curve


# --------------------------------------------------------------------------------------
# Memory-bound classes and multi-tensor apply
# --------------------------------------------------------------------------------------
MEM_CLASSES = ("elementwise", "reduction", "norm", "softmax", "loss", "embedding", "copy", "random", "other")


# Keys whose rows are a different regime from their class (own curve only, not in the class fit).
SEPARATE_REGIMES = frozenset({"permute"})


def _mem_key(r: Row) -> str:
    """The curve key the estimator will look up for this row (see roofline._copy_key)."""
    p = r["params"]
    if r["class"] == "copy" and p.get("transposed"):
        return "permute"
    out_dtype = p.get("out_dtype")
    if r["class"] == "copy" and out_dtype and out_dtype != r["dtype"]:
        wider = ELEMENT_BYTES.get(out_dtype, 2) > ELEMENT_BYTES.get(r["dtype"], 2)
        return f"{r['op']}.{'widen' if wider else 'narrow'}"
    if r["class"] == "reduction" and p.get("dim") == 0 and p.get("cols", 1) > 1:
        return f"{r['op']}.outer"
    if r["class"] == "optimizer" and r["dtype"] != "fp32":
        return f"{r['op']}.{r['dtype']}"
    return r["op"]


def _plan(r: Row) -> list[tuple[int, int]]:
    p = r["params"]
    numels = p.get("tensor_numels") or [p["numel"] // max(1, p.get("n_tensors", 1))] * p.get("n_tensors", 1)
    plan = mta_launch_plan(numels, p.get("depth", 1))
    return plan + ([(1, 0)] if r["op"] in ("_foreach_norm", "_foreach_max") else [])


def mem_pred(c: MemCurve, gpu: GPUSpec, r: Row, mta: bool) -> float:
    return mta_time_ns(c, gpu, r["bytes"], _plan(r)) if mta else mem_time_ns(c, gpu, r["bytes"])


def fit_mem_curve(rs: list[Row], gpu: GPUSpec, start: MemCurve, mta: bool, only_bw: bool = False) -> MemCurve:
    """Fit floor, bandwidth and saturation scale; with only_bw, just the bandwidth (few rows)."""
    names = ("bw_eff",) if only_bw else ("floor_us", "bw_eff", "sat_blocks") if mta else ("floor_us", "bw_eff", "b_sat")
    base = {"floor_us": start.floor_us, "bw_eff": start.bw_eff, "b_sat": start.b_sat,
            "sat_blocks": start.sat_blocks or float(gpu.sm_count)}

    def loss(p: dict[str, float]) -> float:
        c = MemCurve(**{**base, **p})
        return sum(sq_log_err(mem_pred(c, gpu, r, mta), r["median_us"]) for r in rs) / len(rs)

    params, _ = fit(names, base, loss)
    curve = MemCurve(**{**base, **params})
    return curve if mta else replace(curve, sat_blocks=0.0)


def fit_memory(rows: list[Row], gpu: GPUSpec, seed: MemCurve, notes: dict[str, str],
               quality_out: dict[str, Any]) -> dict[str, MemCurve]:
    curves: dict[str, MemCurve] = {}
    pairs: dict[str, list[tuple[float, float]]] = {}
    groups: list[tuple[str, str, bool]] = [(c, c, False) for c in MEM_CLASSES] + [("optimizer", "optimizer", True)]
    for cls, key, mta in groups:
        rs = [r for r in rows if r["class"] == cls]
        if not rs:
            continue
        typical = [r for r in rs if _mem_key(r) not in SEPARATE_REGIMES] or rs
        curves[key] = fit_mem_curve(typical, gpu, seed, mta)
        by_op: dict[str, list[Row]] = {}
        for r in rs:
            by_op.setdefault(_mem_key(r), []).append(r)
        for op, ors in by_op.items():
            sizes = {r["bytes"] for r in ors}
            curve = curves[key]
            if len(sizes) >= MIN_ROWS_PER_OP:  # few sizes: only the bandwidth is the op's own
                curve = curves[f"{cls}:{op}"] = fit_mem_curve(ors, gpu, curves[key], mta,
                                                              only_bw=len(sizes) < MIN_ROWS_FULL_FIT)
            for r in ors:
                pairs.setdefault(cls, []).append((mem_pred(curve, gpu, r, mta), r["median_us"]))
    for cls, ps in pairs.items():
        quality_out[f"memory.{cls}"] = quality(ps)
    for cls in MEM_CLASSES + ("optimizer",):
        if cls not in curves:
            curves[cls] = curves.get("elementwise", seed)
            notes[f"memory.{cls}"] = "unmeasured: elementwise curve"
    return curves


# --------------------------------------------------------------------------------------
# Transfers
# --------------------------------------------------------------------------------------
def _transfer_pred(cal: TransferCal, r: Row) -> float:
    return transfer_time_ns(cal, r["bytes"], r["op"] == "h2d", bool(r["params"].get("pinned")))


def fit_transfer(rows: list[Row], seed: TransferCal, quality_out: dict[str, Any]) -> TransferCal:
    """One floor and four bandwidths (direction x pinned/pageable), in log error like the rest."""
    trows = [r for r in rows if r["class"] == "transfer"]
    if not trows:
        return seed
    names = [n for n in ("h2d_pinned_gbps", "h2d_pageable_gbps", "d2h_pinned_gbps", "d2h_pageable_gbps")
             if any(r["op"] == n[:3] and bool(r["params"].get("pinned")) == ("_pinned" in n) for r in trows)]

    def loss(p: dict[str, float]) -> float:
        cal = replace(seed, **p)
        return sum(sq_log_err(_transfer_pred(cal, r), r["median_us"]) for r in trows) / len(trows)

    params, _ = fit(["floor_us", *names], {"floor_us": seed.floor_us, **{n: getattr(seed, n) for n in names}}, loss)
    cal = replace(seed, **params)
    quality_out["transfer"] = quality([(_transfer_pred(cal, r), r["median_us"]) for r in trows])
    return cal


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------
def calibrate(measured: dict[str, Any], gpu: GPUSpec | None = None,
              gemm_extra: list[dict[str, Any]] | None = None) -> Calibration:
    """Fit every group to the rows of `measured`; the GEMM group also to the GEMM rows of
    `gemm_extra` (the same grid timed again, e.g. by phantom profile --sweep: a shape timed twice
    weighs twice and its residual is the mean of both)."""
    meta, rows = measured["meta"], measured["rows"]
    extra = gemm_extra or []
    gpus = {str(m["meta"].get("gpu")) for m in [measured, *extra]}
    if len(gpus) > 1:
        raise ValueError(f"measured files of different GPUs: {sorted(gpus)}")
    gpu = gpu or get_gpu(meta["gpu"])
    gemm_rows = rows + [r for m in extra for r in m["rows"] if r["class"] == "gemm"]
    seed = seed_calibration()
    notes: dict[str, str] = {}
    q: dict[str, Any] = {}
    gemm = fit_gemm(gemm_rows, gpu, seed.gemm, notes, q)
    attention = dict(seed.attention)
    for backend in ("flash", "cudnn", "efficient"):
        for bwd in (False, True):
            start = seed.attn_curve("flash", bwd)
            curve = fit_attention(rows, gpu, start, backend, bwd, gemm.mem_eff, q)
            if curve is not None:
                attention[f"{backend}.{'bwd' if bwd else 'fwd'}"] = curve
    memory = fit_memory(rows, gpu, seed.memory["copy"], notes, q)
    transfer = fit_transfer(rows, seed.transfer, q)
    source = (f"bench/kernels/measure.py on {meta['device_name']} (driver {meta['driver']}, torch {meta['torch']}, "
              f"CUDA {meta['cuda']}, {meta['date']}), {len(rows)} rows; fitted by phantom.cost.calibrate")
    if extra:
        source += "; GEMM also on " + " and ".join(
            f"{sum(r['class'] == 'gemm' for r in m['rows'])} GEMM rows of {_timer(m['meta'])} ({m['meta'].get('date')})"
            for m in extra)
    notes.setdefault("all", "fitted to the measured rows (squared log error); see fit for residuals")
    return Calibration(gpu=gpu.name, origin="measured", source=source, gemm=gemm, attention=attention,
                       memory=memory, transfer=transfer, notes=notes, fit=q)


def _timer(meta: dict[str, Any]) -> str:
    return "phantom profile --sweep" if "phantom profile" in str(meta.get("method", "")) else "measure.py"


def _round(cal: Calibration) -> Calibration:
    """Round constants to 4 significant digits so the JSON stays readable and diffs stay small."""
    def r(x: float) -> float:
        return float(f"{x:.4g}")

    def rc(obj: Any) -> Any:
        return replace(obj, **{k: r(v) for k, v in obj.__dict__.items() if isinstance(v, float)})

    gemm = replace(rc(cal.gemm), curves={k: rc(v) for k, v in cal.gemm.curves.items()})
    return replace(cal, gemm=gemm, attention={k: rc(v) for k, v in cal.attention.items()},
                   memory={k: rc(v) for k, v in cal.memory.items()}, transfer=rc(cal.transfer))


def main(argv: list[str] | None = None) -> int:
    import json

    ap = argparse.ArgumentParser(description="fit phantom's roofline calibration to measured kernel times")
    ap.add_argument("measured", type=Path, help="JSON written by bench/kernels/measure.py")
    ap.add_argument("--gemm-rows", type=Path, action="append", default=[], metavar="JSON",
                    help="more GEMM rows of the same GPU to fit the GEMM group on too, e.g. the grid timed by "
                         "phantom profile --sweep (bench/profile/results/kernels_<GPU>.json); repeatable")
    ap.add_argument("--gpu", default=None, help="GPU preset name (default: from the file's meta)")
    ap.add_argument("--out", type=Path, default=None, help="default phantom/cost/data/<GPU>.json")
    args = ap.parse_args(argv)
    measured = json.loads(args.measured.read_text())
    extra = [json.loads(p.read_text()) for p in args.gemm_rows]
    gpu = get_gpu(args.gpu) if args.gpu else None
    cal = _round(calibrate(measured, gpu, extra))
    out = args.out or calibration_path(cal.gpu)
    write_calibration(cal, out)
    print(f"wrote {out}")
    for group, qual in cal.fit.items():
        print(f"  {group:<22} " + " ".join(f"{k}={v}" for k, v in qual.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
