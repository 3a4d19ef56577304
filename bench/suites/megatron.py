"""Megatron-Core end-to-end benchmark: examples/megatron/pretrain_gpt.py under phantom, against
real runs and against Megatron's published H100 rows.

    python bench/suites/megatron.py list
    python bench/suites/megatron.py real --out /tmp/megatron_real_h200x2.json   # on 2 real GPUs
    python bench/suites/megatron.py sim --gpu H200 --real /tmp/megatron_real_h200x2.json \\
        --out /tmp/megatron_sim_h200x2
    python bench/suites/megatron.py published --out /tmp/megatron_published

`real` runs `torchrun --nproc-per-node 2 examples/megatron/pretrain_gpt.py ...` for each 2-GPU
config and records Megatron's log line of every iteration (elapsed time per iteration, TFLOP/s
per GPU) and the script's peak-memory line. `sim` runs the same commands under
`phantom run --nproc-per-node 2` and compares the median of the steady iterations (the first
WARMUP are left out on both sides). `published` simulates the Megatron-Core r0.8 weak-scaling
rows on H100 (NVIDIA/Megatron-LM README; ../shared/reference/public-ground-truth.md) on the
`h100-ib` cluster with `--ranks auto`. Standard library only: the work happens in the
subprocesses.
"""
from __future__ import annotations

import argparse
import shlex
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "megatron" / "pretrain_gpt.py"
WARMUP = 2
ITER_RE = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?elapsed time per iteration \(ms\): ([\d.]+) \|"
                     r" throughput per GPU \(TFLOP/s/GPU\): ([\d.]+)")
MEM_RE = re.compile(r"max allocated ([\d.]+) GiB, max reserved ([\d.]+) GiB")


# Megatron's usual setting (one hardware queue: TP/SP collectives are issued in order), and
# NVLink multicast off as the lent machine requires; the same on both sides.
ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_NVLS_ENABLE": "0",
       "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass
class Config:
    name: str
    args: tuple[str, ...]
    nproc: int = 2


# One published 1.7B TP1 rank's work on one GPU (the 1-GPU configs below).
PUB_1GPU = ("--preset", "gpt-1.7b", "--seq-length", "4096", "--micro-batch-size", "1",
            "--global-batch-size", "4", "--train-iters", "8", "--use-distributed-optimizer",
            "--core-attention", "sdpa")
TE_ARGS = ("--transformer-impl", "transformer_engine", "--gradient-accumulation-fusion")
# 2-GPU configs (TP2 and DP2, GPT 1.7B of the published table at sequence 2048), the same
# command on the real machine and under phantom; each config runs the same command on both sides.
COMMON = ("--preset", "gpt-1.7b", "--seq-length", "2048", "--micro-batch-size", "2",
          "--global-batch-size", "8", "--train-iters", "6")
MOE_COMMON = ("--num-layers", "4", "--seq-length", "4096", "--micro-batch-size", "1",
              "--global-batch-size", "8", "--train-iters", "6", "--use-distributed-optimizer",
              "--core-attention", "sdpa")
