"""The fallback model (no database) on the issue-10 sweep groups, against their H200 timings.

    python bench/nonllm_fallback.py --real bench/profile/results/sweep_nonllm_H200.json \\
        --out bench/data/sim_nonllm_fallback_h200.md

The rows were timed on a real H200 by `phantom profile --sweep --sweep-groups
conv_layout,spatial,graph` (bench/kernels/measure.py's cases: convolutions over layouts and
dtypes, batch/group norm, pooling, upsampling, gather/scatter/segment ops). Here the same
cases run under `phantom run --no-db --gpu H200`, each timed by CUDA events as a user would,
so every time comes from the fallback (roofline) model. These rows are now also exact
database hits; this table says how the fallback does on such ops where a database misses.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GROUPS = ("conv_layout_cases", "spatial_cases", "graph_cases")


def _measure():
    spec = importlib.util.spec_from_file_location("phantom_measure_grid", REPO / "bench" / "kernels" / "measure.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _key(op, shapes, dtype, params) -> str:
    return json.dumps([op, shapes, dtype, params], sort_keys=True)


def predict(out: str) -> int:
    """Runs under `phantom run`: every case once, timed by CUDA events (simulated)."""
    import torch

    m = _measure()
    rows = {}
    busy = torch.empty(16384, 16384, device="cuda", dtype=torch.bfloat16)
    for group in GROUPS:
        for case in getattr(m, group)():
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(case.extra.get("tf32"))
            try:
                b = case.make()
                case.fn(b)  # once untimed, as the real timer warms up
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                # A long GEMM first keeps the stream busy while the host enqueues the case, so
                # the events time the case's kernels alone (the real timer replays a CUDA graph).
                torch.mm(busy, busy)
                s.record()
                case.fn(b)
                e.record()
                torch.cuda.synchronize()
                rows[_key(case.op, case.shapes, case.dtype, case.params)] = s.elapsed_time(e) * 1e3
            except Exception as exc:  # noqa: BLE001 (reported per case)
                rows[_key(case.op, case.shapes, case.dtype, case.params)] = f"{type(exc).__name__}: {str(exc)[:120]}"
    Path(out).write_text(json.dumps(rows))
    return 0


def compare(real_path: str, out: str) -> int:
    tmp = Path(out).with_suffix(".pred.json")
    cmd = [sys.executable, "-m", "phantom.cli", "run", "--quiet", "--no-db", "--gpu", "H200", __file__,
           "--predict", str(tmp)]
    if subprocess.call(cmd):
        return 1
    pred = json.loads(tmp.read_text())
    tmp.unlink()
    real = json.loads(Path(real_path).read_text())
    groups: dict[str, list[float]] = {}
    lines = []
    for r in real["rows"]:
        p = pred.get(_key(r["op"], r["shapes"], r["dtype"], r["params"]))
        label = r["op"]
        if r["op"].startswith("conv"):
            label = f"{r['op']} {r['dtype']} {r['params'].get('layout')}"
        elif "layout" in r["params"]:
            label = f"{r['op']} {r['params']['layout']}"
        if not isinstance(p, float):
            lines.append(f"| {label} | {r['shapes']} | {r['median_us']:.1f} | {p} | |")
            continue
        err = (p - r["median_us"]) / r["median_us"]
        groups.setdefault(label, []).append(err)
        lines.append(f"| {label} | {r['shapes']} | {r['median_us']:.1f} | {p:.1f} | {err * 100:+.0f}% |")
    summary = ["| op (dtype, layout) | cases | median abs error | worst |", "|---|---|---|---|"]
    for label, errs in sorted(groups.items()):
        a = sorted(abs(e) for e in errs)
        summary.append(f"| {label} | {len(errs)} | {100 * statistics.median(a):.0f}% | "
                       f"{100 * max(errs, key=abs):+.0f}% |")
    allerr = [abs(e) for errs in groups.values() for e in errs]
    meta = real.get("meta", {})
    text = [f"Fallback (no database) vs {meta.get('device_name', '?')} timings "
            f"({meta.get('date', '?')[:10]}, torch {meta.get('torch', '?')}): {len(allerr)} cases, "
            f"median |error| {100 * statistics.median(allerr):.0f}%.", "", *summary, "",
            "| case | shapes | real us | fallback us | error |", "|---|---|---|---|---|", *lines]
    Path(out).write_text("\n".join(text) + "\n")
    print("\n".join(text[:len(summary) + 3]))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real")
    ap.add_argument("--out")
    ap.add_argument("--predict", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.predict:
        return predict(a.predict)
    return compare(a.real, a.out)


if __name__ == "__main__":
    sys.exit(main())
