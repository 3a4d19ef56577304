"""Ranking fidelity of `phantom sweep`: a sweep spec's points for real, and the sweep's order.

    python bench/suites/sweep.py real --spec examples/sweeps/gpt_1b_h200.toml --out /tmp/real.json
    python bench/suites/sweep.py sim --spec examples/sweeps/gpt_1b_h200.toml --json /tmp/sim.json
    python bench/suites/sweep.py import-distributed --spec examples/sweeps/dist_train_2gpu.toml \
        --out /tmp/real.json bench/results/distributed/real-h200x2-2026-11-22-1.json

(through the harness: `python bench/bench.py real|sim|compare sweep --setup h200`.)

`real` runs every point of the spec as the script itself (`python SCRIPT ARGS`, or `torchrun
--nproc-per-node N` for the spec's --nproc-per-node) on this machine's GPUs, and records each
point's median iteration time from the script's `summary:` line, with its tokens/s per GPU from
the spec's tokens_per_iteration. `sim` runs `phantom sweep SPEC` and records the same from
sweep.json. `import-distributed` takes the same points from real runs of the distributed suite
(examples/dist_train.py with the same arguments). The harness compares the two orders
(bench/bench.py `ranking_lines`): Kendall's tau and where the real best point lands.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from phantom.sweep import expr  # noqa: E402
from phantom.sweep.spec import cluster_names, load_spec, point_run, points, value_text  # noqa: E402

SUMMARY = re.compile(r"summary: median_iter_ms=([\d.]+)")  # examples/*.py
TORCHTITAN_TPS = re.compile(r"tps: ([\d,]+)")  # torchtitan's metrics line: tokens/s per GPU


def iteration_ms(output: str, tokens: float, world: int) -> float | None:
    """The median iteration time the script printed: its summary line, else torchtitan's tokens/s
    per GPU of the steps after the first (their median)."""
    found = SUMMARY.findall(output)
    if found:
        return float(found[-1])
    tps = [float(t.replace(",", "")) for t in TORCHTITAN_TPS.findall(output)][1:]
    if tps:
        return tokens / statistics.median(tps) / world * 1e3
    return None


def _option(tokens: list[str], flag: str, default: str) -> str:
    return tokens[tokens.index(flag) + 1] if flag in tokens else default


def cmd_real(args: argparse.Namespace) -> None:
    spec = load_spec(args.spec)
    nproc = int(_option(spec.run_options, "--nproc-per-node", "0"))
    spec.world_size = spec.nproc_per_node = max(1, nproc)
    tokens_tree = expr.parse(spec.tokens_per_iteration)
    rows = {}
    valid = [p for p in points(spec)[0] if not args.only or any(o in p.label() for o in args.only)]
    with tempfile.TemporaryDirectory() as tmp:
        for point in valid:
            run = point_run(spec, point, Path(tmp))
            given = run.run_args
            target = given[given.index("--") + 1:] if "--" in given else given[given.index("-m"):]
            if target[:2] == ["-m", "torchtitan.train"]:  # with the torch-version patches phantom applies too
                target = ["bench/suites/torchtitan_entry.py", *target[2:]]
            launcher = ["torchrun", "--standalone", "--nproc-per-node", str(nproc)] if nproc else [sys.executable]
            proc = subprocess.run(launcher + target, cwd=REPO, capture_output=True, text=True)
            tokens = expr.evaluate(tokens_tree, cluster_names(spec) | point.as_dict())
            row = {"label": point.label(), "exit_code": proc.returncode}
            ms = iteration_ms(proc.stdout + proc.stderr, tokens, spec.world_size)
            if ms is not None:
                row |= {"iteration_ms": ms, "tokens_per_s_per_gpu": tokens / (ms / 1e3) / spec.world_size}
            else:
                row["error"] = (proc.stderr or proc.stdout)[-6000:]
            rows[point.label()] = row
            print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"spec": str(args.spec), "rows": rows}, indent=1) + "\n")


def cmd_sim(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep"
        subprocess.run([sys.executable, "-m", "phantom.cli", "sweep", str(args.spec), "--out", str(out),
                        "--prune-factor", "0", *args.extra], cwd=REPO, check=True)
        doc = json.loads((out / "sweep.json").read_text())
    rows = {}
    for p in doc["points"]:
        label = " ".join(f"{k}={value_text(v)}" for k, v in p["values"].items())
        rows[label] = {"label": label, "status": p["status"], "iteration_ms": p["iteration_ms"],
                       "tokens_per_s_per_gpu": p["tokens_per_s_per_gpu"]}
    Path(args.json).write_text(json.dumps({"spec": str(args.spec), "rows": rows}, indent=1) + "\n")


def cmd_import_distributed(args: argparse.Namespace) -> None:
    """The spec's points (`parallel=X`) from a distributed-suite result file's `X-1b-s2k` rows."""
    spec = load_spec(args.spec)
    spec.world_size = spec.nproc_per_node = int(_option(spec.run_options, "--nproc-per-node", "1"))
    tree = expr.parse(spec.tokens_per_iteration)
    source = json.loads(Path(args.results).read_text())
    rows = {}
    for point in points(spec)[0]:
        ms = source["rows"].get(f"{point.get('parallel')}-1b-s2k")
        if ms is None:  # a run of some of the configs only
            continue
        tokens = expr.evaluate(tree, cluster_names(spec) | point.as_dict())
        rows[point.label()] = {"label": point.label(), "iteration_ms": ms,
                               "tokens_per_s_per_gpu": tokens / (ms / 1e3) / spec.world_size}
    Path(args.out).write_text(json.dumps({"spec": str(args.spec), "rows": rows,
                                          "converted_from": args.results}, indent=1) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    real = sub.add_parser("real")
    real.add_argument("--spec", required=True)
    real.add_argument("--out", required=True)
    real.add_argument("--only", nargs="+", help="the points whose label holds one of these")
    sim = sub.add_parser("sim")
    sim.add_argument("--spec", required=True)
    sim.add_argument("--json", required=True)
    sim.add_argument("--real", help="the harness passes the real run it compares with; the spec "
                                    "names the points, so it is not read")
    sim.add_argument("extra", nargs="*", help="further phantom sweep options")
    imp = sub.add_parser("import-distributed")
    imp.add_argument("--spec", required=True)
    imp.add_argument("--out", required=True)
    imp.add_argument("results")
    args = p.parse_args()
    {"real": cmd_real, "sim": cmd_sim, "import-distributed": cmd_import_distributed}[args.mode](args)


if __name__ == "__main__":
    main()
