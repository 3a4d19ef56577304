"""What is allocated on the device between the rows of `cuda_graphs.py`, by where it was
allocated: the same script on a GPU and under phantom, to find which allocations one side
keeps alive and the other does not.

Records the allocator's history (`torch.cuda.memory._record_memory_history`) and, before each
row of `cuda_graphs.py`'s training and inference steps, takes `_snapshot()` and sums the
active blocks by the innermost frame of their allocation stack in the script's own code
(torch's and phantom's frames skipped), with `memory_allocated()` beside it.

    python bench/probes/live_blocks.py --batch 2 --out real.json               # on the GPU
    phantom run --gpu H100 bench/probes/live_blocks.py --batch 2 --out sim.json
    python bench/probes/live_blocks.py --compare real.json sim.json
"""
from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import sys

MIB = 2**20
_HERE = os.path.dirname(os.path.abspath(__file__))


def python_frames(frames: list[dict]) -> list[str]:
    """The Python frames of an allocation stack outside torch and phantom, innermost first
    (a GPU's stacks also hold C++ frames, phantom's none)."""
    torch_dir = os.sep + "torch" + os.sep
    return [f"{os.path.basename(f['filename'])}:{f.get('line')} {f.get('name')}" for f in frames
            if f.get("filename", "").endswith(".py") and torch_dir not in f["filename"]
            and "phantom" + os.sep not in f["filename"]]


def torch_frame(frames: list[dict]) -> str:
    """The innermost Python frame inside torch (what in torch allocated it), or ''."""
    torch_dir = os.sep + "torch" + os.sep
    for f in frames:
        if f.get("filename", "").endswith(".py") and torch_dir in f["filename"]:
            return f"torch/{f['filename'].split(torch_dir, 1)[1]}:{f.get('line')}"
    return ""


def site_of(frames: list[dict]) -> str:
    """Where the script asked for the memory, and the torch frame that allocated it."""
    own = python_frames(frames)
    inner = torch_frame(frames)
    return (own[0] if own else "(no script frame)") + (f" via {inner}" if inner else "")


def live_by_site() -> dict[str, float]:
    import torch

    sites: dict[str, float] = collections.Counter()
    for seg in torch.cuda.memory._snapshot()["segments"]:
        for block in seg["blocks"]:
            if block["state"] == "active_allocated":
                sites[site_of(block.get("frames", []))] += block["size"] / MIB
    return {k: round(v, 2) for k, v in sorted(sites.items(), key=lambda kv: -kv[1])}


def run(batch: int, out: str) -> None:
    import torch

    sys.path.insert(0, _HERE)
    import cuda_graphs as cg

    torch.cuda.memory._record_memory_history(max_entries=200_000)
    samples = []
    timed = cg.timed

    def sampled(step, label):
        gc.collect()
        samples.append({"before": label["name"], "allocated_mib": round(torch.cuda.memory_allocated() / MIB, 2),
                        "sites": live_by_site()})
        row = timed(step, label)
        samples[-1]["peak_gib"] = row["peak_gib"]
        return row

    cg.timed = sampled
    cg.training_rows(batch)
    cg.inference_rows(batch)
    gc.collect()
    samples.append({"before": "end", "allocated_mib": round(torch.cuda.memory_allocated() / MIB, 2),
                    "sites": live_by_site()})
    with open(out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "samples": samples}, f, indent=1)


def compare(real_path: str, sim_path: str) -> str:
    real, sim = (json.load(open(p))["samples"] for p in (real_path, sim_path))
    lines = []
    for r, s in zip(real, sim):
        lines.append(f"\n## before {r['before']}: allocated real {r['allocated_mib']} MiB, phantom {s['allocated_mib']} MiB"
                     f" (peak of the row: {r.get('peak_gib')} / {s.get('peak_gib')} GiB)")
        for site in sorted(set(r["sites"]) | set(s["sites"]), key=lambda k: -max(r["sites"].get(k, 0), s["sites"].get(k, 0))):
            a, b = r["sites"].get(site, 0.0), s["sites"].get(site, 0.0)
            if abs(a - b) >= 0.5:
                lines.append(f"  {site:<70} real {a:9.2f}  phantom {b:9.2f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--out")
    p.add_argument("--compare", nargs=2, metavar=("REAL", "SIM"))
    a = p.parse_args()
    if a.compare:
        print(compare(*a.compare))
    else:
        run(a.batch, a.out or "live_blocks.json")


if __name__ == "__main__":
    main()
