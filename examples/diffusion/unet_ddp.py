"""Train Stable Diffusion's UNet (diffusers `UNet2DConditionModel`) with DistributedDataParallel.

Launched by torchrun, one process per GPU. The UNet is built from Stable Diffusion 1.5's
config (below, as in its `unet/config.json`; no download), with random weights. Each step is
the denoising objective of diffusers' text-to-image training script on synthetic data: random
64x64x4 latents (512x512 images through the VAE), 77 text-encoder states of width 768, random
timesteps, noise prediction with an MSE loss, bf16 autocast, AdamW. The VAE and text encoder
are frozen in that script and their outputs are what the UNet sees; here they are random
tensors of the same shapes.

    torchrun --nproc-per-node 2 examples/diffusion/unet_ddp.py --batch-size 8

Rank 0 prints one line per step and a final `summary:` line.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from diffusers import UNet2DConditionModel
from torch.nn.parallel import DistributedDataParallel as DDP

GIB = 2**30

SD15_UNET = dict(
    sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280, 1280),
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32, act_fn="silu",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=8, help="latents per step per GPU")
    parser.add_argument("--resolution", type=int, default=512, help="image size (latents are 1/8 of it)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    device = torch.device("cuda", local_rank)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    torch.manual_seed(args.seed)
    unet = UNet2DConditionModel(**SD15_UNET).to(device)
    unet.train()
    model = DDP(unet, device_ids=[local_rank])
    n_params = sum(p.numel() for p in unet.parameters())
    optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-5, weight_decay=1e-2)

    latent = args.resolution // 8
    if rank == 0:
        print(f"device: {world} x {torch.cuda.get_device_name()} | torch {torch.__version__} | UNet params "
              f"{n_params / 1e6:.1f}M | batch {args.batch_size} x {latent}x{latent} latents per GPU | bf16 autocast",
              flush=True)

    times_ms = []
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for it in range(args.steps):
        latents = torch.randn(args.batch_size, 4, latent, latent, device=device)
        text = torch.randn(args.batch_size, 77, SD15_UNET["cross_attention_dim"], device=device)
        noise = torch.randn_like(latents)
        timesteps = torch.randint(0, 1000, (args.batch_size,), device=device)
        noisy = latents + noise  # the scheduler's add_noise, up to per-timestep scales
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pred = model(noisy, timesteps, encoder_hidden_states=text).sample
        loss = F.mse_loss(pred.float(), noise)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
