"""RMSNorm's backward in a compiled float8 training block: which kernels Inductor makes of it,
and what each costs.

    python bench/kernels/mix_order_probe.py --out probe.json          # on a GPU, ~2 min
    phantom run --gpu H100 --host-time off bench/kernels/mix_order_probe.py --only ... --out sim.json
    python bench/kernels/mix_order_probe.py --compare probe.json [probe2.json ...] sim.json

In torchtitan's compiled float8 step Inductor fuses the float8 casts of
the recomputed norm output, stored transposed for the weight-gradient GEMMs, into RMSNorm
backward's *mix-order reduction* (its row sum and its weight gradient's column sum in one
persistent kernel), and that those kernels hold 13.3 of the step's 27.9 ms of generated
kernels on an H100; standalone functions (kernels/inductor_sweep.py `mix.*`) never made that
fusion. This probe builds the smallest training block that has the step's structure: an
`nn.RMSNorm` (torchtitan 0.3.0's norm) whose output feeds 1-3 `Float8Linear`s (torchao,
tensorwise scaling: torchtitan's float8 recipe), under no, full or selective activation
checkpointing, compiled whole, forward and backward with autograd. Each variant records its
step time (CUDA events, median of 10) and every kernel of one step (the profiler: name, time,
grid, registers); Inductor's output code (TORCHINDUCTOR_CACHE_DIR) says which kernels are
mix-order reductions and what they store. `--compare` sets the real steps' GPU work (the sum of
their kernels: these small steps leave the GPU idle between launches) against phantom's step
with host time taken out (`--host-speed 0.0001`), which is its GPU work.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import tempfile

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

# name: (float8, activation checkpointing, projections fed by the norm)
VARIANTS = {
    "f8_sac3": (True, "sac", 3),
    "f8_full3": (True, "full", 3),
    "f8_none3": (True, "none", 3),
    "f8_none2": (True, "none", 2),
    "f8_none1": (True, "none", 1),
    "bf16_none3": (False, "none", 3),
    "f8_sac2": (True, "sac", 2),
    "f8_sac1": (True, "sac", 1),
    "bf16_sac3": (False, "sac", 3),
}
# (rows, cols): the step's 8192 x 4096 (Llama 3 8B at seq 8192, local batch 1); twice the rows;
# a narrower model; and a square one, where Inductor's mix-order rule (rows >= 2 x cols) is off
SIZES = ((8192, 4096), (16384, 4096), (8192, 2048), (4096, 4096))
# without checkpointing the norm's saved statistics make its backward's row and column sums
# siblings (a mix-order reduction); recomputed under AC they are producer and consumer
DEFAULT_RUNS = ([(v, s) for v in ("f8_sac3", "f8_none3") for s in SIZES]
                + [(v, SIZES[0]) for v in VARIANTS if v not in ("f8_sac3", "f8_none3")])


class Block(nn.Module):
    """x + sum of projections of RMSNorm(x): the norm's backward gets the sum of the
    projections' input gradients, as an attention block's norm gets q's, k's and v's."""

    def __init__(self, dim: int, consumers: int, ac: str) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.proj = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(consumers))
        self.ac = ac

    def _body(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        out = x
        for p in self.proj:
            out = out + p(h)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ac == "none":
            return self._body(x)
        if self.ac == "full":
            return checkpoint(self._body, x, use_reentrant=False)
        return checkpoint(self._body, x, use_reentrant=False, context_fn=_selective_contexts)


# torchtitan's selective op AC keeps matmul outputs and recomputes the rest (module-level
# functions: Dynamo traces checkpoint's context_fn only when it is one)
_SAVED_OPS = {torch.ops.aten.mm.default, torch.ops.aten._scaled_mm.default}


def _policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in _SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_contexts():
    return create_selective_checkpoint_contexts(_policy)


def build(variant: str, rows: int, cols: int):
    float8, ac, consumers = VARIANTS[variant]
    block = Block(cols, consumers, ac).to(device="cuda", dtype=torch.bfloat16)
    if float8:
        from torchao.float8 import convert_to_float8_training
        convert_to_float8_training(block, module_filter_fn=lambda m, name: isinstance(m, nn.Linear))
    block = torch.compile(block)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)

    def step():
        block(x).backward(grad)
    return step


