"""Host-bound DeepSpeed rows against the speed of the host they ran on.

The ZeRO-3 rows of `deepspeed.py` are host-bound on 2 x H200: most of a step is ZeRO-3's Python
(per-module fetch and release hooks). Their real samples spread 14-64% over the lent hosts
(`ground_truth_spread.py`), and each device call timed the host's reference CPU step
(`python -m phantom.engine.host`) around its runs. phantom charges host time at one node pace:
the GPU preset's reference step times its typical slowdown (H200: 603 us x 1.5 = 905 us), so
its number stands for a host of that pace, while the median of the real samples stands for
whichever hosts were lent. This script puts the two on one axis:

- every committed real sample of the rows, with the reference steps timed around it: just
  before and after the run where the call timed them so (`device/h200_zero3_paced_s43.sh`),
  else the mean of its call's (before, between and after its runs);
- phantom's step for the same row at several node paces (`--host-speed` = node reference step
  / this machine's best reference step, as phantom's default measures it).

If phantom's curve passes through the real points, its host accounting of the row is right and
the error against the median of the samples is the choice of node pace; if it misses at every
pace, the accounting is off. If the real points do not follow the reference step at all, the
reference step is no gauge of these hosts' pace for this code (Session 43 found so: z3-3b-ac
took 810 ms on one GPU between reference steps of 641 and 630 us, 804 ms between 1231 and 1110).

    python bench/host_speed_curve.py --configs z3-1b,z3-1b-ga2,z3-3b-ac --paces 500,650,800,950,1100 \\
        --out bench/data/session43/host_speed_curve

Writes OUT.md (tables), OUT.json and OUT.html (plotly). The simulations run `phantom run` as
`deepspeed.py sim` does.
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collectives import phantom_cmd, run_streaming, write_json  # noqa: E402
from ground_truth_spread import DATA, DEEPSPEED_H200, deepspeed_samples  # noqa: E402


def _bench_deepspeed():
    """bench/deepspeed.py by path: by name, `deepspeed` is DeepSpeed itself wherever it has
    been imported first (a test session)."""
    spec = importlib.util.spec_from_file_location("bench_deepspeed", Path(__file__).with_name("deepspeed.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being built
    spec.loader.exec_module(module)
    return module


BENCH_DS = _bench_deepspeed()
ds_config, parse_summary, select = BENCH_DS.ds_config, BENCH_DS.parse_summary, BENCH_DS.select

# Real 1-GPU samples (`deepspeed.py real --nproc 1`), shown beside the 2-GPU ones: the same
# ZeRO code path with one partition (Session 43).
DEEPSPEED_H200_1GPU = [
    "session43/device_zero3_1gpu_h200/zero3_1gpu_real_r1.json",
    "session43/device_zero3_1gpu_h200/zero3_1gpu_real_r2.json",
    # one run a file, each between two reference steps (device/h200_zero3_paced_s43.sh)
    *(f"session43/device_zero3_paced_h200/paced_{i}_{name}.json"
      for i, name in enumerate(["z3-1b", "z3-3b-ac"] * 3 + ["z3-1b"], start=1)),
]
PACED = re.compile(r"^paced_(\d+)_")


def _reference_us(path: Path) -> float | None:
    """A host_reference*.json's reference step in us (an Intel Xeon host's), or None."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(d, dict) and d.get("host_step_ns") and "Xeon" in d.get("cpu", "")
    return d["host_step_ns"] / 1e3 if ok else None


def sample_pace_us(sample: Path) -> float | None:
    """The host's pace around a sample file's runs: the two reference steps just before and
    after it where the call timed them so (`paced_N_*.json`: host_reference_{N-1} and _N);
    else the mean of every reference step of its call's folder."""
    paced = PACED.match(sample.name)
    if paced:
        n = int(paced.group(1))
        hits = [sample.parent / f"host_reference_{k}.json" for k in (n - 1, n)]
    else:
        hits = [Path(h) for h in glob.glob(str(sample.parent / "host_reference*.json"))]
    steps = [us for us in map(_reference_us, hits) if us]
    return statistics.mean(steps) if steps else None


