"""The training benchmark's configs on one GPU, as rank 0 of a fake 2-rank process group.

The 2-GPU tensor-parallel rows of `distributed.py` come out 14-25% short in simulation, and the
real steps are host-bound (the GPU idles 40-112 ms a step). Two explanations were left open:
DTensor's host path at these model sizes costs more than phantom charges, or the real ranks
lose time waiting for each other in NCCL kernels (host-bound ranks arrive at each collective at
different times; simulated ranks run in lockstep). This separates them: `examples/dist_train.py`
runs unchanged on one GPU as rank 0 of a fake process group of 2 (its collectives return at
once), so the step is rank 0's own host path and GPU work, with no peer to wait for. It also
runs each config with Python's cyclic garbage collector off (after start-up), and the `gc:` line
times the collections themselves, per generation and steady step (`GcClock`). The direct timing
is what measures the collector's cost: on/off pairs differ by the steps' run-to-run spread
(session 14, `data/gc_cost/`). phantom charges none of it (`Simulation.on_gc`).

    python bench/tp_one_gpu.py real --out bench/data/tp_one_gpu_h200.json     # on a GPU host
    python bench/tp_one_gpu.py run [--gc off] -- --parallel tp --preset 1b ... # one run (used by `real`)
    torchrun --nproc-per-node 2 bench/tp_one_gpu.py run --real-group --time-collectives -- ...
                                              # the same instrumentation with a real NCCL peer

Standard library only in `real`; `run` needs torch with CUDA.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import runpy
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distributed import CONFIGS, HOST_BOUND, Config  # noqa: E402
from single_gpu import parse_summary  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "dist_train.py"
NAMES = ("tp-1b-s2k", "tp-3b-s2k", "tp-350m-s128", "tp-3b-s128", "fsdp-350m-s128", "ddp-350m-s128")


class GcClock:
    """gc.callbacks hook: collections per generation and their wall time, by optimizer step.

    Timed with `time.monotonic_ns`, which phantom leaves real, so the same hook measures the
    collector in a real run and in phantom's own process. Collections are filed under the
    number of optimizer steps done when they ran; `summary` averages over the steps after the
    script's warm-up."""

    def __init__(self) -> None:
        self.steps = 0
        self.by_step: dict[int, list[int]] = {}  # steps done -> [n0, n1, n2, ns0, ns1, ns2]
        self._t0 = 0

    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self._on_step)
        gc.callbacks.append(self)

    def _on_step(self, *_) -> None:
        self.steps += 1

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.monotonic_ns()
            return
        row = self.by_step.setdefault(self.steps, [0] * 6)
        g = min(info["generation"], 2)
        row[g] += 1
        row[3 + g] += time.monotonic_ns() - self._t0

    def summary(self, warmup: int) -> str:
        """Per-step means over steps warmup+1 .. the one before last (the last step's bucket
        also holds the script's shut-down), and every collection of the run."""
        steady = [self.by_step.get(i, [0] * 6) for i in range(warmup, max(warmup, self.steps - 1))]
        every = [sum(col) for col in zip(*self.by_step.values())] or [0] * 6
        n = max(1, len(steady))
        per = [sum(col) / n for col in zip(*steady)] if steady else [0.0] * 6
        return (f"collections={sum(every[:3])} ms={sum(every[3:]) / 1e6:.1f} steady_steps={len(steady)} "
                + " ".join(f"gen{g}_per_step={per[g]:.2f} gen{g}_ms_per_step={per[3 + g] / 1e6:.2f}" for g in range(3))
                + f" ms_per_step={sum(per[3:]) / 1e6:.2f}")


def _start_profiler(path: str):
    """Host and GPU ops of optimizer steps 6-7 (counted by an optimizer-step hook), written
    to `path` as torch.profiler's table when the script ends."""
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.profiler import ProfilerActivity, profile, schedule

    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   schedule=schedule(wait=5, warmup=1, active=2, repeat=1))
    prof.start()
    register_optimizer_step_post_hook(lambda *_: prof.step())
    return prof


