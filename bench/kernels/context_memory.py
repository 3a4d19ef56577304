"""Device memory a process holds outside PyTorch's caching allocator (CUDA context, loaded kernel
images, cuBLAS/cuDNN handles, NCCL communicators): cudaMemGetInfo's used bytes minus
torch.cuda.memory_reserved(). phantom charges it as the allocator's `driver_reserved_bytes`,
which sets when a simulated allocation runs out of memory.

    python bench/kernels/context_memory.py stages --out $OUT/context_memory.json
    torchrun --nproc-per-node 1 bench/kernels/context_memory.py script --out $OUT/x.json -- SCRIPT ARGS...

`stages` adds one library at a time (context, cuBLAS GEMM, cuDNN and flash attention, a one-rank
NCCL group and its first collective, more NCCL groups) and records the non-PyTorch bytes after
each; `script` runs a training script unchanged and records them when it exits.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import runpy
import sys
import time

import torch

MiB = 2**20


def outside_torch() -> dict:
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    reserved = torch.cuda.memory_reserved()
    return {"total": total, "used": total - free, "torch_reserved": reserved,
            "outside_torch_mib": round((total - free - reserved) / MiB, 1),
            "max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3)}


def stages() -> list[dict]:
    import torch.distributed as dist
    import torch.nn.functional as F

    out = []

    def mark(name: str) -> None:
        out.append({"stage": name, **outside_torch()})
        print(f"{name:40s} {out[-1]['outside_torch_mib']:8.1f} MiB outside PyTorch", flush=True)

    torch.empty(1, device="cuda")
    mark("context")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    mark("bf16 GEMM (cuBLAS)")
    q = torch.randn(1, 16, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for backend, name in ((SDPBackend.CUDNN_ATTENTION, "SDPA cuDNN fwd+bwd"),
                          (SDPBackend.FLASH_ATTENTION, "SDPA flash fwd+bwd")):
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
        mark(name)
    w = torch.randn(4096, 4096, device="cuda", requires_grad=True)
    opt = torch.optim.AdamW([w], fused=True)
    for _ in range(2):
        (F.layer_norm(a.float() @ w, (4096,)).sum()).backward()
        opt.step()
    mark("fp32 GEMM, layer norm, fused AdamW")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    mark("init_process_group(nccl), 1 rank")
    t = torch.randn(64 * MiB // 4, device="cuda")
    dist.all_reduce(t)
    mark("first all_reduce (communicator made)")
    for i in range(8):
        g = dist.new_group([0])
        dist.all_reduce(t, group=g)
    mark("8 more groups, one all_reduce each")
    dist.destroy_process_group()
    return out


def run_script(argv: list[str], out: str) -> None:
    def record() -> None:
        if torch.cuda.is_initialized():
            data = {"script": argv, **outside_torch(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            if int(os.environ.get("RANK", "0")) == 0:
                with open(out, "w") as f:
                    json.dump(data, f, indent=1)
                print(f"context_memory: {data['outside_torch_mib']} MiB outside PyTorch at exit", flush=True)

    atexit.register(record)
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["stages", "script"])
    ap.add_argument("--out", required=True)
    args, rest = ap.parse_known_args()
    if args.mode == "stages":
        rows = stages()
        device = torch.cuda.get_device_name(0)
        with open(args.out, "w") as f:
            json.dump({"device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
                       "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "stages": rows}, f, indent=1)
    else:
        run_script(rest[1:] if rest[:1] == ["--"] else rest, args.out)


if __name__ == "__main__":
    main()
