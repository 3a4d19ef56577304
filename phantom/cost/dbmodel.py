"""DatabaseCostModel: measured kernel times where the database has the op, the roofline elsewhere.

Hot path (every simulated op): one tuple signature (the roofline's memo key: shapes, strides,
dtypes, scalars) and one dict lookup. Only the first call of each distinct signature builds the
normalised string key (`op_key`) and looks it up in the database; the answer is memoised.

Besides costs it keeps, per database key, calls and simulated GPU time, so the report can list
the most expensive misses, and, when `record` is set (phantom profile), a call spec of every key
for the timing process to rebuild.

A GPU may borrow the rows of a preset with the same die and clocks (`GPUSpec.kernel_db_from`):
all of them when it has no database of its own (the 96 GB HBM2e H100 takes the H100 SXM's), or
the signatures its own database misses (the H100 and H200 each fill the other's gaps). A
tensor-core kernel (SAME_CLOCK_CLASSES) keeps its measured time: same SMs, same clock. Any other
borrowed row moves by the fallback model's difference for that signature, this GPU's time minus
the measured one's, bounded by the model's ratio: the part of a kernel the model explains
(streaming its bytes) moves with the memory systems, and what the measurement knows beyond it
(kernel choice, launch overheads, latency-bound gathers and tails) stays as it is. A kernel at
a fraction of the bandwidth (a graph gather) so moves less than the bandwidths' ratio, one at
full bandwidth by all of it. Checked on the 3,591 signatures both Hopper databases have
(bench/probes/db_borrow.py): 4.2-4.5% median error, 4.7-5.2% time-weighted, against 4.6% and 6.1-6.5%
scaling by the ratio, and 9.6-11.7% median for the roofline alone.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from phantom.cost.base import KernelCost
from phantom.cost.db import KernelDB, KernelDBError, load_db, shipped_db_path
from phantom.cost.roofline import RooflineCostModel, classify
from phantom.cost.signature import call_spec, op_key
from phantom.hardware.gpus import GPUSpec, get_gpu

DB_SOURCE = "db"
# Classes whose kernels run on the tensor cores at the SM clock: a borrowed row of a same-die GPU
# keeps its time. Scaling them by the two fitted rooflines' ratio only added the fits' noise
# (GEMM 3.4% against 2.2% unscaled, attention 6.8% against 1.1%: bench/probes/db_borrow.py).
SAME_CLOCK_CLASSES = frozenset({"gemm", "attention", "conv"})


# torch's out_dtype GEMMs (bf16 or fp16 A and B into an fp32 C, with `out=` to accumulate in
# place: Apex's wgrad accumulation into Megatron's main_grad) run the plain GEMM's mainloop with
# a wider epilogue: overload packet -> (index of A in the arguments, the plain GEMM).
_WIDE_C_PLAIN = {"mm": (0, torch.ops.aten.mm.default), "addmm": (1, torch.ops.aten.mm.default),
                 "bmm": (0, torch.ops.aten.bmm.default), "baddbmm": (1, torch.ops.aten.bmm.default)}


def plain_gemm_of(func: Any, args: tuple) -> tuple[Any, tuple] | None:
    """The plain GEMM (op, (A, B)) an out_dtype GEMM call runs the mainloop of, else None."""
    if getattr(func, "_overloadname", "") not in ("dtype", "dtype_out"):
        return None
    plain = _WIDE_C_PLAIN.get(getattr(func, "_overloadpacket", func).__name__)
    if plain is None:
        return None
    first, op = plain
    return op, (args[first], args[first + 1])


def borrow_ns(measured_ns: float, model_there_ns: float, model_here_ns: float) -> float:
    """A kernel measured on one GPU, on another of the same die: the measurement plus the
    model's difference, kept between unchanged and scaled by the model's full ratio."""
    if model_there_ns <= 0:
        return measured_ns
    by_ratio = measured_ns * model_here_ns / model_there_ns
    shifted = measured_ns + model_here_ns - model_there_ns
    return min(max(shifted, min(measured_ns, by_ratio)), max(measured_ns, by_ratio))


class DatabaseCostModel:
    """CostModel: database rows first, `fallback` (a RooflineCostModel) for misses."""

    def __init__(self, gpu: GPUSpec, dbs: list[KernelDB], fallback: RooflineCostModel | None = None,
                 record: bool = False, borrowed_from: GPUSpec | None = None) -> None:
        self.gpu = gpu
        self.fallback = fallback or RooflineCostModel(gpu)
        self.fallback_source = type(self.fallback).__name__
        # The measured GPU's own model, for the scale of borrowed rows (None: nothing borrowed).
        self.borrowed_from = borrowed_from
        self._measured_model = RooflineCostModel(borrowed_from) if borrowed_from else None
        self.rows: dict[str, float] = {}
        self._borrowed_keys: set[str] = set()
        for db in dbs:  # later databases (a user's --db) override earlier ones (the shipped one)
            borrowed = borrowed_from is not None and db.gpu == borrowed_from.name
            if db.gpu != gpu.name and not borrowed:
                raise KernelDBError(f"{db.path}: header.gpu is {db.gpu!r}, expected {gpu.name!r} "
                                    f"(the simulated GPU); a time measured on one GPU is wrong for another")
            self.rows.update({k: r.ns for k, r in db.rows.items()})
            if borrowed:
                self._borrowed_keys.update(db.rows)
            else:  # a later database of this GPU's own replaces a borrowed row
                self._borrowed_keys.difference_update(db.rows)
        self.db_paths = [db.path for db in dbs]
        # fast key -> [cost, db key, stats [calls, gpu_ns], hit]
        self._memo: dict[Any, list] = {}
        self.key_stats: dict[str, list] = {}  # db key -> [calls, gpu_ns, hit, op_class]
        self.specs: dict[str, dict] | None = {} if record else None

    # ---- CostModel -------------------------------------------------------------------
    def fused_pointwise(self, nbytes: float, flops: float, load_efficiency: float = 1.0) -> KernelCost:
        """A generated kernel has no database row: the fallback's memory curve."""
        return self.fallback.fused_pointwise(nbytes, flops, load_efficiency)

    def estimate(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict, out: object) -> KernelCost | None:
        fb = self.fallback
        info = fb._info.get(func)
        if info is None:
            info = fb._info[func] = classify(func)
        if info.op_class is None:
            return None
        fast = fb._key(func, info, args, kwargs or {})
        entry = None
        if fast is not None:
            try:
                entry = self._memo.get(fast)
            except TypeError:  # unhashable (symbolic shapes): no memo
                fast = None
        if entry is None:
            entry = self._resolve(func, args, kwargs, out)
            if entry is None:
                return None
            if fast is not None:
                self._memo[fast] = entry
        cost, stats = entry[0], entry[1]
        stats[0] += 1
        stats[1] += cost.gpu_ns
        return cost

    def _resolve(self, func: Any, args: tuple, kwargs: dict, out: Any) -> list | None:
        cost = self.fallback.estimate(func, args, kwargs, out)
        if cost is None:
            return None
        if cost.op_class == "transfer":  # host<->device copies: PCIe model, not a kernel row
            return [replace(cost, source=self.fallback_source), [0, 0.0, False, "transfer"]]
        key = op_key(func, args, kwargs)
        ns = self.rows.get(key)
        if ns is not None and key in self._borrowed_keys and cost.op_class not in SAME_CLOCK_CLASSES:
            ns = self._borrowed_ns(ns, func, args, kwargs, out, cost.gpu_ns)
        if ns is None:
            ns = self._wide_c_ns(func, args, cost.gpu_ns)
        if ns is not None:
            cost = replace(cost, gpu_ns=ns, source=DB_SOURCE)
        else:
            cost = replace(cost, source=self.fallback_source)
        stats = self.key_stats.get(key)
        if stats is None:
            stats = self.key_stats[key] = [0, 0.0, ns is not None, cost.op_class]
            if self.specs is not None:
                self.specs[key] = call_spec(func, args, kwargs)
        return [cost, stats]

    def _wide_c_ns(self, func: Any, args: tuple, model_ns: float) -> float | None:
        """An out_dtype GEMM the database lacks, from its plain GEMM's row where it has that:
        the measured mainloop plus the model's difference of the two, which is the wider
        epilogue's traffic (C read and D written in fp32 instead of D in bf16:
        roofline._epilogue_bytes). Without this the fused wgrad accumulation would fall to the
        roofline while the unfused GEMM + add it replaces is measured, and the two paths would
        not compare. At the published Megatron rows' shapes the fused call came out +2.7 /
        +3.1% in total against a real H100 (bench/probes/wgrad_fusion.py, two rounds; -7.2 / -7.5%
        before the epilogue was modelled)."""
        plain = plain_gemm_of(func, args)
        if plain is None:
            return None
        op, operands = plain
        measured = self.rows.get(op_key(op, operands, {}))
        if measured is None:
            return None
        a, b = operands
        plain_out = torch.empty((*a.shape[:-1], b.shape[-1]), dtype=a.dtype, device="meta")
        modelled = self.fallback.estimate(op, operands, {}, plain_out)
        if modelled is None or modelled.gpu_ns <= 0:
            return None
        return measured + max(0.0, model_ns - modelled.gpu_ns)

    def _borrowed_ns(self, measured_ns: float, func: Any, args: tuple, kwargs: dict, out: Any,
                     here_ns: float) -> float:
        """A row measured on the other GPU, moved to this one (module docstring)."""
        there = self._measured_model.estimate(func, args, kwargs, out)
        if there is None or there.gpu_ns <= 0:
            return measured_ns
        return borrow_ns(measured_ns, there.gpu_ns, here_ns)

    def reset_stats(self) -> None:
        """Forget per-signature statistics and recorded specs (Simulation's start-up
        calibration step runs ops that are not the script's)."""
        self._memo.clear()
        self.key_stats.clear()
        if self.specs is not None:
            self.specs.clear()

    # ---- reporting ---------------------------------------------------------------------
    def top_misses(self, n: int = 10) -> list[dict[str, Any]]:
        """The n missed signatures with the most simulated GPU time."""
        missed = [(k, s) for k, s in self.key_stats.items() if not s[2] and s[3] != "transfer"]
        missed.sort(key=lambda kv: -kv[1][1])
        return [{"key": k, "op_class": s[3], "calls": s[0], "gpu_ms": s[1] / 1e6} for k, s in missed[:n]]

    def records(self) -> list[dict[str, Any]]:
        """Every recorded signature (phantom profile), most simulated GPU time first."""
        out = []
        for key, spec in (self.specs or {}).items():
            calls, ns, hit, cls = self.key_stats[key]
            out.append({"key": key, "op_class": cls, "calls": calls, "sim_gpu_ns": ns, "in_db": hit, **spec})
        out.sort(key=lambda r: -r["sim_gpu_ns"])
        return out


def make_cost_model(gpu: GPUSpec, db_paths: list[str] | None = None, record: bool = False,
                    use_shipped: bool = True) -> Any:
    """The cost model a Simulation uses: DatabaseCostModel when a database applies (the shipped
    one for this GPU and/or the one it borrows, and --db files) or when recording; else the
    plain roofline. Later databases override earlier ones: borrowed rows, then this GPU's own,
    then the user's."""
    dbs: list[KernelDB] = []
    borrowed_from = None
    if use_shipped:
        sibling = get_gpu(gpu.kernel_db_from) if gpu.kernel_db_from else None
        if sibling is not None and shipped_db_path(sibling.name).exists():
            dbs.append(load_db(shipped_db_path(sibling.name)))
            borrowed_from = sibling
        if shipped_db_path(gpu.name).exists():
            dbs.append(load_db(shipped_db_path(gpu.name)))
    dbs += [load_db(p) for p in (db_paths or [])]
    if not dbs and not record:
        return RooflineCostModel(gpu)
    return DatabaseCostModel(gpu, dbs, record=record, borrowed_from=borrowed_from)
