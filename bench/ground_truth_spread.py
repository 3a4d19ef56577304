"""How far apart the real measurements of one acceptance row are, and what that leaves reachable.

Issues 4, 8, 9 and 10 accept on iteration times measured for real on lent 2 x H200 machines and
simulated here. Each row was measured more than once (different calls, days and machines of the
same kind). This script reads every committed real sample of those rows and asks, per row: how
far apart are the samples, and what is the smallest error any single predicted value x could
have against all of them at once? That error is (max - min) / (max + min), reached at
x = 2 max min / (max + min). Where it exceeds the issue's bound, no simulator, however exact,
meets the bound against every real sample: the row's ground truth moves more than the bound.

It also lists the GPU hosts' reference CPU step (`python -m phantom.engine.host`, run before and
after most device calls): the same tiny PyTorch step timed on the lent hosts, whose speed sets a
host-bound row's real time.

    python bench/ground_truth_spread.py [--sim bench/data/session38/sim_suites*/]
        [--collective-sims bench/data/session38/collectives/*.json] [--out FILE]

With --sim (folders of the suites' simulated results, one per run, as bench/data/session38/queue.sh
writes them), it also sets phantom's numbers (the median of its runs) against the median of the
real samples, and every run against every sample; --collective-sims does the same for
`collectives.py sim --json` sweeps, by issue 4's two size ranges.

Standard library only; the sources are the JSON and log files named in each row.
"""
from __future__ import annotations

import argparse
import glob
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def least_error_pct(values: list[float]) -> float:
    """The least relative error one value can have against every one of `values` (in %)."""
    return 100 * (max(values) - min(values)) / (max(values) + min(values))


@dataclass
class Row:
    issue: int
    suite: str
    name: str
    bound_pct: float  # the issue's bound on one row's error (its max; or its mean where no max)
    bound_kind: str
    samples: list[tuple[float, str]] = field(default_factory=list)  # (ms, source)

    def spread_pct(self) -> float:
        ms = [m for m, _ in self.samples]
        return 100 * (max(ms) / min(ms) - 1)

    def floor_pct(self) -> float:
        """The least error one value can have against every sample at once."""
        return least_error_pct([m for m, _ in self.samples])


def _median_tail(values: list[float], skip: int) -> float:
    return statistics.median(values[skip:])


def distributed_samples(path: Path) -> dict[str, float]:
    """`distributed.py real`: per config the median of the steps after the 3 warm-up ones."""
    results = json.loads(path.read_text())["results"]
    items = results.items() if isinstance(results, dict) else ((r["name"], r) for r in results)
    return {name: _median_tail(r["iter_ms"], 3) for name, r in items
            if isinstance(r, dict) and isinstance(r.get("iter_ms"), list) and len(r["iter_ms"]) > 3}


def deepspeed_samples(path: Path) -> dict[str, float]:
    """`deepspeed.py real`, runs with DeepSpeed's FusedAdam only (as simulated; the first
    2 x H200 sample's JIT build failed and fell back to torch's Adam)."""
    return {r["config"]["name"]: r["median_iter_ms"] for r in json.loads(path.read_text())["results"]
            if r.get("median_iter_ms") and r.get("optimizer") == "fused_adam"}


def megatron_samples(path: Path) -> dict[str, float]:
    return {name: r["median_ms"] for name, r in json.loads(path.read_text())["results"].items()
            if r.get("median_ms")}


def nonllm_samples(path: Path) -> dict[str, float]:
    runs = json.loads(path.read_text())["runs"]
    return {f"{r['workload']} x{r['gpus']}": r["summary"]["median_iter_ms"] for r in runs
            if r.get("summary") and r["summary"].get("median_iter_ms")}


def unet_log_samples(path: Path) -> list[tuple[str, float]]:
    """`device/unet_flicker.sh`'s log: '== unet N GPU' headers, then the script's summary line.
    Runs under the profiler (the header names its command after 'GPU') are left out."""
    out, gpus = [], None
    for line in path.read_text().splitlines():
        m = re.match(r"== unet (\d) GPU\s*(\S*)", line)
        if m:
            gpus = int(m.group(1)) if not m.group(2) else None
        m = re.search(r"summary: median_iter_ms=([\d.]+)", line)
        if m and gpus:
            out.append((f"unet x{gpus}", float(m.group(1))))
    return out


