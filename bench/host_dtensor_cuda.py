"""Host time of DTensor (TP) and FSDP2 steps on CUDA tensors against CPU tensors, on one GPU.

phantom measures the script's host time on the simulating machine, where every tensor is fake,
and converts it by one factor measured on a plain CPU step (`phantom.engine.host`). Session 6
(`host_torch_versions.py`) found the GPU hosts run DTensor's Python about as fast as the
development VMs on CPU tensors, yet TP steps come out 14-25% short in simulation. What a CPU run
cannot show is the host work that exists only on CUDA tensors: kernel launches, the caching
allocator, streams and events. This times the same tiny steps (4 MLP blocks of width 64, batch
16: host-bound on any GPU) on CPU tensors and on CUDA tensors, one process, a fake process group
of 2 ranks (collectives are no-ops on both devices), one intra-op thread, and prints the
difference per step and per kernel launched.

    python bench/host_dtensor_cuda.py --out bench/data/host_dtensor_cuda_h100.json   # on a GPU host

Each workload's time is the median of `--rounds` timings of 4 steps (after 3 warm-up steps),
synchronised at both ends on CUDA; `kernels` counts one step's CUDA activities in the profiler
(kernels and device copies).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

import host_torch_versions as workloads


def _kernels_per_step(step) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def _top_host_ops(step, device: str, n: int = 25) -> str:
    """The profiler's table of 4 steps' host-side ops by self CPU time (where the time goes)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    for _ in range(2):
        step()
    with profile(activities=acts) as prof:
        for _ in range(4):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=n, max_name_column_width=60)


def _time(step, device: str, rounds: int, steps: int = 4) -> float:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        step()
    sync()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            step()
        sync()
        times.append((time.perf_counter_ns() - t0) / steps)
    return statistics.median(times)


def _build(name: str, device: str):
    """The workload's step on `device`: host_torch_versions' models, meshes on that device."""
    import torch.distributed.device_mesh as device_mesh

    real_init = device_mesh.init_device_mesh

    def init_on_device(_kind, shape, **kwargs):
        return real_init(device, shape, **kwargs)

    device_mesh.init_device_mesh = init_on_device  # host_torch_versions asks for "cpu"
    try:
        return {"plain_mlp": workloads.plain_step, "tp_dtensor": workloads.tp_step,
                "fsdp2": workloads.fsdp_step}[name]()
    finally:
        device_mesh.init_device_mesh = real_init


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--out", type=Path)
    p.add_argument("--profile", type=Path, help="also write each workload's top host ops (4 steps) here")
    p.add_argument("--cpu-only", action="store_true", help="time the CPU side alone (no GPU here)")
    a = p.parse_args()
    devices = ("cpu",) if a.cpu_only else ("cpu", "cuda")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    torch.set_num_threads(1)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    host = workloads._load_host_module()
    reference_us = min(host.reference_step_ns(rounds=3) for _ in range(5)) / 1e3
    print(f"reference step {reference_us:.1f} us", flush=True)
    rows = {}
    for name in ("plain_mlp", "tp_dtensor", "fsdp2"):
        row = {}
        for device in devices:
            torch.set_default_device(device)  # the model and each step's input
            step = _build(name, device)
            row[f"{device}_us"] = round(_time(step, device, a.rounds) / 1e3, 1)
            if device == "cuda":
                row["kernels"] = _kernels_per_step(step)
            if a.profile:
                with a.profile.open("a") as f:
                    f.write(f"\n## {name} on {device}\n{_top_host_ops(step, device)}\n")
            torch.set_default_device(None)
        if "cuda_us" in row:
            row["cuda_extra_us"] = round(row["cuda_us"] - row["cpu_us"], 1)
            row["extra_per_kernel_us"] = round(row["cuda_extra_us"] / max(row["kernels"], 1), 2)
        rows[name] = row
        print(name, row, flush=True)
    result = {"device": torch.cuda.get_device_name() if not a.cpu_only else "none", "torch": torch.__version__,
              "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
              "date": time.strftime("%Y-%m-%d"), "reference_step_us": round(reference_us, 1),
              "workloads": rows}
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
