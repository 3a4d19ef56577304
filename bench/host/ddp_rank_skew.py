"""Where a data-parallel step's extra time goes: each rank's host timeline, step by step.

    torchrun --nproc-per-node 2 bench/host/ddp_rank_skew.py --out skew.json      # on the GPUs
    phantom run --nproc-per-node 2 --gpu H100 bench/host/ddp_rank_skew.py --out skew_sim.json

The SD UNet step of `examples/diffusion/unet_ddp.py` (DDP, bf16 autocast, AdamW, synthetic
latents), with each rank recording `time.perf_counter()` when its forward returns, when its
backward returns, after the optimizer step, and after `torch.cuda.synchronize()` ends the
step. On one host the clock is shared by the rank processes, so the ranks' timestamps compare
directly; under phantom each rank's clock is its simulated host clock. Rank 0 writes every
rank's timestamps, plus per-step summaries: how far apart the ranks finish their backward on the
host, and how long the step runs past the later of the two.

Why: the real 2-GPU UNet step is 40-58 ms (14-25%) longer than the 1-GPU step on the same
machine, two independent copies on two GPUs are not slower than one, and phantom's ranks, which charge one leader's host gaps, finish together.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "diffusion"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from diffusers import UNet2DConditionModel
    from torch.nn.parallel import DistributedDataParallel as DDP
    from unet_ddp import SD15_UNET

    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    device = torch.device("cuda", local_rank)
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**SD15_UNET).to(device)
    model = DDP(unet, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-5, weight_decay=1e-2)

    marks: list[dict[str, float]] = []
    torch.cuda.synchronize()
    dist.barrier()
    for _ in range(args.steps):
        m = {"start": time.perf_counter()}
        latents = torch.randn(args.batch_size, 4, 64, 64, device=device)
        text = torch.randn(args.batch_size, 77, SD15_UNET["cross_attention_dim"], device=device)
        noise = torch.randn_like(latents)
        timesteps = torch.randint(0, 1000, (args.batch_size,), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pred = model(latents + noise, timesteps, encoder_hidden_states=text).sample
        loss = F.mse_loss(pred.float(), noise)
        m["forward"] = time.perf_counter()
        loss.backward()
        m["backward"] = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        m["optimizer"] = time.perf_counter()
        torch.cuda.synchronize()
        m["end"] = time.perf_counter()
        marks.append(m)

    every: list = [None] * world
    dist.all_gather_object(every, marks)
    if rank == 0:
        steps = []
        for i in range(args.warmup, args.steps):
            per_rank = [every[r][i] for r in range(world)]
            bwd = [m["backward"] for m in per_rank]
            steps.append({
                "step_ms": max(m["end"] - m["start"] for m in per_rank) * 1e3,
                "host_ms": [(m["optimizer"] - m["start"]) * 1e3 for m in per_rank],
                "backward_apart_ms": (max(bwd) - min(bwd)) * 1e3,
                "past_last_host_ms": (max(m["end"] for m in per_rank)
                                      - max(m["optimizer"] for m in per_rank)) * 1e3,
            })
        summary = {k: statistics.median(s[k] for s in steps)
                   for k in ("step_ms", "backward_apart_ms", "past_last_host_ms")}
        summary["host_ms_per_rank"] = [statistics.median(s["host_ms"][r] for s in steps) for r in range(world)]
        Path(args.out).write_text(json.dumps({"world": world, "gpu": torch.cuda.get_device_name(),
                                              "torch": torch.__version__, "summary": summary,
                                              "steps": steps, "marks": every}, indent=1))
        print(f"summary: {json.dumps(summary)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
