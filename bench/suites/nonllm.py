"""Vision, diffusion and graph workloads: real 1- and 2-GPU runs against phantom (issue 10).

    python bench/suites/nonllm.py real --out /tmp/real_nonllm_h200x2.json     # on the GPU host
    python bench/suites/nonllm.py sim  --real /tmp/real_nonllm_h200x2.json \\
                                --out /tmp/sim_nonllm_h200x2.md        # anywhere
    python bench/suites/nonllm.py record --out-dir bench/profile/records           # op signatures

Each workload is an example script run unchanged by torchrun (real) and by
`phantom run --nproc-per-node N --gpu H200` (simulated), with the same arguments; both sides
print the script's own `summary:` line (median and mean iteration time over the steps after
the script's warm-up, peak allocated memory as the maximum over ranks), which is what is
compared.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# name -> (script, arguments): the same on both sides.
WORKLOADS: dict[str, tuple[str, list[str]]] = {
    "resnet50": ("examples/vision/resnet50_ddp.py", ["--batch-size", "256", "--steps", "10", "--warmup", "4"]),
    "gat": ("examples/graph/gat_ddp.py", ["--nodes", "100000", "--avg-degree", "16", "--steps", "10",
                                          "--warmup", "3"]),
    "unet": ("examples/diffusion/unet_ddp.py", ["--batch-size", "8", "--steps", "8", "--warmup", "3"]),
}
GPU_COUNTS = (1, 2)
SUMMARY = re.compile(r"^summary: (.*)$", re.M)


def parse_summary(stdout: str) -> dict[str, float] | None:
    m = SUMMARY.search(stdout)
    if not m:
        return None
    out = {}
    for kv in m.group(1).split():
        k, v = kv.split("=")
        out[k] = float(v.rstrip("M"))
    return out


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # never NVLink multicast on the shared GPU hosts
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               PYTHONUNBUFFERED="1")
    return env


def _host_info() -> dict[str, str]:
    def q(field: str) -> str:
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout
            return out.strip().splitlines()[0]
        except Exception as exc:  # noqa: BLE001 (recorded, not fatal)
            return f"unknown ({type(exc).__name__})"
    import torch
    return {"gpu": q("name"), "driver": q("driver_version"), "torch": torch.__version__,
            "cuda": str(torch.version.cuda), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "python": sys.version.split()[0]}


def real(args: argparse.Namespace) -> int:
    results = {"meta": _host_info(), "runs": []}
    only = set(args.only.split(",")) if args.only else set(WORKLOADS)
    counts = [int(n) for n in args.gpus.split(",")] if args.gpus else GPU_COUNTS
    for name, (script, sargs) in WORKLOADS.items():
        if name not in only:
            continue
        for n in counts:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
                   str(REPO / script), *sargs]
            t0 = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=args.timeout)
            summary = parse_summary(proc.stdout)
            run = {"workload": name, "gpus": n, "args": sargs, "rc": proc.returncode, "summary": summary,
                   "wall_s": round(time.time() - t0, 1), "stdout": proc.stdout[-3000:],
                   "stderr": proc.stderr[-2000:] if proc.returncode else ""}
            print(f"{name} x{n}: rc {proc.returncode} {summary}", flush=True)
            results["runs"].append(run)
            Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


def _phantom() -> list[str]:
    exe = shutil.which("phantom")
    return [exe] if exe else [sys.executable, "-m", "phantom.cli"]


def sim(args: argparse.Namespace) -> int:
    real_data = json.loads(Path(args.real).read_text())
    meta = real_data["meta"]
    # the preset of the real runs' GPU unless named: a wrong one is a silently wrong table
    from phantom.cost.db import KernelDBError
    from phantom.cost.profile.timing import gpu_preset_for

    try:
        real_gpu = gpu_preset_for(meta["gpu"])
    except KernelDBError:
        real_gpu = None
    args.gpu = args.gpu or real_gpu
    if args.gpu is None:
        raise SystemExit(f"the real runs were on {meta['gpu']!r}: name phantom's preset with --gpu")
    if real_gpu and args.gpu.upper() != real_gpu.upper():
        print(f"warning: simulating --gpu {args.gpu} against real runs on {meta['gpu']}", file=sys.stderr)
    rows, errs_t, errs_m = [], [], []
    only = set(args.only.split(",")) if args.only else set(WORKLOADS)
    for run in real_data["runs"]:
        name, n = run["workload"], run["gpus"]
        if name not in only or not run["summary"]:
            continue
        script, sargs = WORKLOADS[name]
        assert sargs == run["args"], f"{name}: the real run used {run['args']}, this script {sargs}"
        cmd = [*_phantom(), "run", "--quiet", "--nproc-per-node", str(n), "--gpu", args.gpu, str(REPO / script), *sargs]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        s = parse_summary(proc.stdout)
        wall = time.time() - t0
        if proc.returncode or not s:
            print(f"{name} x{n}: simulation failed (rc {proc.returncode})\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        r = run["summary"]
        et = (s["median_iter_ms"] - r["median_iter_ms"]) / r["median_iter_ms"]
        em = (s["peak_alloc_gib"] - r["peak_alloc_gib"]) / r["peak_alloc_gib"]
        errs_t.append(abs(et))
        errs_m.append(abs(em))
        rows.append(f"| {name} | {n} | {r['median_iter_ms']:.2f} | {s['median_iter_ms']:.2f} | {et * 100:+.1f}% | "
                    f"{r['peak_alloc_gib']:.2f} | {s['peak_alloc_gib']:.2f} | {em * 100:+.1f}% | {wall:.0f} s |")
        print(rows[-1], flush=True)
    table = [
        f"Real: {meta['gpu']} x2, driver {meta['driver']}, torch {meta['torch']} (CUDA {meta['cuda']}), "
        f"{meta['date'][:10]} (`{args.real}`). Simulated: `phantom run --gpu {args.gpu}`, "
        f"{datetime.date.today().isoformat()}, {_torch_version()}.",
        "",
        "| workload | GPUs | real ms/iter | phantom ms/iter | error | real peak GiB | phantom peak GiB | error | sim wall |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Iteration time: mean |error| {100 * sum(errs_t) / len(errs_t):.1f}%, max {100 * max(errs_t):.1f}%. "
        f"Peak memory: mean |error| {100 * sum(errs_m) / len(errs_m):.1f}%, max {100 * max(errs_m):.1f}%.",
    ]
    Path(args.out).write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0


def _torch_version() -> str:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True)
    return "torch " + out.stdout.strip()


def record(args: argparse.Namespace) -> int:
    """Op signatures of each workload (rank 0 of 2, 3 steps), for `phantom profile --from-records`."""
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    for name, (script, sargs) in WORKLOADS.items():
        if args.only and name not in args.only.split(","):
            continue
        short = [a for a in sargs]
        i = short.index("--steps")
        short[i + 1] = "3"
        j = short.index("--warmup")
        short[j + 1] = "1"
        out = Path(args.out_dir) / f"nonllm-{name}.json"
        cmd = [*_phantom(), "profile", "--gpu", "H200", "--record-only", str(out), "--nproc-per-node", "2",
               "--", str(REPO / script), *short]
        rc = subprocess.call(cmd)
        if rc:
            return rc
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("real")
    r.add_argument("--out", required=True)
    r.add_argument("--only", default="")
    r.add_argument("--gpus", default="", help="GPU counts to run, e.g. 1 (default: 1,2)")
    r.add_argument("--timeout", type=int, default=300)
    s = sub.add_parser("sim")
    s.add_argument("--real", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--only", default="")
    s.add_argument("--gpu", help="phantom's GPU preset (default: the real runs' GPU)")
    c = sub.add_parser("record")
    c.add_argument("--out-dir", default=str(REPO / "bench" / "profile" / "records"))
    c.add_argument("--only", default="")
    a = ap.parse_args()
    return {"real": real, "sim": sim, "record": record}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
