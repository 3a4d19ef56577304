#!/usr/bin/env python3
"""Is a GEMM's database time its time in a training step? The same GEMMs timed three ways.

phantom's kernel database times a row as `phantom profile` does (cost/profile/timing.py): after
a second of big GEMMs to ramp the clock, CUDA-graph replays back to back, the median of 15. A
board at its power limit lowers its SM clock, so a long compute-bound GEMM timed that way may
carry the throttled clock, while in a training step it runs between memory-bound kernels and
shorter phases. For each GEMM this times:

  * `cool`: after 1 s idle, one graph replay of ~4 ms of the GEMM (rotated inputs), behind a
    short GPU sleep so the launch is hidden: the clock the power controller allows at the start
    of a burst (its window is ~100 ms, hardware/power.py);
  * `db`: right after 0.3 s of 8192^3 GEMMs, the database's own Timer (the profile's method);
  * `sustained`: 0.6 s of back-to-back replays, the mean of the last 150 ms.

With `--smi` it samples the SM clock and board power with nvidia-smi every 20 ms into that CSV;
the JSON records each phase's wall-clock span to line them up. Reading only: no GPU setting is
changed. Standalone on the GPU host (PYTHONPATH=. for phantom's Timer), torch 2.11+.

    python bench/kernels/gemm_clock.py --out gemm_clock_H100.json --smi smi.csv
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

import torch

from phantom.cost.profile.timing import Timer, device_header

# (a dims, a strides, b dims, b strides): the GEMMs of torchtitan's Llama 3 8B at local batch 1,
# seq 8192 (rank 0 of the traced 5-block step, data/session34/device_titan_profile_h100_bs1),
# then square ones.
def _nn(m: int, k: int, n: int, at: bool = False, bt: bool = False) -> tuple:
    a_st = [1, m] if at else [k, 1]
    b_st = [1, k] if bt else [n, 1]
    return ([m, k], a_st, [k, n], b_st)


CASES = [
    ([1024, 8192], [1, 1024], [8192, 4096], [4096, 1]),
    ([128256, 8192], [1, 128256], [8192, 4096], [4096, 1]),
    ([14336, 8192], [1, 14336], [8192, 4096], [4096, 1]),
    ([4096, 8192], [1, 4096], [8192, 14336], [14336, 1]),
    ([4096, 8192], [1, 4096], [8192, 4096], [4096, 1]),
    ([8192, 1024], [1024, 1], [1024, 4096], [4096, 1]),
    ([8192, 128256], [128256, 1], [128256, 4096], [4096, 1]),
    ([8192, 14336], [14336, 1], [14336, 4096], [1, 14336]),
    ([8192, 14336], [14336, 1], [14336, 4096], [4096, 1]),
    ([8192, 4096], [4096, 1], [4096, 1024], [1, 4096]),
    ([8192, 4096], [4096, 1], [4096, 128256], [1, 4096]),
    ([8192, 4096], [4096, 1], [4096, 14336], [1, 4096]),
    ([8192, 4096], [4096, 1], [4096, 14336], [14336, 1]),
    ([8192, 4096], [4096, 1], [4096, 4096], [1, 4096]),
    ([8192, 4096], [4096, 1], [4096, 4096], [4096, 1]),
    _nn(8192, 8192, 8192), _nn(4096, 4096, 4096), _nn(2048, 2048, 2048), _nn(16384, 8192, 8192, bt=True),
    _nn(4096, 4096, 1024, bt=True), _nn(2048, 8192, 2048, bt=True),
]


def _operands(case: tuple, n_sets: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    a_dims, a_st, b_dims, b_st = case
    out = []
    for _ in range(n_sets):
        a = torch.empty_strided(a_dims, a_st, device="cuda", dtype=torch.bfloat16).normal_()
        b = torch.empty_strided(b_dims, b_st, device="cuda", dtype=torch.bfloat16).normal_()
        out.append((a, b))
    return out


def _graph(sets: list, calls: int) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for a, b in sets[:3]:
            torch.mm(a, b)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            a, b = sets[i % len(sets)]
            torch.mm(a, b)
    return g


def _timed(g: torch.cuda.CUDAGraph, replays: int = 1) -> float:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(2_000_000)  # ~1 ms at Hopper clocks: the host enqueues before the GPU starts
    s.record()
    for _ in range(replays):
        g.replay()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3  # us


def _heat(seconds: float) -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(10):
            torch.mm(a, a)
        torch.cuda.synchronize()


def measure(case: tuple, timer: Timer, l2_bytes: int) -> dict:
    a_dims, _, b_dims, _ = case
    flops = 2.0 * a_dims[0] * a_dims[1] * b_dims[1]
    in_bytes = 2.0 * (a_dims[0] * a_dims[1] + b_dims[0] * b_dims[1])
    sets = _operands(case, max(1, min(8, int(3 * l2_bytes // in_bytes) + 1)))
    est = _timed(_graph(sets, 1))
    calls = max(1, round(4000.0 / est))
    g = _graph(sets, calls)
    row: dict = {"a": [a_dims, case[1]], "b": [b_dims, case[3]], "flops": flops, "calls_cool": calls}
    spans = {}
    cool = []
    for _ in range(3):
        torch.cuda.synchronize()
        time.sleep(1.0)
        t0 = time.time()
        cool.append(_timed(g) / calls)
        spans.setdefault("cool", []).append([t0, time.time()])
    row["cool_us"] = statistics.median(cool)
    row["cool_all_us"] = cool
    t0 = time.time()
    _heat(0.3)
    tm = timer.time(lambda ab: torch.mm(*ab), lambda: _operands(case, 1)[0], in_bytes)
    spans["db"] = [t0, time.time()]
    row["db_us"] = tm.ns / 1e3
    row["db_calls"] = tm.calls
    # sustained: 0.6 s of back-to-back replays, the last ~150 ms timed
    n = max(2, int(600_000 / (row["cool_us"] * calls)))
    tail = max(1, int(150_000 / (row["cool_us"] * calls)))
    torch.cuda.synchronize()
    time.sleep(1.0)
    t0 = time.time()
    for _ in range(n - tail):
        g.replay()
    row["sustained_us"] = _timed(g, tail) / (calls * tail)
    spans["sustained"] = [t0, time.time()]
    row["spans"] = spans
    for k in ("cool", "db", "sustained"):
        row[f"{k}_tflops"] = flops / row[f"{k}_us"] / 1e6
    del g, sets
    torch.cuda.empty_cache()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--smi", help="sample SM clock and power with nvidia-smi every 20 ms into this CSV")
    args = ap.parse_args()
    smi = None
    if args.smi:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                                "--format=csv,noheader,nounits", "-lms", "20"], stdout=open(args.smi, "w"))
    torch.manual_seed(0)
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20))
    timer = Timer(l2)
    out = {"header": device_header(), "rows": []}
    out["header"]["method"] = __doc__.split("\n\n")[1]
    _heat(1.0)
    for case in CASES:
        row = measure(case, timer, l2)
        out["rows"].append(row)
        print(f"{str(row['a'][0]):16s} x {str(row['b'][0]):16s} cool {row['cool_us']:9.1f} ({row['cool_tflops']:4.0f}) "
              f"db {row['db_us']:9.1f} ({row['db_tflops']:4.0f}) sustained {row['sustained_us']:9.1f} "
              f"({row['sustained_tflops']:4.0f} TFLOP/s)", flush=True)
        json.dump(out, open(args.out, "w"), indent=1)
    if smi is not None:
        smi.terminate()


if __name__ == "__main__":
    main()
