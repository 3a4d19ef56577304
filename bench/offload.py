"""Host <-> device copies and activation offloading, real and simulated.

The same script on a GPU (`python bench/offload.py`) and under phantom (`phantom run --gpu
H200 bench/offload.py`). Prints one JSON line per measurement:

- `copy`: 1 GiB copied each way between the GPU and pinned or pageable host memory (CUDA
  events around one copy into an existing buffer, median of 5 after 2 warm-up copies);
- `step`: a training step of four 2048 -> 8192 -> 2048 GeLU MLP blocks on 8 x 2048 tokens,
  plain and under `torch.autograd.graph.save_on_cpu(pin_memory=True)` (every saved activation
  copied to pinned host memory in the forward and back in the backward), median of steps 3-7,
  with the peak allocated memory.

    python bench/offload.py --out real.jsonl
    phantom run --gpu H200 bench/offload.py --out sim.jsonl
    python bench/offload.py --compare real.jsonl sim.jsonl
"""
from __future__ import annotations

import argparse
import statistics
import time

from jsonl import emit, rows_by

GIB = 2**30


def copies() -> list[dict]:
    import torch

    dev = torch.empty(GIB // 4, device="cuda")
    rows = []
    for pinned in (True, False):
        host = torch.empty(GIB // 4, pin_memory=pinned)
        for name, copy in (("d2h", lambda: host.copy_(dev, non_blocking=pinned)),
                           ("h2d", lambda: dev.copy_(host, non_blocking=pinned))):
            times = []
            for i in range(7):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                copy()
                end.record()
                end.synchronize()
                if i >= 2:
                    times.append(start.elapsed_time(end))
            ms = statistics.median(times)
            rows.append({"kind": "copy", "name": f"{name}_{'pinned' if pinned else 'pageable'}",
                         "ms": round(ms, 3), "gbps": round(GIB / ms / 1e6, 2)})
    return rows


def steps() -> list[dict]:
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 2048))
                            for _ in range(4)]).cuda()
    x = torch.randn(8, 2048, 2048, device="cuda")
    rows = []
    for offload in (False, True):
        torch.cuda.reset_peak_memory_stats()
        times = []
        for i in range(7):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            if offload:
                with torch.autograd.graph.save_on_cpu(pin_memory=True):
                    loss = model(x).float().pow(2).mean()
            else:
                loss = model(x).float().pow(2).mean()
            loss.backward()
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            if i >= 2:
                times.append((time.perf_counter() - t0) * 1e3)
        rows.append({"kind": "step", "name": "save_on_cpu" if offload else "plain",
                     "ms": round(statistics.median(times), 2),
                     "peak_gib": round(torch.cuda.max_memory_allocated() / GIB, 3)})
    return rows


def compare(real_path: str, sim_path: str) -> str:
    real, sim = rows_by(real_path, "name"), rows_by(sim_path, "name")
    out = ["| measurement | real ms | phantom ms | error | real peak GiB | phantom peak GiB |",
           "|---|---|---|---|---|---|"]
    for (name,), r in real.items():
        s = sim.get((name,))
        if s is None:
            continue
        err = (s["ms"] / r["ms"] - 1) * 100
        out.append(f"| {r['kind']} {name} | {r['ms']} | {s['ms']} | {err:+.1f}% | "
                   f"{r.get('peak_gib', '')} | {s.get('peak_gib', '')} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--compare", nargs=2, metavar=("REAL", "SIM"))
    a = p.parse_args()
    if a.compare:
        print(compare(*a.compare))
        return
    emit(copies() + steps(), a.out)

if __name__ == "__main__":
    main()
