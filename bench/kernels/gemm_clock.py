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
  * `db`: right after 0.3 s of 8192^3 GEMMs (the profile's `warm_up_clocks`), the database's
    own Timer (the profile's method);
  * `sustained`: 0.6 s of back-to-back replays, the mean of the last 150 ms.

With `--smi` it samples the SM clock and board power with nvidia-smi every 20 ms into that CSV;
the JSON records each phase's wall-clock span to line them up. Reading only: no GPU setting is
changed. Standalone on the GPU host (PYTHONPATH=. for phantom's Timer), torch 2.11+.

    python bench/kernels/gemm_clock.py --out gemm_clock_H100.json --smi smi.csv
    python bench/kernels/gemm_clock.py --summary gemm_clock_H100.json --smi-in smi.csv.gz \
        --in-step rank0_trace.json.gz       # a table; here, no GPU needed

`--in-step` takes a torch.profiler (kineto) trace of a training step with shapes recorded
(torchtitan's profiler writes one) and adds the median time of the same GEMMs (same dims and
strides) in it.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import gzip
import json
import statistics
import subprocess
import time

# (a dims, a strides, b dims, b strides): the GEMMs of torchtitan's Llama 3 8B at local batch 1,
# seq 8192 (rank 0 of the traced 5-block step, a torchtitan profiler trace),
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


def _operands(case: tuple, n_sets: int) -> list:
    import torch

    a_dims, a_st, b_dims, b_st = case
    out = []
    for _ in range(n_sets):
        a = torch.empty_strided(a_dims, a_st, device="cuda", dtype=torch.bfloat16).normal_()
        b = torch.empty_strided(b_dims, b_st, device="cuda", dtype=torch.bfloat16).normal_()
        out.append((a, b))
    return out


def _graph(sets: list, calls: int):
    import torch

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


def _timed(g, replays: int = 1) -> float:
    import torch

    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(2_000_000)  # ~1 ms at Hopper clocks: the host enqueues before the GPU starts
    s.record()
    for _ in range(replays):
        g.replay()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3  # us


def measure(case: tuple, timer, l2_bytes: int) -> dict:
    import torch

    from phantom.cost.profile.timing import warm_up_clocks

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
    warm_up_clocks(0.3)  # the profile's own heat before its rows
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


def in_step_times(trace_path: str) -> dict[str, float]:
    """Median kernel time (us) of each aten::mm in a kineto trace, keyed by dims and strides."""
    events = json.load(gzip.open(trace_path) if trace_path.endswith(".gz") else open(trace_path))["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events
           if e.get("cat") == "cpu_op" and e["name"] == "aten::mm" and "External id" in e.get("args", {})}
    times: dict[str, list[float]] = {}
    for k in events:
        op = ops.get(k.get("args", {}).get("External id")) if k.get("cat") == "kernel" else None
        if op is not None:
            a = op["args"]
            times.setdefault(_key(a["Input Dims"][:2], a["Input Strides"][:2]), []).append(k["dur"])
    return {key: statistics.median(v) for key, v in times.items()}


def _key(dims: list, strides: list) -> str:
    return json.dumps([dims[0], strides[0], dims[1], strides[1]])


def smi_clock(path: str, spans: list) -> float | None:
    """Mean SM clock (MHz) of nvidia-smi's samples inside the given [start, end] wall spans."""
    mhz = []
    for row in csv.reader(gzip.open(path, "rt") if path.endswith(".gz") else open(path)):
        try:
            ts = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
        except (ValueError, IndexError):
            continue
        t = ts.replace(tzinfo=datetime.timezone.utc).timestamp()
        if any(a <= t <= b + 0.02 for a, b in spans):
            mhz.append(float(row[1]))
    return statistics.mean(mhz) if mhz else None


def summary(path: str, smi: str | None, trace: str | None) -> str:
    d = json.load(open(path))
    steps = in_step_times(trace) if trace else {}
    h = d["header"]
    lines = [f"{h['device_name']}, driver {h['driver']}, torch {h['torch']}, {h['date'][:10]}", "",
             "| A | B (strides) | cool us | database-style us | sustained us | cool / db | in a step us | step / cool |"
             + (" MHz cool / sustained |" if smi else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if smi else "")]
    ratios, step_ratios = [], []
    for r in d["rows"]:
        ratio = r["cool_us"] / r["db_us"]
        ratios.append(ratio)
        step = steps.get(_key([r["a"][0], r["b"][0]], [r["a"][1], r["b"][1]]))
        if step:
            step_ratios.append(step / r["cool_us"])
        cells = [f"{r['a'][0]} {r['a'][1]}", f"{r['b'][0]} {r['b'][1]}", f"{r['cool_us']:.1f}", f"{r['db_us']:.1f}",
                 f"{r['sustained_us']:.1f}", f"{ratio:.3f}", f"{step:.1f}" if step else "-",
                 f"{step / r['cool_us']:.3f}" if step else "-"]
        if smi:
            spans = r["spans"]
            c, su = smi_clock(smi, spans["cool"]), smi_clock(smi, [spans["sustained"]])
            cells.append(f"{c:.0f} / {su:.0f}" if c and su else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"cool / database-style: mean {statistics.mean(ratios):.3f}, median {statistics.median(ratios):.3f}, "
              f"range {min(ratios):.3f}-{max(ratios):.3f} ({len(ratios)} GEMMs)"]
    if step_ratios:
        lines.append(f"in a step / cool: mean {statistics.mean(step_ratios):.3f}, range {min(step_ratios):.3f}-"
                     f"{max(step_ratios):.3f} ({len(step_ratios)} GEMMs)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="measure on this machine's GPU, into this JSON")
    ap.add_argument("--smi", help="sample SM clock and power with nvidia-smi every 20 ms into this CSV")
    ap.add_argument("--summary", metavar="JSON", help="print a table of a measured JSON instead")
    ap.add_argument("--smi-in", help="with --summary: the run's nvidia-smi samples (CSV, .gz too)")
    ap.add_argument("--in-step", help="with --summary: a kineto trace of a training step on that GPU")
    args = ap.parse_args()
    if args.summary:
        print(summary(args.summary, args.smi_in, args.in_step))
        return
    if not args.out:
        ap.error("give --out (measure) or --summary JSON (report)")
    import torch

    from phantom.cost.profile.timing import Timer, device_header, warm_up_clocks

    smi = None
    if args.smi:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                                "--format=csv,noheader,nounits", "-lms", "20"], stdout=open(args.smi, "w"))
    torch.manual_seed(0)
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20))
    timer = Timer(l2)
    out = {"header": device_header(), "rows": []}
    out["header"]["method"] = __doc__.split("\n\n")[1]
    warm_up_clocks(1.0)
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