def _shadow_with_nccl() -> None:
    """Also send every functional all-reduce (DTensor's) through a real ProcessGroupNCCL of one
    rank: torch's and NCCL's host path of a collective (events, the flight recorder, the
    watchdog's work queue, the enqueue), with no peer to wait for. The one-rank group reduces a
    scratch copy, so the script's tensors and autograd are untouched."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    pg = dist.ProcessGroupNCCL(dist.HashStore(), 0, 1)
    plain = funcol.all_reduce

    def all_reduce(tensor, reduceOp, group, tag=""):
        pg.allreduce([torch.empty_like(tensor)]).wait()  # wait: the stream waits, as wait_tensor does
        return plain(tensor, reduceOp, group, tag)

    funcol.all_reduce = all_reduce


class CollectiveClock:
    """Host time of each functional all-reduce call (DTensor's): wall time and the calling
    thread's CPU time, so time spent blocked (wall above CPU) shows apart from work. For real
    runs: under phantom `perf_counter` is the simulated clock and `thread_time` is not."""

    def __init__(self) -> None:
        self.wall_ns: list[int] = []
        self.cpu_ns: list[int] = []

    def install(self) -> None:
        import torch.distributed._functional_collectives as funcol

        inner = funcol.all_reduce

        def all_reduce(tensor, reduceOp, group, tag=""):
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            out = inner(tensor, reduceOp, group, tag)
            self.cpu_ns.append(time.thread_time_ns() - c0)
            self.wall_ns.append(time.perf_counter_ns() - w0)
            return out

        funcol.all_reduce = all_reduce

    def summary(self, skip: int) -> str:
        """Percentiles in µs over the calls after the first `skip` (start-up and warm-up)."""
        def pct(xs: list[int], q: float) -> float:
            return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] / 1e3 if xs else float("nan")

        wall, cpu = self.wall_ns[skip:], self.cpu_ns[skip:]
        parts = [f"calls={len(wall)}"] + [f"{name}_p{int(q * 100)}={pct(xs, q):.1f}"
                                          for name, xs in (("wall", wall), ("cpu", cpu)) for q in (0.1, 0.5, 0.9, 0.99)]
        if wall:
            parts.append(f"wall_mean={sum(wall) / len(wall) / 1e3:.1f} cpu_mean={sum(cpu) / len(cpu) / 1e3:.1f}")
        return " ".join(parts)


def cmd_run(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    if not args.real_group:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
        dist.init_process_group = lambda *a, **k: dist.distributed_c10d.init_process_group(
            "fake", store=FakeStore(), rank=0, world_size=2)
    if args.shadow_nccl:
        _shadow_with_nccl()
    collectives = CollectiveClock() if args.time_collectives else None
    if collectives is not None:
        collectives.install()  # after the shadow: its time counts with the call
    clock = GcClock()
    clock.install()
    if args.gc == "off":
        gc.disable()  # before the model exists: its objects are never walked either
    script = str(ROOT / args.script)
    sys.argv = [script, *args.script_args]
    prof = _start_profiler(args.profile) if args.profile else None
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        if prof is not None:
            prof.stop()
            Path(args.profile).write_text(prof.key_averages().table(
                sort_by="cpu_time_total", row_limit=60, max_name_column_width=70))
        rank = os.environ.get("RANK", "0")
        print(f"gc: rank={rank} {clock.summary(_script_warmup(args.script_args))} "
              f"tracked_objects={len(gc.get_objects())}", flush=True)
        if collectives is not None:
            print(f"all_reduce host µs: rank={rank} {collectives.summary(args.skip_calls)}", flush=True)


def _script_warmup(script_args: list[str]) -> int:
    """The script's --warmup (dist_train.py's and gpt_train.py's default is 3)."""
    return int(script_args[script_args.index("--warmup") + 1]) if "--warmup" in script_args else 3


def run_config(cfg: Config, gc_mode: str, steps: int, warmup: int, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "run", "--gc", gc_mode, "--", *cfg.args(steps, warmup)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    out = p.stdout + p.stderr
    row = {"config": cfg.name, "gc": gc_mode, "rc": p.returncode, "wall_s": round(time.time() - t0, 1)}
    try:
        row.update(parse_summary(out))
    except ValueError:
        row["error"] = out[-3000:]
    gc_line = next((ln for ln in out.splitlines() if ln.startswith("gc: ")), "")
    row.update({k: float(v) for k, v in (kv.split("=") for kv in gc_line[4:].split())})
    if p.returncode != 0:
        row.setdefault("error", out[-3000:])
    return row


def cmd_real(args: argparse.Namespace) -> None:
    import torch

    configs = [c for c in CONFIGS + HOST_BOUND if c.name in (args.configs.split(",") if args.configs else NAMES)]
    rows = []
    for cfg in configs:
        for gc_mode in ("on", "off"):
            row = run_config(cfg, gc_mode, args.steps, args.warmup, args.timeout)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "error"}), flush=True)
            if "error" in row:
                print(row["error"], flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "node": platform.node(),
            "driver": subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True).stdout.strip()}
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="one run of dist_train.py as rank 0 of a fake 2-rank group")
    run.add_argument("--gc", choices=("on", "off"), default="on")
    run.add_argument("--script", default=str(SCRIPT.relative_to(ROOT)),
                     help="the training script, relative to the repository (default: %(default)s)")
    run.add_argument("--profile", help="write a torch.profiler table of two steps to this file")
    run.add_argument("--shadow-nccl", action="store_true",
                     help="also issue each functional all-reduce on a real one-rank NCCL group")
    run.add_argument("--real-group", action="store_true",
                     help="keep the script's own process group (under torchrun with real GPUs)")
    run.add_argument("--time-collectives", action="store_true",
                     help="print percentiles of each functional all-reduce call's host time")
    run.add_argument("--skip-calls", type=int, default=600, help="calls left out of those percentiles")
    run.add_argument("script_args", nargs=argparse.REMAINDER)
    real = sub.add_parser("real", help="every config, with the collector on and off")
    real.add_argument("--out", required=True)
    real.add_argument("--configs", help=f"comma-separated (default: {','.join(NAMES)})")
    real.add_argument("--steps", type=int, default=12)
    real.add_argument("--warmup", type=int, default=4)
    real.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    if args.cmd == "run":
        args.script_args = [a for a in args.script_args if a != "--"]
        cmd_run(args)
    else:
        cmd_real(args)


if __name__ == "__main__":
    main()
