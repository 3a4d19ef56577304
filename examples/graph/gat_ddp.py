"""Train a graph attention network (torch_geometric's GAT) with DistributedDataParallel.

Launched by torchrun, one process per GPU. Each rank trains full-batch on its own graph (as
with one partition of a large graph per GPU): a synthetic graph of --nodes nodes with random
features and --avg-degree random in-edges per node, self loops added on the CPU (as
`torch_geometric.transforms.AddSelfLoops` does when a dataset is loaded), moved to the GPU
once. The loss is meaningless; the point is the speed and memory of a realistic step: per
layer, a linear projection, per-edge attention logits (gather), a softmax over each node's
in-edges (scatter max / sum) and the weighted sum of messages (scatter add).

    torchrun --nproc-per-node 2 examples/graph/gat_ddp.py --nodes 100000 --avg-degree 16

Rank 0 prints one line per step and a final `summary:` line.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_geometric.nn.models import GAT
from torch_geometric.utils import add_self_loops

GIB = 2**30


def random_graph(nodes: int, avg_degree: int, features: int, classes: int, g: torch.Generator):
    edges = nodes * avg_degree
    edge_index = torch.randint(0, nodes, (2, edges), generator=g)
    edge_index, _ = add_self_loops(edge_index, num_nodes=nodes)
    x = torch.randn(nodes, features, generator=g)
    y = torch.randint(0, classes, (nodes,), generator=g)
    return x, edge_index, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--avg-degree", type=int, default=16)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64, help="channels per head")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--classes", type=int, default=47)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    device = torch.device("cuda", local_rank)

    torch.manual_seed(args.seed)
    model = GAT(args.features, args.hidden * args.heads, args.layers, out_channels=args.classes,
                heads=args.heads, dropout=0.5, add_self_loops=False).to(device)  # self loops added above
    model = DDP(model, device_ids=[local_rank])
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=5e-4)

    x, edge_index, y = random_graph(args.nodes, args.avg_degree, args.features, args.classes,
                                    torch.Generator().manual_seed(args.seed + rank))
    x, edge_index, y = x.to(device), edge_index.to(device), y.to(device)
    if rank == 0:
        print(f"device: {world} x {torch.cuda.get_device_name()} | torch {torch.__version__} | GAT params "
              f"{n_params / 1e6:.2f}M | {args.layers} layers x {args.heads} heads x {args.hidden} | graph "
              f"{args.nodes} nodes {edge_index.size(1)} edges per GPU", flush=True)

    model.train()
    times_ms = []
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for it in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        out = model(x, edge_index)
        loss = F.cross_entropy(out, y)
        loss.backward()
        optimizer.step()

        torch.cuda.synchronize()
        t1 = time.perf_counter()
        dt, t0 = t1 - t0, t1
        if it >= args.warmup:
            times_ms.append(dt * 1e3)
        if rank == 0:
            print(f"iter {it} | loss {loss.item():.4f} | {dt * 1e3:.2f} ms | "
                  f"{edge_index.size(1) * world / dt / 1e6:,.1f} M edges/s | "
                  f"peak {torch.cuda.max_memory_allocated() / GIB:.2f} GiB", flush=True)

    mine = (torch.cuda.max_memory_allocated() / GIB, torch.cuda.max_memory_reserved() / GIB)
    peaks: list = [None] * world
    dist.all_gather_object(peaks, mine)
    if rank == 0:
        times_ms = times_ms or [dt * 1e3]
        median_ms = statistics.median(times_ms)
        print(f"summary: median_iter_ms={median_ms:.2f} mean_iter_ms={statistics.mean(times_ms):.2f} "
              f"edges_per_s={edge_index.size(1) * world / (median_ms / 1e3):.0f} "
              f"peak_alloc_gib={max(a for a, _ in peaks):.2f} peak_reserved_gib={max(r for _, r in peaks):.2f} "
              f"params={n_params / 1e6:.2f}M", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
