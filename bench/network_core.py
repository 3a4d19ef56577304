"""The network model alone: how fast max-min sharing and collective placement are at scale.

    python bench/network_core.py [--out bench/data/network_core.md]

1. `max_min_rates` on E entities sharing links (random 2-6 links each, three link
   capacities, a third of the entities capped): the dict-based progressive filling and the
   numpy one (used from maxmin.VECTOR_FROM entities), and their largest disagreement.
2. `NetworkSimulator.schedule` on 1,024 GPUs (128 nodes of 8): what the coordinator asks for
   in an FSDP x TP8 run with representative ranks -- a TP all-reduce inside a node with its
   127 sibling groups, an FSDP all-gather / reduce-scatter across 128 nodes with its 7
   siblings -- on the rail-optimized h100-ib fabric (siblings on disjoint links: counted,
   not simulated) and on a 2:1 oversubscribed fabric with one leaf per node group (the
   siblings share leaf uplinks and run in one flow phase with the collective); and an
   all-to-all over 64 ranks of 8 nodes (4,032 flows).
Times are wall-clock on this machine, median of repeats. Standard library + numpy.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from phantom.network import CollectiveOp, NetworkSimulator, load_cluster, maxmin
from phantom.network.cluster import ClusterSpec

REPO = Path(__file__).resolve().parent.parent


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_maxmin(rows: list[str]) -> None:
    rows += ["| entities | links | dict-based ms | numpy ms | max rel. difference |", "|---|---|---|---|---|"]
    rng = random.Random(1)
    for n in (16, 64, 256, 1024, 4096):
        links = [f"l{j}" for j in range(max(16, n // 2))]
        cap = {l: rng.choice([50.0, 100.0, 450.0]) for l in links}
        w = [{l: rng.choice([1.0, 2.0]) for l in rng.sample(links, rng.randint(2, 6))} for _ in range(n)]
        ceil = [rng.choice([float("inf"), float("inf"), 60.0]) for _ in range(n)]
        saved = maxmin.VECTOR_FROM
        try:
            maxmin.VECTOR_FROM = 10**9
            ref = maxmin.max_min_rates(w, cap, ceil)
            t_py = timed(lambda: maxmin.max_min_rates(w, cap, ceil), 1 if n >= 1024 else 5)
            maxmin.VECTOR_FROM = 1
            vec = maxmin.max_min_rates(w, cap, ceil)
            t_np = timed(lambda: maxmin.max_min_rates(w, cap, ceil), 5)
        finally:
            maxmin.VECTOR_FROM = saved
        diff = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(ref, vec))
        rows.append(f"| {n:,} | {len(links):,} | {t_py * 1e3:.2f} | {t_np * 1e3:.2f} | {diff:.1e} |")


def oversubscribed(nodes: int) -> ClusterSpec:
    base = load_cluster("h100-ib", nnodes=nodes)
    from dataclasses import replace

    inter = replace(base.inter_node, rail_optimized=False, oversubscription=2.0, nodes_per_leaf=16)
    return replace(base, inter_node=inter, name="h100-ib-2to1")


def bench_schedule(rows: list[str]) -> None:
    rows += ["", "| fabric | collective | siblings | of which share links | ms per placement |",
             "|---|---|---|---|---|"]
    nodes = 128
    tp_groups = [tuple(range(8 * k, 8 * k + 8)) for k in range(nodes)]
    dp_groups = [tuple(range(j, 8 * nodes, 8)) for j in range(8)]
    a2a = tuple(range(64))
    for fabric, cluster in (("h100-ib (rail-optimized)", load_cluster("h100-ib", nnodes=nodes)),
                            ("2:1 oversubscribed, one leaf per 16 nodes", oversubscribed(nodes))):
        cases = [
            ("TP all-reduce 64 MiB", CollectiveOp("all_reduce", tp_groups[0], 64 << 20),
             [CollectiveOp("all_reduce", g, 64 << 20) for g in tp_groups[1:]]),
            ("FSDP all-gather 54 MiB", CollectiveOp("all_gather", dp_groups[0], 54 << 20),
             [CollectiveOp("all_gather", g, 54 << 20) for g in dp_groups[1:]]),
            ("FSDP reduce-scatter 108 MiB", CollectiveOp("reduce_scatter", dp_groups[0], 108 << 20),
             [CollectiveOp("reduce_scatter", g, 108 << 20) for g in dp_groups[1:]]),
            ("all-to-all 64 ranks, 256 MiB", CollectiveOp("all_to_all", a2a, 256 << 20), []),
        ]
        for name, op, sibs in cases:
            net = NetworkSimulator(cluster)
            t = [0.0]

            def place():
                s = net.schedule(op, t[0], sibs)
                t[0] = s.end_ns  # one after the other, as in a training step

            place()  # plans cached, as after the first iteration
            before = net.sibling_ops_shared
            dt = timed(place, 5)
            shared = (net.sibling_ops_shared - before) // 5
            rows.append(f"| {fabric} | {name} | {len(sibs)} | {shared} | {dt * 1e3:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/data/network_core.md")
    args = ap.parse_args()
    rows: list[str] = []
    bench_maxmin(rows)
    bench_schedule(rows)
    text = "\n".join(rows) + "\n"
    (REPO / args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
