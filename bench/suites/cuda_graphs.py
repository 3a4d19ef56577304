"""CUDA graphs, real and simulated: what a replay costs, and training and inference steps
captured whole, through `make_graphed_callables` and under `torch.compile(mode="reduce-overhead")`.

The same script on a GPU (`python bench/suites/cuda_graphs.py`) and under phantom (`phantom run --gpu
H200 bench/suites/cuda_graphs.py`). Prints one JSON line per measurement:

- `launch`: a graph of K tiny in-place adds (K = 1 ... 1024): host time of `capture` (the
  `torch.cuda.graph` block, instantiation included) and of one `replay()` call, the replay's GPU
  time between CUDA events, and the same K adds launched eagerly (host and GPU time);
- `call`: host time of one call of a compiled 3-layer MLP (batch 8), default and reduce-overhead:
  inference, and a training step's forward and backward;
- `step`: a small GPT (4 layers, width 512, bf16, 256 tokens) at batch 2 (host-bound) and 16,
  timed per step with a synchronize around each, median of 20 after 5 warm-up steps, with the
  peak allocated memory: training eager, captured whole (forward, backward, capturable AdamW
  in one graph, as PyTorch's CUDA-graph docs show), with `make_graphed_callables`, and compiled
  with and without `mode="reduce-overhead"`; inference (no_grad forward) eager, captured and
  compiled both ways.

    python bench/suites/cuda_graphs.py --out real.jsonl
    phantom run --gpu H200 bench/suites/cuda_graphs.py --out sim.jsonl
    python bench/suites/cuda_graphs.py --compare real.jsonl sim.jsonl
"""
from __future__ import annotations

import argparse
import statistics
import time

from jsonl import emit, rows_by

GIB = 2**30
WARMUP, STEPS = 5, 20


def launch_rows() -> list[dict]:
    import torch

    x = torch.zeros(1024, device="cuda")
    rows = []
    for k in (1, 16, 128, 1024):
        def adds() -> None:
            for _ in range(k):
                x.add_(1.0)

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            adds()  # warm-up on a side stream, as the docs advise
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        t0 = time.perf_counter()
        with torch.cuda.graph(g):
            adds()
        capture_ms = (time.perf_counter() - t0) * 1e3
        replay_host, replay_gpu, eager_host, eager_gpu = [], [], [], []
        for i in range(30):
            for fn, host, gpu in ((g.replay, replay_host, replay_gpu), (adds, eager_host, eager_gpu)):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
                end.record()
                end.synchronize()
                if i >= 5:
                    host.append((t1 - t0) * 1e6)
                    gpu.append(start.elapsed_time(end) * 1e3)
        rows.append({"kind": "launch", "name": f"adds_{k}", "capture_ms": round(capture_ms, 3),
                     "replay_host_us": round(statistics.median(replay_host), 2),
                     "replay_gpu_us": round(statistics.median(replay_gpu), 2),
                     "eager_host_us": round(statistics.median(eager_host), 2),
                     "eager_gpu_us": round(statistics.median(eager_gpu), 2)})
        print(rows[-1], flush=True)
    return rows


