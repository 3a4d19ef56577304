"""Cluster descriptions: the TOML format, its validation, the shipped presets.

A cluster is `nodes` identical nodes of `gpus_per_node` GPUs. Inside a node the GPUs talk over
NVSwitch (every GPU has one egress and one ingress NVLink port of its full NVLink bandwidth into
a non-blocking switch) or over PCIe through the host. Between nodes, each node has
`nics_per_node` NICs on a leaf/spine fabric. docs/clusters.md documents every key.
"""
from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from phantom.hardware.gpus import get_gpu, list_gpus


class ClusterConfigError(ValueError):
    """A cluster file, preset name or command-line override is invalid (the message says why)."""


# NCCL's achievable bandwidth per NVLink lane (src/graph/topo.h SM80/SM90_NVLINK_BW: 20.0 and
# 20.6 GB/s) against the 25 GB/s raw per-direction rate of NVLink3/4. The same ~18-20% protocol
# overhead is what nccl-tests shows as ~370 GB/s ring busbw on 450 GB/s H100 NVLink.
_NVLINK_EFFICIENCY_BY_MAJOR = {8: 20.0 / 25.0, 9: 20.6 / 25.0}
# PCIe per-direction raw rates of an x16 link by GPU generation (Gen4 for Ampere, Gen5 Hopper).
_PCIE_GBPS_BY_MAJOR = {8: 32.0, 9: 64.0}


@dataclass(frozen=True)
class IntraNode:
    kind: str = "nvswitch"  # "nvswitch" | "pcie"
    nvlink_gbps: float | None = None  # per GPU per direction, GB/s; None: the GPU preset's
    nvlink_efficiency: float | None = None  # None: NCCL's per-lane figure for the generation
    pcie_gbps: float | None = None  # per GPU per direction (x16 link), GB/s; None: by generation
    # Pinned H2D copies on this project's H100 (Gen5 x16) ran at 52.6 GB/s of 64 raw: TLP and
    # flow-control overhead, the same fraction on any generation.
    pcie_efficiency: float = 0.82
    # PCIe-only nodes: GPU-to-GPU traffic crosses the CPU root complex; one shared capacity per
    # direction. None: half the GPUs' total PCIe bandwidth (two x16 GPUs per root port pair).
    host_bridge_gbps: float | None = None
    # NVLink SHARP all-reduce (NCCL's NVLS algorithm); off by default as on the machines this
    # project measures (NCCL_NVLS_ENABLE=0).
    nvls: bool = False


@dataclass(frozen=True)
class InterNode:
    nics_per_node: int = 0
    nic_gbit: float = 400.0  # line rate per NIC, Gb/s
    # Payload fraction of the line rate that NCCL reaches per NIC: 46-49 GB/s of 50 on NDR
    # 400 Gb/s in public nccl-tests runs (issues 267, 290), ~192 of 200 GB/s on 8x HDR.
    nic_efficiency: float = 0.95
    rail_optimized: bool = True
    nic_latency_us: float = 0.0  # added to NCCL's network hop latency (IB plugin reports 0)
    nodes_per_leaf: int = 32
    oversubscription: float = 1.0  # leaf downlink capacity / leaf uplink capacity


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    gpu: str
    nodes: int = 1
    gpus_per_node: int = 8
    max_gpus_per_node: int = 8  # GPUs a node physically has; gpus_per_node may use fewer
    cpu: str = "intel"  # "intel" | "amd": NCCL's LL bandwidth cap and net overhead depend on it
    description: str = ""
    intra_node: IntraNode = field(default_factory=IntraNode)
    inter_node: InterNode = field(default_factory=InterNode)
    source: str = "<built-in>"

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def compute_capability(self) -> tuple[int, int]:
        return get_gpu(self.gpu).compute_capability

    @property
    def nvlink_gbps(self) -> float:
        n = self.intra_node.nvlink_gbps
        return get_gpu(self.gpu).nvlink_gbps if n is None else n

    @property
    def nvlink_efficiency(self) -> float:
        e = self.intra_node.nvlink_efficiency
        if e is not None:
            return e
        major = self.compute_capability[0]
        return _NVLINK_EFFICIENCY_BY_MAJOR.get(major, _NVLINK_EFFICIENCY_BY_MAJOR[9])

    @property
    def pcie_gbps(self) -> float:
        p = self.intra_node.pcie_gbps
        if p is not None:
            return p
        return _PCIE_GBPS_BY_MAJOR.get(self.compute_capability[0], 64.0)

    @property
    def host_bridge_gbps(self) -> float:
        h = self.intra_node.host_bridge_gbps
        return self.pcie_gbps * self.gpus_per_node / 2 if h is None else h

    @property
    def nic_gbps(self) -> float:
        """Line rate per NIC in GB/s."""
        return self.inter_node.nic_gbit / 8.0

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def local_of(self, rank: int) -> int:
        return rank % self.gpus_per_node

    def nic_of_local(self, local: int) -> int:
        nics = self.inter_node.nics_per_node
        return local % nics if nics else 0


