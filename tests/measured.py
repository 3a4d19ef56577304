"""Rows of the kernel sweeps measured on real GPUs (bench/kernels/results/), for tests that
check phantom against measurements it may not have been fitted to."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

RESULTS = Path(__file__).parents[1] / "bench/kernels/results"


@lru_cache(maxsize=None)
def _rows(name: str) -> tuple[dict, ...]:
    return tuple(json.loads((RESULTS / name).read_text())["rows"])


def sweep_rows(name: str) -> list[dict]:
    """Every row of one sweep file, e.g. "kernels_H100.json" (1 x H100 80GB HBM3, torch 2.11)."""
    return list(_rows(name))


def measured_rows(gpu: str, op: str, dtype: str, aligned: bool = True) -> list[dict]:
    """The rows of kernels_<gpu>.json for one op and dtype; with `aligned`, without the sweep's
    deliberately unaligned shapes (tag "unaligned")."""
    return [r for r in sweep_rows(f"kernels_{gpu}.json") if r["op"] == op and r["dtype"] == dtype
            and not (aligned and r["params"].get("tag") == "unaligned")]


def gemm_bounds_us(gpu: str, shapes: list[tuple[int, int, int]]) -> tuple[float, float]:
    """Bounds on the summed time of bf16 GEMMs (M, N, K) from the GPU's measured aligned ones.
    Lower: no GEMM beats the fastest measured one (the launch floor). Upper: no GEMM takes
    longer than a measured one at least as large in every dimension (M and N exchangeable)."""
    rows = measured_rows(gpu, "mm", "bf16")

    def covering_us(m, n, k):
        return min(r["median_us"] for r in rows if r["params"]["K"] >= k and (
            (r["params"]["M"] >= m and r["params"]["N"] >= n) or (r["params"]["M"] >= n and r["params"]["N"] >= m)))

    floor = min(r["median_us"] for r in rows)
    return len(shapes) * floor, sum(covering_us(*s) for s in shapes)


def linear_gemms(tokens: int, linears: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """The (M, N, K) of each Linear's forward, data-gradient and weight-gradient GEMMs, for
    Linears of (in, out) features over `tokens` rows."""
    return [s for k, n in linears for s in ((tokens, n, k), (tokens, k, n), (k, n, tokens))]
