"""`host_dtensor_cuda.py`'s steps as phantom simulates them: 2 ranks, simulated NCCL.

    phantom run --nproc-per-node 2 --gpu H100 bench/host_dtensor_sim.py tp_dtensor

The same tiny models (4 MLP blocks of width 64, batch 16; host-bound on any GPU) on CUDA, with
meshes over the simulated 'nccl' group (the real side runs a fake group in one process: its
collectives cost nothing, where phantom charges each collective's host cost, ~20 us). Rank 0
prints the median and fastest of 12 synchronised steps after 3 warm-up steps.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.device_mesh as device_mesh

sys.path.insert(0, str(Path(__file__).resolve().parent))
import host_torch_versions as workloads  # noqa: E402


def build_step(name: str):
    """This rank's process group on the simulated NCCL, meshes on CUDA, and the named
    workload's step, warmed up by 3 calls."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    real_init = device_mesh.init_device_mesh
    device_mesh.init_device_mesh = lambda _kind, shape, **kw: real_init("cuda", shape, **kw)
    torch.set_default_device(f"cuda:{local}")
    step = {"plain_mlp": workloads.plain_step, "tp_dtensor": workloads.tp_step,
            "fsdp2": workloads.fsdp_step}[name]()
    for _ in range(3):
        step()
    return step


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "tp_dtensor"
    step = build_step(name)
    times = []
    for _ in range(12):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    if dist.get_rank() == 0:
        print(f"{name} median {statistics.median(times):.0f} us, fastest {min(times):.0f} us", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
