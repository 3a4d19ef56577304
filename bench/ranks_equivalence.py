"""Representative ranks vs every rank: `--ranks auto` and `--ranks all` on the same runs.

    python bench/ranks_equivalence.py [--out bench/data/ranks_equivalence.md] [--only NAME ...]

Runs examples/llama_train.py (Llama-3 1B layout, seq 4096) through `phantom run` on the
h100-ib cluster, 8 ranks (one node) and 16 ranks (two nodes), as FSDP2, TP x FSDP and
PP x FSDP, once with every rank a process and once with one process per class of equivalent
ranks. Compares the median iteration time and the peak memory the script printed (rank 0's
and the maximum over ranks), and records the wall time of each run.

Each pair is run twice: with the host time measured as usual, and with host time removed
(`--host-speed 0.0001`, so only GPU and network time remain): the second pair isolates what the
representative ranks change in the simulation itself. With host time measured, the `auto` run
is made twice more: the spread between runs of the same setting is this machine's noise floor,
which no comparison of two runs can go under.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMON = ["--preset", "llama3-1b", "--seq-len", "4096", "--steps", "5", "--warmup", "2"]
CONFIGS = {
    "fsdp-8": (1, ["--local-batch-size", "2"]),
    "tpxfsdp-8": (1, ["--local-batch-size", "2", "--tp", "4"]),
    "ppxfsdp-8": (1, ["--local-batch-size", "4", "--pp", "2"]),
    "fsdp-16": (2, ["--local-batch-size", "2"]),
    "tpxfsdp-16": (2, ["--local-batch-size", "2", "--tp", "8"]),
    "ppxfsdp-16": (2, ["--local-batch-size", "4", "--pp", "2"]),
}
SUMMARY = re.compile(r"summary: median_iter_ms=([\d.]+) .*peak_alloc_gib=([\d.]+) max_peak_alloc_gib=([\d.]+)")


def run(nnodes: int, extra: list[str], ranks: str, host_speed: float) -> dict:
    cmd = [sys.executable, "-m", "phantom.cli", "run", "--cluster", "h100-ib", "--nnodes", str(nnodes),
           "--ranks", ranks, "--host-speed", str(host_speed), "--quiet",
           "examples/llama_train.py", *COMMON, *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    m = SUMMARY.search(proc.stdout)
    if proc.returncode != 0 or m is None:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return {"iter_ms": float(m[1]), "peak": float(m[2]), "max_peak": float(m[3]), "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/data/ranks_equivalence.md")
    ap.add_argument("--only", nargs="*", choices=CONFIGS, default=list(CONFIGS))
    ap.add_argument("--host-time", choices=("measured", "removed", "both"), default="both",
                    help="which of the two pairs to run (default both)")
    args = ap.parse_args()
    rows = ["| config | host time | iter ms, all | iter ms, auto | diff | auto again (2 runs) | "
            "auto vs auto, max | peak GiB all / auto | max peak GiB all / auto | wall s all / auto |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    diffs = {"measured": [], "removed": []}
    floors = []
    for name in args.only:
        nnodes, extra = CONFIGS[name]
        for label, speed in (("measured", 1.0), ("removed", 0.0001)):
            if args.host_time not in (label, "both"):
                continue
            full = run(nnodes, extra, "all", speed)
            rep = run(nnodes, extra, "auto", speed)
            again = [run(nnodes, extra, "auto", speed) for _ in range(2)] if label == "measured" else []
            d = (rep["iter_ms"] - full["iter_ms"]) / full["iter_ms"] * 100
            diffs[label].append(abs(d))
            autos = [rep["iter_ms"]] + [a["iter_ms"] for a in again]
            floor = (max(autos) - min(autos)) / min(autos) * 100 if again else None
            if floor is not None:
                floors.append(floor)
            row = (f"| {name} | {label} | {full['iter_ms']:.1f} | {rep['iter_ms']:.1f} | {d:+.2f}% | "
                   f"{' / '.join(f'{a:.1f}' for a in autos[1:]) or '-'} | "
                   f"{f'{floor:.2f}%' if floor is not None else '-'} | "
                   f"{full['peak']:.2f} / {rep['peak']:.2f} | {full['max_peak']:.2f} / {rep['max_peak']:.2f} | "
                   f"{full['wall_s']:.0f} / {rep['wall_s']:.0f} |")
            rows.append(row)
            print(row, flush=True)
    for label, ds in diffs.items():
        if ds:
            rows.append(f"\nHost time {label}: all vs auto, mean |diff| {sum(ds) / len(ds):.2f}%, "
                        f"max {max(ds):.2f}%.")
    if floors:
        rows.append(f"\nHost time measured, three auto runs of one setting: mean spread "
                    f"{sum(floors) / len(floors):.2f}%, max {max(floors):.2f}%.")
    text = "\n".join(rows) + "\n"
    Path(REPO / args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