def real_points(names: list[str]) -> list[dict]:
    points = []
    for gpus, files in ((2, DEEPSPEED_H200), (1, DEEPSPEED_H200_1GPU)):
        for rel in files:
            path = DATA / rel
            if not path.exists():
                continue
            pace = sample_pace_us(path)
            for name, ms in deepspeed_samples(path).items():
                if name in names:
                    points.append({"config": name, "gpus": gpus, "ms": ms, "pace_us": pace, "source": rel})
    return points


def simulate(config, nproc: int, host_speed: float | None, phantom: list[str], timeout: float) -> dict:
    """One `phantom run` of a deepspeed.py config; its summary and the host pace it used."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = phantom + ["run", "--quiet", "--nproc-per-node", str(nproc), "--gpu", "H200",
                         "--report", str(report)]
        cmd += ["--host-speed", f"{host_speed:.4f}"] if host_speed else []
        r = run_streaming(cmd + ["--"] + config.args(ds_config(config, "fused_adam", tmp)), timeout)
        summary = parse_summary(r["output"])
        if summary is None:
            return {"error": r.get("error") or "no summary line"}
        sim = json.loads(report.read_text())["simulation"] if report.exists() else {}
        return {"ms": summary["median_iter_ms"], "host_speed": sim.get("host_speed"),
                "node_pace_us": sim.get("host_step_ns_simulated", 0) * sim.get("host_mean_slowdown_simulated", 0) / 1e3}


def curve(config, paces: list[float], nproc: int, phantom: list[str], timeout: float) -> list[dict]:
    """phantom's step at the default pace, then at each of `paces` (node reference step, us)."""
    default = simulate(config, nproc, None, phantom, timeout)
    out = [{"pace_us": default.get("node_pace_us"), "default": True, **default}]
    if "error" in default:
        return out
    # host_speed = node pace / this machine's best reference step: the default run gives the latter
    best_here_us = default["node_pace_us"] / default["host_speed"]
    for pace in paces:
        out.append({"pace_us": pace, "default": False,
                    **simulate(config, nproc, pace / best_here_us, phantom, timeout)})
        print(f"  {config.name} x{nproc} at {pace:.0f} us: {out[-1].get('ms', out[-1].get('error'))}", flush=True)
    return out


def interpolate(points: list[dict], pace: float) -> float | None:
    """phantom's step at `pace`, linear between the two nearest paces of its curve (beyond
    its ends, along the end segment)."""
    xy = sorted((p["pace_us"], p["ms"]) for p in points if "ms" in p and not p["default"])
    if len(xy) < 2:
        return None
    i = next((k for k in range(1, len(xy) - 1) if pace <= xy[k][0]), len(xy) - 1)
    (x0, y0), (x1, y1) = xy[i - 1], xy[i]
    return y0 + (y1 - y0) * (pace - x0) / (x1 - x0)


def tables(curves: dict, reals: list[dict]) -> list[str]:
    lines = ["phantom's step (ms) at each node pace (reference step, us); * marks the default pace:", ""]
    for key, pts in curves.items():
        cells = ", ".join(f"{p['pace_us']:.0f}{'*' if p['default'] else ''}: "
                          f"{p['ms']:.1f}" if "ms" in p else f"{p['pace_us']}: failed" for p in pts)
        lines.append(f"- {key}: {cells}")
    lines += ["", "Real samples against phantom at the pace the reference steps around them measured:", "",
              "| row | GPUs | real ms | reference step around it, us | phantom at that pace | error | source |",
              "|---|---|---|---|---|---|---|"]
    errors = {}
    for p in sorted(reals, key=lambda p: (p["config"], p["gpus"], p["pace_us"] or 0)):
        key = f"{p['config']} x{p['gpus']}"
        pace, sim, err = "-", "-", "-"
        if p["pace_us"]:
            pace = f"{p['pace_us']:.0f}"
            ms = interpolate(curves[key], p["pace_us"]) if key in curves else None
            if ms:
                errors.setdefault(key, []).append(100 * (ms / p["ms"] - 1))
                sim, err = f"{ms:.1f}", f"{errors[key][-1]:+.1f}%"
        lines.append(f"| {p['config']} | {p['gpus']} | {p['ms']:.1f} | {pace} | {sim} | {err} | `{p['source']}` |")
    lines += [""] + [f"- {k}: mean error {statistics.mean(v):+.1f}%, mean |error| "
                     f"{statistics.mean(abs(e) for e in v):.1f}% over {len(v)} samples"
                     for k, v in errors.items()]
    return lines


