"""Host time of a training step by phase: forward, backward, clipping, optimizer, zero_grad.

    python bench/host_phases.py --out phases_real.json                          # on a GPU host
    phantom run --gpu H200 bench/host_phases.py --out phases_sim.json           # simulated
    python bench/host_phases.py --compare phases_real.json phases_sim.json      # the table

`examples/gpt_train.py`'s GPT step (bf16 autocast, SDPA, fused AdamW, clipping), small enough
that the host sets the pace, with `time.perf_counter()` marks between the phases and a
synchronize only at the step's end: each phase's host time, medians over the steps after the
warm-up. Why: phantom takes one per-entry dispatch overhead off every gap, yet a forward op's
entry and a backward op's (which under phantom reaches Python from the autograd engine's CUDA
thread) cost differently to reach the handler (bench/README, distributed, session 20); the
phases say which part of a host-bound step is over- or under-charged against a real host.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

PHASES = ("batch", "forward", "backward", "clip", "optimizer", "zero_grad", "sync")
CONFIGS = {"gpt-124m-s512-b1": ("gpt2-124m", 512, 1), "gpt-124m-s128-b1": ("gpt2-124m", 128, 1),
           "gpt-350m-s512-b1": ("gpt2-350m", 512, 1)}


def run(name: str, steps: int, warmup: int) -> dict:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from gpt_train import PRESETS, GPT, GPTConfig, get_batch

    preset, seq_len, batch = CONFIGS[name]
    cfg = GPTConfig(**{**PRESETS[preset], "block_size": seq_len})
    with torch.device("cuda"):
        model = GPT(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    rows = []
    torch.cuda.synchronize()
    for _ in range(steps):
        marks = [time.perf_counter()]
        x, y = get_batch(batch, seq_len, cfg.vocab_size)
        marks.append(time.perf_counter())
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        marks.append(time.perf_counter())
        loss.backward()
        marks.append(time.perf_counter())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        marks.append(time.perf_counter())
        optimizer.step()
        marks.append(time.perf_counter())
        optimizer.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
        torch.cuda.synchronize()
        marks.append(time.perf_counter())
        rows.append([(b - a) * 1e6 for a, b in zip(marks, marks[1:])])
    steady = rows[warmup:]
    return {phase: statistics.median(r[i] for r in steady) for i, phase in enumerate(PHASES)} | {
        "step": statistics.median(sum(r) for r in steady)}


def compare(real_path: str, sim_path: str) -> str:
    real, sim = json.loads(Path(real_path).read_text()), json.loads(Path(sim_path).read_text())
    lines = [f"real: {real['device']}, torch {real['torch']}; simulated: torch {sim['torch']}", "",
             "| config | phase | real µs | phantom µs | error |", "|---|---|---|---|---|"]
    for name, phases in real["results"].items():
        for phase, r in phases.items():
            s = sim["results"].get(name, {}).get(phase)
            if s is not None:
                err = f"{100 * (s - r) / r:+.1f}%" if r > 0 else "-"
                lines.append(f"| {name} | {phase} | {r:.0f} | {s:.0f} | {err} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--compare", nargs=2, metavar=("REAL", "SIM"))
    args = ap.parse_args()
    if args.compare:
        print(compare(*args.compare))
        return
    import torch

    results = {}
    for name in args.configs.split(","):
        results[name] = run(name, args.steps, args.warmup)
        print(name, {k: round(v) for k, v in results[name].items()}, flush=True)
    record = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
