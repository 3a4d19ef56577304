"""The caching allocator's segments around the first optimizer steps: where a script's optimizer
states land, in the cache the backward left or in new segments.

Real side and phantom's side of one comparison, the same command under each:

    torchrun --nproc-per-node 4 bench/opt_step_segments.py --out DIR -- bench/torchtitan_entry.py ...
    phantom run --nproc-per-node 4 --gpu H100 bench/opt_step_segments.py --out DIR -- SCRIPT ...

Rank 0 writes DIR/segments.json: before and after each of the first `--steps` optimizer steps,
reserved and allocated bytes and, per stream, the segments' total, allocated and free bytes
and the free blocks of 1 MiB or more (largest first). torch's global optimizer hooks
(`register_optimizer_step_pre_hook`/`post_hook`) see every optimizer, so the script is unchanged.
With `--big-allocs MIB`, the second step's allocations and frees of MIB or more (the allocator's
history, recorded from the first step's end) are listed in order with their Python frames;
`--trace-step 1` lists the first step's instead, recorded from the start.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

MiB = 1 << 20


def summarise_segments(segments: list[dict]) -> dict:
    """Per stream: segment count, total/allocated/free bytes, free blocks >= 1 MiB (largest first)."""
    streams: dict[str, dict] = defaultdict(lambda: {"segments": 0, "total": 0, "allocated": 0,
                                                    "free": 0, "free_blocks_mib": []})
    for seg in segments:
        s = streams[f"{seg.get('stream', 0)}:{seg.get('segment_type', '?')}"]
        s["segments"] += 1
        s["total"] += seg["total_size"]
        s["allocated"] += seg["allocated_size"]
        addr = seg.get("address", 0)
        for block in seg.get("blocks", []):
            if block["state"] == "inactive":
                s["free"] += block["size"]
                if block["size"] >= MiB:
                    s["free_blocks_mib"].append(round(block["size"] / MiB, 1))
                    if block["size"] >= 1024 * MiB:  # where the big cached blocks are
                        s.setdefault("free_big", []).append([addr, block["size"]])
            addr += block["size"]
    for s in streams.values():
        s["free_blocks_mib"].sort(reverse=True)
    return dict(streams)


class Recorder:
    def __init__(self, out: Path, steps: int) -> None:
        self.out, self.steps, self.records, self.step = out, steps, [], 0
        self.depth = 0  # optimizers inside optimizers (torchtitan's container is one): outermost only
        self.big_mib = 0  # --big-allocs
        self.trace_step = 2  # --trace-step

    def before(self, *_) -> None:
        self.depth += 1
        if self.depth == 1:
            self.mark("before")

    def after(self, *_) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.mark("after")
            if self.step == self.trace_step - 1 and self.big_mib:
                # the traced step's large allocations and frees, with their stacks
                torch.cuda.memory._record_memory_history(max_entries=400_000)

    def big_events(self) -> list[dict]:
        """The recorded trace's allocations and frees of `big_mib` MiB or more, in order."""
        trace = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
        keep = []
        for e in trace:
            if e["action"] in ("alloc", "free_requested", "segment_alloc") and e["size"] >= self.big_mib * MiB:
                frames = [f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in e.get("frames", [])
                          if f["filename"].endswith(".py")
                          and ("torch/" not in f["filename"] or "torchtitan" in f["filename"])][:4]
                keep.append({"action": e["action"], "mib": round(e["size"] / MiB, 2), "addr": e.get("addr"),
                             "stream": e.get("stream", 0), "frames": frames})
        return keep

    def mark(self, when: str) -> None:
        if self.step >= self.steps:
            return
        self.records.append({"step": self.step + 1, "when": when,
                             "reserved": torch.cuda.memory_reserved(),
                             "allocated": torch.cuda.memory_allocated(),
                             "streams": summarise_segments(torch.cuda.memory_snapshot())})
        if when == "before" and self.step == self.trace_step - 1 and self.big_mib:
            self.records[-1]["big_events"] = self.big_events()
        if when == "after":
            self.step += 1
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "segments.json").write_text(json.dumps(self.records, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--trace-step", type=int, default=2, choices=(1, 2),
                   help="with --big-allocs: the step whose allocations are listed (1: from the start)")
    p.add_argument("--big-allocs", type=float, default=0, metavar="MIB",
                   help="also list the second step's allocations and frees of MIB or more, with stacks")
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS]")
    args = p.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not script:
        p.error("give the script after --")
    if os.environ.get("RANK", "0") == "0":
        rec = Recorder(Path(args.out), args.steps)
        rec.big_mib = args.big_allocs
        rec.trace_step = args.trace_step
        if args.big_allocs and args.trace_step == 1:
            torch.cuda.memory._record_memory_history(max_entries=400_000)
        register_optimizer_step_pre_hook(rec.before)
        register_optimizer_step_post_hook(rec.after)
    sys.argv = script
    runpy.run_path(script[0], run_name="__main__")


if __name__ == "__main__":
    main()
