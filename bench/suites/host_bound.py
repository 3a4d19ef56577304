"""Host-bound training steps: small models where the CPU's Python and launch overhead, not
the GPU, sets the iteration time. Checks phantom's host-time model (README, "Host time").

    python bench/suites/host_bound.py real --out /tmp/host_bound_h100.json   # on the GPU machine
    python bench/suites/host_bound.py sim --gpu H100 --real /tmp/host_bound_h100.json

Uses the runners of single_gpu.py; the workloads are the shipped examples with small sizes.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from single_gpu import REPO, parse_summary, phantom_cmd, run_one  # noqa: E402

WORKLOADS = {
    "gpt-124m-s512-b1": ["examples/gpt_train.py", "--preset", "gpt2-124m", "--seq-len", "512", "--batch-size", "1"],
    "gpt-124m-s1k-b4": ["examples/gpt_train.py", "--preset", "gpt2-124m", "--seq-len", "1024", "--batch-size", "4"],
    "gpt-350m-s1k-b2": ["examples/gpt_train.py", "--preset", "gpt2-350m", "--seq-len", "1024", "--batch-size", "2"],
    "hf-llama-tiny": ["examples/hf_llama_train.py"],
    "hf-llama-tiny-ac": ["examples/hf_llama_train.py", "--ac"],
    "hf-llama-small": ["examples/hf_llama_train.py", "--hidden-size", "1024", "--layers", "8", "--heads", "16",
                       "--kv-heads", "8", "--intermediate-size", "2816", "--seq-len", "1024", "--batch-size", "4"],
}


def run_all(prefix: list[str], steps: int, warmup: int, timeout: float) -> dict:
    results = {}
    for name, argv in WORKLOADS.items():
        r = run_one([*prefix, *argv, "--steps", str(steps), "--warmup", str(warmup)], timeout)
        results[name] = r
        print("  ->", r.get("median_iter_ms", r.get("error")), flush=True)
    return results


def cmd_real(args: argparse.Namespace) -> None:
    import torch  # only the real mode needs it, on the GPU machine

    results = run_all([sys.executable], args.steps, args.warmup, args.timeout)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "python": platform.python_version(), "date": datetime.datetime.now().isoformat(timespec="seconds")}
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")


def _simulate(name: str, args: argparse.Namespace, tmp: str, i: int) -> tuple[float | None, dict, dict]:
    report = Path(tmp) / f"{name}.{i}.json"
    prefix = [*phantom_cmd(None), "run", "--gpu", args.gpu, "--quiet", *shlex.split(args.run_args), "--report",
              str(report), "--"]
    sim = run_one([*prefix, *WORKLOADS[name], "--steps", str(args.steps), "--warmup", str(args.warmup)],
                  args.timeout)
    rep = json.loads(report.read_text()) if report.exists() else {}
    return sim.get("median_iter_ms"), sim, rep


def cmd_sim(args: argparse.Namespace) -> None:
    """Each workload simulated `--repeat` times (host-bound steps move between runs with the
    simulating machine's speed): the median is compared, the range shows the spread."""
    real = json.loads(Path(args.real).read_text())["results"]
    rows, errs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [n for n in WORKLOADS if not args.only or n in args.only.split(",")]:
            runs = [_simulate(name, args, tmp, i) for i in range(args.repeat)]
            times = sorted(ms for ms, _, _ in runs if ms is not None)
            real_ms = real.get(name, {}).get("median_iter_ms")
            if not times or not real_ms:
                rows.append(f"| {name} | {real_ms} | {runs[-1][1].get('error')} | | | | | |")
                continue
            sim_ms = statistics.median(times)
            rep = runs[-1][2]
            busy = rep.get("gpu_busy_fraction") or 0.0
            sim_info = rep.get("simulation", {})
            host = sim_info.get("host_time") or {}
            err = 100 * (sim_ms - real_ms) / real_ms
            errs.append(abs(err))
            rows.append(f"| {name} | {real_ms} | {sim_ms:.2f} | {times[0]:.1f}-{times[-1]:.1f} | {err:+.1f} | "
                        f"{100 * busy:.0f}% | {host.get('ratio') or 0:.2f} | "
                        f"{(host.get('script_host_ns') or 0) / 1e6:.1f} |")
    table = "\n".join([f"| workload | real ms | sim ms (median of {args.repeat}) | sim range | err % | "
                        "sim GPU busy | host ratio | script Python ms |",
                        "|---|---|---|---|---|---|---|---|", *rows])
    if errs:
        table += f"\n\niteration time |error|: mean {statistics.mean(errs):.1f}%, max {max(errs):.1f}%\n"
    print(table)
    if args.out:
        Path(args.out).write_text(table)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    for mode in ("real", "sim"):
        s = sub.add_parser(mode)
        s.add_argument("--steps", type=int, default=10)
        s.add_argument("--warmup", type=int, default=3)
        s.add_argument("--timeout", type=float, default=300)
        s.add_argument("--out", default=None if mode == "sim" else "host_bound.json")
        if mode == "sim":
            s.add_argument("--gpu", default="H100")
            s.add_argument("--real", required=True)
            s.add_argument("--only", default="", help="comma-separated workload names (default: all)")
            s.add_argument("--repeat", type=int, default=3, help="simulations per workload (median)")
            s.add_argument("--run-args", default="", help="extra `phantom run` options, e.g. '--host-time off'")
    args = p.parse_args()
    (cmd_real if args.mode == "real" else cmd_sim)(args)


if __name__ == "__main__":
    main()
