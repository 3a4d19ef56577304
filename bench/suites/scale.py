"""How far one machine simulates: wall time and RAM against the simulated GPU count.

    python bench/suites/scale.py [--only NAME ...] [--startup] [--out /tmp/scale.md]

Runs examples/llama_train.py (Llama-3 8B, or 70B for the 3-D layout; seq 8192) through
`phantom run --cluster h100-ib` (8 H100 a node, one 400 Gb/s NIC per GPU) from 8 to 1,024
simulated GPUs, with the default `--ranks` (every rank up to 8, representative ranks above),
and samples the proportional set size (PSS: shared pages split between the processes that
share them, so the sum is the real RAM used) of the run's process tree -- the launcher,
the fork server, the ranks -- twice a second from /proc. Reports the wall time of the whole run
(start-up, three iterations: the first one, with FSDP's and the allocator's warm-up, is the
slowest), the processes that ran, the simulated iteration time and tokens/s/GPU the script
printed, and the peak RAM in total.
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

REPO = Path(__file__).resolve().parents[2]
LLAMA = ["examples/llama_train.py", "--seq-len", "8192", "--steps", "3", "--warmup", "1"]
# name: (nodes, script arguments, what it is)
RUNS = {
    "fsdp-8": (1, ["--preset", "llama3-8b", "--local-batch-size", "2", "--ac"], "8B FSDP"),
    "fsdp-16": (2, ["--preset", "llama3-8b", "--local-batch-size", "2", "--ac"], "8B FSDP"),
    "fsdp-64": (8, ["--preset", "llama3-8b", "--local-batch-size", "2", "--ac"], "8B FSDP"),
    "fsdp-128": (16, ["--preset", "llama3-8b", "--local-batch-size", "2", "--ac"], "8B FSDP"),
    "fsdp-512": (64, ["--preset", "llama3-8b", "--local-batch-size", "2", "--ac"], "8B FSDP"),
    "fsdp-1024": (128, ["--preset", "llama3-8b", "--local-batch-size", "2", "--ac"], "8B FSDP"),
    "fsdp-tp8-1024": (128, ["--preset", "llama3-8b", "--local-batch-size", "2", "--ac", "--tp", "8"],
                      "8B FSDP x TP8"),
    "pp8-tp8-dp16-1024": (128, ["--preset", "llama3-70b", "--local-batch-size", "8", "--ac", "--tp", "8",
                                "--pp", "8"], "70B PP8 x TP8 x DP16 (1F1B, 8 micro-batches)"),
}


def _descendants(root: int) -> list[int]:
    """`root` and every process under it (the launcher, its fork server, the ranks)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


# Rank start-up: 16 processes of a tiny model (--ranks all), forked from the pre-warmed
# parent or each a fresh Python (PHANTOM_NO_FORK_SERVER=1).
STARTUP = ["--ranks", "all", "examples/llama_train.py", "--preset", "debug", "--seq-len", "256",
           "--local-batch-size", "1", "--steps", "2", "--warmup", "1"]


def run(name: str) -> dict:
    nodes, extra, what = RUNS[name]
    cmd = [sys.executable, "-m", "phantom.cli", "run", "--cluster", "h100-ib", "--nnodes", str(nodes),
           *LLAMA, *extra]
    return _measure(cmd, name, what, nodes * 8, {})


def _measure(cmd: list[str], name: str, what: str, gpus: int, env: dict) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    peak_total, peak_procs = 0, 0
    while proc.poll() is None:
        sizes = [_pss(p) for p in _descendants(proc.pid)]
        peak_total = max(peak_total, sum(sizes))
        peak_procs = max(peak_procs, len(sizes))
        time.sleep(0.5)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    m = re.search(r"median_iter_ms=([\d.]+) tokens_per_s_per_gpu=(\d+)", out)
    if proc.returncode != 0 or not m:
        raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{out[-2000:]}\n{err[-3000:]}")
    ran = re.search(r"(\d+) of (\d+) ranks ran", err)
    return {"name": name, "what": what, "gpus": gpus, "wall_s": wall, "iter_ms": float(m[1]),
            "tps": int(m[2]), "ranks_run": int(ran[1]) if ran else gpus, "procs": peak_procs,
            "ram_gib": peak_total / 2**30}


def startup(lines: list[str]) -> None:
    lines += ["", "Rank start-up, 16 ranks each a process (`--ranks all`, Llama debug preset, 2 iterations):", "",
              "| rank processes | wall s | RAM peak GiB (PSS, all processes) |", "|---|---|---|"]
    cmd = [sys.executable, "-m", "phantom.cli", "run", "--cluster", "h100-ib", "--nnodes", "2", *STARTUP]
    for label, env in (("forked from the pre-warmed parent", {}),
                       ("fresh Python each (PHANTOM_NO_FORK_SERVER=1)", {"PHANTOM_NO_FORK_SERVER": "1"})):
        r = _measure(cmd, label, label, 16, env)
        lines.append(f"| {label} | {r['wall_s']:.0f} | {r['ram_gib']:.2f} |")
        print(lines[-1], flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", choices=RUNS, default=list(RUNS))
    p.add_argument("--startup", action="store_true", help="also compare forked and fresh rank processes")
    p.add_argument("--out")
    args = p.parse_args()
    lines = [f"`--cluster h100-ib`, examples/llama_train.py seq 8192, full AC, 3 iterations; this machine: "
             f"{os.cpu_count()} cores", "",
             "| run | simulated GPUs | rank processes | wall s (whole run) | sim iter ms | tok/s/GPU | "
             "RAM peak GiB (PSS, all processes) |", "|---|---|---|---|---|---|---|"]
    for name in args.only:
        r = run(name)
        lines.append(f"| {r['what']} | {r['gpus']:,} | {r['ranks_run']} | {r['wall_s']:.0f} | "
                     f"{r['iter_ms']:.1f} | {r['tps']:,} | {r['ram_gib']:.2f} |")
        print(lines[-1], flush=True)
    if args.startup:
        startup(lines)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
