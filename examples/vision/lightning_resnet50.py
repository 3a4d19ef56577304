"""Train a timm ResNet-50 with PyTorch Lightning's Trainer (bf16-mixed, DDP on several GPUs).

The Lightning way: a LightningModule, a DataLoader with worker processes and pinned memory,
`Trainer(accelerator="gpu", devices=N, strategy="ddp")`. A callback times each training batch
(synchronised wall clock, as a user would); rank 0 prints it and a final `summary:` line.

    python examples/vision/lightning_resnet50.py --devices 1 --batch-size 128
    phantom run --gpu H100 examples/vision/lightning_resnet50.py --devices 1

Lightning starts the other ranks itself when `--devices` is more than one and it was not
launched by torchrun; under `phantom run --nproc-per-node N`, pass `--devices N`.
"""
import argparse
import statistics
import time

import pytorch_lightning as pl
import timm
import torch
from torch.utils.data import DataLoader, Dataset

GIB = 2**30


class RandomImages(Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.randn(3, 224, 224), i % 1000


class Classifier(pl.LightningModule):
    def __init__(self, arch: str):
        super().__init__()
        self.net = timm.create_model(arch, num_classes=1000)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)


class BatchTimer(pl.Callback):
    def __init__(self) -> None:
        self.times_ms: list[float] = []

    def on_train_batch_start(self, trainer, *args):
        torch.cuda.synchronize()
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, *args):
        torch.cuda.synchronize()
        self.times_ms.append((time.perf_counter() - self.start) * 1e3)
        if trainer.global_rank == 0:
            print(f"batch {trainer.global_step} | {self.times_ms[-1]:.2f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="resnet50", help="a timm model name")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=128, help="images per step per GPU")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the median")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader worker processes")
    args = parser.parse_args()

    timer = BatchTimer()
    trainer = pl.Trainer(accelerator="gpu", devices=args.devices, strategy="ddp" if args.devices > 1 else "auto",
                         precision="bf16-mixed", max_steps=args.steps, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[timer])
    data = DataLoader(RandomImages(args.batch_size * args.devices * args.steps), batch_size=args.batch_size,
                      num_workers=args.workers, pin_memory=True, persistent_workers=args.workers > 0)
    trainer.fit(Classifier(args.arch), data)
    if trainer.global_rank == 0:
        median_ms = statistics.median(timer.times_ms[args.warmup:] or timer.times_ms)
        print(f"summary: median_iter_ms={median_ms:.2f} images_per_s={args.batch_size * args.devices / median_ms * 1e3:.0f} "
              f"peak_alloc_gib={torch.cuda.max_memory_allocated() / GIB:.2f}", flush=True)


if __name__ == "__main__":
    main()