# --- schema ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Key:
    kind: type  # int, float, bool, str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False  # lo excluded
    choices: tuple[str, ...] = ()

    def expected(self) -> str:
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        name = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[self.kind]
        if self.lo is not None and self.hi is not None:
            return f"{name} in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"
        if self.lo is not None:
            return f"{name} {'>' if self.lo_open else '>='} {self.lo:g}"
        return name


_GPU_NAMES = tuple(g.name for g in list_gpus())
_TOP_KEYS: dict[str, _Key] = {
    "name": _Key(str),
    "description": _Key(str),
    "gpu": _Key(str, choices=_GPU_NAMES),
    "nodes": _Key(int, 1, 100_000),
    "gpus_per_node": _Key(int, 1, 64),
    "max_gpus_per_node": _Key(int, 1, 64),
    "cpu": _Key(str, choices=("intel", "amd")),
}
_SECTIONS: dict[str, dict[str, _Key]] = {
    "intra_node": {
        "kind": _Key(str, choices=("nvswitch", "pcie")),
        "nvlink_gbps": _Key(float, 0, 10_000, lo_open=True),
        "nvlink_efficiency": _Key(float, 0, 1, lo_open=True),
        "pcie_gbps": _Key(float, 0, 1_000, lo_open=True),
        "pcie_efficiency": _Key(float, 0, 1, lo_open=True),
        "host_bridge_gbps": _Key(float, 0, 10_000, lo_open=True),
        "nvls": _Key(bool),
    },
    "inter_node": {
        "nics_per_node": _Key(int, 0, 64),
        "nic_gbit": _Key(float, 0, 10_000, lo_open=True),
        "nic_efficiency": _Key(float, 0, 1, lo_open=True),
        "rail_optimized": _Key(bool),
        "nic_latency_us": _Key(float, 0, 1_000),
        "nodes_per_leaf": _Key(int, 1, 100_000),
        "oversubscription": _Key(float, 1, 1_000),
    },
}


def _err(source: str, key: str, msg: str) -> ClusterConfigError:
    return ClusterConfigError(f"{source}: {key}: {msg}")


def _unknown(source: str, key: str, known: list[str]) -> ClusterConfigError:
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(leaf, known, n=1)
    hint = f" (did you mean {key[: len(key) - len(leaf)]}{close[0]!r}?)" if close else ""
    return _err(source, key, f"unknown key{hint}; known keys here: {', '.join(sorted(known))}")