REAL_CONFIGS = [
    Config("tp2-sp", COMMON + ("--tp", "2", "--sequence-parallel")),
    Config("dp2-distopt", COMMON + ("--use-distributed-optimizer", "--overlap-grad-reduce",
                                    "--overlap-param-gather")),
    Config("tp2-sp-sdpa", COMMON + ("--tp", "2", "--sequence-parallel",
                                    "--core-attention", "sdpa")),
    # TP2 + SP at batches that keep the GPUs busy: the rows above spend most of a step on
    # the host (their real samples spread by 17-23% over hosts and hours), these mostly on the
    # GPU (phantom with the host taken out, `--host-time off`, is within 1-3% of its full
    # run). Same model; 4x and 8x the tokens per micro-batch.
    Config("tp2-sp-mb8", ("--preset", "gpt-1.7b", "--seq-length", "2048", "--micro-batch-size", "8",
                          "--global-batch-size", "32", "--train-iters", "6", "--tp", "2",
                          "--sequence-parallel")),
    Config("tp2-sp-sdpa-s4k", ("--preset", "gpt-1.7b", "--seq-length", "4096", "--micro-batch-size",
                               "8", "--global-batch-size", "16", "--train-iters", "6", "--tp", "2",
                               "--sequence-parallel", "--core-attention", "sdpa")),
    # One GPU doing one published 1.7B TP1 rank's work (seq 4096, micro batch 1, 4 micro-batches,
    # distributed optimizer), without its data-parallel communication: the GPU side of the
    # published row, measurable on a one-GPU machine.
    Config("pub-1.7b-1gpu", PUB_1GPU, nproc=1),
    Config("pub-1.7b-1gpu-local", PUB_1GPU[:-2] + ("--core-attention", "local"), nproc=1),
    # The same ops at shapes too small to keep the GPU busy: the iteration is the host's time
    # for one published rank's ops (24 layers, 4 micro-batches), on a real host and under phantom.
    # The two sequence lengths tell whether it is host-bound (equal times) or not.
    *(Config(f"pub-1.7b-1gpu-host-s{seq}", PUB_1GPU + (
        "--seq-length", str(seq), "--hidden-size", "256", "--ffn-hidden-size", "1024",
        "--num-attention-heads", "4", "--vocab-size", "4096"), nproc=1) for seq in (128, 512)),
    # The same two with Transformer Engine's layer spec, through phantom's TE stand-in
    # (phantom/adapters/te_standin) under phantom, and on a real GPU through the same stand-in
    # run for real (phantom/adapters/te_standin on PYTHONPATH; the lent machines
    # have no Transformer Engine): the stand-in's own GPU work and host time, both sides.
    Config("pub-1.7b-1gpu-te", PUB_1GPU[:-2] + TE_ARGS, nproc=1),
    Config("pub-1.7b-1gpu-host-s512-te", PUB_1GPU[:-2] + TE_ARGS + (
        "--seq-length", "512", "--hidden-size", "256", "--ffn-hidden-size", "1024",
        "--num-attention-heads", "4", "--vocab-size", "4096"), nproc=1),
    # The same with Megatron-LM's default gradient-accumulation fusion; on a real GPU without
    # Apex it needs bench/device/apex_shim on PYTHONPATH.
    Config("pub-1.7b-1gpu-gaf", PUB_1GPU + ("--gradient-accumulation-fusion",), nproc=1),
    # MoE on 2 GPUs (issue 8's Mixtral and Qwen3 presets cut to 4 layers): expert parallelism 2
    # with the all-to-all dispatcher (dense layers data-parallel), and Mixtral with TP2 + SP
    # (experts split by TP). Real routing is whatever the router picks (or random logits, `-balanced`:
    # Megatron's benchmarking option); phantom's is uniform (README, Megatron-Core).
    *(Config(name + suffix, args + extra + MOE_COMMON)
      for name, args in (("moe-mixtral-ep2", ("--preset", "mixtral-8x7b", "--ep", "2")),
                         ("moe-qwen3-ep2", ("--preset", "qwen3-30b-a3b", "--ep", "2")),
                         ("moe-mixtral-tp2-sp", ("--preset", "mixtral-8x7b", "--tp", "2",
                                                 "--sequence-parallel")))
      for suffix, extra in (("", ()), ("-balanced", ("--moe-router-force-load-balancing",)))),
]


@dataclass
class Published:
    name: str
    preset: str
    tp: int
    gpus: int
    tflops: float  # published TFLOP/s/GPU


