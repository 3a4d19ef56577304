"""Workloads from the wider ecosystem, out of sample: real runs on one GPU against phantom.

    python bench/suites/workloads.py real --out /tmp/real_h100.json      # on the GPU host
    python bench/suites/workloads.py sim --real /tmp/real_h100.json \\
                                  --out /tmp/sim_h100             # anywhere
    python bench/suites/workloads.py record --out-dir bench/profile/records              # op signatures

Scripts written the way users of each library write them, none of them tuned against phantom
before its first real run: the Hugging Face `Trainer` (accelerate underneath; also LoRA
fine-tuning with peft and gradient checkpointing), timm models with
fp16 autocast and a GradScaler, and a PyTorch Lightning `Trainer`. The first table of each GPU
is taken with the kernel database as shipped before these workloads were ever run, so it says
how phantom does on models it was not built around; a `record` + `phantom profile` round can
add their kernels afterwards (and the table then says which rows were measured).

`--set patterns` runs common training patterns instead (bench/suites/patterns/: fp16 with a
GradScaler and a tied model moved to the GPU after its optimizer was built, DDP with no_sync
accumulation, FSDP1, tensor + sequence parallelism with loss_parallel, pipelining), most on two
GPUs (torchrun on the GPU host, `--nproc-per-node 2` under phantom):

    python bench/suites/workloads.py real --set patterns --out real.json          # 2-GPU host
    python bench/suites/workloads.py sim --real real.json --out sim               # the set is in real.json

Each workload runs unchanged under `python` (real; one GPU, no launcher) and under
`phantom run --gpu <the real run's GPU>`, with the same arguments; both sides print the
script's own `summary:` line (median step time after the warm-up, peak allocated memory).
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

from nonllm import _env, _host_info, _phantom, _torch_version, parse_summary

REPO = Path(__file__).resolve().parents[2]

# name -> (script, arguments): the same on both sides.
WORKLOADS: dict[str, tuple[str, list[str]]] = {
    "hf-trainer-small": ("examples/hf_trainer_train.py", ["--steps", "12", "--warmup", "4"]),
    "hf-trainer-0.9b": ("examples/hf_trainer_train.py", [
        "--hidden-size", "2048", "--layers", "16", "--heads", "16", "--kv-heads", "8",
        "--intermediate-size", "5632", "--seq-len", "2048", "--batch-size", "4", "--steps", "10",
        "--warmup", "4"]),
    "hf-lora-0.9b": ("examples/hf_trainer_train.py", [
        "--hidden-size", "2048", "--layers", "16", "--heads", "16", "--kv-heads", "8",
        "--intermediate-size", "5632", "--seq-len", "2048", "--batch-size", "4", "--steps", "10",
        "--warmup", "4", "--lora-rank", "16", "--gradient-checkpointing"]),
    "timm-vit-b16": ("examples/vision/timm_vit_amp.py", [
        "--model", "vit_base_patch16_224", "--batch-size", "128", "--steps", "12", "--warmup", "4"]),
    "timm-convnext-t": ("examples/vision/timm_vit_amp.py", [
        "--model", "convnext_tiny", "--batch-size", "128", "--steps", "12", "--warmup", "4"]),
    "lightning-resnet50": ("examples/vision/lightning_resnet50.py", [
        "--devices", "1", "--batch-size", "128", "--steps", "12", "--warmup", "4", "--workers", "6"]),
}


# Common training patterns, out of sample: plain-torch scripts in bench/suites/patterns/
# written after a robustness sweep found them broken or untested under phantom. name ->
# (script, arguments, GPUs); two GPUs run under torchrun on the GPU host and with
# `--nproc-per-node 2` under phantom.
PATTERNS: dict[str, tuple[str, list[str], int]] = {
    "amp-fp16-tied": ("bench/suites/patterns/amp_fp16.py", [], 1),
    "ddp-accum4": ("bench/suites/patterns/ddp_accum.py", [], 2),
    "fsdp1-full": ("bench/suites/patterns/fsdp1.py", ["--strategy", "FULL_SHARD"], 2),
    "fsdp1-grad-op-ac": ("bench/suites/patterns/fsdp1.py", ["--strategy", "SHARD_GRAD_OP", "--ac", "--batch", "8"], 2),
    "tp-sp-loss-parallel": ("bench/suites/patterns/tp_loss_parallel.py", [], 2),
    "pp-1f1b": ("bench/suites/patterns/pipeline.py", ["--schedule", "1F1B"], 2),
    "pp-interleaved": ("bench/suites/patterns/pipeline.py", ["--schedule", "Interleaved1F1B", "--microbatches", "4"], 2),
    "hf-generate": ("bench/suites/patterns/hf_generate.py", [], 1),
    # Float8 training through torchao: a bf16 baseline and three recipes, compiled
    # blocks (the way float8 is run), and tensorwise eager.
    "float8-bf16-compile": ("bench/suites/patterns/float8.py", ["--recipe", "none"], 1),
    "float8-tensorwise-compile": ("bench/suites/patterns/float8.py", ["--recipe", "tensorwise"], 1),
    "float8-rowwise-compile": ("bench/suites/patterns/float8.py", ["--recipe", "rowwise"], 1),
    "float8-rowwise-gw-hp-compile": ("bench/suites/patterns/float8.py", ["--recipe", "rowwise_with_gw_hp"], 1),
    "float8-tensorwise-eager": ("bench/suites/patterns/float8.py", ["--recipe", "tensorwise", "--eager"], 1),
    "float8-fsdp2-allgather": ("bench/suites/patterns/float8_dist.py", ["--parallel", "fsdp"], 2),
    "float8-tp": ("bench/suites/patterns/float8_dist.py", ["--parallel", "tp"], 2),
}


def _registry(name: str) -> dict[str, tuple[str, list[str], int]]:
    return {n: (*v, 1) for n, v in WORKLOADS.items()} if name == "workloads" else PATTERNS


def _selected(only: str, registry: dict) -> list[str]:
    names = only.split(",") if only else list(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        sys.exit(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(registry)}")
    return names


def _launch(script: str, gpus: int) -> list[str]:
    """The real side's command: plain python for one GPU, torchrun for several."""
    if gpus == 1:
        return [sys.executable, str(REPO / script)]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}",
            str(REPO / script)]