# Every committed real sample of the 2 x H200 acceptance rows (files under bench/data).
S38 = "session38/device_spread_h200x2/session38_"
S38_UNET = "session38/device_unet_spread_h200x2/session38_unet_"
S39 = "session39/device_traces_h200x2/"
S40 = "session40/device_layer_host_h200x2/"  # runs with bench/layer_host_times.py's wrapper
S40S = "session40/device_samples_h200x2/session40_"
S41S = "session41/device_samples_h200x2/session41_"
S41B = "session41/device_samples_h200x2_b/session41_"  # the same script, another lent machine
DISTRIBUTED_H200 = ["real_distributed_h200x2.json", "session19/h200x2_call1_ground_truth/real_distributed_h200x2.json",
                    S38 + "r1_real_distributed_h200x2.json", S38 + "r2_real_distributed_h200x2.json"]
DEEPSPEED_H200 = ["deepspeed_real_h200x2.json", "deepspeed_real_h200x2_fusedadam.json",
                  "session19/h200x2_call2_followup/deepspeed_real_h200x2.json", S38 + "deepspeed_real_h200x2.json",
                  S39 + "deepspeed_real_h200x2.json", S40S + "r1_deepspeed_real_h200x2.json",
                  S40S + "r2_deepspeed_real_h200x2.json", S41S + "3b_deepspeed_real_h200x2.json",
                  S41S + "1b_deepspeed_real_h200x2.json", S41B + "3b_deepspeed_real_h200x2.json",
                  S41B + "1b_deepspeed_real_h200x2.json"]
MEGATRON_H200 = ["megatron_real_h200x2.json", "session19/h200x2_call1_ground_truth/megatron_real_h200x2.json",
                 S38 + "r1_megatron_real_h200x2.json", S38 + "r2_megatron_real_h200x2.json",
                 S39 + "megatron_real_h200x2.json", S40 + "megatron_real_r1.json", S40 + "megatron_real_r2.json",
                 S40S + "megatron_real_h200x2.json", S41S + "megatron_real_h200x2.json",
                 S41B + "megatron_real_h200x2.json"]
NONLLM_H200 = ["real_nonllm_h200x2.json", "session19/h200x2_call1_ground_truth/real_nonllm_h200x2.json",
               *(f"{S38_UNET}r{i}_real_nonllm_h200x2.json" for i in (1, 2, 3))]
UNET_LOGS_H200 = ["unet_session7/real_unet_h200x2.log"]
# nccl-tests-style sweeps through torch.distributed (`collectives.py real`), 2 x H200
COLLECTIVES_H200 = ["real_collectives_h200x2.json", "real_collectives_small_h200x2_session7.json",
                    "session19/h200x2_call1_ground_truth/real_collectives_h200x2.json",
                    "session19/h200x2_call1_ground_truth/real_collectives_h200x2_b.json"]
MIB = 1 << 20
# issue 4: mean |error| <= 10% for sizes from 1 MiB, <= 25% below
COLLECTIVE_BOUNDS = {"from 1 MiB": 10.0, "below 1 MiB": 25.0}

# (issue, suite, bound on one row's error in %, what the bound is)
SUITES = {
    "distributed": (4, 10.0, "max"),
    "megatron": (8, 5.0, "each row"),
    "deepspeed": (9, 5.0, "mean"),
    "nonllm": (10, 12.0, "max"),
}


def collect() -> list[Row]:
    rows: dict[tuple[str, str], Row] = {}

    def add(suite: str, name: str, ms: float, source: str) -> None:
        issue, bound, kind = SUITES[suite]
        row = rows.setdefault((suite, name), Row(issue, suite, name, bound, kind))
        row.samples.append((ms, source))

    readers = [("distributed", DISTRIBUTED_H200, distributed_samples),
               ("deepspeed", DEEPSPEED_H200, deepspeed_samples),
               ("megatron", MEGATRON_H200, megatron_samples),
               ("nonllm", NONLLM_H200, nonllm_samples)]
    for suite, paths, read in readers:
        for rel in paths:
            path = DATA / rel
            if path.exists():
                for name, ms in read(path).items():
                    add(suite, name, ms, rel)
    for rel in UNET_LOGS_H200:
        if (DATA / rel).exists():
            for name, ms in unet_log_samples(DATA / rel):
                add("nonllm", name, ms, rel)
    return list(rows.values())


def _table_column(path: Path, column: int, key) -> dict[str, float]:
    """Rows of a markdown table the bench scripts write: {key(cells): float(cells[column])}."""
    out = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > column:
            try:
                out[key(cells)] = float(cells[column])
            except ValueError:
                continue
    return out


def simulated(folder: Path) -> dict[tuple[str, str], float]:
    """phantom's iteration times from one run of the suites (queue.sh's file names)."""
    sims: dict[tuple[str, str], float] = {}
    files = {"distributed": ("sim_distributed_h200x2.md", lambda p: _table_column(p, 3, lambda c: c[0])),
             "deepspeed": ("deepspeed_sim_h200x2.json", deepspeed_samples),
             "megatron": ("megatron_sim_h200x2.json", megatron_samples),
             "nonllm": ("sim_nonllm_h200x2.md", lambda p: _table_column(p, 3, lambda c: f"{c[0]} x{c[1]}"))}
    for suite, (name, read) in files.items():
        if (folder / name).exists():
            sims.update({(suite, row): ms for row, ms in read(folder / name).items()})
    return sims


