#!/usr/bin/env python3
"""Compare two `measure.py` results row by row: a real GPU's and phantom's.

`measure.py` runs unchanged under phantom (`phantom run --gpu H100 bench/kernels/measure.py
--only GROUP --out sim.json`): each case is captured in a CUDA graph and replayed, as on the
GPU, so the simulated rows are what the cost model charges those ops. Rows are matched by op,
shapes, dtype and params; `--pairs TAG_A TAG_B` also compares the difference between two
variants of each shape (e.g. the gemm_wide_c group's fp32-C GEMM over its plain GEMM).

    python bench/kernels/compare.py real.json sim.json [--pairs wgrad_bf16 wgrad_fp32_c]
"""
from __future__ import annotations

import argparse
import json
import statistics


def _rows(path: str) -> dict[tuple, float]:
    rows = json.load(open(path))["rows"]
    return {(r["op"], json.dumps(r["shapes"]), r["dtype"], json.dumps(r["params"], sort_keys=True)): r["median_us"]
            for r in rows}


def _mean_rows(paths: list[str]) -> dict[tuple, float]:
    """Rows of several runs of the same cases, their mean time."""
    runs = [_rows(p) for p in paths]
    return {k: statistics.mean(r[k] for r in runs) for k in runs[0] if all(k in r for r in runs)}


def row_errors(real: dict, sim: dict) -> list[tuple[tuple, float, float]]:
    return [(k, real[k], sim[k]) for k in real if k in sim]


def pair_errors(real: dict, sim: dict, tag_a: str, tag_b: str) -> list[tuple[dict, float, float]]:
    """(params, real extra us, phantom extra us) of variant b over variant a, per shape."""
    def by_shape(rows: dict, tag: str) -> dict:
        out = {}
        for (op, shapes, dtype, params), us in rows.items():
            p = json.loads(params)
            if p.get("tag") == tag:
                out[(p.get("M"), p.get("N"), p.get("K"), p.get("batch"))] = (p, us)
        return out
    ra, rb, sa, sb = by_shape(real, tag_a), by_shape(real, tag_b), by_shape(sim, tag_a), by_shape(sim, tag_b)
    return [(ra[s][0], rb[s][1] - ra[s][1], sb[s][1] - sa[s][1]) for s in ra if s in rb and s in sa and s in sb]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("real", nargs="+", help="measure.py JSON(s) from the GPU (several: their mean), then phantom's last")
    ap.add_argument("--pairs", nargs=2, metavar=("TAG_A", "TAG_B"))
    a = ap.parse_args()
    *real_paths, sim_path = a.real
    real, sim = _mean_rows(real_paths), _rows(sim_path)
    errs = row_errors(real, sim)
    if not errs:
        raise SystemExit(f"no rows in common between {', '.join(real_paths)} and {sim_path}")
    rel = [(s - r) / r * 100 for _, r, s in errs]
    print(f"{len(errs)} rows: mean |error| {statistics.mean(map(abs, rel)):.1f}%, "
          f"median {statistics.median(rel):+.1f}%, max |error| {max(map(abs, rel)):.1f}%; "
          f"sum real {sum(r for _, r, _ in errs):,.0f} us, phantom {sum(s for _, _, s in errs):,.0f} us")
    if a.pairs:
        pairs = pair_errors(real, sim, *a.pairs)
        print(f"\n{a.pairs[1]} over {a.pairs[0]}, per shape:\n")
        print("| M | N | K | real extra us | phantom extra us |")
        print("|---|---|---|---|---|")
        for p, r, s in pairs:
            print(f"| {p['M']} | {p['N']} | {p['K']} | {r:.1f} | {s:.1f} |")
        tr, ts = sum(r for _, r, _ in pairs), sum(s for _, _, s in pairs)
        print(f"\nsum of the extra over {len(pairs)} shapes: real {tr:,.0f} us, phantom {ts:,.0f} us "
              f"({(ts - tr) / tr * 100:+.1f}%); median per-shape ratio phantom/real "
              f"{statistics.median(s / r for _, r, s in pairs if r > 0):.2f}")


if __name__ == "__main__":
    main()
