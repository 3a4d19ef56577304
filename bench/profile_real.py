"""Kernel-level profile of one training step of a script on real GPUs (torch.profiler).

    torchrun --nproc-per-node 2 bench/profile_real.py --step 5 --out prof.json -- examples/dist_train.py --parallel ddp ...

Runs the script unchanged (as `__main__`) under torch.profiler, recording the optimizer step
number `--step` (steps are counted by an optimizer-step hook). Rank 0 writes per-kernel-class
GPU time, NCCL kernel time, the step's GPU span and the time compute kernels spent
overlapping NCCL kernels, for comparison with phantom's report of the same script. For
diagnosis on the GPU machines; not a benchmark.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.profiler import ProfilerActivity, profile, schedule


def _class(name: str) -> str:
    n = name.lower()
    if "nccl" in n:
        return "nccl"
    if "gemm" in n or "cutlass" in n or "xmma" in n or "sm90" in n or "nvjet" in n:
        return "gemm"
    if "flash" in n or "fmha" in n or "cudnn" in n or "attention" in n:
        return "attention"
    if "adam" in n or "multi_tensor" in n:
        return "optimizer"
    if "copy" in n or "memcpy" in n or "cast" in n:
        return "copy"
    return "other"


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -1.0
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def summarize(prof, steps: int = 1) -> dict:
    """Totals over the recorded window, divided by `steps` (the steps it holds)."""
    raw = _summarize(prof)
    per_step = {k: (v / steps if isinstance(v, float) else v) for k, v in raw.items()}
    per_step["gpu_ms_by_class"] = {c: ms / steps for c, ms in raw["gpu_ms_by_class"].items()}
    per_step["steps"] = steps
    return per_step


def _summarize(prof) -> dict:
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and e.time_range.end > e.time_range.start]
    by_class: dict[str, float] = {}
    spans: dict[str, list] = {}
    for k in kernels:
        c = _class(k.name)
        d = (k.time_range.end - k.time_range.start) / 1e3
        by_class[c] = by_class.get(c, 0.0) + d
        spans.setdefault(c, []).append((k.time_range.start / 1e3, k.time_range.end / 1e3))
    compute = [iv for c, ivs in spans.items() if c != "nccl" for iv in ivs]
    nccl = spans.get("nccl", [])
    start = min(s for s, _ in compute + nccl)
    end = max(e for _, e in compute + nccl)
    both = _union(compute) + _union(nccl) - _union(compute + nccl)
    by_name: dict[str, list] = {}
    for k in kernels:
        row = by_name.setdefault(k.name[:160], [0, 0.0])
        row[0] += 1
        row[1] += (k.time_range.end - k.time_range.start) / 1e3
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:60]
    # Host side: the span of the CPU ops recorded in the step, and how long the GPU sat idle
    # with no kernel on any stream (host-bound phases show up there).
    cpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    cpu_span = (max(e.time_range.end for e in cpu) - min(e.time_range.start for e in cpu)) / 1e3 if cpu else 0.0
    nccl_ms = sorted(round((k.time_range.end - k.time_range.start) / 1e3, 3) for k in kernels
                     if _class(k.name) == "nccl")
    return {"gpu_ms_by_class": by_class, "gpu_span_ms": end - start, "nccl_kernel_ms": nccl_ms,
            "compute_busy_ms": _union(compute), "nccl_busy_ms": _union(nccl),
            "compute_and_nccl_overlap_ms": both, "gpu_idle_ms": end - start - _union(compute + nccl),
            "cpu_span_ms": cpu_span, "kernels": len(kernels),
            "top_kernels": [{"name": n, "count": c, "ms": round(ms, 3)} for n, (c, ms) in top]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--step", type=int, default=5)
    p.add_argument("--out", default="profile.json")
    p.add_argument("--cpu", action="store_true",
                   help="record CPU ops as well (host spans; adds profiler overhead to the host)")
    p.add_argument("--active", type=int, default=1, help="steps recorded (from --step on)")
    p.add_argument("--sync", action="store_true",
                   help="synchronize at each optimizer step before the profiler steps, so the "
                        "window holds exactly the recorded steps' kernels")
    p.add_argument("--trace", help="also write rank 0's Chrome trace of the step to this path")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if a.cpu else [ProfilerActivity.CUDA]
    prof = profile(activities=activities,
                   schedule=schedule(wait=a.step - 1, warmup=1, active=a.active, repeat=1))

    hooks = [0]

    def on_step(*_args) -> None:
        hooks[0] += 1
        if a.sync:
            torch.cuda.synchronize()
        prof.step()

    register_optimizer_step_post_hook(on_step)
    sys.argv = [a.script, *[x for x in a.args if x != "--"]]
    # as `python SCRIPT` would: the script's folder first on the path, not this one (bench/
    # holds deepspeed.py and megatron.py, which would shadow the frameworks)
    sys.path[0] = os.path.dirname(os.path.abspath(a.script))
    prof.start()
    runpy.run_path(a.script, run_name="__main__")
    prof.stop()
    if int(os.environ.get("RANK", "0")) == 0:
        summary = summarize(prof, a.active)
        summary["optimizer_step_hooks"] = hooks[0]  # in the whole run (some frameworks step
        # several torch optimizers an iteration: Megatron's dense and expert ones)
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)
        print(json.dumps({k: v for k, v in summary.items() if k not in ("top_kernels", "nccl_kernel_ms")},
                         indent=1))
        if a.trace:
            prof.export_chrome_trace(a.trace)


if __name__ == "__main__":
    main()