def compare(rows: list[Row], runs: list[dict[tuple[str, str], float]], sources: list[str]) -> list[str]:
    """phantom's runs (the median of the runs per row) against the median of the real samples."""
    lines = ["", f"phantom ({len(runs)} run(s) of the suites on the simulating machine: "
             + ", ".join(f"`{s}`" for s in sources) + ") against the real samples:", "",
             "| issue | row | phantom ms, each run | phantom median | real median (samples) | error vs real median | "
             "error of each run vs each sample |", "|---|---|---|---|---|---|---|"]
    errors: dict[str, list[float]] = {}
    for r in sorted(rows, key=lambda r: (r.issue, r.name)):
        sims = [run[(r.suite, r.name)] for run in runs if (r.suite, r.name) in run]
        if not sims:
            continue
        sim, real = statistics.median(sims), statistics.median(m for m, _ in r.samples)
        each = sorted(100 * (x / m - 1) for x in sims for m, _ in r.samples)
        errors.setdefault(r.suite, []).append(abs(100 * (sim / real - 1)))
        lines.append(f"| {r.issue} | {r.name} | {', '.join(f'{x:.1f}' for x in sims)} | {sim:.1f} | "
                     f"{real:.1f} ({len(r.samples)}) | {100 * (sim / real - 1):+.1f}% | {each[0]:+.1f} to {each[-1]:+.1f}% |")
    lines.append("")
    for suite, errs in errors.items():
        issue, bound, kind = SUITES[suite]
        lines.append(f"- issue {issue}, {suite}: phantom's median against the real median, mean |error| "
                     f"{statistics.mean(errs):.1f}%, max {max(errs):.1f}% over {len(errs)} rows (bound {bound:.0f}%, {kind})")
    return lines


def collective_times(path: Path) -> dict[tuple[str, int], float]:
    """`collectives.py real` or `sim --json`: (op, size) -> time in us."""
    return {(r["op"], r["size"]): r["time_us"] for r in json.loads(path.read_text())["results"]
            if r.get("time_us")}


def collectives(sim_paths: list[Path]) -> list[str]:
    """Every committed real sweep, and phantom's sweeps (the median of its runs per op and
    size) against the median of the real ones, by issue 4's two size ranges."""
    real: dict[tuple[str, int], list[float]] = {}
    for rel in COLLECTIVES_H200:
        if (DATA / rel).exists():
            for key, us in collective_times(DATA / rel).items():
                real.setdefault(key, []).append(us)
    lines = ["", f"Collectives (`collectives.py`, 2 x H200, {len(COLLECTIVES_H200)} real sweeps: "
             + ", ".join(f"`{r}`" for r in COLLECTIVES_H200) + "):", ""]
    floors = {rng: [] for rng in COLLECTIVE_BOUNDS}
    for (op, size), us in real.items():
        if len(us) > 1:
            floors["from 1 MiB" if size >= MIB else "below 1 MiB"].append(least_error_pct(us))
    for rng, values in floors.items():
        lines.append(f"- {rng}: {len(values)} op-size points with several samples; the least error one value "
                     f"can have against all of a point's samples is {statistics.mean(values):.1f}% on average, "
                     f"up to {max(values):.1f}% (bound on the mean: {COLLECTIVE_BOUNDS[rng]:.0f}%)")
    if not sim_paths:
        return lines
    sims: dict[tuple[str, int], list[float]] = {}
    for path in sim_paths:
        for key, us in collective_times(path).items():
            sims.setdefault(key, []).append(us)
    errors = {rng: [] for rng in COLLECTIVE_BOUNDS}
    single = {rng: [] for rng in COLLECTIVE_BOUNDS}
    for key, us in sims.items():
        if key in real:
            rng = "from 1 MiB" if key[1] >= MIB else "below 1 MiB"
            errors[rng].append(abs(100 * (statistics.median(us) / statistics.median(real[key]) - 1)))
            single[rng] += [abs(100 * (x / r - 1)) for x in us for r in real[key]]
    lines += ["", f"phantom ({len(sim_paths)} sweep(s): " + ", ".join(f"`{p}`" for p in sim_paths)
              + "), the median of its sweeps against the median of the real ones:", ""]
    for rng, errs in errors.items():
        if errs:
            lines.append(f"- {rng}: mean |error| {statistics.mean(errs):.1f}% over {len(errs)} op-size points "
                         f"(bound {COLLECTIVE_BOUNDS[rng]:.0f}%); one sweep against one real sweep: "
                         f"mean {statistics.mean(single[rng]):.1f}%")
    return lines