# Megatron-Core r0.8 on H100, seq 4096, DP 48, global batch 192 (public-ground-truth.md).
PUBLISHED = [
    Published("1.7B TP1", "gpt-1.7b", 1, 48, 408.8),
    Published("7.1B TP2", "gpt-7.1b", 2, 96, 465.9),
    Published("16B TP4", "gpt-16b", 4, 192, 489.1),
]
# What the published runs used that the local spec has: distributed optimizer, overlapped
# grad reduce and param gather, sequence parallel with TP, gradient-accumulation fusion
# (Megatron-LM's default: its flag is `--no-gradient-accumulation-fusion`; TE's linear layers
# fuse it themselves, the local spec through Apex's extension, which phantom simulates);
# fused attention (TE) is stood in for by torch SDPA's flash kernel. Micro batch 1 is an
# assumption (the README does not say).
PUBLISHED_ARGS = ("--seq-length", "4096", "--micro-batch-size", "1", "--global-batch-size",
                  "192", "--use-distributed-optimizer", "--overlap-grad-reduce",
                  "--overlap-param-gather", "--gradient-accumulation-fusion",
                  "--train-iters", "5", "--disable-gloo-process-groups")
# The layer spec (`published --spec`): Transformer Engine's, as the published runs used, through
# phantom's simulated TE (te, the default); or the local spec with torch SDPA standing in for
# TE's fused attention (local).
SPEC_ARGS = {"te": ("--transformer-impl", "transformer_engine"),
             "local": ("--core-attention", "sdpa")}
SPEC_PHANTOM_ARGS = {"te": ("--transformer-engine", "simulated"), "local": ()}
SPEC_TEXT = {"te": "Transformer Engine spec (phantom's simulated TE)",
             "local": "local spec + SDPA core attention"}


def parse(output: str) -> dict:
    iters = [dict(iteration=int(m[0]), ms=float(m[1]), tflops=float(m[2]))
             for m in ITER_RE.findall(output)]
    mem = MEM_RE.search(output)
    steady = [i for i in iters if i["iteration"] > WARMUP]
    return dict(iterations=iters,
                median_ms=statistics.median(i["ms"] for i in steady) if steady else None,
                median_tflops=statistics.median(i["tflops"] for i in steady) if steady else None,
                max_allocated_gib=float(mem[1]) if mem else None,
                max_reserved_gib=float(mem[2]) if mem else None)


def run(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int, str, float]:
    print("$", " ".join(cmd), flush=True)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})})
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = 124, (e.stdout or b"").decode() + (e.stderr or b"").decode()
    wall = time.time() - t0
    for line in out.splitlines():
        if "iteration" in line and "elapsed" in line or "memory (rank 0)" in line:
            print("   ", line.strip()[:160], flush=True)
    if rc != 0:
        print(out[-3000:], flush=True)
    return rc, out, wall


def write_json(path: str, data: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def pct(sim: float | None, ref: float | None) -> float | None:
    return None if sim is None or ref is None else 100.0 * (sim - ref) / ref


def real_env(c: Config) -> dict:
    """The environment of a real run of `c`: ENV, and phantom's TE stand-in on the path for the TE
    spec's configs only, from TE_STANDIN_PATH (phantom/adapters/te_standin). Put on the path for
    a whole call, it made Megatron take TE's FusedAdam and multi-tensor kernels in the local spec's
    configs too, which their simulation (no `--transformer-engine simulated`) does not."""
    env = dict(ENV)
    standin = os.environ.get("TE_STANDIN_PATH")
    if standin and "transformer_engine" in c.args:
        env["PYTHONPATH"] = os.pathsep.join(x for x in (os.environ.get("PYTHONPATH"), standin) if x)
    return env


def cmd_real(args: argparse.Namespace) -> None:
    import torch  # noqa: PLC0415 (the real machine's CUDA build)

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout
    results = {}
    for c in selected(args.configs):
        env = real_env(c)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(c.nproc),
               str(SCRIPT), *c.args]
        rc, out, wall = run(cmd, args.timeout, env)
        Path(args.out).with_suffix(f".{c.name}.log").write_text(out)
        results[c.name] = dict(args=list(c.args), rc=rc, wall_s=round(wall, 1), **parse(out),
                               tail=out[-1500:] if rc else "")
        write_json(args.out, dict(device=smi.strip(), torch=torch.__version__,
                                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                  env=env, results=results))


