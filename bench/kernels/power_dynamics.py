"""How fast the GPU's power limit acts, and over what window it averages (read-only).

    python bench/kernels/power_dynamics.py --out results/power_dynamics_H100.json

A bf16 GEMM whose time is set by the SM clock serves as the clock meter: one CUDA event pair per
call gives its duration, so the clock's path is seen at the GEMM's own resolution (~1.5 ms).
  * `transient`: from a rested board, GEMMs back to back for 8 s: how soon the clock falls to
    its sustained value, and what a short burst (the kernel database's 15 x 3 ms) sees.
  * `duty_<g>_<c>`: g ms of GEMMs, then c ms of a memory-bound copy (or of a GPU sleep), repeated
    for 6 s. If the limit acted on each kernel's own power, the GEMMs would run at their
    sustained clock whatever the copy phase; if it acts on power averaged over a window longer
    than g + c, they run faster, as the copies pull the average down.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from power_probe import Sampler, board_info  # same folder

M = N = K = 8192


def gemm_setup():
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b, out=c)


def timed_calls(fn, count: int) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
    evs = []
    for _ in range(count):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        evs.append((s, e))
    return evs


def transient(gemm, seconds: float) -> dict:
    torch.cuda.synchronize()
    time.sleep(5.0)  # rest: the board cools and the clock returns to idle
    first = torch.cuda.Event(enable_timing=True)
    first.record()
    evs = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        evs += timed_calls(gemm, 50)
        evs[-1][1].synchronize()
    torch.cuda.synchronize()
    starts = [first.elapsed_time(s) for s, _ in evs]
    durs = [s.elapsed_time(e) for s, e in evs]
    flops = 2.0 * M * N * K

    def rate(lo_ms: float, hi_ms: float) -> float | None:
        sel = [d for t, d in zip(starts, durs) if lo_ms <= t < hi_ms]
        return flops / (statistics.median(sel) / 1e3) / 1e12 if sel else None

    windows = [(0, 5), (5, 20), (20, 50), (50, 100), (100, 200), (200, 500), (500, 1000), (1000, 2000),
               (2000, 4000), (4000, 8000)]
    return {"tflops_by_window_ms": {f"{lo}-{hi}": rate(lo, hi) for lo, hi in windows},
            "first_45ms_tflops": rate(0, 45),
            "per_call_ms_head": [round(d, 4) for d in durs[:60]]}


def duty(gemm, other, gemm_ms: float, other_ms: float, seconds: float, per_gemm_ms: float,
         per_other_ms: float) -> dict:
    n_gemm = max(1, round(gemm_ms / per_gemm_ms))
    n_other = max(1, round(other_ms / per_other_ms))
    torch.cuda.synchronize()
    time.sleep(2.0)
    t0 = time.time()
    gemm_evs = []
    while time.time() - t0 < seconds:
        evs = timed_calls(gemm, n_gemm)
        for _ in range(n_other):
            other()
        if time.time() - t0 > 2.0:  # steady part only
            gemm_evs += evs
        evs[-1][1].synchronize()
    torch.cuda.synchronize()
    durs = [s.elapsed_time(e) for s, e in gemm_evs]
    return {"gemm_calls_per_phase": n_gemm, "other_calls_per_phase": n_other,
            "gemm_tflops_in_phase": 2.0 * M * N * K / (statistics.median(durs) / 1e3) / 1e12 if durs else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sampler = Sampler()
    sampler.start()
    result: dict = {"board": board_info(), "runs": {}}

    def record(name: str, t0: float, row: dict) -> None:
        row.update(sampler.window(t0 + 2.0, time.time()))
        result["runs"][name] = row
        print(name, json.dumps(row), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))

    gemm = gemm_setup()
    gemm()
    x = torch.randn(1 << 29, device="cuda", dtype=torch.bfloat16)  # 1 GiB
    y = torch.empty_like(x)
    copy = lambda: y.copy_(x)  # noqa: E731

    t0 = time.time()
    record("transient", t0, transient(gemm, 8.0))
    # per-call times at the sustained clock, to size the phases
    per_gemm = statistics.median(s.elapsed_time(e) for s, e in _sync(timed_calls(gemm, 20)))
    per_copy = statistics.median(s.elapsed_time(e) for s, e in _sync(timed_calls(copy, 20)))
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.cuda._sleep(1_000_000)
    e.record()
    e.synchronize()
    sleep_cycles = 1_000_000 / s.elapsed_time(e)  # per ms
    gpu_sleep = lambda: torch.cuda._sleep(int(sleep_cycles))  # noqa: E731  one ms
    result["per_call_ms"] = {"gemm": per_gemm, "copy": per_copy}
    for g, c in ((2, 2), (10, 10), (50, 50), (200, 200), (1000, 1000), (10, 30)):
        t0 = time.time()
        record(f"duty_gemm{g}_copy{c}", t0, duty(gemm, copy, g, c, 7.0, per_gemm, per_copy))
    for g, c in ((10, 10), (100, 100)):
        t0 = time.time()
        record(f"duty_gemm{g}_sleep{c}", t0, duty(gemm, gpu_sleep, g, c, 7.0, per_gemm, 1.0))
    sampler.stop()


def _sync(evs):
    torch.cuda.synchronize()
    return evs


if __name__ == "__main__":
    main()
