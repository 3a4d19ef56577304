"""NCCL's own performance model, re-derived from its sources (NVIDIA/nccl, master, 2026-06).

What NCCL does at communicator creation and per call, and what this module reproduces:
  - src/graph/search.cc: pick a per-channel bandwidth from a speed table and pack as many
    channels of it as the GPU's links (single node) or NICs (multi-node) hold; then
    `ncclTopoDupChannels` doubles channels at half the bandwidth when they are fast.
  - src/graph/connect.cc: the communicator runs twice the searched channels (and twice again on
    Hopper multi-node when fewer than 16).
  - src/graph/tuning.cc `ncclTopoTuneModel`: per (collective, algorithm, protocol) a bus
    bandwidth (channels x per-channel bandwidth, protocol factors, per-channel caps) and a
    latency (base latency + per-step hardware latency by link type); `ncclTopoGetAlgoTime`:
    time = latency + bytes / bandwidth, with the tree correction and ring plateau factors.
  - src/enqueue.cc `topoGetAlgoInfo`: the fastest predicted (algorithm, protocol), and the
    number of channels actually launched, reduced for small messages by thread thresholds.
The simulator uses the selection, the latency and the per-channel bandwidth as a cap; the data
movement itself goes through the flow model on the physical links.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from phantom.network.cluster import ClusterSpec

PROTOCOLS = ("LL", "LL128", "Simple")
LL, LL128, SIMPLE = 0, 1, 2

# tuning.cc ncclTunerConstantsDefaults, microseconds, per protocol (LL, LL128, Simple).
BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0)}
HW_LAT = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0.0, 0.0, 0.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0)},
}
# Rows: index1 (single node: GPU generation Volta/Ampere/Hopper/Blackwell; multi-node: CPU,
# 0 Intel, 1 AMD); columns: index2 = min(nNodes, 3) - 1. GB/s.
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_MAX_RING_LL128 = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3)
PER_CH_MAX_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0),
                         (55.6, 31.67, 20.0))
PER_CH_MAX_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
# Static correction of tree bandwidth at medium sizes, index log2(bytes / 64), 64 B .. 256 MB.
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9,
     .9),
)
# search.cc speed tables (GB/s per channel), tried from the fastest down.
SPEED_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEED_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
               3.0, 2.4, 1.2, 0.24, 0.12)
SM90_SPEED_INTRA = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
SM90_SPEED_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                    2.4, 1.2, 0.24, 0.12)
MAX_CHANNELS = 64  # device.h MAXCHANNELS
RING_GRAPH_MAX_CHANNELS = MAX_CHANNELS // 2  # init.cc
PCI_BW = 12.0  # topo.h, PCIe Gen3 x16 as NCCL counts it
# NCCL counts 3 GB/s per PCIe Gen5 lane (topo.cc: 240 / 80 per lane-speed unit): 48 GB/s for
# x16 of a 64 GB/s link, and the same 3/4 of the raw rate for Gen4 (24 of 32).
NCCL_PCIE_FRACTION = 0.75
NVLS_CHANNELS_SM90 = 16  # transport/nvls.cc
# comm.h / device.h thread thresholds and maximum threads per channel.
THREAD_THRESHOLD = (8, 8, 64)
MAX_THREADS = {"ring": (512, 640, 512), "tree": (512, 640, 512)}
P2P_LL_THRESHOLD = 16384  # enqueue.cc NCCL_P2P_LL_THRESHOLD
P2P_PER_BATCH = 8  # device.h NCCL_MAX_DEV_WORK_P2P_PER_BATCH
# Bytes on the wire per payload byte is 1/efficiency: LL sends a 4-byte flag with every 4 data
# bytes; LL128 uses 120 of every 128 bytes (NCCL's model rounds to 0.92); Simple is raw.
PROTOCOL_EFFICIENCY = (0.5, 0.92, 1.0)


def _log2i(x: int) -> int:
    return x.bit_length() - 1 if x > 0 else -1


def _pow2_up(x: int) -> int:
    return 1 << (max(1, x) - 1).bit_length()


@dataclass(frozen=True)
class Graph:
    """A searched channel set: `channels` graph channels of `bw` GB/s each."""
    channels: int
    bw: float


@dataclass(frozen=True)
class CommModel:
    """What NCCL derives once per communicator."""
    n_ranks: int
    n_nodes: int
    ppn: int  # GPUs of the communicator per node (the largest node share)
    cc_index: int  # 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell
    intra_hw: str  # "nvlink" | "pci"
    ring: Graph
    comm_channels: int  # channels the communicator runs (ring/tree)
    nvls: Graph | None  # NVLS graph when NVLink SHARP is available and enabled
    ll128: bool  # LL128 enabled on this topology
    net_overhead_us: float
    latency_inter_us: float
    same_channels: bool

    @property
    def index2(self) -> int:
        return min(self.n_nodes, 3) - 1


@dataclass(frozen=True)
class Choice:
    algorithm: str  # "ring" | "tree" | "nvls"
    protocol: int  # index into PROTOCOLS
    channels: int  # channels launched for this call
    latency_us: float
    channel_bw: float  # NCCL's bus bandwidth per launched channel, GB/s (before algbw ratio)
    total_bw: float  # cap on the sum over channels (LL), inf when none
    predicted_us: float


def _cc_index(cc: tuple[int, int]) -> int:
    major = cc[0]
    return 3 if major >= 10 else 2 if major >= 9 else 1 if major >= 8 else 0


def _search(speeds: tuple[float, ...], max_bw: float, total_bw: float) -> Graph:
    """search.cc in closed form: the fastest listed speed that fits, as many channels as fit."""
    s = next((v for v in speeds if v <= max_bw + 1e-9 and v <= total_bw + 1e-9), speeds[-1])
    return Graph(max(1, min(RING_GRAPH_MAX_CHANNELS, int(total_bw / s + 1e-9))), s)


def _dup(g: Graph, cc_major: int) -> Graph:
    """ncclTopoDupChannels: fast channels are split in two at half the bandwidth."""
    if g.bw < 25.0 or (cc_major * 10 > 80 and g.bw < 50.0 and g.channels > 4):
        return g
    dup = min(g.channels * 2, RING_GRAPH_MAX_CHANNELS)
    return Graph(dup, g.bw / math.ceil(dup / g.channels))


def comm_model(cluster: ClusterSpec, ranks: tuple[int, ...]) -> CommModel:
    return _comm_model(cluster, tuple(sorted(ranks)))


@lru_cache(maxsize=4096)
def _comm_model(cluster: ClusterSpec, ranks: tuple[int, ...]) -> CommModel:
    c = cluster
    cc_major = c.compute_capability[0]
    per_node: dict[int, list[int]] = {}
    for r in ranks:
        per_node.setdefault(c.node_of(r), []).append(r)
    n_nodes = len(per_node)
    ppn = max(len(v) for v in per_node.values())
    nvswitch = c.intra_node.kind == "nvswitch"
    # NCCL counts NVLink as lanes x its per-lane figure: the cluster's effective NVLink rate.
    intra_bw = (c.nvlink_gbps * c.nvlink_efficiency if nvswitch
                else c.pcie_gbps * NCCL_PCIE_FRACTION)
    if not nvswitch and ppn > 1:
        # Every ring hop crosses the shared host link: it holds `ppn` channel-hops.
        intra_bw = min(intra_bw, c.host_bridge_gbps * NCCL_PCIE_FRACTION / ppn)
    if n_nodes == 1:
        speeds = SM90_SPEED_INTRA if cc_major >= 9 else SPEED_INTRA
        ring = _dup(_search(speeds, intra_bw, intra_bw), cc_major)
        comm_channels = min(MAX_CHANNELS, 2 * ring.channels)
    else:
        speeds = SM90_SPEED_INTER if cc_major >= 9 else SPEED_INTER
        nic = c.nic_gbps
        max_bw = min(nic, c.pcie_gbps * NCCL_PCIE_FRACTION)
        nics = min(len({c.nic_of_local(c.local_of(r)) for r in v}) for v in per_node.values())
        s = next((v for v in speeds if v <= max_bw + 1e-9), speeds[-1])
        per_nic = max(1, int(nic / s + 1e-9))
        n = nics * per_nic
        if ppn > 1:
            # Every channel also crosses each GPU's NVLink once per node (all but the exit GPU).
            n = min(n, max(1, int(intra_bw / (s * (ppn - 1) / ppn) + 1e-9)))
        ring = _dup(Graph(min(n, RING_GRAPH_MAX_CHANNELS), s), cc_major)
        comm_channels = min(MAX_CHANNELS, 2 * ring.channels)
        if cc_major >= 9 and ring.bw > 45.0 and comm_channels < 16:
            comm_channels = min(MAX_CHANNELS, 2 * comm_channels)
    nvls = None
    if (c.intra_node.nvls and nvswitch and cc_major >= 9 and n_nodes == 1 and ppn >= 2):
        # NVLS search: one channel per GPU (minChannels = maxChannels), total NVLink bandwidth
        # boosted by n/(n-1) since NVLS need not return to its start.
        boosted = intra_bw * ppn / (ppn - 1)
        speeds = SM90_SPEED_INTRA
        s = next((v for v in speeds if v <= intra_bw + 1e-9 and v * ppn <= boosted + 1e-9),
                 speeds[-1])
        nvls = Graph(ppn, s)
    amd = c.cpu == "amd"
    return CommModel(
        n_ranks=len(ranks), n_nodes=n_nodes, ppn=ppn, cc_index=_cc_index(c.compute_capability),
        intra_hw="nvlink" if nvswitch else "pci", ring=ring, comm_channels=comm_channels,
        nvls=nvls, ll128=nvswitch, net_overhead_us=2.0 if amd else 1.0,
        latency_inter_us=c.inter_node.nic_latency_us, same_channels=n_nodes == 1,
    )


_NSTEPS = {
    "all_reduce": lambda n: 2 * (n - 1),
    "all_gather": lambda n: n - 1,
    "reduce_scatter": lambda n: n - 1,
    "broadcast": lambda n: n,
    "reduce": lambda n: n,
}


def channel_bw(m: CommModel, coll: str, algo: str, p: int, cpu_amd: bool) -> tuple[float, float]:
    """tuning.cc's bus bandwidth of (coll, algo, proto) split in two: GB/s per searched
    channel, and a cap on the total (LL's llMaxBw), inf when none. (0, 0) if not applicable."""
    ci, i2 = m.cc_index, m.index2
    ll_row = ci if m.n_nodes == 1 else (1 if cpu_amd else 0)
    ll_max = LL_MAX_BW[ll_row][i2]
    inf = math.inf
    if algo == "nvls":
        g = m.nvls
        if g is None or p != SIMPLE or coll != "all_reduce" or g.channels < 2:
            return 0.0, 0.0
        return g.bw * NVLS_EFFICIENCY[ci] * (g.channels - 1) / g.channels * 2.0, inf
    if p == LL128 and not m.ll128:
        return 0.0, 0.0
    bw, total = m.ring.bw, inf
    if algo == "ring":
        if p == LL:
            bw, total = bw * 0.5, ll_max
        elif p == LL128:
            bw = min(bw * 0.92, PER_CH_MAX_RING_LL128[ci][i2])
    elif algo == "tree":
        if coll != "all_reduce":
            return 0.0, 0.0
        bw = min(bw * 0.92, PER_CH_MAX_TREE[ci][i2])
        if p == LL:
            bw, total = bw / 3.8, ll_max
        elif p == LL128:
            bw = min(bw * (7.0 / 9.0 if m.n_nodes == 1 else 120.0 / 128.0),
                     PER_CH_MAX_TREE_LL128[ci][i2])
    return bw, total


def _bus_bw(m: CommModel, coll: str, algo: str, p: int, cpu_amd: bool) -> float:
    per_channel, total = channel_bw(m, coll, algo, p, cpu_amd)
    g = m.nvls if algo == "nvls" else m.ring
    return 0.0 if per_channel <= 0 or g is None else min(g.channels * per_channel, total)


def _latency_us(m: CommModel, coll: str, algo: str, p: int) -> float:
    n, nodes = m.n_ranks, m.n_nodes
    nsteps = _NSTEPS[coll](n)
    intra_lat = HW_LAT[m.intra_hw][algo][p]
    inter_lat = (HW_LAT["net"]["tree"][p] if m.ppn == 1 else HW_LAT["net"][algo][p])
    inter_lat += m.latency_inter_us * (2 if p == SIMPLE else 1)  # + the flush on Simple
    lat = BASE_LAT[algo][p]
    if algo == "ring":
        hw_lat = HW_LAT["net" if nodes > 1 else m.intra_hw]["ring"][p]
        if coll in ("broadcast", "reduce"):
            if m.same_channels:
                return lat + hw_lat
            if p == SIMPLE:
                hw_lat = HW_LAT["net" if nodes > 1 else m.intra_hw]["tree"][p]
            return lat + nsteps * hw_lat
        net_overhead = 0.0
        if nodes > 1:
            net_overhead = m.net_overhead_us * (3 if p == SIMPLE else 1)
        intra_lat = max(intra_lat, net_overhead)
        inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if coll == "all_reduce" else nodes - 1)
        return lat + (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
    if algo == "tree":
        return lat + 2 * ((n // nodes - 1) * intra_lat + _log2i(nodes) * inter_lat)
    if algo == "nvls":
        return intra_lat + (inter_lat if nodes > 1 else 0.0)
    raise ValueError(algo)


def algbw_ratio(algo: str, coll: str, n: int) -> float:
    """tuning.cc's bus -> algorithm bandwidth conversion."""
    if algo in ("ring", "nvls"):
        return n / _NSTEPS[coll](n)
    return 0.5


def predict_us(m: CommModel, coll: str, algo: str, p: int, nbytes: int, cpu_amd: bool) -> float:
    """ncclTopoGetAlgoTime; -1 when the pair is unavailable."""
    bus = _bus_bw(m, coll, algo, p, cpu_amd)
    if bus <= 0:
        return -1.0
    bw = bus * algbw_ratio(algo, coll, m.n_ranks)
    lat = _latency_us(m, coll, algo, p)
    log_size = _log2i(nbytes >> 6)
    if algo == "tree" and coll == "all_reduce" and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[p][log_size]
    if (algo == "ring" and p == SIMPLE and m.n_nodes > 1 and coll == "all_reduce"
            and nbytes / (m.comm_channels * m.n_ranks) >= 64):
        lat *= 1.4 if m.cc_index >= 1 else 1.9  # the ring's plateau effect
    return lat + nbytes / (1000.0 * bw)


def launched_channels(m: CommModel, algo: str, p: int, nbytes: int) -> int:
    """enqueue.cc topoGetAlgoInfo: fewer channels for small messages."""
    if algo == "nvls":
        return NVLS_CHANNELS_SM90
    nc = m.comm_channels
    nt = MAX_THREADS[algo][p]
    if algo == "ring" and p == SIMPLE and m.ring.bw * m.ring.channels <= PCI_BW:
        nt = 256
    threshold = THREAD_THRESHOLD[p] * (m.n_ranks if (algo == "ring" and p == LL) else 1)
    while nbytes < nc * nt * threshold and nc >= 2:
        nc -= 1
    return nc


def choose(cluster: ClusterSpec, m: CommModel, coll: str, nbytes: int) -> Choice:
    """The (algorithm, protocol) NCCL predicts fastest on an idle network, and its channels."""
    amd = cluster.cpu == "amd"
    best: Choice | None = None
    algos = ("tree", "ring", "nvls") if coll == "all_reduce" else ("ring",)
    for algo in algos:
        for p in range(3):
            t = predict_us(m, coll, algo, p, nbytes, amd)
            if t >= 0 and (best is None or t < best.predicted_us):
                lat = _latency_us(m, coll, algo, p)
                if (algo == "ring" and p == SIMPLE and m.n_nodes > 1 and coll == "all_reduce"
                        and nbytes / (m.comm_channels * m.n_ranks) >= 64):
                    lat *= 1.4 if m.cc_index >= 1 else 1.9
                per_graph_channel, total = channel_bw(m, coll, algo, p, amd)
                g = m.nvls if algo == "nvls" else m.ring
                # The communicator runs its searched channels duplicated: each runs at the
                # searched channel's bandwidth x searched / running channels.
                running = NVLS_CHANNELS_SM90 if algo == "nvls" else m.comm_channels
                best = Choice(algo, p, launched_channels(m, algo, p, nbytes), lat,
                              per_graph_channel * g.channels / running, total, t)
    assert best is not None  # ring/Simple is always available
    return best


def tree_correction(p: int, nbytes: int) -> float:
    log_size = _log2i(nbytes >> 6)
    return TREE_CORRECTION[p][log_size] if 0 <= log_size < 23 else 1.0


def p2p_channels_per_peer(cluster: ClusterSpec, m: CommModel, remote: bool) -> int:
    """paths.cc ncclTopoGetNchannels + ncclTopoComputeP2pChannels, as a power of two."""
    p2p_channels = min(MAX_CHANNELS, _pow2_up(m.comm_channels))
    if remote:
        per_peer = max(1, math.ceil(cluster.nic_gbps / 12.0))  # P2P_PER_CHANNEL_NET_BW
    elif cluster.intra_node.kind == "nvswitch":
        lane = 20.6 if cluster.compute_capability[0] >= 9 else 20.0
        per_peer = 2 * max(1, int(cluster.nvlink_gbps * cluster.nvlink_efficiency / lane))
    else:
        per_peer = 2
    return min(p2p_channels, _pow2_up(per_peer))


def p2p_latency_us(m: CommModel, p: int, remote: bool, peers: int) -> float:
    """NCCL has no p2p cost model; this uses its ring base latency plus one hop of hardware
    latency per batch of up to 8 concurrent peers (how enqueue.cc groups p2p work)."""
    if remote:
        hw = HW_LAT["net"]["tree"][p] + m.latency_inter_us * (2 if p == SIMPLE else 1)
    else:
        hw = HW_LAT[m.intra_hw]["ring"][p]
    rounds = max(1, math.ceil(peers / P2P_PER_BATCH))
    return BASE_LAT["ring"][p] + rounds * hw
