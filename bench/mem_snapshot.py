"""What is allocated at the peak: run a script with the CUDA caching allocator's memory
history on, and list the blocks alive at the moment `max_memory_allocated` was reached,
grouped by the Python line that allocated them.

Real side of a memory comparison (phantom's side: the report's memory breakdown at the
peak, `phantom run --report`). On the GPU machine, under torchrun like the script itself:

    torchrun --nproc-per-node 2 bench/mem_snapshot.py --out $OUT/ddp_mem -- \\
        examples/dist_train.py --parallel ddp --preset 1b --seq-len 2048 --batch-size 8 --steps 4

Writes DIR/rank<R>.json (rank 0 only unless --all-ranks): peak bytes, and the live blocks at
the peak by allocating line (bytes, count, the innermost frames).
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import runpy
import sys
from collections import defaultdict
from pathlib import Path

import torch

STACK_DEPTH = 6  # innermost Python frames kept per allocation site


def _site(frames: list[dict]) -> str:
    keep = [f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in frames[:STACK_DEPTH]]
    return " <- ".join(keep) or "(no Python frame)"


def live_at_peak(trace: list[dict]) -> tuple[int, list[dict]]:
    """Replays the allocator trace: `alloc` adds a block, `free_requested` takes it off
    (that is when allocated bytes drop; `free_completed` only returns it to the cache).
    Returns the peak and the blocks alive at it."""
    live: dict[int, dict] = {}
    current = peak = 0
    at_peak: list[dict] = []
    for event in trace:
        action = event["action"]
        if action == "alloc":
            live[event["addr"]] = event
            current += event["size"]
            if current > peak:
                peak = current
                at_peak = list(live.values())
        elif action == "free_requested" and event["addr"] in live:
            current -= live.pop(event["addr"])["size"]
    return peak, at_peak


def summarise(snapshot: dict, device: int) -> dict:
    trace = snapshot["device_traces"][device]
    peak, blocks = live_at_peak(trace)
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for b in blocks:
        g = groups[_site(b.get("frames", []))]
        g[0] += b["size"]
        g[1] += 1
    rows = sorted(({"bytes": v[0], "count": v[1], "site": k} for k, v in groups.items()),
                  key=lambda r: -r["bytes"])
    return {"peak_bytes_in_trace": peak, "max_memory_allocated": torch.cuda.max_memory_allocated(device),
            "trace_events": len(trace), "live_at_peak": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--all-ranks", action="store_true")
    parser.add_argument("--max-entries", type=int, default=400_000)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    rank = int(os.environ.get("RANK", 0))
    torch.cuda.memory._record_memory_history(max_entries=a.max_entries, stacks="python")

    def dump() -> None:
        if rank != 0 and not a.all_ranks:
            return
        device = torch.cuda.current_device()
        a.out.mkdir(parents=True, exist_ok=True)
        summary = summarise(torch.cuda.memory._snapshot(), device)
        (a.out / f"rank{rank}.json").write_text(json.dumps(summary, indent=1) + "\n")
        top = summary["live_at_peak"][:12]
        print(f"[mem_snapshot rank {rank}] peak {summary['peak_bytes_in_trace'] / 2**30:.2f} GiB "
              f"(max_memory_allocated {summary['max_memory_allocated'] / 2**30:.2f})", flush=True)
        for r in top:
            print(f"  {r['bytes'] / 2**30:7.3f} GiB  x{r['count']:<5d} {r['site'][:160]}", flush=True)

    atexit.register(dump)
    sys.argv = [a.script, *[x for x in a.args if x != "--"]]
    runpy.run_path(a.script, run_name="__main__")


if __name__ == "__main__":
    main()
