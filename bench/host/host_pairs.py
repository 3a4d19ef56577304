"""Do the lent H100 hosts run host-bound steps slower than the lent H200 hosts, and by how much?

    python bench/host/host_pairs.py [--out FILE.md]

phantom converts the script's host time to the simulated node's host by the node's reference CPU
step (`GPUSpec.host_step_ns`, best speed) times a typical slowdown below that best
(`GPUSpec.host_mean_slowdown`). This compares what that makes of an H100 host against an H200
host with what the real host-bound steps say, on every pair of real runs of the same suite:

- 1 GPU: `host_bound.py real` (6 small GPT / Llama steps);
- 2 GPUs: `distributed.py real --suite host-bound` (DDP, FSDP2, TP, PP at 128 tokens).

For a pair of runs, the ratio is the median over the suite's workloads of H100 ms / H200 ms. It
also lists the pure-Python flicker runs (`host_flicker.py`) of every lent host, the numbers the
typical slowdown is the median of (`phantom.hardware.gpus.HOST_FLICKER_MEAN_SLOWDOWNS`).
No GPU needed: it reads the committed data.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "bench" / "host" / "data"
sys.path.insert(0, str(REPO))

from phantom.hardware.gpus import (H100_HOST_STEP_NS, H200_HOST_STEP_NS,  # noqa: E402
                                   HOST_MEAN_SLOWDOWN)

# (kind, file): real runs of each suite on the lent machines
ONE_GPU = [
    ("H100", "host_bound_1gpu_h100_a.json"), ("H100", "host_bound_1gpu_h100_b.json"),
    ("H100", "host_bound_1gpu_h100_c.json"),
    ("H100", "host_bound_1gpu_h100_d.json"),  # GPU 0 of the 2 x H100 machine
    ("H100", "host_bound_1gpu_h100_e.json"),
    ("H200", "host_bound_1gpu_h200_a.json"), ("H200", "host_bound_1gpu_h200_b.json"),
]
TWO_GPUS = [
    ("H100", "host_bound_2gpu_h100_a.json"),
    ("H100", "host_bound_2gpu_h100_b.json"),
    ("H100", "host_bound_2gpu_h100_c.json"),
    ("H200", "host_bound_2gpu_h200_a.json"),
]
# (kind, file): host_flicker.py runs, one mean slowdown per probing core
FLICKER = [
    ("H200", "flicker_h200_a.json"), ("H200", "flicker_h200_b.json"),
    ("H200", "flicker_h200_c.json"),
    ("H200", "flicker_h200_d.json"), ("H200", "flicker_h200_e.json"),
    ("H100", "flicker_h100_a.json"),
    ("H100", "flicker_h100_b.json"), ("H100", "flicker_h100_c.json"),
    ("H100", "flicker_h100_d.json"),
    ("H100", "flicker_h100_e.json"),
    ("H100", "flicker_h100_f.json"),
    ("H100", "flicker_h100_g.json"),
    ("H100", "flicker_h100_h.json"),
]
# What the presets made of an H100 host against an H200 host with per-kind
# typical slowdowns (1.59 and 1.32), and with one pooled value (the current model).
PER_KIND_RATIO = H100_HOST_STEP_NS * 1.59 / (H200_HOST_STEP_NS * 1.32)
POOLED_RATIO = H100_HOST_STEP_NS / H200_HOST_STEP_NS


def medians(path: str) -> dict[str, float]:
    return {k: v["median_iter_ms"] for k, v in json.loads((DATA / path).read_text())["results"].items()}


def flicker_slowdowns() -> list[tuple[str, str, float]]:
    out = []
    for kind, path in FLICKER:
        for core in json.loads((DATA / path).read_text())["per_core"]:
            out.append((kind, path, round(core["mean_slowdown"], 2)))
    return out


def pair_ratios(runs: list[tuple[str, str]]) -> list[tuple[str, str, float]]:
    h100 = [p for k, p in runs if k == "H100"]
    h200 = [p for k, p in runs if k == "H200"]
    out = []
    for a in h100:
        for b in h200:
            ma, mb = medians(a), medians(b)
            out.append((a, b, statistics.median(ma[w] / mb[w] for w in ma if w in mb)))
    return out


def report() -> str:
    lines = ["Real host-bound steps, H100 host against H200 host (median over a suite's workloads "
             "of H100 ms / H200 ms):", "", "| suite | H100 run | H200 run | ratio |", "|---|---|---|---|"]
    every = []
    for suite, runs in (("1 GPU", ONE_GPU), ("2 GPUs", TWO_GPUS)):
        for a, b, r in pair_ratios(runs):
            every.append(r)
            lines.append(f"| {suite} | `{a}` | `{b}` | {r:.2f} |")
    lines += ["", f"Median over the {len(every)} pairs: **{statistics.median(every):.2f}** "
              f"(range {min(every):.2f}-{max(every):.2f}). phantom's H100 host against its H200 host: "
              f"{PER_KIND_RATIO:.2f} with per-kind typical slowdowns (the earlier model), "
              f"{POOLED_RATIO:.2f} with one pooled value (the reference steps' ratio alone).", "",
              "Flicker runs (`host_flicker.py`, mean slowdown against the fastest probe):", "",
              "| host | file | mean slowdown |", "|---|---|---|"]
    flick = flicker_slowdowns()
    lines += [f"| {k} | `{p}` | {s:.2f} |" for k, p, s in flick]
    by_kind = {k: statistics.median(s for kk, _, s in flick if kk == k) for k in ("H100", "H200")}
    lines += ["", f"Median: H100 hosts {by_kind['H100']:.2f}, H200 hosts {by_kind['H200']:.2f}, "
              f"all {statistics.median(s for _, _, s in flick):.2f} "
              f"(`HOST_MEAN_SLOWDOWN` = {HOST_MEAN_SLOWDOWN:.3f})."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args(argv)
    text = report()
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
