"""`phantom profile [--db PATH] [--sweep] [--] SCRIPT.py [ARGS...]`.

Two processes, on purpose: (1) `phantom run` machinery records every distinct op signature of
the script under simulation (fast: fake tensors) and writes them to a JSON file; (2) a plain
Python process, with no fake CUDA library loaded, rebuilds and times each one on the real GPU
(timing.py). This process itself never touches CUDA.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from phantom.cost.db import shipped_db_path
from phantom.config import add_options, flag_of, options_with_value

# phantom run's options for the simulated cluster, which profile's recording takes too
LAYOUT = ("nproc_per_node", "nnodes", "cluster", "ranks")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="phantom profile",
        usage="phantom profile [options] [--] SCRIPT.py [ARGS...]\n       phantom profile --sweep [options]",
        description="Time a script's ops (and/or the standard grid) on this machine's real GPU and add "
                    "them to a kernel database that `phantom run` then uses. A large "
                    "data-parallel script records its shapes from one representative rank "
                    "per class with --ranks auto.")
    p.add_argument("--db", metavar="PATH", help="database to add rows to (default: phantom_kernels_<GPU>.json)")
    p.add_argument("--gpu", help="GPU preset the recording simulates (default: this machine's GPU, via nvidia-smi)")
    p.add_argument("--sweep", action="store_true", help="also time the standard grid (bench/kernels/measure.py)")
    p.add_argument("--sweep-groups", metavar="G,G", default="",
                   help="with --sweep: only these groups of the grid (e.g. conv_layout,spatial,graph)")
    p.add_argument("--sweep-out", metavar="PATH", help="write the grid's calibration rows here (measure.py format)")
    p.add_argument("--record-only", metavar="PATH",
                   help="only record the script's signatures to PATH (works without a GPU); no timing")
    p.add_argument("--from-records", metavar="PATH", action="append", default=[],
                   help="time signatures recorded earlier (repeatable) instead of running a script")
    # The simulated cluster of the recording, as phantom run's options.
    add_options(p, LAYOUT)
    p.add_argument("--budget-s", type=float, default=600.0, help="stop starting new timings after this many seconds")
    p.add_argument("--retime", action="store_true", help="time signatures already in the database again")
    return p


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    takes = options_with_value(_parser())
    i = 0
    while i < len(argv):
        if argv[i] == "--":
            return argv[:i], argv[i + 1:]
        if argv[i] in takes:
            i += 2
        elif argv[i].startswith("-"):
            i += 1
        else:
            return argv[:i], argv[i:]
    return argv, []


def detect_gpu() -> str:
    """This machine's GPU as a phantom preset name, from nvidia-smi (no CUDA in this process)."""
    from phantom.hardware.gpus import list_gpus

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    name = out.strip().splitlines()[0] if out.strip() else ""
    if not name:
        raise SystemExit("phantom profile: no NVIDIA GPU found (nvidia-smi); pass --gpu to record only")
    for g in sorted(list_gpus(), key=lambda g: -len(g.name)):
        if g.device_name == name or g.name in name:
            return g.name
    raise SystemExit(f"phantom profile: GPU {name!r} matches no preset (phantom gpus); pass --gpu")


def record(script: str, args: list[str], gpu: str, path: str, layout: list[str] | None = None) -> int:
    """Run the script under simulation (as `phantom run` would) and write its op signatures to
    `path` (rank N of a distributed run to `path.rankN`). `layout`: phantom run's own options
    for the simulated cluster (--nproc-per-node, --nnodes, --cluster, --ranks)."""
    from phantom.launcher.args import parse_run_args
    from phantom.launcher import launch

    config = parse_run_args(["--gpu", gpu, "--quiet", *(layout or []), "--", script, *args])
    config.record_path = os.path.abspath(path)
    return launch(config)


def main(argv: list[str]) -> int:
    options, target = _split(argv)
    if any(o in ("-h", "--help") for o in options):
        _parser().print_help()
        return 0
    a = _parser().parse_args(options)
    if not target and not a.sweep and not a.from_records:
        print("phantom profile: nothing to do: give a SCRIPT.py, --from-records or --sweep", file=sys.stderr)
        return 2
    gpu = a.gpu or (None if a.record_only else detect_gpu())
    layout = [arg for name in LAYOUT if getattr(a, name) is not None
              for arg in (flag_of(name), str(getattr(a, name)))]
    if a.record_only:
        if not target:
            print("phantom profile: --record-only needs a SCRIPT.py", file=sys.stderr)
            return 2
        rc = record(target[0], target[1:], gpu or "H100", a.record_only, layout)
        print(f"phantom profile: signatures of {target[0]} -> {a.record_only} (exit {rc})", file=sys.stderr)
        return rc
    db = a.db or f"phantom_kernels_{gpu}.json"
    records = list(a.from_records)
    tmp = None
    if target:
        tmp = tempfile.NamedTemporaryFile(prefix="phantom_sigs_", suffix=".json", delete=False).name
        rc = record(target[0], target[1:], gpu, tmp, layout)
        if rc != 0:
            print(f"phantom profile: the script failed under simulation (exit {rc}); nothing timed", file=sys.stderr)
            return rc
        records.append(tmp)
    cmd = [sys.executable, "-m", "phantom.cost.profile.timing", "--db", db, "--budget-s", str(a.budget_s)]
    for r in records:
        cmd += ["--records", r]
    if a.sweep:
        cmd.append("--sweep")
        if a.sweep_out:
            cmd += ["--sweep-out", a.sweep_out]
        if a.sweep_groups:
            cmd += ["--sweep-groups", a.sweep_groups]
    if a.retime:
        cmd.append("--retime")
    # The timing process must not inherit phantom's run configuration or fake CUDA library.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHANTOM_")}
    rc = subprocess.call(cmd, env=env)
    if tmp:
        os.unlink(tmp)
    if rc == 0:
        print(f"phantom profile: rows in {db}; use them with `phantom run --gpu {gpu} --db {db}` "
              f"(or copy to {shipped_db_path(gpu)})", file=sys.stderr)
    return rc
