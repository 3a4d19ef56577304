"""Where a DeepSpeed ZeRO-3 step's host time goes, on a real host and under phantom.

    torchrun --nproc-per-node 2 bench/zero3_host_phases.py --out real.json -- \\
        examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero3.json --model llama-1b ...
    phantom run --nproc-per-node 2 --gpu H200 bench/zero3_host_phases.py --out sim.json -- \\
        examples/deepspeed/train.py ...                                    # the same arguments
    python bench/zero3_host_phases.py --compare real.json sim.json         # the table

The training script runs unchanged (`runpy`); before it starts, the DeepSpeed functions of
ZeRO-3's host path (the engine's forward/backward/step, the per-module fetch and release hooks,
the parameter coordinator's all-gathers, the gradient reduce-and-partition path, the optimizer
step) are wrapped by timers that add up each one's inclusive `time.perf_counter()` time and
calls, per optimizer step. Under phantom `perf_counter` is the simulated host clock, so the two
files compare what phantom charges with what a real host spends, function by function, and the
call counts say whether both sides took the same code path. Why: the ZeRO-3 rows of
`bench/deepspeed.py` come out 14-28% under the real 2 x H200 steps, which are host-bound, while
the GPU-bound ZeRO-2 rows are within 2% (bench/README, distributed, session 20).

Each rank writes OUT with `.rankN` before the suffix when the world has more than one rank.
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
from pathlib import Path

# (module, class, attribute): the functions timed. Name-mangled private methods are spelled
# as Python stores them.
TARGETS = [
    ("deepspeed.runtime.engine", "DeepSpeedEngine", "forward"),
    ("deepspeed.runtime.engine", "DeepSpeedEngine", "backward"),
    ("deepspeed.runtime.engine", "DeepSpeedEngine", "step"),
    ("deepspeed.runtime.zero.parameter_offload", "DeepSpeedZeRoOffload", "pre_sub_module_forward_function"),
    ("deepspeed.runtime.zero.parameter_offload", "DeepSpeedZeRoOffload", "post_sub_module_forward_function"),
    ("deepspeed.runtime.zero.parameter_offload", "DeepSpeedZeRoOffload", "pre_sub_module_backward_function"),
    ("deepspeed.runtime.zero.parameter_offload", "DeepSpeedZeRoOffload", "post_sub_module_backward_function"),
    ("deepspeed.runtime.zero.partitioned_param_coordinator", "PartitionedParameterCoordinator", "fetch_sub_module"),
    ("deepspeed.runtime.zero.partitioned_param_coordinator", "PartitionedParameterCoordinator", "release_sub_module"),
    ("deepspeed.runtime.zero.partitioned_param_coordinator", "PartitionedParameterCoordinator",
     "_PartitionedParameterCoordinator__all_gather_params"),
    ("deepspeed.runtime.zero.partitioned_param_coordinator", "PartitionedParameterCoordinator",
     "_PartitionedParameterCoordinator__release_param"),
    ("deepspeed.runtime.zero.partition_parameters", "AllGatherCoalescedHandle", "wait"),
    ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3", "reduce_ready_partitions_and_remove_grads"),
    ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3",
     "_DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads"),
    ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3",
     "_DeepSpeedZeroOptimizer_Stage3__avg_scatter_grads"),
    ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3", "partition_grads"),
    ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3", "independent_gradient_partition_epilogue"),
    ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3", "step"),
    ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3", "_optimizer_step"),
]
SHORT = {"_PartitionedParameterCoordinator__": "", "_DeepSpeedZeroOptimizer_Stage3__": "",
         "DeepSpeedZeRoOffload.": "offload.", "PartitionedParameterCoordinator.": "coordinator.",
         "DeepSpeedZeroOptimizer_Stage3.": "stage3.", "DeepSpeedEngine.": "engine.",
         "AllGatherCoalescedHandle.": "gather_handle."}


# Under phantom, what the simulation counted inside each function as well (inclusive): handler
# entries (each has the calibrated dispatch overhead taken off its gap), ops, freed storages
# and blocking round trips to the coordinator, to tell which kind of host work is mischarged.
SIM_COUNTERS = ("dispatch_entries", "ops_intercepted", "releases", "wake_ups")


def _simulation():
    """The running Simulation, found through its `gc.callbacks` hook; None on a real host."""
    import gc

    return next((cb.__self__ for cb in gc.callbacks if getattr(cb, "__name__", "") == "on_gc"), None)


class Timers:
    """Inclusive time and calls per wrapped function, cut into optimizer steps by
    `end_step` (the engine's step at a gradient-accumulation boundary)."""

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.counts: dict[str, dict[str, int]] = {}
        self.steps: list[dict] = []
        self._sim = _simulation()
        self._mark = time.perf_counter()

    def _counters(self) -> tuple[int, ...]:
        return tuple(getattr(self._sim, c) for c in SIM_COUNTERS) if self._sim else ()

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            c0 = self._counters()
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total[name] = self.total.get(name, 0.0) + time.perf_counter() - t0
                self.calls[name] = self.calls.get(name, 0) + 1
                if c0:
                    counts = self.counts.setdefault(name, dict.fromkeys(SIM_COUNTERS, 0))
                    for key, a, b in zip(SIM_COUNTERS, c0, self._counters()):
                        counts[key] += b - a
        return timed

    def end_step(self) -> None:
        now = time.perf_counter()
        self.steps.append({"step_us": (now - self._mark) * 1e6,
                           "us": {k: v * 1e6 for k, v in self.total.items()},
                           "calls": dict(self.calls), "sim_counts": self.counts})
        self.total, self.calls, self.counts, self._mark = {}, {}, {}, now


def short(name: str) -> str:
    for long, brief in SHORT.items():
        name = name.replace(long, brief)
    return name


def install(timers: Timers) -> list[str]:
    import importlib

    missing = []
    for module, cls_name, attr in TARGETS:
        cls = getattr(importlib.import_module(module), cls_name, None)
        fn = getattr(cls, attr, None) if cls is not None else None
        if fn is None:
            missing.append(f"{module}.{cls_name}.{attr}")
            continue
        setattr(cls, attr, timers.wrap(short(f"{cls_name}.{attr}"), fn))
    engine_cls = importlib.import_module("deepspeed.runtime.engine").DeepSpeedEngine
    timed_step = engine_cls.step

    def step(self, *args, **kwargs):
        before = self.global_steps
        try:
            return timed_step(self, *args, **kwargs)
        finally:
            if self.global_steps != before:
                timers.end_step()
    engine_cls.step = step
    return missing


def run(out: str, script_argv: list[str], warmup: int) -> None:
    # bench/ holds a deepspeed.py of its own: the script's folder goes first on the path instead,
    # as Python would have put it there
    here = Path(__file__).resolve().parent
    sys.path[:] = [str(Path(script_argv[0]).resolve().parent)] + [
        p for p in sys.path if Path(p or ".").resolve() != here]
    import deepspeed  # noqa: F401  (under phantom: its adapter applies on this import)

    timers = Timers()
    missing = install(timers)
    sys.argv = script_argv
    try:
        runpy.run_path(script_argv[0], run_name="__main__")
    finally:
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        path = Path(out)
        if world > 1:
            path = path.with_name(f"{path.stem}.rank{rank}{path.suffix}")
        steady = timers.steps[warmup:]
        names = sorted({k for s in steady for k in s["us"]})
        summary = {n: {"us": statistics.median(s["us"].get(n, 0.0) for s in steady),
                       "calls": statistics.median(s["calls"].get(n, 0) for s in steady),
                       **{c: statistics.median(s["sim_counts"].get(n, {}).get(c, 0) for s in steady)
                          for c in SIM_COUNTERS if steady[0]["sim_counts"]}}
                   for n in names} if steady else {}
        path.write_text(json.dumps({
            "argv": script_argv, "rank": rank, "world": world, "warmup": warmup,
            "missing": missing, "steps": timers.steps,
            "step_us": statistics.median(s["step_us"] for s in steady) if steady else None,
            "median": summary}, indent=1))


def compare(real_path: str, sim_path: str) -> str:
    real, sim = json.loads(Path(real_path).read_text()), json.loads(Path(sim_path).read_text())
    lines = [f"Median over steps after {real['warmup']} (real) / {sim['warmup']} (phantom) warm-up; "
             "inclusive host time per optimizer step.", "",
             "| function | real ms | phantom ms | error | real calls | phantom calls | real us/call | "
             "phantom us/call | phantom entries / ops / freed / round trips per call |",
             "|---|---|---|---|---|---|---|---|---|"]
    rs, ss = real["step_us"], sim["step_us"]
    lines.append(f"| whole step | {rs / 1e3:.1f} | {ss / 1e3:.1f} | {(ss / rs - 1) * 100:+.1f}% | | | | | |")
    names = sorted(set(real["median"]) | set(sim["median"]),
                   key=lambda n: -real["median"].get(n, {"us": 0})["us"])
    for n in names:
        r, s = real["median"].get(n, {"us": 0, "calls": 0}), sim["median"].get(n, {"us": 0, "calls": 0})
        err = f"{(s['us'] / r['us'] - 1) * 100:+.1f}%" if r["us"] else "-"
        per = lambda x: f"{x['us'] / x['calls']:.1f}" if x["calls"] else "-"  # noqa: E731
        counts = " / ".join(f"{s[c] / s['calls']:.1f}" for c in SIM_COUNTERS if c in s and s["calls"])
        lines.append(f"| {n} | {r['us'] / 1e3:.2f} | {s['us'] / 1e3:.2f} | {err} | {r['calls']:g} | "
                     f"{s['calls']:g} | {per(r)} | {per(s)} | {counts} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="where this rank writes its timings (JSON)")
    p.add_argument("--warmup", type=int, default=3, help="optimizer steps left out of the medians")
    p.add_argument("--compare", nargs=2, metavar=("REAL", "SIM"), help="print the table of two files")
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT ARGS...")
    args = p.parse_args()
    if args.compare:
        print(compare(*args.compare))
        return
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not args.out or not script:
        p.error("give --out and, after --, the training script and its arguments")
    run(args.out, script, args.warmup)


if __name__ == "__main__":
    main()
