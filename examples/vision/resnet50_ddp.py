"""Train torchvision's ResNet-50 on ImageNet-sized images with DistributedDataParallel.

Launched by torchrun, one process per GPU; synthetic images and labels (made on the CPU, as a
data loader would, and copied to the GPU each step), so the loss is meaningless and the point
is the speed and memory of a realistic step: the recipe of torchvision's reference
classification script (SGD with momentum 0.9, weight decay 1e-4, label smoothing 0.1) with
bf16 autocast and, by default, channels_last. cuDNN picks its algorithms by its heuristics
(`torch.backends.cudnn.benchmark` stays off: its trial runs would allocate workspaces that
set the peak memory of the first step).

    torchrun --nproc-per-node 2 examples/vision/resnet50_ddp.py --batch-size 128

Rank 0 prints one line per step and a final `summary:` line (images/s over all ranks).
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP

GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="resnet50", help="a torchvision.models name")
    parser.add_argument("--batch-size", type=int, default=128, help="images per step per GPU")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=10, help="training iterations in total")
    parser.add_argument("--warmup", type=int, default=3, help="first iterations left out of the averages")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="autocast dtype (fp32: no autocast)")
    parser.add_argument("--memory-format", choices=["channels_last", "contiguous"], default="channels_last")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    memory_format = torch.channels_last if args.memory_format == "channels_last" else torch.contiguous_format

    torch.manual_seed(args.seed)
    model = torchvision.models.get_model(args.arch, num_classes=1000)
    model = model.cuda().to(memory_format=memory_format)
    model = DDP(model, device_ids=[local_rank])
    n_params = sum(p.numel() for p in model.parameters())
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * args.batch_size * world / 256,
                                momentum=0.9, weight_decay=1e-4)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    # A small pool of pinned host batches, as a DataLoader with pin_memory=True hands out.
    g = torch.Generator().manual_seed(args.seed + rank)
    pool = [(torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=g).pin_memory(),
             torch.randint(0, 1000, (args.batch_size,), generator=g).pin_memory()) for _ in range(2)]
    images_per_iter = args.batch_size * world
    if rank == 0:
        print(f"device: {world} x {torch.cuda.get_device_name()} | torch {torch.__version__} | "
              f"{args.arch} params {n_params / 1e6:.2f}M | batch {args.batch_size} x {args.image_size}px per GPU | "
              f"{args.dtype} {args.memory_format}", flush=True)

    model.train()
    times_ms = []
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for it in range(args.steps):
        images, target = pool[it % len(pool)]
        images = images.cuda(non_blocking=True).contiguous(memory_format=memory_format)
        target = target.cuda(non_blocking=True)
        with autocast:
            output = model(images)
            loss = criterion(output, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradient buckets while backward runs
        optimizer.step()

        torch.cuda.synchronize()
        t1 = time.perf_counter()
        dt, t0 = t1 - t0, t1
        if it >= args.warmup:
            times_ms.append(dt * 1e3)
        if rank == 0:
            print(f"iter {it} | loss {loss.item():.4f} | {dt * 1e3:.2f} ms | {images_per_iter / dt:,.0f} img/s | "
                  f"peak {torch.cuda.max_memory_allocated() / GIB:.2f} GiB", flush=True)

    mine = (torch.cuda.max_memory_allocated() / GIB, torch.cuda.max_memory_reserved() / GIB)
    peaks: list = [None] * world
    dist.all_gather_object(peaks, mine)
    if rank == 0:
        times_ms = times_ms or [dt * 1e3]
        median_ms = statistics.median(times_ms)
        print(f"summary: median_iter_ms={median_ms:.2f} mean_iter_ms={statistics.mean(times_ms):.2f} "
              f"images_per_s={images_per_iter / (median_ms / 1e3):.0f} "
              f"peak_alloc_gib={max(a for a, _ in peaks):.2f} peak_reserved_gib={max(r for _, r in peaks):.2f} "
              f"params={n_params / 1e6:.2f}M", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
