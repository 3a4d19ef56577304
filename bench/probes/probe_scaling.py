"""How much of the speed probe's correction a run's host charge should take, from repeated runs.

phantom scales every measured host gap by its speed factor (`HostAccount.gap_scale`: the probe's
best time over its recent times, times the host speed) before taking the per-entry overhead off.
If the probe tracked the PyTorch host path exactly, repeated runs of one script would charge
the same host time however fast the machine ran. `record` runs a script under phantom and saves,
per iteration, what its gaps were charged with the gap scale as measured and with fixed scales;
`damping` then recomputes each run's charge with the correction taken to a power alpha (0: no
correction, 1: phantom's, which is itself the probe's swing at half strength,
`host.PROBE_STRENGTH`) and prints how much the runs spread (coefficient of variation):

    for i in 1 2 3 4 5 6; do phantom run --quiet --gpu H100 bench/probes/probe_scaling.py record run$i.json \\
        examples/gpt_train.py --preset gpt2-124m --seq-len 512 --batch-size 1 --steps 10; done
    python bench/probes/probe_scaling.py damping run*.json
"""
from __future__ import annotations

import json
import math
import runpy
import statistics
import sys
from pathlib import Path

FIXED_SCALES = (0.9, 1.0, 1.1, 1.2)
STEADY = range(3, 10)  # iterations whose charges are compared


def record(out: str, script: list[str]) -> None:
    from phantom.host.steady import SteadyGaps
    from phantom.interception import current_simulation

    sim = current_simulation()
    rows: list[tuple[int, float, float]] = []
    typical = SteadyGaps.typical

    def logged(self, site, gap):
        rows.append((len(sim.iterations), gap, sim.host.gap_scale))
        return typical(self, site, gap)

    SteadyGaps.typical = logged
    sys.argv = script
    # the script's folder in place of this one, as python would run it (this folder's
    # megatron.py would shadow Megatron-Core's package)
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [str(Path(script[0]).resolve().parent)] + [p for p in sys.path if p != here]
    try:
        runpy.run_path(script[0], run_name="__main__")
    finally:
        if not rows:
            return  # the script failed before its first gap: its own error follows
        c = sim.host.dispatch_overhead_ns
        fixed = {}
        for scale in FIXED_SCALES:
            charged: dict[int, float] = {}
            for it, gap, gap_scale in rows:
                charged[it] = charged.get(it, 0.0) + max(0.0, gap / gap_scale * scale - c)
            fixed[scale] = charged
        measured: dict[int, float] = {}
        for it, gap, _ in rows:
            measured[it] = measured.get(it, 0.0) + max(0.0, gap - c)
        with open(out, "w") as f:
            json.dump({"c": c, "median_scale": statistics.median(s for _, _, s in rows),
                       "measured": measured, "fixed": fixed}, f)


def _steady_median(by_iter: dict) -> float:
    return statistics.median(v for k, v in by_iter.items() if int(k) in STEADY) / 1e6


def _at(charges: dict[float, float], scale: float) -> float:
    """The charge at `scale`, linear between the fixed scales recorded (extrapolated past them)."""
    xs = sorted(charges)
    for a, b in zip(xs, xs[1:]):
        if scale <= b or b == xs[-1]:
            return charges[a] + (charges[b] - charges[a]) * (scale - a) / (b - a)
    raise ValueError("need at least two fixed scales")


def damping(paths: list[str]) -> None:
    runs = []
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        runs.append((d["median_scale"], {float(s): _steady_median(m) for s, m in d["fixed"].items()},
                     _steady_median(d["measured"])))
    typical = math.exp(statistics.mean(math.log(s) for s, _, _ in runs))
    print("charged as run (ms an iteration, gaps only): " + " ".join(f"{m:.1f}" for _, _, m in runs))
    print("| alpha | charge per run, ms an iteration | mean | coefficient of variation |")
    print("|---|---|---|---|")
    for alpha in (0.0, 0.25, 0.5, 0.75, 1.0):
        v = [_at(charges, s ** alpha * typical ** (1 - alpha)) for s, charges, _ in runs]
        mean = statistics.mean(v)
        print(f"| {alpha} | {' '.join(f'{x:.1f}' for x in v)} | {mean:.1f} | {statistics.pstdev(v) / mean:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "record":
        record(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "damping":
        damping(sys.argv[2:])
    else:
        sys.exit(__doc__)
