"""How phantom's host-gap accounting rules charge one run's gaps, recomputed offline.

phantom charges each host gap (the script's time between two entries into its handler) less
a mean per-entry overhead, clipped at zero (`Simulation.begin_op`). `record` runs a script
under phantom and saves every gap as `SteadyGaps.typical` returns it (before anything is
taken off), with the kind of entry that ends it (op, metadata query, other), its thread, its
iteration, and with `--megatron` the phase of Megatron's iteration it falls in
(megatron_phases.py's wrappers). `rules` then charges the same gaps under several rules, so
rules are compared without this machine's run-to-run drift:

    phantom run --nproc-per-node 1 --gpu H100 bench/host_gap_rules.py record --megatron \\
        --out gaps.json -- examples/megatron/pretrain_gpt.py ARGS...
    python bench/host_gap_rules.py rules gaps.json

Rules: `clipped` (phantom's: each gap less c, at least zero), `unclipped`, `query-runs` (a
metadata query's shortfall taken off the following gaps up to the next entry that is not a
query, then dropped). Gaps only: launches and runtime calls are charged on top of these.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import runpy
import sys
import threading
from pathlib import Path

OP, QUERY, OTHER = "op", "query", "other"


def record(out: str, megatron: bool, script: list[str]) -> None:
    import gc

    from phantom.engine.host import SteadyGaps
    from phantom.interception import mode

    sim = next(cb.__self__ for cb in gc.callbacks if getattr(cb, "__name__", "") == "on_gc")
    main_thread = threading.get_ident()
    phase = ["-"]
    gaps: list[tuple] = []
    typical = SteadyGaps.typical

    def logged(self, site, gap):
        charged = typical(self, site, gap)
        kind = QUERY if site in mode._METADATA_OPS else OP if hasattr(site, "overloadpacket") else OTHER
        thread = "main" if threading.get_ident() == main_thread else "other"
        gaps.append((len(sim.iterations), phase[0], thread, kind, charged))
        return charged

    SteadyGaps.typical = logged
    here = Path(__file__).resolve().parent
    if megatron:
        sys.path.insert(0, str(here))
        import megatron_phases  # takes this folder off the path again (bench/megatron.py)

        wrap = megatron_phases.PhaseClock.wrap

        def labelled(self, name, fn):
            timed = wrap(self, name, fn)

            def inner(*args, **kwargs):
                outer, phase[0] = phase[0], name
                try:
                    return timed(*args, **kwargs)
                finally:
                    phase[0] = outer
            return inner

        megatron_phases.PhaseClock.wrap = labelled
        megatron_phases.install(megatron_phases.PhaseClock())
    # this folder's modules (bench/megatron.py) must not shadow the script's imports
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(Path(script[0]).resolve().parent))  # as `python SCRIPT` would
    sys.argv = list(script)
    try:
        runpy.run_path(script[0], run_name="__main__")
    finally:
        if int(os.environ.get("RANK", "0")) == 0:
            Path(out).write_text(json.dumps({"overhead_ns": sim.dispatch_overhead_ns,
                                             "gaps": gaps}))


def charge(gaps: list, c: float, rule: str) -> list[float]:
    """What each gap is charged under `rule` (gaps in order)."""
    charged, deficit = [], 0.0
    for *_, kind, gap in gaps:
        x = gap - (c if kind != OTHER else 0.0)
        if rule == "clipped":
            charged.append(max(0.0, x))
        elif rule == "unclipped":
            charged.append(x)
        else:  # query-runs
            x -= deficit
            deficit = -x if kind == QUERY and x < 0 else 0.0
            charged.append(max(0.0, x))
    return charged


def rules(path: str, skip: int) -> None:
    data = json.loads(Path(path).read_text())
    gaps, c = data["gaps"], data["overhead_ns"]
    iterations = sorted({g[0] for g in gaps})[skip:-1]  # the last one may be cut short
    print(f"{path}: overhead c = {c / 1e3:.1f} us an entry; iterations {iterations}\n")
    print("| rule | " + " | ".join(_phases(gaps)) + " | all |")
    print("|---" * (len(_phases(gaps)) + 2) + "|")
    for rule in ("clipped", "unclipped", "query-runs"):
        per_phase = collections.defaultdict(float)
        for g, ch in zip(gaps, charge(gaps, c, rule)):
            if g[0] in iterations:
                per_phase[g[1]] += ch
        n = len(iterations) * 1e6
        cells = [f"{per_phase[p] / n:.1f}" for p in _phases(gaps)]
        print(f"| {rule} | " + " | ".join(cells) + f" | {sum(per_phase.values()) / n:.1f} |")
    print("\nms an iteration. Gaps by transition (kind that began -> kind that ended):\n")
    print("| phase | thread | transition | an iteration | median us | p10-p90 us | clipped ms | unclipped ms |")
    print("|---|---|---|---|---|---|---|---|")
    by = collections.defaultdict(list)
    for prev, g in zip(gaps, gaps[1:]):
        if g[0] in iterations and prev[2] == g[2]:
            by[(g[1], g[2], f"{prev[3]} -> {g[3]}")].append(g[4])
    for (ph, th, tr), v in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        if len(v) < 10 * len(iterations):
            continue
        v.sort()
        n = len(iterations)
        print(f"| {ph} | {th} | {tr} | {len(v) // n} | {v[len(v) // 2] / 1e3:.1f} | "
              f"{v[len(v) // 10] / 1e3:.1f}-{v[9 * len(v) // 10] / 1e3:.1f} | "
              f"{sum(max(0.0, x - c) for x in v) / n / 1e6:.1f} | {sum(x - c for x in v) / n / 1e6:.1f} |")


def _phases(gaps: list) -> list[str]:
    return sorted({g[1] for g in gaps})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", required=True)
    r.add_argument("--megatron", action="store_true", help="label Megatron's phases")
    r.add_argument("script", nargs=argparse.REMAINDER)
    q = sub.add_parser("rules")
    q.add_argument("gaps")
    q.add_argument("--skip", type=int, default=2, help="warm-up iterations left out")
    args = p.parse_args()
    if args.cmd == "record":
        script = args.script[1:] if args.script[:1] == ["--"] else args.script
        record(args.out, args.megatron, script)
    else:
        rules(args.gaps, args.skip)


if __name__ == "__main__":
    main()
