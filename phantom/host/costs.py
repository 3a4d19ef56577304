"""What torch's own host side costs on the simulated node, per call: the shipped table.

`phantom/host/data/host_costs_<GPU>.json` was measured on the GPU node's host by
`bench/host/host_cost_table.py` (its provenance block names the device, driver, torch, CPU and
date): the time the calling thread spends inside one eager torch call on CUDA tensors
(argument parsing, the dispatcher, autograd's node, the caching allocator, the kernel launch),
not the Python around it. `HostCosts` prices:

* a torch API call by its kind (`api_call_ns`: a method, a function, a property), whatever it
  dispatches;
* each ATen op it dispatches by its overload (`ops`), with and without an autograd node;
  ops taking tensor lists (foreach, fused optimizers, cat) by a line through the list lengths
  measured (`lists`); an op the table lacks by the median of its class's rows, classes told
  apart here by the op's schema and tags (`op_class`), never by a copied number;
* each op the autograd engine runs in a backward pass at its no-grad row, each autograd node
  it runs at the engine's own cost of a node (`backward_node_ns`), and each backward pass at
  its fixed cost (`backward_call_ns`).

Which rows priced how much host time is counted (`HostCosts.report`).
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).with_name("data")

GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "addmv", "mv",
                      "_scaled_mm", "_addmm_activation", "dot", "vdot"})
REDUCTION_OPS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "prod", "norm",
                           "linalg_vector_norm", "var", "std", "var_mean", "std_mean", "argmax",
                           "argmin", "any", "all", "logsumexp", "cumsum", "_softmax",
                           "_log_softmax", "softmax", "log_softmax"})
CLASSES = ("view", "factory", "copy", "gemm", "reduction", "pointwise", "list", "other")


class HostCostTableError(ValueError):
    """The host-cost table is missing or malformed."""


def op_class(op: Any) -> str:
    """The class an ATen overload is priced by when the table has no row for it."""
    packet = getattr(op, "_opname", None)
    if not isinstance(packet, str):  # a higher-order op, or another callable
        parts = str(getattr(op, "__name__", op)).split(".")
        packet = parts[1] if len(parts) > 2 else parts[0]
    name = packet.rstrip("_")
    schema = getattr(op, "_schema", None)
    if schema is not None:
        if any(str(a.type) == "List[Tensor]" for a in schema.arguments):
            return "list"
        returns = schema.returns
        if returns and returns[0].alias_info is not None and not returns[0].alias_info.is_write:
            return "view"
    if name in GEMM_OPS:
        return "gemm"
    if name in REDUCTION_OPS:
        return "reduction"
    if name in ("copy", "clone", "_to_copy", "contiguous", "to"):
        return "copy"
    if name.startswith(("empty", "zeros", "ones", "full", "rand", "arange", "scalar_tensor")) \
            or name.endswith("_like"):
        return "factory"
    tags = getattr(op, "tags", ())
    try:
        import torch

        if torch.Tag.pointwise in tags:
            return "pointwise"
    except (ImportError, AttributeError):
        pass
    return "other"


@dataclass
class _Line:
    """ns = base + per_tensor * tensors, fitted through a list op's measured lengths."""
    base: float
    per_tensor: float

    def __call__(self, tensors: int) -> float:
        return max(0.0, self.base + self.per_tensor * tensors)


def _fit(lengths: list[int], ns: list[float]) -> _Line:
    if len(lengths) == 1:
        return _Line(ns[0], 0.0)
    slope, intercept = statistics.linear_regression(lengths, ns)
    return _Line(intercept, slope)