def plot(curves: dict, reals: list[dict], path: str) -> None:
    """One panel a row: phantom's curve and the real samples at their pace (plotly, HTML)."""
    from plotly.subplots import make_subplots

    keys = list(curves)
    fig = make_subplots(rows=1, cols=len(keys), subplot_titles=keys)
    for col, key in enumerate(keys, start=1):
        pts = sorted((p["pace_us"], p["ms"]) for p in curves[key] if "ms" in p and not p["default"])
        fig.add_scatter(x=[x for x, _ in pts], y=[y for _, y in pts], mode="lines+markers",
                        name="phantom", legendgroup="phantom", showlegend=col == 1,
                        marker_color="#1f77b4", row=1, col=col)
        config, gpus = key.split(" x")
        rs = [p for p in reals if p["config"] == config and str(p["gpus"]) == gpus and p["pace_us"]]
        fig.add_scatter(x=[p["pace_us"] for p in rs], y=[p["ms"] for p in rs], mode="markers",
                        name="real", legendgroup="real", showlegend=col == 1, marker_symbol="square",
                        marker_color="#d62728", text=[p["source"] for p in rs], row=1, col=col)
        fig.update_xaxes(title_text="host reference step (us)", row=1, col=col)
    fig.update_yaxes(title_text="step (ms)", row=1, col=1)
    fig.update_layout(height=420, width=360 * len(keys), title="host-bound DeepSpeed rows against host pace")
    fig.write_html(path, include_plotlyjs="cdn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="z3-1b,z3-1b-ga2,z3-3b-ac")
    parser.add_argument("--paces", default="500,650,800,950,1100", help="node reference steps, us")
    parser.add_argument("--gpus", default="2,1", help="simulate these GPU counts")
    parser.add_argument("--out", required=True)
    parser.add_argument("--phantom", help="command that runs phantom (default: `phantom`)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--tables-from", metavar="JSON",
                        help="no simulation: the curves of an earlier run's OUT.json, against the "
                             "real samples committed now")
    args = parser.parse_args()
    configs = select(args.configs)
    if args.tables_from:
        curves = json.loads(Path(args.tables_from).read_text())["curves"]
        paces = json.loads(Path(args.tables_from).read_text())["paces_us"]
        return write(args.out, curves, paces, real_points([c.name for c in configs]))
    paces = [float(p) for p in args.paces.split(",")]
    phantom = phantom_cmd(args.phantom)
    curves = {}
    for gpus in (int(g) for g in args.gpus.split(",")):
        for c in configs:
            curves[f"{c.name} x{gpus}"] = curve(c, paces, gpus, phantom, args.timeout)
    write(args.out, curves, paces, real_points([c.name for c in configs]))


def write(out: str, curves: dict, paces: list[float], reals: list[dict]) -> None:
    text = "\n".join(tables(curves, reals)) + "\n"
    print(text)
    Path(out + ".md").write_text(text)
    write_json(out + ".json", {"paces_us": paces, "curves": curves, "real": reals})
    plot(curves, reals, out + ".html")


if __name__ == "__main__":
    main()