def cmd_table(args: argparse.Namespace) -> None:
    sim = json.loads(Path(args.out + ".json").read_text())
    real = json.loads(Path(args.real).read_text())
    write_sim(args.out, sim["results"], real, sim["gpu"])


def cmd_sim(args: argparse.Namespace) -> None:
    real = json.loads(Path(args.real).read_text()) if args.real else {"results": {}}
    rows = {}
    for c in selected(args.configs):
        te = ("--transformer-engine", "simulated") if "transformer_engine" in c.args else ()
        cmd = [sys.executable, "-m", "phantom.cli", "run", "--nproc-per-node", str(c.nproc),
               "--gpu", args.gpu, *te, str(SCRIPT), *c.args]
        rc, out, wall = run(cmd, args.timeout, ENV)
        rows[c.name] = dict(args=list(c.args), rc=rc, wall_s=round(wall, 1), **parse(out),
                            tail=out[-1500:] if rc else "")
        write_sim(args.out, rows, real, args.gpu)


def write_sim(out: str, rows: dict, real: dict, gpu: str) -> None:
    write_json(out + ".json", dict(gpu=gpu, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                   real=real.get("device"), results=rows))
    device = "; ".join(sorted(set(str(real.get("device", "no real run")).splitlines())))
    gpus = "/".join(sorted({str(c.nproc) for c in REAL_CONFIGS if c.name in rows}))
    lines = [f"Megatron-Core 0.16 `examples/megatron/pretrain_gpt.py`, {gpus} x {gpu}: phantom vs "
             f"real ({gpus} x {device}, torch {real.get('torch', '?')}, "
             f"{real.get('date', '?')}). Median of iterations {WARMUP + 1}+.", "",
             "| config | real ms/iter | sim ms/iter | error | real TFLOP/s/GPU | sim | real "
             "max alloc GiB | sim | error | sim wall s |", "|---|---|---|---|---|---|---|---|---|---|"]
    errs = []
    for name, r in rows.items():
        ref = real.get("results", {}).get(name, {})
        e = pct(r["median_ms"], ref.get("median_ms"))
        m = pct(r["max_allocated_gib"], ref.get("max_allocated_gib"))
        if e is not None:
            errs.append(abs(e))
        f = (lambda v, d=1: "-" if v is None else f"{v:.{d}f}")
        lines.append(f"| {name} | {f(ref.get('median_ms'))} | {f(r['median_ms'])} | "
                     f"{f(e)}% | {f(ref.get('median_tflops'))} | {f(r['median_tflops'])} | "
                     f"{f(ref.get('max_allocated_gib'), 2)} | {f(r['max_allocated_gib'], 2)} | "
                     f"{f(m)}% | {r['wall_s']} |")
    if errs:
        lines += ["", f"Iteration time: mean |error| {statistics.mean(errs):.1f}%, "
                      f"max {max(errs):.1f}%."]
    Path(out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def cmd_published(args: argparse.Namespace) -> None:
    rows = []
    for p in PUBLISHED:
        if args.rows and p.name not in args.rows.split(","):
            continue
        cmd = [sys.executable, "-m", "phantom.cli", "run", "--cluster", "h100-ib", "--nnodes",
               str(p.gpus // 8), "--ranks", "auto", *SPEC_PHANTOM_ARGS[args.spec],
               *shlex.split(args.phantom_args), str(SCRIPT), "--preset", p.preset,
               "--tp", str(p.tp), *(("--sequence-parallel",) if p.tp > 1 else ()),
               *(a for a in PUBLISHED_ARGS
                 if args.gaf or a != "--gradient-accumulation-fusion"), *SPEC_ARGS[args.spec]]
        rc, out, wall = run(cmd, args.timeout)
        r = parse(out)
        rows.append(dict(name=p.name, gpus=p.gpus, tp=p.tp, published_tflops=p.tflops, rc=rc,
                         spec=args.spec,
                         wall_s=round(wall, 1), sim_tflops=r["median_tflops"],
                         sim_ms=r["median_ms"], error_pct=pct(r["median_tflops"], p.tflops),
                         max_allocated_gib=r["max_allocated_gib"], command=cmd[3:],
                         tail=out[-1500:] if rc else ""))
        write_published(args.out, rows)


def write_published(out: str, rows: list[dict]) -> None:
    write_json(out + ".json", dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                   rows=rows))
    lines = ["Megatron-Core r0.8 weak scaling on H100 (NVIDIA/Megatron-LM README): seq 4096, "
             "DP 48, global batch 192; phantom: `h100-ib` cluster, `--ranks auto`, "
             f"{SPEC_TEXT[rows[0].get('spec', 'local')] if rows else ''}, micro batch 1. "
             "Median of iterations "
             f"{WARMUP + 1}+.", "",
             "| row | GPUs | published TFLOP/s/GPU | phantom | error | phantom ms/iter | "
             "max alloc GiB | wall s |", "|---|---|---|---|---|---|---|---|"]
    errs = []
    for r in rows:
        f = (lambda v, d=1: "-" if v is None else f"{v:.{d}f}")
        if r["error_pct"] is not None:
            errs.append(abs(r["error_pct"]))
        lines.append(f"| {r['name']} | {r['gpus']} | {r['published_tflops']} | "
                     f"{f(r['sim_tflops'])} | {f(r['error_pct'])}% | {f(r['sim_ms'])} | "
                     f"{f(r['max_allocated_gib'], 2)} | {r['wall_s']} |")
    if errs:
        lines += ["", f"TFLOP/s/GPU: mean |error| {statistics.mean(errs):.1f}%, "
                      f"max {max(errs):.1f}%."]
    Path(out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def selected(names: str | None) -> list[Config]:
    if not names:
        return REAL_CONFIGS
    chosen = [c for c in REAL_CONFIGS if c.name in names.split(",")]
    unknown = set(names.split(",")) - {c.name for c in chosen}
    if unknown:
        raise SystemExit(f"unknown config(s) {sorted(unknown)}; `list` shows them")
    return chosen


def cmd_list(args: argparse.Namespace) -> None:
    for c in REAL_CONFIGS:
        print(f"{c.name:14s} {c.nproc} GPUs  {' '.join(c.args)}")
    for p in PUBLISHED:
        print(f"{p.name:14s} {p.gpus} GPUs  --preset {p.preset} --tp {p.tp} {' '.join(PUBLISHED_ARGS)} "
              f"{' '.join(SPEC_ARGS['te'])}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    q = sub.add_parser("real")
    q.add_argument("--out", required=True)
    q.add_argument("--configs")
    q.add_argument("--timeout", type=float, default=240)
    q = sub.add_parser("sim")
    q.add_argument("--out", required=True)
    q.add_argument("--gpu", default="H200")
    q.add_argument("--real")
    q.add_argument("--configs")
    q.add_argument("--timeout", type=float, default=1800)
    q = sub.add_parser("table", help="rewrite <out>.md from <out>.json and the real JSON")
    q.add_argument("--out", required=True)
    q.add_argument("--real", required=True)
    q = sub.add_parser("published")
    q.add_argument("--out", required=True)
    q.add_argument("--rows")
    q.add_argument("--phantom-args", default="", help="extra `phantom run` options, e.g. '--rank-spread 0'")
    q.add_argument("--spec", choices=sorted(SPEC_ARGS), default="te",
                   help="te (default): Transformer Engine's layer spec, simulated; local: the "
                        "local spec with SDPA attention")
    q.add_argument("--no-gradient-accumulation-fusion", dest="gaf", action="store_false",
                   help="run the rows without it, for comparison")
    q.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args()
    {"list": cmd_list, "real": cmd_real, "sim": cmd_sim, "table": cmd_table,
     "published": cmd_published}[args.cmd](args)


if __name__ == "__main__":
    main()
