"""Flow-level network simulation of NCCL collectives on a described cluster.

cluster.py      the TOML format, presets (presets/*.toml) and validation
topology.py     directional links and the paths GPU traffic takes
nccl_model.py   NCCL's tuning model: channels, algorithm/protocol choice, latencies, caps
traffic.py      collectives as flows (rings, trees, NVLS, point-to-point)
maxmin.py       weighted max-min fair sharing (progressive filling)
reservations.py link capacity promised to already-placed collectives, over time
simulator.py    NetworkSimulator: schedule / estimate / forget_before
"""
from phantom.network.cluster import ClusterConfigError, ClusterSpec, list_presets, load_cluster
from phantom.network.collectives import CollectiveOp, ScheduledCollective
from phantom.network.simulator import NetworkSimulator

__all__ = [
    "ClusterConfigError", "ClusterSpec", "CollectiveOp", "NetworkSimulator",
    "ScheduledCollective", "list_presets", "load_cluster",
]
