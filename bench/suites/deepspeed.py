"""DeepSpeed end-to-end benchmark: examples/deepspeed/train.py (HF Llama + deepspeed.initialize) with
ZeRO-2 and ZeRO-3 on 2 GPUs, real against simulated.

    python bench/suites/deepspeed.py list
    python bench/suites/deepspeed.py real --out /tmp/deepspeed_real_h200x2.json      # on the 2-GPU machine
    python bench/suites/deepspeed.py sim --gpu H200 --real /tmp/deepspeed_real_h200x2.json \\
        --out /tmp/deepspeed_sim_h200x2
    python bench/suites/deepspeed.py sim --gpu H200 --repeat 3 --real r1.json r2.json --out OUT   # pooled samples
    python bench/suites/deepspeed.py sim --real r1.json r2.json r3.json --runs-from OUT.json --out OUT2   # no new runs
    python bench/suites/deepspeed.py scale --out /tmp/deepspeed_scale_h100x16          # 16 simulated H100
    python bench/suites/deepspeed.py args z2-1b-lion --dir /tmp/x   # one config's script and arguments

`real` first builds DeepSpeed's FusedAdam CUDA extension (JIT, nvcc) once, then runs each config
with `torchrun --nproc-per-node 2` (`--nproc 1`: one GPU, the same ZeRO code path with one
partition, for a host-bound check where no 2-GPU machine is lent) and records the script's own `summary:` line (median step time
after the warm-up steps, peak allocated memory as the max over ranks). If the FusedAdam build
fails, every config runs with DeepSpeed's `torch_adam` (torch.optim.AdamW, fused=True) instead,
and the JSON says so; `sim` then uses the same optimizer. It also times one optimizer step of
DeepSpeed's FusedAdam and of torch's fused AdamW on the same flat fp32 partition
(`bench/kernels/deepspeed_adam.py`), which is how phantom prices FusedAdam.

The `pp*` rows run examples/deepspeed/train_pipe.py (the pipeline engine, ZeRO-1) instead: `pp2-1b`
on two stages; `pp1-*` on one stage, the engine's schedule and host path on one GPU
(`real --nproc 1`). `z2-1b-lion` and `z0-1b-lamb` take DeepSpeed's other fused optimizers
(FusedLion under ZeRO-2, FusedLamb with fp16: examples/deepspeed/zero2_lion.json, lamb_fp16.json);
`real` builds their CUDA ops first.

`sim` runs the same configs under `phantom run --nproc-per-node N --gpu H200` (N: the real file's) and writes
`<out>.md` (a table) and `<out>.json` (what `python bench/bench.py sim deepspeed` reads).

`scale` runs Llama3 8B under ZeRO-3 (examples/deepspeed/train.py) and under FSDP2
(examples/llama_train.py) on 16 simulated H100 (2 nodes of `h100-ib`), same batch and sequence,
and writes both results.

Standard library only: the work happens in the subprocesses.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collectives import environment, phantom_cmd, run_streaming, torchrun_cmd, write_json  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "examples/deepspeed/train.py"
PIPE_SCRIPT = "examples/deepspeed/train_pipe.py"
CONFIGS = REPO / "examples" / "deepspeed"
SUMMARY_RE = re.compile(r"^summary: (.*)$", re.M)
HEADER_RE = re.compile(r"^device: (.*)$", re.M)


@dataclass
class Config:
    name: str
    zero: int
    model: str
    seq_len: int
    micro_batch: int
    grad_accum: int = 1
    ac: bool = False
    steps: int = 8
    warmup: int = 3
    stages: int = 0  # > 0: the pipeline engine (train_pipe.py) with this many stages
    optimizer: str = "adamw"  # a key of OPTIMIZERS: the JSON's optimizer (and precision) for this row

    def args(self, config_path: str) -> list[str]:
        common = ["--deepspeed_config", config_path, "--model", self.model, "--seq-len", str(self.seq_len),
                  "--steps", str(self.steps), "--warmup", str(self.warmup)] + (["--ac"] if self.ac else [])
        if self.stages:  # micro-batch and micro-batches are the JSON's (ds_config)
            return [PIPE_SCRIPT, "--stages", str(self.stages)] + common
        return [SCRIPT, "--micro-batch", str(self.micro_batch), "--grad-accum", str(self.grad_accum)] + common

    @property
    def gpus_needed(self) -> int:
        return max(self.stages, 1)


CONFIGS_2GPU = [  # in the order the real run takes them (most wanted first)
    Config("z2-1b", 2, "llama-1b", 2048, 4),
    Config("z3-1b", 3, "llama-1b", 2048, 4),
    Config("z2-3b-ac", 2, "llama-3b", 2048, 4, ac=True),
    Config("z3-3b-ac", 3, "llama-3b", 2048, 4, ac=True),
    Config("z3-1b-ga2", 3, "llama-1b", 2048, 2, grad_accum=2),
    # ZeRO-3 at a batch that keeps the GPUs busier: the z3 rows above spend most of a step in
    # ZeRO-3's host work (their real samples spread by 14-64% over hosts and hours); here
    # phantom's step is 1.17x its GPU and network time alone (`--host-time off`), against
    # 1.86x for z3-1b. ZeRO-2 at the same shape for comparison.
    Config("z3-1b-s4k", 3, "llama-1b", 4096, 6),
    Config("z2-1b-s4k", 2, "llama-1b", 4096, 6),
    # The pipeline engine (deepspeed.pipe, ZeRO-1, its 1F1B TrainSchedule over the micro-batches).
    # pp2: two stages, the real comparison waits for a 2-GPU machine. pp1: ONE stage on one GPU,
    # the same engine, schedule interpreter and per-micro-batch host path with no stage-to-stage
    # sends, which a 1-GPU machine can check.
    Config("pp2-1b", 1, "llama-1b", 2048, 2, grad_accum=8, stages=2),
    Config("pp1-1b", 1, "llama-1b", 2048, 2, grad_accum=4, stages=1),
    Config("pp1-1b-m1", 1, "llama-1b", 2048, 1, grad_accum=8, stages=1),
    Config("pp1-3b-ac", 1, "llama-3b", 2048, 2, grad_accum=4, ac=True, stages=1),
    # DeepSpeed's other fused optimizers: FusedLion under ZeRO-2 (bf16), and FusedLamb, which
    # DeepSpeed runs only with fp16 and a dynamic loss scale, without ZeRO (FP16_UnfusedOptimizer's
    # `fused_lamb_legacy` path: one `lamb` call of three kernels per parameter).
    Config("z2-1b-lion", 2, "llama-1b", 2048, 4, optimizer="lion"),
    Config("z0-1b-lamb", 0, "llama-1b", 2048, 4, optimizer="lamb"),
]

# The DeepSpeed op builder that compiles each Config.optimizer's CUDA kernels, and the example
# JSON that selects it (with its precision: FusedLamb needs fp16 and a dynamic loss scale; a
# first scale of 2**12, not the default 2**16, which overflows a randomly initialised model's
# fp16 gradients for several steps that skip the optimizer). "adamw": zero{1,2,3}.json.
OPTIMIZERS = {
    "adamw": {"builder": "FusedAdamBuilder"},
    "lion": {"builder": "FusedLionBuilder", "json": "zero2_lion.json"},
    "lamb": {"builder": "FusedLambBuilder", "json": "lamb_fp16.json"},
}


def ds_config(c: Config, optimizer: str, out_dir: str) -> str:
    """The example's JSON for this config (zero{1,2,3}.json, or pipe.json with the config's
    micro-batch and micro-batches); with optimizer 'torch_fused', DeepSpeed's `torch_adam`
    switch (torch.optim.AdamW, here with fused=True) instead of FusedAdam."""
    if c.stages:
        config = json.loads((CONFIGS / "pipe.json").read_text())
        config.update(train_micro_batch_size_per_gpu=c.micro_batch, gradient_accumulation_steps=c.grad_accum)
        config.pop("train_batch_size", None)
    else:
        name = OPTIMIZERS[c.optimizer].get("json", f"zero{c.zero}.json")
        config = json.loads((CONFIGS / name).read_text())
        stage = config["zero_optimization"]["stage"]
        assert stage == c.zero, f"{c.name}: {name} is ZeRO-{stage}, the row says ZeRO-{c.zero}"
    if optimizer == "torch_fused" and c.optimizer == "adamw":
        config["optimizer"]["params"].update(torch_adam=True, fused=True)
    path = Path(out_dir) / f"{c.name}_{optimizer}.json"
    path.write_text(json.dumps(config, indent=2))
    return str(path)


def parse_summary(output: str) -> dict | None:
    m = None
    for m in SUMMARY_RE.finditer(output):
        pass
    if m is None:
        return None
    fields = dict(kv.split("=", 1) for kv in m.group(1).split())
    out = {k: float(v.rstrip("M")) for k, v in fields.items()}
    header = HEADER_RE.search(output)
    out["header"] = header.group(1) if header else ""
    return out


def run_configs(launcher: list[str], configs: list[Config], optimizer: str, timeout: float,
                log_path: str | None, on_row=None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in configs:
            r = run_streaming(launcher + c.args(ds_config(c, optimizer, tmp)), timeout,
                              log_path=log_path)
            row = {"config": asdict(c), "wall_s": r["wall_s"], "optimizer": optimizer}
            summary = parse_summary(r["output"])
            if summary is None:
                row["error"] = r.get("error") or "no summary line"
                print("FAILED:", row["error"], flush=True)
            else:
                row.update(summary)
            rows.append(row)
            if on_row:
                on_row(rows)
    return rows


def build_op(builder: str, timeout: float, log_path: str | None) -> dict:
    """JIT-build one DeepSpeed op (nvcc) before the runs that use it, so no run's time limit
    pays for the build."""
    code = (f"import time; t=time.time(); from deepspeed.ops.op_builder import {builder}; "
            f"{builder}().load(verbose=False); print(f'built {builder} in {{time.time()-t:.1f}} s')")
    r = run_streaming([sys.executable, "-c", code], timeout, log_path=log_path)
    return {"ok": r["rc"] == 0 and not r.get("error"), "wall_s": r["wall_s"],
            "error": r.get("error"), "tail": r["output"][-2000:]}


def deepspeed_arch_list() -> None:
    """DeepSpeed 0.19.8's op builder parses TORCH_CUDA_ARCH_LIST entries as numbers
    (deepspeed/ops/op_builder/builder.py `compute_capability_args`: int('0a') fails on '9.0a',
    which the lent GPU image sets), so the FusedAdam build fails there. The suffix only
    enables arch-specific instructions the fused Adam kernel does not use: it is dropped."""
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if arch:
        os.environ["TORCH_CUDA_ARCH_LIST"] = re.sub(r"(\d+\.\d+)[a-z]+", r"\1", arch)
        print(f"TORCH_CUDA_ARCH_LIST {arch!r} -> {os.environ['TORCH_CUDA_ARCH_LIST']!r}", flush=True)


def cmd_real(args: argparse.Namespace) -> None:
    deepspeed_arch_list()
    meta = environment()
    meta["script"] = SCRIPT  # PIPE_SCRIPT for the rows with stages
    configs = select(args.configs, args.nproc)
    optimizer = args.optimizer
    if optimizer == "fused_adam":
        build = build_op("FusedAdamBuilder", args.build_timeout, args.log)
        meta["fused_adam_build"] = build
        if not build["ok"]:
            print("FusedAdam JIT build failed: every config uses torch_adam (fused) instead", flush=True)
            optimizer = "torch_fused"
    for other in sorted({c.optimizer for c in configs} - {"adamw"}):
        build = meta[f"{other}_build"] = build_op(OPTIMIZERS[other]["builder"], args.build_timeout, args.log)
        if not build["ok"]:  # its rows would only fail inside their own time limit
            print(f"{OPTIMIZERS[other]['builder']} failed to build: its rows are left out", flush=True)
            configs = [c for c in configs if c.optimizer != other]
    meta["optimizer"] = optimizer
    meta["nproc"] = args.nproc
    if optimizer == "fused_adam" and args.adam_kernels:  # one optimizer step, DeepSpeed's kernel against torch's
        r = run_streaming([sys.executable, "bench/kernels/deepspeed_adam.py"], 120, log_path=args.log)
        meta["adam_kernels"] = [json.loads(l[len("adam: "):]) for l in r["output"].splitlines()
                                if l.startswith("adam: ")]
    write_json(args.out, {"meta": meta, "results": []})
    rows = run_configs(torchrun_cmd(args.nproc), configs, optimizer, args.timeout, args.log,
                       on_row=lambda rows: write_json(args.out, {"meta": meta, "results": rows}))
    write_json(args.out, {"meta": meta, "results": rows})


def select(names: str | None, nproc: int = 2) -> list[Config]:
    """The named configs (default: every one that fits on `nproc` GPUs, except the one-stage
    pipeline rows on 2 GPUs, where the two-stage row is the comparison)."""
    if not names:
        return [c for c in CONFIGS_2GPU if c.gpus_needed <= nproc and (nproc == 1 or c.stages != 1)]
    wanted = names.split(",")
    unknown = set(wanted) - {c.name for c in CONFIGS_2GPU}
    if unknown:
        raise SystemExit(f"unknown config(s) {sorted(unknown)}; see `python bench/suites/deepspeed.py list`")
    chosen = [c for c in CONFIGS_2GPU if c.name in wanted]
    too_big = [c.name for c in chosen if c.gpus_needed > nproc]
    if too_big:
        raise SystemExit(f"config(s) {too_big} need more than {nproc} GPU(s) (pipeline stages)")
    return chosen


def err(sim: float, real: float) -> float:
    return (sim - real) / real * 100


def real_samples(paths: list[str]) -> tuple[dict, dict[str, list[dict]]]:
    """The real files' meta (the first's) and every successful row per config name."""
    metas, rows = [], {}
    for path in paths:
        real = json.loads(Path(path).read_text())
        metas.append(real["meta"])
        for r in real["results"]:
            if "error" not in r:
                rows.setdefault(r["config"]["name"], []).append(r)
    nprocs = {m.get("nproc", 2) for m in metas}  # files from before --nproc were all 2-GPU runs
    optimizers = {m.get("optimizer", "fused_adam") for m in metas}
    if len(nprocs) > 1 or len(optimizers) > 1:
        raise SystemExit(f"the real files mix GPU counts {sorted(nprocs)} or optimizers {sorted(optimizers)}")
    return metas[0], rows


def cmd_sim(args: argparse.Namespace) -> None:
    meta, real_rows = real_samples(args.real)
    optimizer, nproc = meta.get("optimizer", "fused_adam"), meta.get("nproc", 2)
    configs = [c for c in select(args.configs, nproc) if c.name in real_rows]
    launcher = phantom_cmd(args.phantom) + ["run", "--quiet", "--nproc-per-node", str(nproc), "--gpu", args.gpu, "--"]
    runs: dict[str, list[dict]] = {}
    if args.runs_from:  # the phantom runs of an earlier `sim`, against these real files
        earlier = json.loads(Path(args.runs_from).read_text())
        runs, args.repeat = earlier["runs"], earlier["repeat"]
    for _ in range(0 if args.runs_from else args.repeat):  # rounds: a slow spell hits every config
        for row in run_configs(launcher, configs, optimizer, args.timeout, None):
            runs.setdefault(row["config"]["name"], []).append(row)
    lines = [f"Real: {meta.get('device')}, torch {meta.get('torch')}, {meta.get('date', '')[:10]}, "
             f"{len(args.real)} file(s); optimizer {optimizer}. Simulated: `phantom run --nproc-per-node "
             f"{nproc} --gpu {args.gpu}`, {args.repeat} run(s) of each. Medians of the samples.", "",
             "| config | ZeRO | model | micro x accum x seq | real ms (each) | real median | phantom ms (each) | "
             "phantom median | err % | real peak GiB | phantom peak GiB | err % |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    t_err, m_err, results = [], [], []
    for c in configs:
        real, sim = real_rows[c.name], [r for r in runs.get(c.name, []) if "error" not in r]
        shape = f"{c.micro_batch} x {c.grad_accum} x {c.seq_len}" + (" ac" if c.ac else "") + \
            (f", {c.stages} pipeline stage(s)" if c.stages else "")
        real_ms = [r["median_iter_ms"] for r in real]
        if not sim:
            error = next((r.get("error", "") for r in runs.get(c.name, [])), "not run")
            lines.append(f"| {c.name} | {c.zero} | {c.model} | {shape} | {', '.join(f'{x:.1f}' for x in real_ms)} | "
                         f"{statistics.median(real_ms):.1f} | failed: {error[:60]} | | | | | |")
            results.append({"config": asdict(c), "real_ms": real_ms, "error": error})
            continue
        sim_ms = [r["median_iter_ms"] for r in sim]
        real_med, sim_med = statistics.median(real_ms), statistics.median(sim_ms)
        real_peak = max(r["max_peak_alloc_gib"] for r in real)
        sim_peak = max(r["max_peak_alloc_gib"] for r in sim)
        te, me = err(sim_med, real_med), err(sim_peak, real_peak)
        t_err.append(abs(te))
        m_err.append(abs(me))
        results.append({"config": asdict(c), "real_ms": real_ms, "phantom_ms": sim_ms, "time_err_pct": round(te, 2),
                        "real_peak_gib": real_peak, "phantom_peak_gib": sim_peak, "mem_err_pct": round(me, 2)})
        lines.append(f"| {c.name} | {c.zero} | {c.model} | {shape} | {', '.join(f'{x:.1f}' for x in real_ms)} | "
                     f"{real_med:.1f} | {', '.join(f'{x:.1f}' for x in sim_ms)} | {sim_med:.1f} | {te:+.1f} | "
                     f"{real_peak:.2f} | {sim_peak:.2f} | {me:+.1f} |")
    if t_err:
        lines += ["", f"Iteration time |error| mean {statistics.mean(t_err):.1f}%, max {max(t_err):.1f}%; "
                      f"peak memory (max over ranks) |error| mean {statistics.mean(m_err):.1f}%, "
                      f"max {max(m_err):.1f}%."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out + ".md").write_text(text)
    write_json(args.out + ".json", {"real": args.real, "gpu": args.gpu, "repeat": args.repeat,
                                    "results": results, "runs": runs})


def cmd_scale(args: argparse.Namespace) -> None:
    """Llama3 8B, ZeRO-3 (DeepSpeed) against FSDP2 (examples/llama_train.py), 16 simulated H100.
    Each run keeps a run directory (`--out`) so the steady-step breakdown (compute, exposed
    communication, idle) and the GPU time by class explain any difference."""
    shape = ["--seq-len", str(args.seq_len)] + (["--ac"] if args.ac else [])
    results: dict = {"layout": f"16 x H100 (2 nodes of h100-ib), seq {args.seq_len}, {args.micro_batch} "
                               f"sequence(s) per rank, activation checkpointing {args.ac}"}
    zero3_8b = Config("scale", 3, "llama3-8b", args.seq_len, args.micro_batch)
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "deepspeed_zero3": [SCRIPT, "--deepspeed_config", ds_config(zero3_8b, "fused_adam", tmp), "--model",
                                "llama3-8b", "--micro-batch", str(args.micro_batch)],
            "fsdp2": ["examples/llama_train.py", "--preset", "llama3-8b", "--local-batch-size",
                      str(args.micro_batch)],
        }
        for name, target in runs.items():
            run_dir = Path(tmp) / name
            cmd = phantom_cmd(args.phantom) + ["run", "--quiet", "--out", str(run_dir), "--cluster", "h100-ib",
                                               "--nnodes", "2", "--nproc-per-node", "8", "--"]
            r = run_streaming(cmd + target + ["--steps", "5", "--warmup", "2"] + shape, args.timeout)
            results[name] = parse_summary(r["output"]) or {"error": r.get("error")}
            report = run_dir / "report.json"
            if report.exists():
                results[name]["phantom"] = explain(json.loads(report.read_text()), warmup=2)
    print(json.dumps(results, indent=2))
    write_json(args.out + ".json", results)


def explain(report: dict, warmup: int) -> dict:
    """Mean steady-step breakdown and GPU time by class from a phantom run report."""
    steps = (report.get("breakdown") or {}).get("iterations", [])[warmup:]
    keys = ("time_ms", "compute_ms", "exposed_comm_ms", "idle_ms")
    mean = {k: round(statistics.mean(s[k] for s in steps), 1) for k in keys} if steps else {}
    classes = {k: round(v["share"], 3) for k, v in (report.get("op_classes") or {}).items()}
    colls = [{k: c.get(k) for k in ("kind", "bytes", "calls", "network_ms")}
             for c in (report.get("top_collectives") or [])[:4]]
    return {"steady_step": mean, "gpu_busy_fraction": report.get("gpu_busy_fraction"),
            "gpu_time_share": classes, "top_collectives": colls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    p = sub.add_parser("args", help="print a config's script and arguments (its JSON written to --dir)")
    p.add_argument("name")
    p.add_argument("--dir", required=True)
    p.add_argument("--optimizer", choices=["fused_adam", "torch_fused"], default="fused_adam")
    p = sub.add_parser("real")
    p.add_argument("--out", required=True)
    p.add_argument("--configs", help="comma-separated config names (default: all)")
    p.add_argument("--optimizer", choices=["fused_adam", "torch_fused"], default="fused_adam")
    p.add_argument("--nproc", type=int, choices=[1, 2], default=2, help="GPUs (default 2)")
    p.add_argument("--adam-kernels", action=argparse.BooleanOptionalAction, default=True,
                   help="time DeepSpeed's and torch's Adam kernels first (~30 s)")
    p.add_argument("--timeout", type=float, default=150)
    p.add_argument("--build-timeout", type=float, default=240)
    p.add_argument("--log")
    p = sub.add_parser("sim")
    p.add_argument("--real", required=True, nargs="+",
                   help="real result file(s) of `real`: several are pooled, each config's median over them")
    p.add_argument("--repeat", type=int, default=1, help="phantom runs of each config (rounds)")
    p.add_argument("--runs-from", metavar="JSON",
                   help="an earlier `sim`'s JSON: its phantom runs against these real files, none run")
    p.add_argument("--out", required=True)
    p.add_argument("--gpu", default="H200")
    p.add_argument("--configs")
    p.add_argument("--phantom", help="command that runs phantom (default: `phantom`)")
    p.add_argument("--timeout", type=float, default=900)
    p = sub.add_parser("scale")
    p.add_argument("--out", required=True)
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--ac", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--phantom")
    p.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    if args.cmd == "list":
        for c in CONFIGS_2GPU:
            print(c)
    elif args.cmd == "args":  # for device scripts that run a config under another tool
        c = select(args.name, nproc=max(c.gpus_needed for c in CONFIGS_2GPU))[0]
        print(" ".join(c.args(ds_config(c, args.optimizer, args.dir))))
    else:
        {"real": cmd_real, "sim": cmd_sim, "scale": cmd_scale}[args.cmd](args)


if __name__ == "__main__":
    main()