def kernels_of(step) -> list[dict]:
    """Every kernel of one step, in order: name, time, grid, registers (the profiler's trace;
    empty where it records no CUDA activity, as under phantom: use `phantom run --trace`)."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    events = [e for e in json.load(open(path)).get("traceEvents", []) if e.get("cat") == "kernel"]
    return [{"name": e["name"], "us": e["dur"], "grid": e.get("args", {}).get("grid"),
             "registers": e.get("args", {}).get("registers per thread")}
            for e in sorted(events, key=lambda e: e["ts"])]


def step_ms(step, reps: int = 10) -> float:
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def compare(paths: list[str]) -> str:
    """Markdown: each real row's kernel time against the simulated row's step time."""
    *reals, sim_path = paths
    real = {}
    for path in reals:
        for row in json.load(open(path))["rows"]:
            if "kernels" in row:
                real[(row["variant"], row["rows"], row["cols"])] = row
    lines = ["| variant | rows x cols | real step ms | real kernels ms | of them mix-order kernel us "
             "| phantom GPU ms | error |", "|---|---|---|---|---|---|---|"]
    errors = []
    for row in json.load(open(sim_path))["rows"]:
        key = (row["variant"], row["rows"], row["cols"])
        if key not in real or "step_ms" not in row:
            continue
        r = real[key]
        kernels_ms = sum(k["us"] for k in r["kernels"]) / 1e3
        # a mix-order kernel: a persistent reduction over 16 rows a program (RSPLIT_SIZE)
        mix = [k["us"] for k in r["kernels"] if k["name"].startswith("triton_per_")
               and (k.get("grid") or [0])[0] == r["rows"] // 16]
        err = row["step_ms"] / kernels_ms - 1
        errors.append(abs(err))
        lines.append(f"| {key[0]} | {key[1]} x {key[2]} | {r['step_ms']:.3f} | {kernels_ms:.3f} | "
                     f"{mix[0] if mix else '-'} | {row['step_ms']:.3f} | {100 * err:+.1f}% |")
    if errors:
        lines.append(f"\nmean |error| {100 * statistics.mean(errors):.1f}%, max {100 * max(errors):.1f}% "
                     f"over {len(errors)} rows")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", nargs="+", metavar="JSON",
                    help="real run(s) then a simulated run: print the comparison table")
    ap.add_argument("--out")
    ap.add_argument("--only", default="", help="comma-separated variant names (default: the standard runs)")
    args = ap.parse_args()
    if args.compare:
        if len(args.compare) < 2:
            ap.error("--compare needs a real run and a simulated run")
        print(compare(args.compare))
        return 0
    if not args.out:
        ap.error("--out is required (or --compare)")
    runs = DEFAULT_RUNS
    if args.only:
        wanted = args.only.split(",")
        unknown = [w for w in wanted if w not in VARIANTS]
        if unknown:
            ap.error(f"--only: unknown variant(s) {unknown}; known: {sorted(VARIANTS)}")
        runs = [(v, s) for v in wanted for s in SIZES]
    meta = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node()}
    rows = []
    for variant, (r, c) in runs:
        torch._dynamo.reset()
        try:
            step = build(variant, r, c)
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            row = {"variant": variant, "rows": r, "cols": c, "step_ms": round(step_ms(step), 4),
                   "kernels": kernels_of(step)}
            print(f"{variant:10s} {r:6d} x {c:<5d} {row['step_ms']:8.3f} ms  {len(row['kernels'])} kernels",
                  flush=True)
        except Exception as e:  # one variant failing (a compile error) leaves the others
            row = {"variant": variant, "rows": r, "cols": c, "error": f"{type(e).__name__}: {e}"[:2000]}
            print(f"{variant:10s} {r:6d} x {c:<5d} failed: {row['error'][:300]}", flush=True)
        rows.append(row)
        with open(args.out, "w") as f:  # after every row: a call cut short keeps what it measured
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
