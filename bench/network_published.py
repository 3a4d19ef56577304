"""phantom's network model against published NCCL busbw numbers (no GPU needed).

    python bench/network_published.py [--out bench/data/network_published.md]

Each row is one public measurement (source named; collected in
shared/reference/public-ground-truth.md) and the busbw phantom's `NetworkSimulator`
predicts for the same cluster, collective and size on an idle network. These numbers were
not used to build the model, which follows NCCL's own tuning model (docs/clusters.md).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from phantom.network import CollectiveOp, NetworkSimulator, load_cluster

GIB = 2**30


@dataclass
class Published:
    case: str
    cluster: str
    nnodes: int
    gpus: int
    gpu: str
    kind: str
    nbytes: int
    busbw_gbps: float
    source: str
    nvls: bool = False


ROWS = [
    Published("8x H100 NVLink, ring all_reduce", "nvlink-node", 1, 8, "H100", "all_reduce", GIB,
              370, "nccl-tests issue 212 (NVIDIA, ring without NVLS)"),
    Published("8x H100 NVLink, NVLS all_reduce", "nvlink-node", 1, 8, "H100", "all_reduce", GIB,
              480, "nccl-tests issue 212 (NVLS, > 256 MB)", nvls=True),
    Published("8x H200 NVLink, all_reduce (NVLS on)", "nvlink-node", 1, 8, "H200", "all_reduce", GIB,
              475, "nccl-tests issue 272", nvls=True),
    Published("2x8 H100, 8x NDR 400G IB, all_reduce", "h100-ib", 2, 8, "H100", "all_reduce", GIB,
              8 * 47.5, "nccl-tests issues 267, 290: 46-49 GB/s per NIC"),
    Published("2x8 A100, 8x HDR 200G IB, all_reduce", "a100-ib", 2, 8, "A100", "all_reduce", GIB,
              192, "DGX-A100 reference all_reduce busbw"),
]

BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n}


def predicted_busbw(row: Published) -> tuple[float, str]:
    cluster = load_cluster(row.cluster, nnodes=row.nnodes, nproc_per_node=row.gpus, gpu=row.gpu)
    if row.nvls:
        from dataclasses import replace

        cluster = replace(cluster, intra_node=replace(cluster.intra_node, nvls=True))
    n = cluster.world_size
    s = NetworkSimulator(cluster).estimate(CollectiveOp(row.kind, tuple(range(n)), row.nbytes))
    busbw = row.nbytes / (s.duration_ns * 1e-9) * BUS_FACTOR[row.kind](n) / 1e9
    return busbw, f"{s.algorithm}/{s.protocol}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the markdown table here")
    args = parser.parse_args()
    lines = ["| case | size | published busbw GB/s | phantom GB/s | err % | algorithm | source |",
             "|---|---|---|---|---|---|---|"]
    errors = []
    for row in ROWS:
        busbw, algo = predicted_busbw(row)
        err = (busbw - row.busbw_gbps) / row.busbw_gbps * 100
        errors.append(abs(err))
        lines.append(f"| {row.case} | {row.nbytes / GIB:g} GiB | {row.busbw_gbps:.0f} | {busbw:.0f} | "
                     f"{err:+.1f} | {algo} | {row.source} |")
    lines.append(f"\nmean |error| {sum(errors) / len(errors):.1f}%, max {max(errors):.1f}%")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
