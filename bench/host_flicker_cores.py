"""Do two cores of a host slow down together? The raw probe series of `host_flicker.py
--cores 2 --series-out`, binned, compared core against core.

    python bench/host_flicker_cores.py bench/data/session19/h200x2_call3_rank_desync/flicker_2cores_series.json.gz

For windows of 0.1 ms to 1 s: each core's spread of window-mean slowdowns (sd / mean), the
correlation of the two cores' window means, and E[max of the two] / E[mean]: what a step
that waits for the slower of two ranks would lose if the ranks' Python slowed like this probe
(bench/README, distributed, session 19; the real ranks lose less, `rank_host_spread.py`).
"""
from __future__ import annotations

import argparse
import gzip
import json

import numpy as np

BIN_NS = 100_000
WINDOWS_BINS = (1, 10, 100, 1000, 10000)


def binned(series: dict, t0: int, t1: int, best: int) -> np.ndarray:
    """Mean slowdown per 0.1 ms bin over [t0, t1]; a bin no probe started in keeps the last."""
    start = np.asarray(series["start_ns"])
    keep = (start >= t0) & (start <= t1)
    idx = (start[keep] - t0) // BIN_NS
    slow = np.asarray(series["probe_ns"])[keep] / best
    n = int((t1 - t0) // BIN_NS) + 1
    sums, counts = np.bincount(idx, weights=slow, minlength=n), np.bincount(idx, minlength=n)
    out = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    for i in range(n):  # carry forward over empty bins (a probe longer than a bin)
        if np.isnan(out[i]):
            out[i] = out[i - 1] if i else np.nanmean(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("series", help="a --series-out file of host_flicker.py with two cores")
    args = ap.parse_args()
    cores = json.load(gzip.open(args.series, "rt"))["per_core"]
    if len(cores) != 2:
        raise SystemExit(f"{args.series}: {len(cores)} cores probed; this compares two")
    best = min(min(c["probe_ns"]) for c in cores)
    t0 = max(c["start_ns"][0] for c in cores)  # the span both cores probed
    t1 = min(c["start_ns"][-1] for c in cores)
    a, b = (binned(c, t0, t1, best) for c in cores)
    print(f"{(t1 - t0) / 1e9:.1f} s probed by both cores; mean slowdown {a.mean():.3f} and {b.mean():.3f}")
    print("| window ms | sd/mean core 0 | sd/mean core 1 | correlation | E[max] / E[mean] |")
    print("|---|---|---|---|---|")
    for w in WINDOWS_BINS:
        n = len(a) // w * w
        x, y = a[:n].reshape(-1, w).mean(1), b[:n].reshape(-1, w).mean(1)
        print(f"| {w * BIN_NS / 1e6:g} | {x.std() / x.mean():.3f} | {y.std() / y.mean():.3f} | "
              f"{np.corrcoef(x, y)[0, 1]:+.3f} | {np.maximum(x, y).mean() / ((x + y) / 2).mean():.3f} |")


if __name__ == "__main__":
    main()
