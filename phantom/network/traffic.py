"""Collectives as flows on the topology.

An Entity advances at one rate: a point-to-point flow, or a whole ring/tree collective whose
pipelined flows all move at the pace of the slowest hop. `volume` is the payload each of its
flows carries, `weights[link]` the wire bytes it puts on `link` per payload byte of progress
(flows crossing the link / protocol efficiency), `max_rate` the payload rate each flow may
reach (NCCL's per-channel bandwidth), in bytes/ns.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from phantom.network.cluster import ClusterSpec
from phantom.network.topology import Topology


@dataclass
class Entity:
    volume: float
    weights: dict[int, float] = field(default_factory=dict)
    max_rate: float = float("inf")

    def add_path(self, links: tuple[int, ...], weight: float) -> None:
        for l in links:
            self.weights[l] = self.weights.get(l, 0.0) + weight


def _by_node(cluster: ClusterSpec, ranks: tuple[int, ...]) -> list[list[int]]:
    nodes: dict[int, list[int]] = {}
    for r in sorted(ranks):
        nodes.setdefault(cluster.node_of(r), []).append(r)
    return [nodes[k] for k in sorted(nodes)]


def _node_order(topo: Topology, members: list[int], channel: int) -> list[int]:
    """The node's GPUs for `channel`, starting at the GPU next to the channel's NIC.

    NCCL rotates channels over the node's NICs so that, across channels, every NIC carries an
    equal share of the inter-node traffic."""
    nics = sorted({topo.nic_of(r) for r in members})
    nic = nics[channel % len(nics)]
    start = next(i for i, r in enumerate(members) if topo.nic_of(r) == nic)
    return members[start:] + members[:start]


def _channel_period(topo: Topology, groups: list[list[int]]) -> int:
    """Channels repeat with the number of NICs in use (1 on a single node)."""
    if len(groups) == 1:
        return 1
    period = 1
    for g in groups:
        n = len({topo.nic_of(r) for r in g})
        period = period * n // _gcd(period, n)
    return period


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def ring_hops(topo: Topology, ranks: tuple[int, ...], channel: int) -> list[tuple[int, int, tuple[int, ...]]]:
    """(src, dst, links) of every hop of `channel`'s ring, closing the cycle."""
    groups = _by_node(topo.cluster, ranks)
    order: list[int] = []
    for g in groups:
        order += _node_order(topo, g, channel) if len(groups) > 1 else g
    hops = []
    for i, src in enumerate(order):
        dst = order[(i + 1) % len(order)]
        hops.append((src, dst, topo.path(src, dst, topo.nic_of(dst))))
    return hops


def ring_entity(topo: Topology, ranks: tuple[int, ...], channels: int, hop_bytes: float,
                efficiency: float, per_channel_rate: float, *, drop_into: int | None = None,
                drop_out_of: int | None = None) -> Entity:
    """A ring (or, dropping one hop, a chain) collective over `channels` channels.

    `hop_bytes` is what each rank passes to its neighbour over all channels together.
    """
    groups = _by_node(topo.cluster, ranks)
    period = _channel_period(topo, groups)
    counts = Counter(c % period for c in range(channels))
    e = Entity(volume=hop_bytes / channels, max_rate=per_channel_rate)
    for c, mult in counts.items():
        for src, dst, links in ring_hops(topo, ranks, c):
            if dst == drop_into or src == drop_out_of:
                continue
            e.add_path(links, mult / efficiency)
    return e


def tree_entity(topo: Topology, ranks: tuple[int, ...], channels: int, nbytes: float,
                efficiency: float, per_flow_rate: float) -> Entity:
    """NCCL's all-reduce tree: a chain inside each node hanging off the GPU next to the
    channel's NIC, and a double binary tree across nodes (even channels on one tree, odd on
    its mirror image, so every node is a leaf in one of them). Every edge carries the whole
    buffer up (reduce) and down (broadcast)."""
    groups = _by_node(topo.cluster, ranks)
    n_nodes = len(groups)
    period = 2 * _channel_period(topo, groups)
    counts = Counter(c % period for c in range(channels))
    e = Entity(volume=nbytes / channels, max_rate=per_flow_rate)
    for c, mult in counts.items():
        w = mult / efficiency
        heads = []
        for g in groups:
            chain = _node_order(topo, g, c) if n_nodes > 1 else g
            heads.append(chain[0])
            for a, b in zip(chain, chain[1:]):
                e.add_path(topo.path(b, a), w)  # up, towards the head
                e.add_path(topo.path(a, b), w)  # down
        for i in range(1, n_nodes):
            child, parent = (i, (i - 1) // 2) if c % 2 == 0 else (
                n_nodes - 1 - i, n_nodes - 1 - (i - 1) // 2)
            hc, hp = heads[child], heads[parent]
            e.add_path(topo.path(hc, hp, topo.nic_of(hp)), w)
            e.add_path(topo.path(hp, hc, topo.nic_of(hc)), w)
    return e


def nvls_entity(topo: Topology, ranks: tuple[int, ...], nbytes: float, efficiency: float) -> Entity:
    """NVLink SHARP all-reduce: the switch reduces and multicasts. Each GPU sends its whole
    buffer and its reduced 1/n share into the switch, and receives its reduced share and the
    whole result: (1 + 1/n) x the buffer through each port, each way."""
    n = len(ranks)
    e = Entity(volume=nbytes)
    for r in ranks:
        e.add_path(topo.nvlink_ports(r), (1 + 1 / n) / efficiency)
    return e


def p2p_entities(topo: Topology, transfers: list[tuple[int, int, float, float]]) -> list[Entity]:
    """One independent flow per (src, dst, bytes, efficiency); local copies carry no traffic."""
    out = []
    for src, dst, nbytes, eff in transfers:
        if src == dst or nbytes <= 0:
            continue
        e = Entity(volume=float(nbytes))
        e.add_path(topo.path(src, dst), 1.0 / eff)
        out.append(e)
    return out
