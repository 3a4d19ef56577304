"""Train a timm Vision Transformer with fp16 autocast and a GradScaler, as classic AMP recipes do.

One process per GPU (torchrun, or plain `python` for one GPU); DDP when the world is larger
than one. Synthetic images in pinned host memory, copied to the GPU each step. fp16 needs the
GradScaler: each step scales the loss, unscales the gradients before clipping them, skips the
optimizer step if any gradient overflowed (a read of a device value, every step) and updates
the scale.

    python examples/vision/timm_vit_amp.py --model vit_base_patch16_224 --batch-size 128
    torchrun --nproc-per-node 2 examples/vision/timm_vit_amp.py

Rank 0 prints one line per step (timed with CUDA events) and a final `summary:` line.
"""
import argparse
import os
import statistics

import timm
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vit_base_patch16_224", help="a timm model name")
    parser.add_argument("--batch-size", type=int, default=128, help="images per step per GPU")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the median")
    args = parser.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    if world > 1:
        dist.init_process_group("nccl")
    rank = dist.get_rank() if world > 1 else 0

    model = timm.create_model(args.model, num_classes=1000).cuda()
    size = model.pretrained_cfg.get("input_size", (3, 224, 224))
    if world > 1:
        model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    scaler = torch.amp.GradScaler("cuda")
    images = torch.randn(args.batch_size, *size).pin_memory()
    labels = torch.randint(0, 1000, (args.batch_size,)).pin_memory()

    times_ms = []
    for step in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        x, y = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        end.record()
        end.synchronize()
        times_ms.append(start.elapsed_time(end))
        if rank == 0:
            print(f"step {step} | {times_ms[-1]:.2f} ms | "
                  f"{args.batch_size * world / times_ms[-1] * 1e3:,.0f} img/s", flush=True)
    if rank == 0:
        median_ms = statistics.median(times_ms[args.warmup:] or times_ms)
        print(f"summary: median_iter_ms={median_ms:.2f} images_per_s={args.batch_size * world / median_ms * 1e3:.0f} "
              f"peak_alloc_gib={torch.cuda.max_memory_allocated() / GIB:.2f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