def _check_value(source: str, key: str, spec: _Key, value: Any) -> Any:
    ok_type = (
        isinstance(value, bool) if spec.kind is bool
        else isinstance(value, int) and not isinstance(value, bool) if spec.kind is int
        else isinstance(value, (int, float)) and not isinstance(value, bool) if spec.kind is float
        else isinstance(value, str)
    )
    if not ok_type:
        raise _err(source, key, f"expected {spec.expected()}, got {value!r} ({type(value).__name__})")
    if spec.choices:
        match = [c for c in spec.choices if c.lower() == value.strip().lower()]
        if not match:
            raise _err(source, key, f"expected {spec.expected()}, got {value!r}")
        return match[0]
    if spec.kind in (int, float):
        too_low = spec.lo is not None and (value <= spec.lo if spec.lo_open else value < spec.lo)
        too_high = spec.hi is not None and value > spec.hi
        if too_low or too_high:
            raise _err(source, key, f"expected {spec.expected()}, got {value!r}")
        return float(value) if spec.kind is float else value
    return value


def _parse(data: dict[str, Any], source: str, default_name: str) -> ClusterSpec:
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
    known_top = list(_TOP_KEYS) + list(_SECTIONS)
    for key, value in data.items():
        if key in _SECTIONS:
            if not isinstance(value, dict):
                raise _err(source, key, f"expected a table [{key}], got {value!r}")
            for sub, v in value.items():
                dotted = f"{key}.{sub}"
                if sub not in _SECTIONS[key]:
                    raise _unknown(source, dotted, list(_SECTIONS[key]))
                sections[key][sub] = _check_value(source, dotted, _SECTIONS[key][sub], v)
        elif key in _TOP_KEYS:
            top[key] = _check_value(source, key, _TOP_KEYS[key], value)
        else:
            raise _unknown(source, key, known_top)
    if "gpu" not in top:
        raise _err(source, "gpu", f"missing; expected {_TOP_KEYS['gpu'].expected()}")
    top.setdefault("name", default_name)
    spec = ClusterSpec(
        **top,
        intra_node=IntraNode(**sections["intra_node"]),
        inter_node=InterNode(**sections["inter_node"]),
        source=source,
    )
    if "max_gpus_per_node" not in top:
        spec = replace(spec, max_gpus_per_node=spec.gpus_per_node)
    return validate(spec)


def validate(spec: ClusterSpec) -> ClusterSpec:
    """Cross-key checks that a single key's range cannot express."""
    src, inter = spec.source, spec.inter_node
    if spec.gpus_per_node > spec.max_gpus_per_node:
        raise _err(src, "gpus_per_node",
                   f"{spec.gpus_per_node} GPUs per node, but the nodes of {spec.name!r} have "
                   f"{spec.max_gpus_per_node} (max_gpus_per_node)")
    if spec.nodes > 1 and inter.nics_per_node == 0:
        raise _err(src, "inter_node.nics_per_node",
                   f"{spec.nodes} nodes need a network: expected an integer >= 1, got 0 "
                   "(add an [inter_node] table, or use a multi-node preset such as 'h100-ib')")
    if spec.intra_node.nvls and spec.intra_node.kind != "nvswitch":
        raise _err(src, "intra_node.nvls", "NVLS needs kind = 'nvswitch'; expected false here")
    if spec.intra_node.nvls and spec.compute_capability[0] < 9:
        raise _err(src, "intra_node.nvls",
                   f"NVLink SHARP needs Hopper or newer; {spec.gpu} has none: expected false")
    return spec


# --- presets and loading -----------------------------------------------------------------------

_PRESET_PACKAGE = "phantom.network.presets"


def _preset_files() -> dict[str, Any]:
    root = resources.files(_PRESET_PACKAGE)
    return {p.name[: -len(".toml")]: p for p in root.iterdir() if p.name.endswith(".toml")}


def list_presets() -> list[tuple[str, str]]:
    """(name, one-line description) of every shipped cluster preset, sorted by name."""
    out = []
    for name, path in sorted(_preset_files().items()):
        data = tomllib.loads(path.read_text())
        out.append((name, str(data.get("description", ""))))
    return out