def gpt(layers: int = 4, dim: int = 512, heads: int = 8, vocab: int = 8192):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, heads, dim // heads).transpose(1, 3).unbind(2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(y.transpose(1, 2).reshape(b, t, dim))

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.attn, self.n2 = nn.LayerNorm(dim), Attention(), nn.LayerNorm(dim)
            self.fc, self.proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

        def forward(self, x):
            x = x + self.attn(self.n1(x))
            return x + self.proj(F.gelu(self.fc(self.n2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.layers = nn.Sequential(*[Layer() for _ in range(layers)])
            self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

        def forward(self, idx):
            return self.head(self.norm(self.layers(self.emb(idx))))

    return GPT()


def timed(step, label: dict) -> dict:
    import torch

    times = []
    torch.cuda.reset_peak_memory_stats()
    for i in range(WARMUP + STEPS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if i >= WARMUP:
            times.append((time.perf_counter() - t0) * 1e3)
    row = {"kind": "step", **label, "ms": round(statistics.median(times), 3),
           "peak_gib": round(torch.cuda.max_memory_allocated() / GIB, 3)}
    print(row, flush=True)
    return row


def training_rows(batch: int, seq: int = 256, vocab: int = 8192) -> list[dict]:
    import torch
    import torch.nn.functional as F

    def setup():
        torch.manual_seed(0)
        model = gpt(vocab=vocab).cuda().to(torch.bfloat16)
        idx = torch.randint(0, vocab, (batch, seq), device="cuda")
        target = torch.randint(0, vocab, (batch, seq), device="cuda")
        return model, idx, target

    def loss_of(out, target):
        return F.cross_entropy(out.view(-1, vocab).float(), target.view(-1))

    rows = []
    label = lambda how: {"name": f"train_{how}_b{batch}", "batch": batch}

    model, idx, target = setup()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def eager_step():
        loss_of(model(idx), target).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    rows.append(timed(eager_step, label("eager")))
    del model, opt

    # Whole step in one graph (PyTorch docs, "Whole-network capture")
    model, idx, target = setup()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True, foreach=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_of(model(idx), target).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = loss_of(model(idx), target)
        static_loss.backward()
        opt.step()
    rows.append(timed(g.replay, label("graph")))
    del model, opt, g, static_loss

    # Forward and backward graphed per module, optimizer eager
    model, idx, target = setup()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    graphed = torch.cuda.make_graphed_callables(model, (idx,))

    def graphed_step():
        loss_of(graphed(idx), target).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    rows.append(timed(graphed_step, label("graphed_callables")))
    del model, opt, graphed

    for mode in ("default", "reduce-overhead"):
        model, idx, target = setup()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        compiled = torch.compile(model, mode=None if mode == "default" else mode)

        def compiled_step():
            loss_of(compiled(idx), target).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        rows.append(timed(compiled_step, label(f"compile_{mode}")))
        del model, opt, compiled
    return rows


def inference_rows(batch: int, seq: int = 256, vocab: int = 8192) -> list[dict]:
    import torch

    torch.manual_seed(0)
    model = gpt(vocab=vocab).cuda().to(torch.bfloat16).eval()
    idx = torch.randint(0, vocab, (batch, seq), device="cuda")
    rows = []
    label = lambda how: {"name": f"infer_{how}_b{batch}", "batch": batch}
    with torch.no_grad():
        rows.append(timed(lambda: model(idx), label("eager")))
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(idx)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(idx)
        rows.append(timed(g.replay, label("graph")))
        del g, static_out
        for mode in ("default", "reduce-overhead"):
            compiled = torch.compile(model, mode=None if mode == "default" else mode)
            rows.append(timed(lambda: compiled(idx), label(f"compile_{mode}")))
            del compiled
    return rows


def call_rows() -> list[dict]:
    """Host time of one call (no synchronize inside the timed part) of a compiled 3-layer MLP,
    default and reduce-overhead: inference, and a training forward and backward."""
    import torch
    import torch.nn as nn

    rows = []
    for mode in ("default", "reduce-overhead"):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                              nn.Linear(1024, 1024)).cuda().to(torch.bfloat16)
        x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
        compiled = torch.compile(model, mode=None if mode == "default" else mode)
        infer, fwd, bwd = [], [], []
        for i in range(40):
            with torch.no_grad():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                compiled(x)
                infer.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = compiled(x)
            t1 = time.perf_counter()
            loss = out.float().sum()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            fwd.append((t1 - t0) * 1e6)
            bwd.append((t3 - t2) * 1e6)
            model.zero_grad(set_to_none=True)
        for name, xs in (("infer", infer), ("train_fwd", fwd), ("train_bwd", bwd)):
            rows.append({"kind": "call", "name": f"mlp_{name}_{mode}",
                         "host_us": round(statistics.median(xs[10:]), 2)})
            print(rows[-1], flush=True)
        del compiled, model
    return rows


def compare(real_path: str, sim_path: str) -> str:
    real, sim = rows_by(real_path, "name"), rows_by(sim_path, "name")
    out = ["| measurement | real | phantom | error |", "|---|---|---|---|"]
    for (name,), r in real.items():
        s = sim.get((name,))
        if s is None:
            continue
        keys = {"step": ("ms", "peak_gib"), "call": ("host_us",)}.get(r["kind"]) or \
            ("capture_ms", "replay_host_us", "replay_gpu_us", "eager_host_us", "eager_gpu_us")
        for key in keys:
            if key in r and key in s and r[key]:
                err = (s[key] / r[key] - 1) * 100
                out.append(f"| {name} {key} | {r[key]} | {s[key]} | {err:+.1f}% |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--only", choices=("launch", "calls", "train", "infer"), action="append")
    p.add_argument("--compare", nargs=2, metavar=("REAL", "SIM"))
    a = p.parse_args()
    if a.compare:
        print(compare(*a.compare))
        return
    only = set(a.only or ("launch", "calls", "train", "infer"))
    rows = []
    if "launch" in only:
        rows += launch_rows()
    if "calls" in only:
        rows += call_rows()
    for batch in (2, 16):
        if "train" in only:
            rows += training_rows(batch)
        if "infer" in only:
            rows += inference_rows(batch)
    emit(rows, a.out)


if __name__ == "__main__":
    main()
