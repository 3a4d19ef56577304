"""How a machine's CPU speed changes over time: the pure-Python probe of phantom.host.machine,
re-run back to back for `--seconds` on one core (or on `--cores` cores at once, one process
each), summarised as slowdowns against the fastest probe seen.

    python bench/host/host_flicker.py --seconds 15 --cores 1 --out flicker.json

The simulating machines this project ran on spend ~30% of their time ~2x slower than their best, in
spells from under a millisecond to seconds. Whether the GPU hosts do the same decides how host
time measured here compares with a real run's (README, "Host time policy"). The summary gives
the mean slowdown over windows of 10 ms to 1 s (the spread of those means is what a host-bound
step of that length sees), the share of probes in the slow state, and spell lengths.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from phantom.host.machine import probe_ns as _probe_ns  # noqa: E402
SLOW_STATE = 1.3  # a probe this many times the best counts as the machine's slow state

PROBE_N = 500  # ~0.15 ms a probe on a 2-core simulating machine: fine enough to see sub-ms spells
WINDOWS_MS = (10, 50, 100, 1000)


def probe_ns() -> int:
    return _probe_ns(time.perf_counter_ns, PROBE_N)


def series(seconds: float, core: int | None) -> list[tuple[int, int]]:
    """(start ns, probe ns) back to back for `seconds`, pinned to `core` if given."""
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    for _ in range(50):
        probe_ns()  # warm
    out, end = [], time.perf_counter_ns() + int(seconds * 1e9)
    while (t := time.perf_counter_ns()) < end:
        out.append((t, probe_ns()))
    return out


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarize(points: list[tuple[int, int]]) -> dict:
    best = min(d for _, d in points)
    t0 = points[0][0]
    slow = [d / best > SLOW_STATE for _, d in points]
    windows = {}
    for w in WINDOWS_MS:
        sums: dict[int, list[int]] = {}
        for t, d in points:
            acc = sums.setdefault((t - t0) // int(w * 1e6), [0, 0])
            acc[0] += d
            acc[1] += 1
        means = [s / n / best for s, n in sums.values()]
        windows[f"{w}ms"] = {"p5": round(_percentile(means, 0.05), 3), "p50": round(_percentile(means, 0.5), 3),
                             "p95": round(_percentile(means, 0.95), 3), "max": round(max(means), 3)}
    spells: dict[bool, list[float]] = {False: [], True: []}
    state, start = slow[0], points[0][0]
    for (t, _), s in zip(points, slow):
        if s != state:
            spells[state].append((t - start) / 1e6)
            state, start = s, t
    spell = {("slow" if k else "fast"): {"count": len(v), "median_ms": round(statistics.median(v), 3),
                                         "p90_ms": round(_percentile(v, 0.9), 3)} if v else None
             for k, v in spells.items()}
    return {"probes": len(points), "best_probe_ns": best,
            "mean_slowdown": round(sum(d for _, d in points) / len(points) / best, 3),
            "slow_share": round(sum(slow) / len(slow), 3), "window_mean_slowdown": windows, "spells": spell}


def _worker(args: tuple[float, int | None, bool]) -> dict:
    seconds, core, keep = args
    points = series(seconds, core)
    out = summarize(points)
    if keep:  # the raw series, for replaying a host's speed over time (--series-out)
        out["series"] = {"core": core, "start_ns": [t for t, _ in points], "probe_ns": [d for _, d in points]}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--cores", type=int, default=1, help="processes probing at once, one per core")
    p.add_argument("--out", default=None)
    p.add_argument("--series-out", default=None,
                   help="also write every probe (start ns on the shared monotonic clock, duration ns) per core, gzipped JSON")
    a = p.parse_args()
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [None]
    keep = a.series_out is not None
    jobs = [(a.seconds, cores[i % len(cores)] if cores[0] is not None else None, keep) for i in range(a.cores)]
    if a.cores == 1:
        per_core = [_worker(jobs[0])]
    else:
        with mp.get_context("spawn").Pool(a.cores) as pool:
            per_core = pool.map(_worker, jobs)
    if keep:
        import gzip
        every = [c.pop("series") for c in per_core]
        with gzip.open(a.series_out, "wt") as f:
            json.dump({"node": platform.node(), "probe_n": PROBE_N, "per_core": every}, f)
    result = {"node": platform.node(), "python": platform.python_version(), "cpu_count": os.cpu_count(),
              "seconds": a.seconds, "cores_probing": a.cores, "per_core": per_core}
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
