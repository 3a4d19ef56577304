"""Host cost of issuing one NCCL collective, per op, on a real GPU host.

    torchrun --nproc-per-node 2 bench/probes/collective_host_cost.py --out collective_host_cost.json

phantom measures the script's own Python, `torch.distributed`'s wrappers included, on the
simulating machine; what it cannot run is ProcessGroupNCCL's C++ side (work object, CUDA
events, stream waits, the NCCL enqueue and kernel launch). This times both on the GPU host
with tiny (4 KiB) tensors, so the GPU is never the bottleneck:

- `api`: the public call (`dist.all_reduce(t)`, ...), as a script makes it;
- `backend`: the same collective straight on the ProcessGroup object (`pg.allreduce([t])`,
  ...): pybind, the c10d dispatcher op and ProcessGroupNCCL, without the Python wrappers.

Each is the fastest of `--repeats` loops of `--calls` calls issued back to back, per call, in
wall and in CPU time. Rank 0 writes the result (`phantom.distributed.comm` takes `backend`).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from typing import Callable

import torch
import torch.distributed as dist


def timed(call: Callable[[], object], calls: int, repeats: int) -> dict:
    """Fastest loop of `calls` back-to-back calls, per call (wall and CPU us)."""
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            call()
        w1, c1 = time.perf_counter(), time.process_time()
        torch.cuda.synchronize()
        best_wall = min(best_wall, (w1 - w0) / calls * 1e6)
        best_cpu = min(best_cpu, (c1 - c0) / calls * 1e6)
    return {"wall_us": round(best_wall, 2), "cpu_us": round(best_cpu, 2)}


def ops(rank: int, world: int, numel: int) -> dict[str, tuple[Callable, Callable]]:
    """op -> (public API call, ProcessGroup call), on tensors of `numel` floats."""
    pg = dist.group.WORLD
    t = torch.ones(numel, device="cuda")
    out = torch.empty(numel * world, device="cuda")
    shard = torch.empty(numel // world, device="cuda")
    a2a_out = torch.empty_like(t)
    peer = (rank + 1) % world

    def sendrecv_api():
        return dist.send(t, peer) if rank == 0 else dist.recv(t, peer)

    def sendrecv_pg():
        return pg.send([t], peer, 0) if rank == 0 else pg.recv([t], peer, 0)

    return {
        "all_reduce": (lambda: dist.all_reduce(t), lambda: pg.allreduce([t])),
        "all_gather": (lambda: dist.all_gather_into_tensor(out, t), lambda: pg._allgather_base(out, t)),
        "reduce_scatter": (lambda: dist.reduce_scatter_tensor(shard, t), lambda: pg._reduce_scatter_base(shard, t)),
        "broadcast": (lambda: dist.broadcast(t, 0), lambda: pg.broadcast([t])),
        "all_to_all": (lambda: dist.all_to_all_single(a2a_out, t), lambda: pg.alltoall_base(a2a_out, t, [], [])),
        "sendrecv": (sendrecv_api, sendrecv_pg),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--numel", type=int, default=1024, help="float32 elements (1024: 4 KiB)")
    p.add_argument("--out", default="collective_host_cost.json")
    a = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    results = {}
    for name, (api, backend) in ops(rank, world, a.numel).items():
        for _ in range(20):  # warm: communicators, NCCL's p2p connections, caches
            api()
            backend()
        torch.cuda.synchronize()
        results[name] = {"api": timed(api, a.calls, a.repeats), "backend": timed(backend, a.calls, a.repeats)}
        if rank == 0:
            print(name, results[name], flush=True)
    if rank == 0:
        meta = {"device": torch.cuda.get_device_name(), "world": world, "torch": torch.__version__,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())), "python": platform.python_version(),
                "numel": a.numel, "calls": a.calls, "repeats": a.repeats,
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "ops": results}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