def reference_steps() -> list[tuple[str, float]]:
    """The lent GPU hosts' reference CPU step (fastest timing), every committed measurement."""
    out = []
    for hit in sorted(glob.glob(str(DATA / "**" / "host_reference*.json"), recursive=True)):
        try:
            d = json.loads(Path(hit).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and d.get("host_step_ns") and "Xeon" in d.get("cpu", ""):
            out.append((str(Path(hit).relative_to(DATA)), d["host_step_ns"] / 1e3))
    return out


def before_after_pairs(steps: list[tuple[str, float]]) -> list[tuple[str, float, float]]:
    by_dir: dict[str, dict[str, float]] = {}
    for rel, us in steps:
        name = Path(rel).name
        for tag in ("before", "after", "_1", "_2"):
            if tag in name:
                by_dir.setdefault(str(Path(rel).parent), {})[tag] = us
    pairs = []
    for d, tags in by_dir.items():
        if "before" in tags and "after" in tags:
            pairs.append((d, tags["before"], tags["after"]))
        elif "_1" in tags and "_2" in tags:
            pairs.append((d, tags["_1"], tags["_2"]))
    return pairs


def spread_lines(rows: list[Row]) -> list[str]:
    """The rows with several real samples: their spread and the least error against all."""
    lines = ["Real samples of the 2 x H200 acceptance rows (every committed one; "
             "`python bench/ground_truth_spread.py`).", "",
             "| issue | suite | row | real ms (samples) | spread | least error one value can have against all | issue's bound | reachable |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r.issue, r.name)):
        if len(r.samples) < 2:
            continue
        ms = ", ".join(f"{m:.1f}" for m, _ in r.samples)
        reach = "yes" if r.floor_pct() <= r.bound_pct else "**no**"
        lines.append(f"| {r.issue} | {r.suite} | {r.name} | {ms} | {r.spread_pct():.1f}% | "
                     f"{r.floor_pct():.1f}% | {r.bound_pct:.0f}% ({r.bound_kind}) | {reach} |")
    lines += ["", "Per suite, the least mean error reachable against every sample (the mean of the rows' floors):", ""]
    for suite, (issue, bound, kind) in SUITES.items():
        floors = [r.floor_pct() if len(r.samples) > 1 else 0.0 for r in rows if r.suite == suite]
        if floors:
            lines.append(f"- issue {issue}, {suite}: mean floor {statistics.mean(floors):.1f}%, "
                         f"max floor {max(floors):.1f}% over its {len(floors)} rows, a row of one sample "
                         f"counting 0 (bound: {bound:.0f}%, {kind})")
    lines += ["", "Sources:", ""]
    for r in sorted(rows, key=lambda r: (r.issue, r.name)):
        lines.append(f"- {r.suite} {r.name}: " + "; ".join(f"{m:.1f} ms `{s}`" for m, s in r.samples))
    return lines


def host_reference_lines() -> list[str]:
    steps = reference_steps()
    if not steps:
        return []
    us = [v for _, v in steps]
    lines = ["", f"The lent GPU hosts' reference CPU step (`python -m phantom.engine.host`, fastest of 15 "
             f"timings): {len(us)} measurements, {min(us):.0f}-{max(us):.0f} us "
             f"(median {statistics.median(us):.0f}, max/min {max(us) / min(us):.2f}).", ""]
    pairs = before_after_pairs(steps)
    if pairs:
        ratios = [max(a, b) / min(a, b) for _, a, b in pairs]
        lines += [f"Before and after one device call (same machine, minutes apart), {len(pairs)} pairs: "
                  f"ratio median {statistics.median(ratios):.2f}, max {max(ratios):.2f}:", ""]
        for d, a, b in sorted(pairs, key=lambda p: -max(p[1], p[2]) / min(p[1], p[2]))[:8]:
            lines.append(f"- `{d}`: {a:.0f} -> {b:.0f} us")
    return lines


def report(sim_folders: list[Path] | None = None, collective_sims: list[Path] | None = None) -> str:
    rows = collect()
    lines = spread_lines(rows)
    if sim_folders:
        lines += compare(rows, [simulated(f) for f in sim_folders], [str(f) for f in sim_folders])
    lines += collectives(collective_sims or [])
    lines += host_reference_lines()
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sim", type=Path, nargs="*", default=[],
                   help="folders of simulated suite results (queue.sh's), one per run of the suites")
    p.add_argument("--collective-sims", type=Path, nargs="*", default=[],
                   help="`collectives.py sim --json` files, one per phantom sweep")
    p.add_argument("--out", help="also write the table here")
    args = p.parse_args()
    text = report(args.sim, args.collective_sims)
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
