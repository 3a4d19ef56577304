"""How much a running NCCL collective slows compute kernels on the same GPU (and back).

    torchrun --nproc-per-node 2 bench/overlap.py --out bench/data/overlap_h200x2.json   # on 2 GPUs

A calibration microbenchmark for phantom's compute/communication sharing model (not a
training benchmark): each kernel class is timed alone and while a stream of large
all-reduces runs on another stream, with CUDA events, after warm-up. Kernels:
- GEMM bf16 (compute bound), two shapes;
- elementwise add over 1 GiB tensors (HBM bound);
- and the all-reduce itself, alone and under the GEMM load.
Both ranks run the same sequence (the all-reduces match). Rank 0 writes the JSON.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os

import torch
import torch.distributed as dist


def _time(fn, reps: int, stream) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
    return start, end


def measure(kernel, reps: int, comm_buf, comm_stream, compute_stream, with_comm: bool) -> dict:
    torch.cuda.synchronize()
    dist.barrier()
    comm_events = None
    if with_comm:
        # Enough all-reduces to outlast the compute region (checked below).
        comm_stream.wait_stream(torch.cuda.current_stream())
        comm_events = _time(lambda: dist.all_reduce(comm_buf), 3 * reps, comm_stream)
    s, e = _time(kernel, reps, compute_stream)
    torch.cuda.synchronize()
    out = {"kernel_ms": s.elapsed_time(e) / reps}
    if comm_events:
        cs, ce = comm_events
        out["comm_ms"] = cs.elapsed_time(ce) / (3 * reps)
        out["comm_covers_kernels"] = cs.elapsed_time(ce) >= s.elapsed_time(e)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="overlap.json")
    args = p.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    compute_stream, comm_stream = torch.cuda.Stream(), torch.cuda.Stream()
    comm_buf = torch.randn(64 * 2**20, device="cuda")  # 256 MiB fp32, ~1 ms per all-reduce

    def gemm(m, n, k):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        return lambda: torch.mm(a, b)

    x = torch.randn(256 * 2**20, device="cuda")  # 1 GiB fp32
    y = torch.randn_like(x)
    z = torch.empty_like(x)
    kernels = {
        "gemm_8192x8192x8192_bf16": (gemm(8192, 8192, 8192), 20),
        "gemm_16384x4096x2048_bf16": (gemm(16384, 4096, 2048), 60),
        "add_1GiB_fp32": (lambda: torch.add(x, y, out=z), 30),
    }
    results = {}
    for name, (fn, reps) in kernels.items():
        for _ in range(3):
            fn()
        alone = measure(fn, reps, comm_buf, comm_stream, compute_stream, False)
        shared = measure(fn, reps, comm_buf, comm_stream, compute_stream, True)
        results[name] = {"alone_ms": alone["kernel_ms"], "with_allreduce_ms": shared["kernel_ms"],
                         "slowdown": shared["kernel_ms"] / alone["kernel_ms"],
                         "allreduce_ms_during": shared["comm_ms"],
                         "comm_covers_kernels": shared["comm_covers_kernels"]}
    # The all-reduce alone, for its own slowdown under compute.
    torch.cuda.synchronize()
    s, e = _time(lambda: dist.all_reduce(comm_buf), 30, comm_stream)
    torch.cuda.synchronize()
    results["allreduce_256MiB_fp32_alone_ms"] = s.elapsed_time(e) / 30
    if rank == 0:
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
                "date": datetime.date.today().isoformat(), "world_size": dist.get_world_size(),
                "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "NCCL_MAX_NCHANNELS")}}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
        print(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
