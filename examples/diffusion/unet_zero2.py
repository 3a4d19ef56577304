"""Train Stable Diffusion's UNet with DeepSpeed ZeRO-2 (diffusers `UNet2DConditionModel`).

The step of unet_ddp.py (SD 1.5's UNet from its config, random 64x64x4 latents and 77 x 768
text states, noise prediction, MSE loss) under `deepspeed.initialize` with ZeRO stage 2:
optimizer states and gradients partitioned over the ranks, bf16 training, DeepSpeed's AdamW
(torch's, DS_BUILD_OPS=0), gradients reduce-scattered in 500 MB buckets overlapping backward.

    deepspeed --num_gpus 2 examples/diffusion/unet_zero2.py --batch-size 8

Rank 0 prints one line per step and a final `summary:` line.
"""
import argparse
import os
import statistics
import time

import deepspeed
import torch
import torch.distributed as dist
import torch.nn.functional as F
from diffusers import UNet2DConditionModel

from unet_ddp import SD15_UNET  # noqa: E402  (same directory)

GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=8, help="latents per step per GPU")
    parser.add_argument("--resolution", type=int, default=512)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--local_rank", type=int, default=-1)  # passed by the deepspeed launcher
    args = parser.parse_args()

    deepspeed.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    ds_config = {
        "train_micro_batch_size_per_gpu": args.batch_size,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "weight_decay": 1e-2}},
        "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                              "reduce_scatter": True, "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8},
        "steps_per_print": 1_000_000,
    }
    torch.manual_seed(args.seed)
    unet = UNet2DConditionModel(**SD15_UNET)
    n_params = sum(p.numel() for p in unet.parameters())
    engine, _, _, _ = deepspeed.initialize(model=unet, model_parameters=unet.parameters(), config=ds_config)
    latent = args.resolution // 8
    if rank == 0:
        print(f"device: {world} x {torch.cuda.get_device_name()} | torch {torch.__version__} | UNet params "
              f"{n_params / 1e6:.1f}M | batch {args.batch_size} x {latent}x{latent} latents per GPU | ZeRO-2 bf16",
              flush=True)

    times_ms = []
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for it in range(args.steps):
        latents = torch.randn(args.batch_size, 4, latent, latent, device=engine.device, dtype=torch.bfloat16)
        text = torch.randn(args.batch_size, 77, SD15_UNET["cross_attention_dim"], device=engine.device,
                           dtype=torch.bfloat16)
        noise = torch.randn_like(latents)
        timesteps = torch.randint(0, 1000, (args.batch_size,), device=engine.device)
        pred = engine(latents + noise, timesteps, encoder_hidden_states=text).sample
        loss = F.mse_loss(pred.float(), noise.float())
        engine.backward(loss)
        engine.step()

        torch.cuda.synchronize()
        t1 = time.perf_counter()
        dt, t0 = t1 - t0, t1
        if it >= args.warmup:
            times_ms.append(dt * 1e3)
        if rank == 0:
            print(f"iter {it} | loss {loss.item():.4f} | {dt * 1e3:.2f} ms | {args.batch_size * world / dt:,.1f} img/s | "
                  f"peak {torch.cuda.max_memory_allocated() / GIB:.2f} GiB", flush=True)

    mine = (torch.cuda.max_memory_allocated() / GIB, torch.cuda.max_memory_reserved() / GIB)
    peaks: list = [None] * world
    dist.all_gather_object(peaks, mine)
    if rank == 0:
        times_ms = times_ms or [dt * 1e3]
        median_ms = statistics.median(times_ms)
        print(f"summary: median_iter_ms={median_ms:.2f} mean_iter_ms={statistics.mean(times_ms):.2f} "
              f"images_per_s={args.batch_size * world / (median_ms / 1e3):.1f} "
              f"peak_alloc_gib={max(a for a, _ in peaks):.2f} peak_reserved_gib={max(r for _, r in peaks):.2f} "
              f"params={n_params / 1e6:.1f}M", flush=True)


if __name__ == "__main__":
    main()
