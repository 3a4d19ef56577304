"""Host time you can reproduce: the same simulation, run again, on this machine.

    python bench/host/reproducibility.py run --out bench/host/data/reproducibility_<machine>.json
    python bench/host/reproducibility.py run --workloads gpt2-124m-b1 --repeat 3 --out F.json
    python bench/host/reproducibility.py ranks --out bench/host/data/reproducibility_ranks.json
    python bench/host/reproducibility.py table bench/host/data/reproducibility_<machine>.json

`ranks` checks that representative ranks stand for every rank under counted host time: a
multi-GPU run measured with every rank a process saves its profile, then `--ranks all` and
`--ranks auto` both replay it and their tokens/s per GPU are compared.

`run` simulates each workload with `--host-time measured` `--repeat` times alone and as many
times beside one busy process (a Python loop on one core), interleaved so that a slow spell of
the machine hits both; then with `--host-time counted` from the profile the first measured run
saved, once alone, once beside the busy process and once with an empty PHANTOM_CACHE_DIR. It
records every run's iteration times (the report's `iterations.times_ms`). `table` prints, per
workload: the spread of the medians, (max - min) / median, alone and beside the busy process;
the largest spread of the steady iterations within one run; and whether the counted runs gave
bit-identical iteration times. phantom runs in subprocesses.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from phantom.host.machine import cpu_model  # noqa: E402

GPT2_B1 = ["examples/gpt_train.py", "--preset", "gpt2-124m", "--seq-len", "512", "--batch-size", "1",
           "--steps", "10", "--warmup", "3"]
WORKLOADS = {  # name: (phantom run options, script and its arguments)
    "gpt2-124m-b1": (["--gpu", "H200"], GPT2_B1),
    "hf-llama-tiny": (["--gpu", "H200"], ["examples/hf_llama_train.py", "--steps", "10", "--warmup", "3"]),
    "deepspeed-z3-1b": (["--gpu", "H200", "--nproc-per-node", "2"], "deepspeed:z3-1b"),
    "deepspeed-z3-3b-ac": (["--gpu", "H200", "--nproc-per-node", "2"], "deepspeed:z3-3b-ac"),
}
# name: `phantom run` options and script for `ranks` (examples/llama_train.py's debug model)
RANK_LAYOUTS = {
    "pp2-tp2-dp2-8gpu": ["--nproc-per-node", "8", "examples/llama_train.py", "--preset", "debug", "--seq-len",
                         "1024", "--local-batch-size", "2", "--tp", "2", "--pp", "2", "--steps", "4", "--warmup", "1"],
    "fsdp-tp2-16gpu": ["--cluster", "h100-ib", "--nnodes", "2", "--nproc-per-node", "8", "examples/llama_train.py",
                       "--preset", "debug", "--seq-len", "1024", "--local-batch-size", "2", "--tp", "2",
                       "--steps", "4", "--warmup", "1"],
}
STEADY_FROM = 2  # iterations before this one include set-up and the first, remembered one


def _script(spec: list[str] | str, tmp: Path) -> list[str]:
    if isinstance(spec, list):
        return spec
    suite, name = spec.split(":")
    out = subprocess.run([sys.executable, str(REPO / "bench" / "suites" / f"{suite}.py"), "args", name,
                          "--dir", str(tmp)], capture_output=True, text=True, check=True, cwd=REPO)
    return out.stdout.split()


def _simulate(options: list[str], script: list[str], report: Path, env: dict | None = None,
              timeout: float = 1800) -> dict:
    cmd = [sys.executable, "-m", "phantom.cli", "run", "--quiet", "--report", str(report), *options, *script]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0 or not report.exists():
        return {"error": proc.stderr[-2000:], "cmd": cmd}
    data = json.loads(report.read_text())
    host = data["simulation"]["host_time"]
    return {"times_ms": data["iterations"]["times_ms"], "median_ms": data["iterations"]["median_ms"],
            "gpu_busy": data["gpu_busy_fraction"], "script_host_ms": host["script_host_ns"] / 1e6,
            "priced_host_ms": host["priced_host_ns"] / 1e6, "machine": host.get("machine")}


class Busy:
    """One process spinning on one core beside the simulation."""

    def __enter__(self) -> "Busy":
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def run_workload(name: str, repeat: int, tmp: Path) -> dict:
    options, spec = WORKLOADS[name]
    script = _script(spec, tmp)
    profile = tmp / f"{name}-profile"
    runs: dict[str, list[dict]] = {"alone": [], "busy": [], "counted": []}
    for i in range(repeat):
        save = ["--save-host-profile", str(profile)] if i == 0 else []
        runs["alone"].append(_simulate(options + save, script, tmp / f"{name}-a{i}.json"))
        with Busy():
            runs["busy"].append(_simulate(options, script, tmp / f"{name}-b{i}.json"))
        print(f"{name}: {runs['alone'][-1].get('median_ms')} alone, {runs['busy'][-1].get('median_ms')} busy",
              flush=True)
    counted = options + ["--host-time", "counted", "--host-profile", str(profile)]
    runs["counted"].append(_simulate(counted, script, tmp / f"{name}-c0.json"))
    with Busy():
        runs["counted"].append(_simulate(counted, script, tmp / f"{name}-c1.json"))
    runs["counted"].append(_simulate(counted, script, tmp / f"{name}-c2.json",
                                     env={"PHANTOM_CACHE_DIR": str(tmp / f"{name}-empty-cache")}))
    return {"options": options, "script": script, "runs": runs}


def cmd_run(args: argparse.Namespace) -> None:
    names = args.workloads.split(",") if args.workloads else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    meta = {"machine": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": _commit(), "repeat": args.repeat, "script": "bench/host/reproducibility.py"}
    with tempfile.TemporaryDirectory(prefix="phantom-repro-") as tmp:
        results = {n: run_workload(n, args.repeat, Path(tmp)) for n in names}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    print(table([args.out]))


def _tokens_per_gpu(options: list[str], env: dict | None = None) -> float | None:
    import re

    cmd = [sys.executable, "-m", "phantom.cli", "run", "--quiet", *options]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, **(env or {})})
    found = re.search(r"tokens_per_s_per_gpu=([\d.]+)", proc.stdout)
    if proc.returncode != 0 or not found:
        print(proc.stderr[-2000:], file=sys.stderr)
        return None
    return float(found.group(1))


def cmd_ranks(args: argparse.Namespace) -> None:
    rows = {}
    with tempfile.TemporaryDirectory(prefix="phantom-ranks-") as tmp:
        for name, options in RANK_LAYOUTS.items():
            profile = str(Path(tmp) / name)
            measured = _tokens_per_gpu(["--ranks", "all", "--save-host-profile", profile, *options])
            counted = ["--host-time", "counted", "--host-profile", profile]
            every = _tokens_per_gpu(["--ranks", "all", *counted, *options])
            auto = _tokens_per_gpu(["--ranks", "auto", *counted, *options])
            rows[name] = {"options": options, "measured_all": measured, "counted_all": every, "counted_auto": auto,
                          "auto_vs_all": (auto - every) / every if auto and every else None}
            print(name, rows[name], flush=True)
    meta = {"cpu": cpu_model(), "cpus": os.cpu_count(), "commit": _commit(), "script": "bench/host/reproducibility.py ranks",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "ranks": rows}, indent=1) + "\n")


def _spread(values: list[float]) -> float | None:
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else None


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def table(paths: list[str]) -> str:
    lines = ["| workload | file | median ms alone (each) | spread alone | median ms busy (each) | spread busy | "
             "worst steady spread in a run | counted identical | counted median ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        data = json.loads(Path(path).read_text())
        for name, result in data["results"].items():
            runs = result["runs"]
            ok = {k: [r for r in v if "error" not in r] for k, v in runs.items()}
            alone = [r["median_ms"] for r in ok["alone"]]
            busy = [r["median_ms"] for r in ok["busy"]]
            steady = [_spread(r["times_ms"][STEADY_FROM:]) for r in ok["alone"] + ok["busy"]
                      if len(r["times_ms"]) > STEADY_FROM + 1]
            counted = [r["times_ms"] for r in ok["counted"]]
            same = len(counted) == 3 and counted[0] == counted[1] == counted[2]
            failed = sum(len(v) - len(ok[k]) for k, v in runs.items())
            steady_worst = max((s for s in steady if s is not None), default=None)
            counted_ms = f"{statistics.median(counted[0][STEADY_FROM:]):.2f}" if counted else ""
            lines.append(
                f"| {name} | {Path(path).name} | {', '.join(f'{x:.2f}' for x in alone)} | {_pct(_spread(alone))} | "
                f"{', '.join(f'{x:.2f}' for x in busy)} | {_pct(_spread(busy))} | {_pct(steady_worst)} | "
                f"{'yes' if same else 'no'}{f' ({failed} runs failed)' if failed else ''} | {counted_ms} |")
    return "\n".join(lines)


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("--out", required=True)
    p.add_argument("--workloads", help=f"comma-separated, of {', '.join(WORKLOADS)} (default: all)")
    p.add_argument("--repeat", type=int, default=3)
    p = sub.add_parser("ranks")
    p.add_argument("--out", required=True)
    p = sub.add_parser("table")
    p.add_argument("paths", nargs="+")
    args = parser.parse_args()
    if args.cmd == "run":
        cmd_run(args)
    elif args.cmd == "ranks":
        cmd_ranks(args)
    else:
        print(table(args.paths))


if __name__ == "__main__":
    main()
