"""Where a Megatron-Core iteration's host time goes: the example script, run unchanged, with
its schedule's `forward_step` and `backward_step`, `finalize_model_grads` and the optimizer's
`step` timed by `time.perf_counter` (no synchronisation), summed per iteration.

Meant for host-bound configs (bench/megatron.py's `pub-1.7b-1gpu-host-s*`: the GPU is idle most
of the time, so each phase's wall time is its host time). Under phantom `time.perf_counter` is
the simulated host's clock, so the same wrapper gives the simulated phases:

    torchrun --nproc-per-node 1 bench/megatron_phases.py --out real.json -- ARGS...   # GPU host
    phantom run --nproc-per-node 1 --gpu H100 bench/megatron_phases.py --out sim.json -- ARGS...
    python bench/megatron_phases.py --compare real.json sim.json

ARGS are examples/megatron/pretrain_gpt.py's. Iterations 1 and 2 are left out of the medians.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import runpy
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

# bench/megatron.py would shadow the megatron package: this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "megatron" / "pretrain_gpt.py"
SKIP = 2  # warm-up iterations left out
PHASES = ("forward_step", "backward_step", "finalize_model_grads", "optimizer_step", "other")
# Parts of optimizer_step (not in "other"'s sum): the gradient copy, the norm and clipping
# (Megatron's local multi-tensor fallbacks without Apex), torch's AdamW, the parameter copy back.
OPTIMIZER_PARTS = ("opt.prepare_grads", "opt.grad_norm", "opt.clip", "opt.inner_step",
                   "opt.copy_main_to_model", "opt.step_with_ready_grads")


class PhaseClock:
    """Sums each wrapped call's wall time into the current iteration's phases."""

    def __init__(self) -> None:
        self.iterations: list[dict[str, float]] = []
        self.current: dict[str, float] = defaultdict(float)
        self.iteration_start = time.perf_counter()

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.current[name] += time.perf_counter() - t0
        return timed

    def end_iteration(self) -> None:
        now = time.perf_counter()
        phases = dict(self.current)
        phases["other"] = (now - self.iteration_start) - sum(phases.get(k, 0.0) for k in PHASES[:-1])
        phases["iteration"] = now - self.iteration_start
        self.iterations.append({k: v * 1e3 for k, v in phases.items()})
        self.current = defaultdict(float)
        self.iteration_start = now


def install(clock: PhaseClock) -> None:
    """Patch the Megatron functions the example reaches (before it imports them)."""
    import megatron.core.distributed as mcd
    import megatron.core.optimizer as mco
    from megatron.core.pipeline_parallel import schedules

    schedules.forward_step = clock.wrap("forward_step", schedules.forward_step)
    schedules.backward_step = clock.wrap("backward_step", schedules.backward_step)
    mcd.finalize_model_grads = clock.wrap("finalize_model_grads", mcd.finalize_model_grads)
    make_optimizer = mco.get_megatron_optimizer

    import megatron.core.optimizer.optimizer as mco_optimizer

    for name, part in (("get_grad_norm_fp32", "opt.grad_norm"), ("clip_grad_by_total_norm_fp32", "opt.clip")):
        setattr(mco_optimizer, name, clock.wrap(part, getattr(mco_optimizer, name)))

    def get_megatron_optimizer(*args, **kwargs):
        optimizer = make_optimizer(*args, **kwargs)
        step = clock.wrap("optimizer_step", optimizer.step)
        for sub in getattr(optimizer, "chained_optimizers", [optimizer]):
            sub.prepare_grads = clock.wrap("opt.prepare_grads", sub.prepare_grads)
            sub.step_with_ready_grads = clock.wrap("opt.step_with_ready_grads", sub.step_with_ready_grads)
            sub._copy_main_params_to_model_params = clock.wrap(
                "opt.copy_main_to_model", sub._copy_main_params_to_model_params)
            sub.optimizer.step = clock.wrap("opt.inner_step", sub.optimizer.step)

        def step_and_close_iteration(*a, **k):
            result = step(*a, **k)
            clock.end_iteration()  # the example's loop: zero_grad, forward_backward, step
            return result

        optimizer.step = step_and_close_iteration
        return optimizer

    mco.get_megatron_optimizer = get_megatron_optimizer


def summarise(iterations: list[dict[str, float]]) -> dict[str, float]:
    steady = iterations[SKIP:] or iterations
    return {k: round(statistics.median(i.get(k, 0.0) for i in steady), 2)
            for k in (*PHASES, "iteration", *OPTIMIZER_PARTS)}


def run(out: str, script_args: list[str]) -> None:
    clock = PhaseClock()
    install(clock)
    sys.argv = [str(SCRIPT), *script_args]
    try:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    finally:
        rank = int(os.environ.get("RANK", "0"))
        if rank == 0 and clock.iterations:
            result = dict(args=script_args, median_ms=summarise(clock.iterations),
                          iterations=clock.iterations)
            Path(out).write_text(json.dumps(result, indent=1))
            print("phases (ms, median):", result["median_ms"], flush=True)


def compare(real_path: str, sim_path: str) -> None:
    real = json.loads(Path(real_path).read_text())["median_ms"]
    sim = json.loads(Path(sim_path).read_text())["median_ms"]
    print("| phase | real ms | phantom ms | error |\n|---|---|---|---|")
    for k in (*PHASES, "iteration", *OPTIMIZER_PARTS):
        if k not in real or k not in sim:
            continue  # a file from before the optimizer's parts were timed
        err = f"{(sim[k] / real[k] - 1) * 100:+.1f}%" if real[k] > 0.05 else "-"
        print(f"| {k} | {real[k]:.2f} | {sim[k]:.2f} | {err} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="megatron_phases.json")
    p.add_argument("--compare", nargs=2, metavar=("REAL", "SIM"))
    p.add_argument("script_args", nargs=argparse.REMAINDER)
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    rest = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    run(args.out, rest)


if __name__ == "__main__":
    main()
