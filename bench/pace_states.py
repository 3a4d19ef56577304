"""Does a host-bound simulated step depend on the simulating machine's state?

Runs one DeepSpeed config of `deepspeed.py` again and again under `phantom run`, alternating
`--host-pace process` (engine/pace.py) with `--host-pace probe` (`auto`, the default, takes the
process where the machine has a core for it),
and appends each run (step time, the reference step's start-up time against its best, the
probe's and the pace's mean slowdowns) to a JSONL file. The table sorts the runs by the
machine's state when each started: the reference CPU step timed at start-up against this
machine's best (`host_step_ns_at_start / host_step_ns_here`), "slow" at SLOW_STATE or more.
A state-proof conversion gives the same step in both states.

    python bench/pace_states.py run --config z3-1b --runs 10 --out bench/data/session44/pace_states.jsonl
    python bench/pace_states.py table bench/data/session44/pace_states.jsonl
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepspeed import CONFIGS_2GPU, ds_config, parse_summary  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SLOW_STATE = 1.3  # the start-up reference step this many times its best: the machine's slow state
ARMS = {"pace": ["--host-pace", "process"], "probe": ["--host-pace", "probe"]}


def run_once(config, nproc: int, gpu: str, arm: str, tmp: str) -> dict:
    report = Path(tmp) / "report.json"
    cmd = [sys.executable, "-m", "phantom.cli", "run", "--quiet", "--report", str(report), *ARMS[arm],
           "--nproc-per-node", str(nproc), "--gpu", gpu, "--", *config.args(ds_config(config, "fused_adam", tmp))]
    started = time.time()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    row = {"arm": arm, "config": config.name, "nproc": nproc, "started": started, "wall_s": time.time() - started}
    summary = parse_summary(proc.stdout + proc.stderr)
    if proc.returncode != 0 or summary is None or not report.exists():
        return {**row, "error": (proc.stderr or proc.stdout)[-2000:]}
    sim = json.loads(report.read_text())["simulation"]
    variation = sim["host_speed_variation"]
    return {**row, "step_ms": summary["median_iter_ms"],
            "start_ref_slowdown": sim["host_step_ns_at_start"] / sim["host_step_ns_here"],
            "probe_mean_slowdown": variation["mean_slowdown"],
            "pace_mean_slowdown": variation.get("pace_mean_slowdown"),
            "host_speed": sim["host_speed"], "dispatch_overhead_ns": sim["host_gaps"]["dispatch_overhead_ns"]}


def table(rows: list[dict]) -> list[str]:
    lines = ["| arm | state | runs | step ms (min-max) | median | sd | start-up ref step / best | probe | pace |",
             "|---|---|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        for state in ("fast", "slow"):
            runs = [r for r in rows if r["arm"] == arm and "error" not in r
                    and (r["start_ref_slowdown"] >= SLOW_STATE) == (state == "slow")]
            if not runs:
                continue
            steps = [r["step_ms"] for r in runs]
            paces = [r["pace_mean_slowdown"] for r in runs if r["pace_mean_slowdown"]]
            pace = f"{min(paces):.2f}-{max(paces):.2f}" if paces else "-"
            sd = statistics.stdev(steps) if len(steps) > 1 else 0.0
            lines.append(f"| {arm} | {state} | {len(runs)} | {min(steps):.0f}-{max(steps):.0f} | "
                         f"{statistics.median(steps):.1f} | {sd:.1f} | "
                         f"{min(r['start_ref_slowdown'] for r in runs):.2f}-{max(r['start_ref_slowdown'] for r in runs):.2f} | "
                         f"{min(r['probe_mean_slowdown'] for r in runs):.2f}-{max(r['probe_mean_slowdown'] for r in runs):.2f} | {pace} |")
    failed = [r for r in rows if "error" in r]
    if failed:
        lines.append(f"\n{len(failed)} run(s) failed; the first: {failed[0]['error'][-300:]}")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--config", default="z3-1b", choices=[c.name for c in CONFIGS_2GPU])
    r.add_argument("--nproc", type=int, default=1)
    r.add_argument("--gpu", default="H200")
    r.add_argument("--runs", type=int, default=10, help="runs of each arm, alternating")
    r.add_argument("--out", required=True, help="JSONL file the runs are appended to")
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    args = p.parse_args()
    if args.cmd == "table":
        rows = [json.loads(line) for f in args.files for line in Path(f).read_text().splitlines() if line.strip()]
        print("\n".join(table(rows)))
        return
    config = next(c for c in CONFIGS_2GPU if c.name == args.config)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for arm in ARMS:
                row = run_once(config, args.nproc, args.gpu, arm, tmp)
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{i + 1}/{args.runs} {arm}: {row.get('step_ms', 'FAILED')} ms, start-up ref "
                      f"{row.get('start_ref_slowdown', float('nan')):.2f}x", flush=True)


if __name__ == "__main__":
    main()
