"""Weight-gradient accumulation, fused and not: real GPU against phantom.

Megatron's `gradient_accumulation_fusion` (Megatron-LM's default, Apex's
`fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32`) accumulates each linear layer's weight
gradient into its fp32 `main_grad` inside the wgrad GEMM (cuBLAS with beta = 1 and an fp32 C).
Without it Megatron runs the GEMM into a bf16 gradient and its DDP hook adds that into
`main_grad`. This script times, for the linear layers of the published Megatron GPT rows (one
micro-batch of 4096 tokens, each row's TP shard):

    gemm      grad_output^T @ input            (bf16 out: the wgrad alone)
    gemm_add  main_grad.add_(grad_output^T @ input)   (unfused)
    fused     addmm(main_grad, grad_output^T, input, out_dtype=fp32, out=main_grad)

`fused` is the same cuBLAS call Apex makes (bf16 A and B, fp32 C read and written, beta = 1),
through torch's `out_dtype` GEMM. The same script runs on a real GPU and under phantom:

    python bench/probes/wgrad_fusion.py run --out real.json                 # on the GPU
    phantom run --gpu H100 bench/probes/wgrad_fusion.py run --out sim.json  # simulated
    python bench/probes/wgrad_fusion.py compare real.json sim.json --out wgrad_fusion.md
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

TOKENS = 4096  # seq 4096 x micro-batch 1; with sequence parallelism the wgrad sees the gathered sequence
# (row, layer, out_features, in_features) of each TP shard's weight
SHAPES = [
    ("1.7B TP1", "qkv", 6144, 2048), ("1.7B TP1", "proj", 2048, 2048),
    ("1.7B TP1", "fc1", 8192, 2048), ("1.7B TP1", "fc2", 2048, 8192),
    ("1.7B TP1", "output", 131072, 2048),
    ("7.1B TP2", "qkv", 6144, 4096), ("7.1B TP2", "proj", 4096, 2048),
    ("7.1B TP2", "fc1", 8192, 4096), ("7.1B TP2", "fc2", 4096, 8192),
    ("7.1B TP2", "output", 65536, 4096),
    ("16B TP4", "qkv", 4608, 6144), ("16B TP4", "proj", 6144, 1536),
    ("16B TP4", "fc1", 6144, 6144), ("16B TP4", "fc2", 6144, 6144),
    ("16B TP4", "output", 32768, 6144),
]
VARIANTS = ("gemm", "gemm_add", "fused")


def time_us(fn, reps: int, back_to_back: int = 10) -> float:
    """Median over `reps` of the mean time of `back_to_back` calls in a row: the kernels' time
    with the GPU busy, as the kernel database is timed, not a lone call's launch latency and
    clock ramp after an idle GPU."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(back_to_back):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / back_to_back)
    return statistics.median(times)


def cmd_run(args: argparse.Namespace) -> None:
    import torch

    rows = []
    for row, layer, out_f, in_f in SHAPES:
        x = torch.randn(TOKENS, in_f, device="cuda", dtype=torch.bfloat16)
        g = torch.randn(TOKENS, out_f, device="cuda", dtype=torch.bfloat16)
        main_grad = torch.zeros(out_f, in_f, device="cuda", dtype=torch.float32)
        fns = {"gemm": lambda: g.t().matmul(x),
               "gemm_add": lambda: main_grad.add_(g.t().matmul(x)),
               "fused": lambda: torch.addmm(main_grad, g.t(), x, out_dtype=torch.float32,
                                            out=main_grad)}
        r = dict(row=row, layer=layer, out=out_f, inp=in_f, tokens=TOKENS)
        for name in VARIANTS:
            r[name + "_us"] = round(time_us(fns[name], args.reps), 2)
        rows.append(r)
        print(json.dumps(r), flush=True)
        del x, g, main_grad
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, reps=args.reps)
    with open(args.out, "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)


def pct(a: float, b: float) -> str:
    return f"{100.0 * (a - b) / b:+.1f}%"


def cmd_compare(args: argparse.Namespace) -> None:
    real, sim = (json.load(open(p)) for p in (args.real, args.sim))
    key = lambda r: (r["row"], r["layer"])  # noqa: E731
    sim_rows = {key(r): r for r in sim["rows"]}
    lines = [f"Real: {real['meta']['device']}, torch {real['meta']['torch']}; phantom: "
             f"{sim['meta']['device']} (simulated). Times in µs a call, median of "
             f"{real['meta']['reps']} runs of 10 calls back to back.", "",
             "| row | layer | out x in | real gemm | gemm+add | fused | phantom gemm | gemm+add | "
             "fused | err gemm | err gemm+add | err fused | real saving | phantom saving |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    errs = {v: [] for v in VARIANTS}
    for r in real["rows"]:
        s = sim_rows[key(r)]
        for v in VARIANTS:
            errs[v].append(abs(s[v + "_us"] - r[v + "_us"]) / r[v + "_us"] * 100.0)
        lines.append(
            f"| {r['row']} | {r['layer']} | {r['out']} x {r['inp']} | "
            + " | ".join(f"{r[v + '_us']:.1f}" for v in VARIANTS) + " | "
            + " | ".join(f"{s[v + '_us']:.1f}" for v in VARIANTS) + " | "
            + " | ".join(pct(s[v + "_us"], r[v + "_us"]) for v in VARIANTS) + " | "
            + f"{r['gemm_add_us'] - r['fused_us']:.1f} | {s['gemm_add_us'] - s['fused_us']:.1f} |")
    lines += ["", "Mean |error|: " + ", ".join(
        f"{v} {statistics.mean(e):.1f}%" for v, e in errs.items()) + "."]
    text = "\n".join(lines) + "\n"
    if args.out:
        open(args.out, "w").write(text)
    print(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time the variants on this (real or simulated) GPU")
    r.add_argument("--out", required=True)
    r.add_argument("--reps", type=int, default=20)
    c = sub.add_parser("compare", help="table of real against simulated")
    c.add_argument("real")
    c.add_argument("sim")
    c.add_argument("--out")
    args = p.parse_args()
    {"run": cmd_run, "compare": cmd_compare}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
