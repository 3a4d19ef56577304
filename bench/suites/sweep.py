"""Ranking fidelity of `phantom sweep`: a sweep spec's points for real, and the sweep's order.

    python bench/suites/sweep.py real --spec examples/sweeps/gpt_1b_h200.toml --out /tmp/real.json
    python bench/suites/sweep.py sim --spec examples/sweeps/gpt_1b_h200.toml --out /tmp/sim.json
    python bench/suites/sweep.py rank --real R.json [R.json ...] --sim S.json

`real` runs every point of the spec as the script itself (`python SCRIPT ARGS`, or `torchrun
--nproc-per-node N` for the spec's --nproc-per-node) on this machine's GPUs, and records each
point's median iteration time from the script's `summary:` line, with its tokens/s per GPU from
the spec's tokens_per_iteration. `sim` runs `phantom sweep SPEC` and records the same from
sweep.json. `rank` compares the two orders by tokens/s per GPU: Kendall's tau (tau-b, ties
counted) and where the real best point lands in the sweep's ranking. A point that ran out of
memory for real or in the sweep ranks last on that side.
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
from phantom.sweep.spec import cluster_names, load_spec, point_run, points  # noqa: E402

SUMMARY = re.compile(r"summary: median_iter_ms=([\d.]+)")


def _option(tokens: list[str], flag: str, default: str) -> str:
    return tokens[tokens.index(flag) + 1] if flag in tokens else default


def cmd_real(args: argparse.Namespace) -> None:
    spec = load_spec(args.spec)
    nproc = int(_option(spec.run_options, "--nproc-per-node", "0"))
    spec.world_size = spec.nproc_per_node = max(1, nproc)
    tokens_tree = expr.parse(spec.tokens_per_iteration)
    rows = {}
    valid, _ = points(spec)
    with tempfile.TemporaryDirectory() as tmp:
        for point in valid:
            run = point_run(spec, point, Path(tmp))
            target = run.run_args[run.run_args.index("--") + 1:] if "--" in run.run_args else run.run_args
            launcher = ["torchrun", "--nproc-per-node", str(nproc)] if nproc else [sys.executable]
            proc = subprocess.run(launcher + target, cwd=REPO, capture_output=True, text=True)
            found = SUMMARY.findall(proc.stdout)
            tokens = expr.evaluate(tokens_tree, cluster_names(spec) | point.as_dict())
            row = {"label": point.label(), "exit_code": proc.returncode}
            if found:
                ms = float(found[-1])
                row |= {"iteration_ms": ms, "tokens_per_s_per_gpu": tokens / (ms / 1e3) / spec.world_size}
            else:
                row["error"] = (proc.stderr or proc.stdout)[-1500:]
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
        label = " ".join(f"{k}={_text(v)}" for k, v in p["values"].items())
        rows[label] = {"label": label, "status": p["status"], "iteration_ms": p["iteration_ms"],
                       "tokens_per_s_per_gpu": p["tokens_per_s_per_gpu"]}
    Path(args.out).write_text(json.dumps({"spec": str(args.spec), "rows": rows}, indent=1) + "\n")


def _text(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def kendall_tau_b(a: list[float], b: list[float]) -> float:
    """Kendall's tau-b of two paired lists (ties on either side counted as neither)."""
    concordant = discordant = ties_a = ties_b = 0
    n = len(a)
    for i in range(n):
        for j in range(i + 1, n):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    denom = ((concordant + discordant + ties_a) * (concordant + discordant + ties_b)) ** 0.5
    return (concordant - discordant) / denom if denom else 0.0


def ranking(real_files: list[str], sim_file: str) -> dict:
    """The real median tokens/s per GPU of each point over the real files, against the sweep."""
    reals: dict[str, list[float]] = {}
    for f in real_files:
        for label, row in json.loads(Path(f).read_text())["rows"].items():
            reals.setdefault(label, []).append(row.get("tokens_per_s_per_gpu") or 0.0)
    sim = json.loads(Path(sim_file).read_text())["rows"]
    labels = sorted(set(reals) & set(sim))
    real_v = [statistics.median(reals[k]) for k in labels]
    sim_v = [sim[k]["tokens_per_s_per_gpu"] or 0.0 for k in labels]
    real_best = labels[max(range(len(labels)), key=lambda i: real_v[i])]
    sim_best = labels[max(range(len(labels)), key=lambda i: sim_v[i])]
    real_of_sim_best = real_v[labels.index(sim_best)]
    return {"points": len(labels), "kendall_tau": round(kendall_tau_b(real_v, sim_v), 3),
            "real_best": real_best, "sweep_best": sim_best,
            "sweep_best_short_of_real_best_pct": round(100 * (1 - real_of_sim_best / max(real_v)), 2),
            "rows": {k: {"real": round(r), "sim": round(s)} for k, r, s in zip(labels, real_v, sim_v)}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    for mode in ("real", "sim"):
        m = sub.add_parser(mode)
        m.add_argument("--spec", required=True)
        m.add_argument("--out", required=True)
        m.add_argument("extra", nargs="*", help="further phantom sweep options (sim)")
    r = sub.add_parser("rank")
    r.add_argument("--real", nargs="+", required=True)
    r.add_argument("--sim", required=True)
    args = p.parse_args()
    if args.mode == "real":
        cmd_real(args)
    elif args.mode == "sim":
        cmd_sim(args)
    else:
        print(json.dumps(ranking(args.real, args.sim), indent=1))


if __name__ == "__main__":
    main()
