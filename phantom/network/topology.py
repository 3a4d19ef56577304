"""The cluster as directional links and the paths GPU traffic takes over them.

Capacities are achievable payload rates in bytes per nanosecond (numerically GB/s): the line
rate times the link's efficiency from the cluster spec. Links are created on first use, so a
large cluster costs only the links its collectives touch.

Model, per node:
  nvswitch: GPU g -> switch on `nvl_out[g]`, switch -> GPU on `nvl_in[g]`; the switch itself is
            non-blocking, so a GPU-to-GPU transfer crosses exactly those two links.
  pcie:     GPU g -> host on `pcie_up[g]`, host -> GPU on `pcie_down[g]`, and every GPU-to-GPU
            transfer also crosses the node's `host` link, one shared capacity standing for the
            CPU root complex / inter-socket path (real boards differ: PCIe switches can keep
            some pairs off the CPU; this is the conservative common case).
Between nodes: GPU -> its PCIe link -> NIC (`nic_tx`) -> leaf switch -> (spine, if the leaves
differ: `leaf_up` of the source leaf, `leaf_down` of the destination leaf) -> NIC (`nic_rx`)
-> PCIe -> GPU. On a rail-optimized fabric NIC k of every node hangs off the rail-k leaf of its
group of `nodes_per_leaf` nodes; otherwise all NICs of a node share one leaf.
"""
from __future__ import annotations

from dataclasses import dataclass

from phantom.network.cluster import ClusterSpec


@dataclass(frozen=True)
class Link:
    name: str
    capacity: float  # bytes/ns
    kind: str  # "nvlink" | "pcie" | "host" | "net"


class Topology:
    def __init__(self, cluster: ClusterSpec) -> None:
        self.cluster = cluster
        self.links: list[Link] = []
        self._ids: dict[tuple, int] = {}
        c = cluster
        self._nvl = c.nvlink_gbps * c.nvlink_efficiency
        self._pcie = c.pcie_gbps * c.intra_node.pcie_efficiency
        self._host = c.host_bridge_gbps * c.intra_node.pcie_efficiency
        self._nic = c.nic_gbps * c.inter_node.nic_efficiency

    # --- links -------------------------------------------------------------------------------

    def _link(self, key: tuple) -> int:
        lid = self._ids.get(key)
        if lid is None:
            lid = len(self.links)
            self._ids[key] = lid
            self.links.append(self._make(key))
        return lid

    def _make(self, key: tuple) -> Link:
        kind = key[0]
        name = "/".join(str(k) for k in key)
        if kind in ("nvl_out", "nvl_in"):
            return Link(name, self._nvl, "nvlink")
        if kind in ("pcie_up", "pcie_down"):
            return Link(name, self._pcie, "pcie")
        if kind == "host":
            return Link(name, self._host, "host")
        if kind in ("nic_tx", "nic_rx"):
            return Link(name, self._nic, "net")
        if kind in ("leaf_up", "leaf_down"):
            return Link(name, self._leaf_uplink(key[1]), "net")
        raise KeyError(key)

    def capacity(self, link: int) -> float:
        return self.links[link].capacity

    def _leaf_of(self, node: int, nic: int) -> tuple[int, int]:
        inter = self.cluster.inter_node
        return (node // inter.nodes_per_leaf, nic if inter.rail_optimized else 0)

    def _leaf_uplink(self, leaf: tuple[int, int]) -> float:
        inter, nodes = self.cluster.inter_node, self.cluster.nodes
        group = leaf[0]
        nodes_here = min(inter.nodes_per_leaf, nodes - group * inter.nodes_per_leaf)
        nics_here = nodes_here * (1 if inter.rail_optimized else inter.nics_per_node)
        return nics_here * self._nic / inter.oversubscription

    # --- paths -------------------------------------------------------------------------------

    def intra_path(self, src: int, dst: int) -> tuple[int, ...]:
        """Links from GPU `src` to GPU `dst` of the same node (global ranks)."""
        if self.cluster.intra_node.kind == "nvswitch":
            return (self._link(("nvl_out", src)), self._link(("nvl_in", dst)))
        node = self.cluster.node_of(src)
        return (self._link(("pcie_up", src)), self._link(("host", node)),
                self._link(("pcie_down", dst)))

    def nvlink_ports(self, rank: int) -> tuple[int, int]:
        """(egress, ingress) NVSwitch port links of GPU `rank`."""
        return self._link(("nvl_out", rank)), self._link(("nvl_in", rank))

    def nic_gpu(self, node: int, nic: int, among: list[int] | None = None) -> int:
        """The GPU (global rank) that sits next to NIC `nic` of `node`, preferring `among`."""
        c = self.cluster
        local = [g for g in range(c.gpus_per_node) if c.nic_of_local(g) == nic]
        if among:
            mine = [node * c.gpus_per_node + g for g in local
                    if node * c.gpus_per_node + g in among]
            if mine:
                return mine[0]
        return node * c.gpus_per_node + (local[0] if local else 0)

    def nic_of(self, rank: int) -> int:
        return self.cluster.nic_of_local(self.cluster.local_of(rank))

    def net_path(self, src: int, dst: int, nic: int | None = None) -> tuple[int, ...]:
        """Links from GPU `src` to GPU `dst` on another node, leaving through NIC `nic`.

        On a rail-optimized fabric NCCL keeps traffic on one rail with PXN: `src` first moves
        the data over NVLink to the GPU next to the rail's NIC, and the destination is reached
        through the same rail's NIC on its node. `nic` defaults to the destination's rail.
        """
        c = self.cluster
        a, b = c.node_of(src), c.node_of(dst)
        if a == b:
            raise ValueError(f"net_path between GPUs {src} and {dst} of one node")
        links: list[int] = []
        if c.inter_node.rail_optimized:
            rail = self.nic_of(dst) if nic is None else nic
            tx_nic = rx_nic = rail
            proxy = src if self.nic_of(src) == rail else self.nic_gpu(a, rail)
            if proxy != src:
                links += self.intra_path(src, proxy)
            sender, receiver_nic_gpu = proxy, dst
        else:
            tx_nic = self.nic_of(src) if nic is None else nic
            rx_nic = self.nic_of(dst)
            sender, receiver_nic_gpu = src, dst
        links.append(self._link(("pcie_up", sender)))
        links.append(self._link(("nic_tx", a, tx_nic)))
        la, lb = self._leaf_of(a, tx_nic), self._leaf_of(b, rx_nic)
        if la != lb:
            links.append(self._link(("leaf_up", la)))
            links.append(self._link(("leaf_down", lb)))
        links.append(self._link(("nic_rx", b, rx_nic)))
        links.append(self._link(("pcie_down", receiver_nic_gpu)))
        return tuple(links)

    def path(self, src: int, dst: int, nic: int | None = None) -> tuple[int, ...]:
        c = self.cluster
        if src == dst:
            return ()
        if c.node_of(src) == c.node_of(dst):
            return self.intra_path(src, dst)
        return self.net_path(src, dst, nic)
