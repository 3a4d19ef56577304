"""What the pattern scripts share: a GPT of standard blocks, a step timer, the summary line.

Written as a user would: plain torch.nn, timed with torch.cuda.synchronize and
time.perf_counter, so the same file runs on a GPU (real) and under `phantom run`.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.head_dim = d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(self.ln1(x))
        b, t, _ = qkv.shape  # sizes of the projection's output: local ones under TP + SP
        q, k, v = qkv.view(b, t, 3, -1, self.head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)  # no position embedding: shards along the sequence as is
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def model_args(parser: argparse.ArgumentParser, d: int, layers: int, heads: int, seq: int,
               batch: int) -> None:
    parser.add_argument("--d", type=int, default=d)
    parser.add_argument("--layers", type=int, default=layers)
    parser.add_argument("--heads", type=int, default=heads)
    parser.add_argument("--seq", type=int, default=seq)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=4)


class StepTimer:
    """Wall time of each step between two synchronizes, as training logs measure it."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._t0 = 0.0

    def start(self) -> None:
        torch.cuda.synchronize()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        torch.cuda.synchronize()
        self.times.append((time.perf_counter() - self._t0) * 1e3)
        return self.times[-1]

    def summary(self, warmup: int) -> str:
        steady = self.times[warmup:] or self.times
        return (f"summary: median_iter_ms={statistics.median(steady):.2f} "
                f"peak_alloc_gib={torch.cuda.max_memory_allocated() / 2**30:.3f}")