@dataclass
class HostCosts:
    """The node's host cost of torch's work, from one table (`load`)."""
    path: Path
    provenance: dict
    api_call_ns: dict[str, float]
    rows: dict[str, dict[str, float]]
    lines: dict[str, _Line]
    backward_node_ns: float
    backward_call_ns: float
    record_function_ns: float
    class_ns: dict[str, dict[str, float]] = field(default_factory=dict)
    list_per_tensor_ns: float = 0.0
    # what was charged from rows, lines and class medians (report)
    charged: dict[str, float] = field(default_factory=lambda: {"row": 0.0, "line": 0.0, "class": 0.0,
                                                             "api": 0.0, "backward": 0.0})
    _cache: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> "HostCosts":
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise HostCostTableError(f"no host-cost table at {path}") from None
        except json.JSONDecodeError as e:
            raise HostCostTableError(f"{path}: not JSON ({e})") from None
        try:
            rows = {name: {k: float(v) for k, v in row.items() if k in ("no_grad", "grad")}
                    for name, row in data["ops"].items()}
            # fitted against all the call's list tensors, as phantom counts them
            # (interception.mode._list_tensors); `lengths` is per list
            lines = {name: _fit(list(v.get("tensors", v["lengths"])), [float(x) for x in v["ns"]])
                     for name, v in data.get("lists", {}).items()}
            backward = data.get("backward", {})
            # per node with the pass's fixed cost taken out, where the table measured both
            node_ns = float(backward.get("marginal_per_node_ns", data["backward_node_ns"]))
            costs = cls(path, data.get("provenance", {}),
                        {k: float(v) for k, v in data["api_call_ns"].items()}, rows, lines,
                        node_ns, float(backward.get("fixed_ns", 0.0)),
                        float(data.get("record_function_ns", 0.0)))
        except (KeyError, TypeError, ValueError) as e:
            raise HostCostTableError(f"{path}: malformed host-cost table ({type(e).__name__}: {e}); "
                                     f"expected the fields bench/host/host_cost_table.py writes") from None
        costs._derive_classes()
        return costs

    def _derive_classes(self) -> None:
        """Class medians from the rows, each row classified by its overload (op_class)."""
        import torch

        by_class: dict[str, dict[str, list[float]]] = {}
        for name, row in self.rows.items():
            op = _resolve(torch, name)
            cls_name = op_class(op) if op is not None else "other"
            for grad, ns in row.items():
                by_class.setdefault(cls_name, {}).setdefault(grad, []).append(ns)
        everything = {g: [ns for row in self.rows.values() for k, ns in row.items() if k == g]
                      for g in ("no_grad", "grad")}
        for cls_name in CLASSES:
            found = by_class.get(cls_name, {})
            self.class_ns[cls_name] = {
                g: statistics.median(found.get(g) or everything[g] or [0.0]) for g in ("no_grad", "grad")}
        slopes = [line.per_tensor for line in self.lines.values()]
        self.list_per_tensor_ns = statistics.median(slopes) if slopes else 0.0

    def api_ns(self, kind: str) -> float:
        ns = self.api_call_ns.get(kind, self.api_call_ns.get("method", 0.0))
        self.charged["api"] += ns
        return ns

    def op_ns(self, op: Any, grad: bool, list_tensors: int = 0) -> float:
        """The node's host ns for one dispatched ATen op `op` (an OpOverload): `grad`, autograd
        records a node for it; `list_tensors`, tensors in its list arguments."""
        key = (op, grad, list_tensors)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._price(op, grad, list_tensors)
        ns, source = hit
        self.charged[source] += ns
        return ns

    def backward_ns(self, nodes: int = 0, passes: int = 0) -> float:
        """The autograd engine's own cost of running `nodes` nodes and starting `passes`
        backward passes."""
        ns = nodes * self.backward_node_ns + passes * self.backward_call_ns
        self.charged["backward"] += ns
        return ns

    def _price(self, op: Any, grad: bool, list_tensors: int) -> tuple[float, str]:
        name = str(op)
        column = "grad" if grad else "no_grad"
        line = self.lines.get(name)
        if line is not None:
            ns = line(list_tensors)
            row = self.rows.get(name)
            if grad and row and "grad" in row and "no_grad" in row:
                ns += row["grad"] - row["no_grad"]
            return ns, "line"
        row = self.rows.get(name)
        if row is not None and not list_tensors:
            if column in row:
                return row[column], "row"
            return row.get("no_grad", row.get("grad", 0.0)), "row"
        cls_name = op_class(op)
        ns = self.class_ns[cls_name][column]
        if list_tensors:
            ns += self.list_per_tensor_ns * list_tensors
        return ns, "class"

    def report(self) -> dict:
        total = sum(self.charged.values())
        return {"table": str(self.path), "provenance": self.provenance,
                "charged_ns": dict(self.charged),
                # what the table's measurements priced, rather than a class median
                "row_share": 1 - self.charged["class"] / total if total else None}


def _resolve(torch: Any, name: str) -> Any:
    """`torch.ops.aten.add.Tensor` from "aten.add.Tensor" (None if this torch lacks it)."""
    try:
        ns, packet, overload = name.split(".")
        return getattr(getattr(getattr(torch.ops, ns), packet), overload)
    except (ValueError, AttributeError, RuntimeError):
        return None


def table_path(gpu_name: str) -> Path:
    """The shipped table for a GPU preset: its own where one was measured, else the H200's
    (the node hosts measured so far run the same torch host path; docs/host-time.md)."""
    own = DATA_DIR / f"host_costs_{gpu_name}.json"
    return own if own.exists() else DATA_DIR / "host_costs_H200.json"