def _load_preset(name: str) -> ClusterSpec:
    files = _preset_files()
    key = name.strip().lower()
    if key not in files:
        close = difflib.get_close_matches(key, list(files), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ClusterConfigError(
            f"unknown cluster preset {name!r}{hint}; presets: {', '.join(sorted(files))} "
            "(or give a path to a .toml file; see `phantom clusters`)")
    return _parse(tomllib.loads(files[key].read_text()), f"preset {key!r}", key)


def load_cluster_file(path: str | Path) -> ClusterSpec:
    p = Path(path)
    if not p.is_file():
        raise ClusterConfigError(f"{p}: cluster file not found")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ClusterConfigError(f"{p}: not valid TOML: {e}") from None
    return _parse(data, str(p), p.stem)


def load_cluster(spec: str | None, *, nnodes: int | None = None, nproc_per_node: int | None = None,
                 gpu: str | None = None) -> ClusterSpec:
    """A preset name, a path to a .toml file, or None (one NVSwitch node of `gpu`, default H100).

    `nnodes`, `nproc_per_node` and `gpu`, when given, override the file's values and are
    checked against the hardware it describes.
    """
    if spec is None:
        cluster = _load_preset("nvlink-node")
    elif spec.endswith(".toml") or "/" in spec or Path(spec).is_file():
        cluster = load_cluster_file(spec)
    else:
        cluster = _load_preset(spec)

    where = "command line"
    if gpu is not None:
        match = [g for g in _GPU_NAMES if g.lower() == gpu.strip().lower()]
        if not match:
            raise ClusterConfigError(
                f"{where}: --gpu: expected one of {', '.join(_GPU_NAMES)}, got {gpu!r}")
        cluster = replace(cluster, gpu=match[0])
    if nproc_per_node is not None:
        if not isinstance(nproc_per_node, int) or nproc_per_node < 1:
            raise ClusterConfigError(
                f"{where}: --nproc-per-node: expected an integer >= 1, got {nproc_per_node!r}")
        if nproc_per_node > cluster.max_gpus_per_node:
            raise ClusterConfigError(
                f"{where}: --nproc-per-node: {nproc_per_node} processes per node, but the nodes of "
                f"cluster {cluster.name!r} ({cluster.source}) have {cluster.max_gpus_per_node} GPUs; "
                f"expected 1..{cluster.max_gpus_per_node} (or a cluster file with bigger nodes)")
        cluster = replace(cluster, gpus_per_node=nproc_per_node)
    if nnodes is not None:
        if not isinstance(nnodes, int) or nnodes < 1:
            raise ClusterConfigError(f"{where}: --nnodes: expected an integer >= 1, got {nnodes!r}")
        if nnodes > 1 and cluster.inter_node.nics_per_node == 0:
            raise ClusterConfigError(
                f"{where}: --nnodes: {nnodes} nodes, but cluster {cluster.name!r} "
                f"({cluster.source}) is a single node without a network; expected 1, or a "
                "multi-node cluster such as --cluster h100-ib / h200-ib / a100-ib")
        cluster = replace(cluster, nodes=nnodes)
    return validate(cluster)


def describe(spec: ClusterSpec) -> str:
    """One line for logs and `phantom clusters`."""
    intra = (f"NVSwitch {spec.nvlink_gbps:g} GB/s/GPU" if spec.intra_node.kind == "nvswitch"
             else f"PCIe {spec.pcie_gbps:g} GB/s/GPU")
    s = f"{spec.nodes} x {spec.gpus_per_node} {spec.gpu}, {intra}"
    if spec.nodes > 1:
        i = spec.inter_node
        s += (f", {i.nics_per_node} x {i.nic_gbit:g} Gb/s NICs/node"
              f"{' (rail-optimized)' if i.rail_optimized else ''}")
        if i.oversubscription > 1:
            s += f", {i.oversubscription:g}:1 oversubscribed"
    return s


__all__ = [
    "ClusterConfigError", "ClusterSpec", "IntraNode", "InterNode", "describe", "list_presets",
    "load_cluster", "load_cluster_file", "validate",
]