def real(args: argparse.Namespace) -> int:
    results = {"meta": _host_info(), "set": args.set, "runs": []}
    registry = _registry(args.set)
    for name in _selected(args.only, registry):
        script, sargs, gpus = registry[name]
        t0 = time.time()
        proc = subprocess.run([*_launch(script, gpus), *sargs], capture_output=True, text=True,
                              env=_env(), timeout=args.timeout, cwd=REPO)
        summary = parse_summary(proc.stdout)
        results["runs"].append({"workload": name, "args": sargs, "rc": proc.returncode, "summary": summary,
                                "wall_s": round(time.time() - t0, 1), "stdout": proc.stdout[-3000:],
                                "stderr": proc.stderr[-3000:] if proc.returncode else ""})
        print(f"{name}: rc {proc.returncode} {summary}", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


def _gpu_preset(device_name: str) -> str:
    for preset in ("H200", "H100", "A100"):
        if preset in device_name:
            return preset
    sys.exit(f"no phantom GPU preset for the real run's device {device_name!r}")


def sim(args: argparse.Namespace) -> int:
    real_data = json.loads(Path(args.real).read_text())
    meta = real_data["meta"]
    gpu = _gpu_preset(meta["gpu"])
    registry = _registry(real_data.get("set", "workloads"))
    rows, errs_t, errs_m, results = [], [], [], []
    for run in real_data["runs"]:
        name = run["workload"]
        if (args.only and name not in args.only.split(",")) or not run["summary"]:
            continue
        script, sargs, gpus = registry[name]
        assert sargs == run["args"], f"{name}: the real run used {run['args']}, this script {sargs}"
        report = Path(f"{args.out}.{name}.report.json")
        cmd = [*_phantom(), "run", "--quiet", "--gpu", gpu, "--nproc-per-node", str(gpus), "--report",
               str(report), *args.phantom_args, str(REPO / script), *sargs]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        wall = time.time() - t0
        s = parse_summary(proc.stdout)
        if proc.returncode or not s:
            print(f"{name}: simulation failed (rc {proc.returncode})\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        rep = json.loads(report.read_text())
        report.unlink()
        measured = rep["cost_sources"].get("db", {}).get("share", 0.0) if rep.get("cost_sources") else 0.0
        r = run["summary"]
        et = (s["median_iter_ms"] - r["median_iter_ms"]) / r["median_iter_ms"]
        em = (s["peak_alloc_gib"] - r["peak_alloc_gib"]) / r["peak_alloc_gib"]
        errs_t.append(abs(et))
        errs_m.append(abs(em))
        results.append({"workload": name, "real": r, "sim": s, "time_error": et, "memory_error": em,
                        "gpu_busy": rep.get("gpu_busy_fraction"), "measured_share": measured, "wall_s": wall})
        rows.append(f"| {name} | {r['median_iter_ms']:.2f} | {s['median_iter_ms']:.2f} | {et * 100:+.1f}% | "
                    f"{r['peak_alloc_gib']:.2f} | {s['peak_alloc_gib']:.2f} | {em * 100:+.1f}% | "
                    f"{100 * (rep.get('gpu_busy_fraction') or 0):.0f}% | {100 * measured:.0f}% | {wall:.0f} s |")
        print(rows[-1], flush=True)
    if not rows:
        sys.exit("no workload to simulate")
    table = [
        f"Real: {meta['gpu']}, driver {meta['driver']}, torch {meta['torch']} (CUDA {meta['cuda']}), "
        f"{meta['date'][:10]} (`{args.real}`). Simulated: `phantom run --gpu {gpu}"
        f"{' ' + ' '.join(args.phantom_args) if args.phantom_args else ''}`, {datetime.date.today().isoformat()}, "
        f"{_torch_version()}.",
        "",
        "| workload | real ms/step | phantom ms/step | error | real peak GiB | phantom peak GiB | error "
        "| phantom GPU busy | GPU time from measured rows | sim wall |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Step time: mean |error| {100 * sum(errs_t) / len(errs_t):.1f}%, max {100 * max(errs_t):.1f}%. "
        f"Peak memory: mean |error| {100 * sum(errs_m) / len(errs_m):.1f}%, max {100 * max(errs_m):.1f}%.",
    ]
    Path(args.out + ".md").write_text("\n".join(table) + "\n")
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": results}, indent=1))
    print("\n".join(table))
    return 0


def record(args: argparse.Namespace) -> int:
    """Op signatures of each workload (3 steps), for `phantom profile --from-records`."""
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    for name in _selected(args.only, WORKLOADS):
        script, sargs = WORKLOADS[name]
        short = list(sargs)
        short[short.index("--steps") + 1] = "3"
        short[short.index("--warmup") + 1] = "1"
        out = Path(args.out_dir) / f"workloads-{name}.json"
        cmd = [*_phantom(), "profile", "--gpu", args.gpu, "--record-only", str(out), "--",
               str(REPO / script), *short]
        rc = subprocess.call(cmd, cwd=REPO)
        if rc:
            return rc
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("real")
    r.add_argument("--out", required=True)
    r.add_argument("--only", default="", help="comma-separated workload names (default: all)")
    r.add_argument("--timeout", type=int, default=300)
    r.add_argument("--set", choices=["workloads", "patterns"], default="workloads",
                   help="the one-GPU ecosystem workloads, or the training patterns (1-2 GPUs)")
    s = sub.add_parser("sim")
    s.add_argument("--real", required=True)
    s.add_argument("--out", required=True, help="path prefix: writes <out>.md and <out>.json")
    s.add_argument("--only", default="")
    s.add_argument("--phantom-args", nargs=argparse.REMAINDER, default=[],
                   help="further `phantom run` options (last on the line), e.g. --no-db")
    c = sub.add_parser("record")
    c.add_argument("--out-dir", default=str(REPO / "bench" / "profile" / "records"))
    c.add_argument("--gpu", default="H100")
    c.add_argument("--only", default="")
    a = ap.parse_args()
    return {"real": real, "sim": sim, "record": record}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
