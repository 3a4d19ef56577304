"""How many ranks this machine simulates: wall time and RAM of a multi-rank run.

    python bench/scale.py --ranks 8 16 [--out bench/data/scale.md]

Runs examples/dist_train.py (FSDP2, the 1B preset) through `phantom run` on the `h100-ib`
cluster (8 GPUs a node; 16 ranks = 2 nodes) and samples the resident memory of every rank
process from /proc twice a second. Reports wall time, the simulated iteration time the
script printed, and RAM per rank (peak of the largest rank, mean over ranks) and in total.
Linux only (reads /proc). Standard library only.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = os.sysconf("SC_PAGE_SIZE")


def _rank_pids() -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if b"phantom.launcher.bootstrap" in cmd:
                pids.append(int(d))
    return pids


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def run(ranks: int, steps: int) -> dict:
    nodes = max(1, ranks // 8)
    cmd = [sys.executable, "-m", "phantom.cli", "run", "--cluster", "h100-ib", "--nnodes", str(nodes),
           "--nproc-per-node", str(ranks // nodes), "--quiet", "examples/dist_train.py", "--parallel", "fsdp",
           "--preset", "1b", "--seq-len", "2048", "--batch-size", "2", "--steps", str(steps), "--warmup", "1"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak: dict[int, int] = {}
    peak_total = 0
    while proc.poll() is None:
        sizes = {pid: _rss(pid) for pid in _rank_pids()}
        for pid, size in sizes.items():
            peak[pid] = max(peak.get(pid, 0), size)
        peak_total = max(peak_total, sum(sizes.values()))
        time.sleep(0.5)
    out = proc.stdout.read()
    wall = time.perf_counter() - t0
    m = re.search(r"median_iter_ms=([\d.]+)", out)
    if proc.returncode != 0 or not m:
        raise SystemExit(f"{ranks} ranks failed (exit {proc.returncode}):\n{out[-3000:]}")
    return {"ranks": ranks, "nodes": nodes, "wall_s": wall, "iter_ms": float(m.group(1)),
            "rank_peak_gib": max(peak.values()) / 2**30,
            "rank_mean_gib": sum(peak.values()) / len(peak) / 2**30, "total_gib": peak_total / 2**30}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 16])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args()
    lines = [f"FSDP2 1B (examples/dist_train.py, batch 2 x 2048 per rank, {args.steps} steps), "
             f"`--cluster h100-ib`, on this machine ({os.cpu_count()} cores)", "",
             "| ranks | nodes | wall s | sim iter ms | RAM peak per rank GiB | mean per rank GiB | total GiB |",
             "|---|---|---|---|---|---|---|"]
    for n in args.ranks:
        r = run(n, args.steps)
        lines.append(f"| {r['ranks']} | {r['nodes']} | {r['wall_s']:.0f} | {r['iter_ms']:.1f} | "
                     f"{r['rank_peak_gib']:.2f} | {r['rank_mean_gib']:.2f} | {r['total_gib']:.1f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
