"""`phantom profile --sweep`: the standard grid of bench/kernels/measure.py through phantom's timer.

Each grid case runs once under a recording dispatch mode to learn which aten calls it makes. A
case that launches exactly one kernel-launching op becomes a database row under that op's key
(so the grid's shapes are exact hits too); every case, single-op or not, becomes a calibration
row in measure.py's format (`--sweep-out`), which phantom/cost/calibrate.py fits the fallback to.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from phantom.cost.db import KernelDB, Row, now_iso
from phantom.cost.roofline import classify
from phantom.cost.signature import op_key

MEASURE_PY = Path(__file__).resolve().parents[3] / "bench" / "kernels" / "measure.py"
SKIP_GROUPS = frozenset({"transfer"})  # PCIe copies: modelled by bandwidth, not kernel rows


def load_measure() -> ModuleType:
    if not MEASURE_PY.exists():
        raise FileNotFoundError(f"{MEASURE_PY}: the sweep grid ships with the repository; install phantom "
                                f"from a checkout (pip install -e .) to use --sweep")
    spec = importlib.util.spec_from_file_location("phantom_measure_grid", MEASURE_PY)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod  # dataclasses look their module up in sys.modules
    spec.loader.exec_module(mod)
    return mod


class _Capture(TorchDispatchMode):
    """Records (key, op) of every kernel-launching aten call made under it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        kwargs = kwargs or {}
        if classify(func).op_class is not None:
            self.calls.append((op_key(func, args, kwargs), str(func)))
        return func(*args, **kwargs)


def case_key(case: Any, bufs: Any) -> tuple[str, str] | None:
    """(key, op) when the case is one kernel-launching aten call, else None."""
    cap = _Capture()
    with cap:
        case.fn(bufs)
    torch.cuda.synchronize()
    return cap.calls[0] if len(cap.calls) == 1 else None


def run_sweep(db: KernelDB, db_path: str, timer: Any, budget_s: float, calib_out: str | None,
              header: dict[str, Any], groups: set[str] | None = None) -> dict[str, Any]:
    measure = load_measure()
    t0 = last_save = time.time()
    calib_rows: list[dict] = []
    errors: list[dict] = []
    rows_added = out_of_time = 0
    torch.backends.cuda.matmul.allow_tf32 = False
    for group, gen in measure.GROUPS:
        if group in SKIP_GROUPS or (groups and group not in groups):
            continue
        for case in gen():
            if time.time() - t0 > budget_s:
                out_of_time += 1
                continue
            torch.backends.cuda.matmul.allow_tf32 = bool(case.extra.get("tf32", False))
            try:
                one = case.make()
                kb = case_key(case, one)
                del one
                tm = timer.time(case.fn, case.make, case.in_bytes, graph=case.graph)
            except Exception as exc:  # one broken case must not lose the sweep
                errors.append({"op": case.op, "shapes": case.shapes, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                torch.cuda.synchronize()
                continue
            finally:
                torch.backends.cuda.matmul.allow_tf32 = False
            us = tm.ns / 1e3
            calib_rows.append(measure.row_for(case, {"median_us": us, "method": tm.method, "calls": tm.calls,
                                                     "buffers": tm.buffers}))
            if kb is not None:
                db.add(kb[0], Row(op=kb[1], ns=tm.ns, repeats=tm.repeats, date=now_iso(), origin="sweep"))
                rows_added += 1
            if time.time() - last_save > 15.0:
                db.save(db_path)
                _write_calib(calib_out, header, calib_rows, errors)
                last_save = time.time()
        torch.cuda.empty_cache()
        print(f"  sweep [{time.time() - t0:6.1f}s] {group}: {len(calib_rows)} cases so far, {rows_added} db rows",
              flush=True)
    db.save(db_path)
    _write_calib(calib_out, header, calib_rows, errors)
    return {"cases": len(calib_rows), "db_rows": rows_added, "errors": errors, "out_of_time": out_of_time,
            "seconds": round(time.time() - t0, 1)}


def _write_calib(path: str | None, header: dict[str, Any], rows: list[dict], errors: list[dict]) -> None:
    if not path:
        return
    meta = {**header, "method": header.get("method", "") + "; sweep via phantom profile"}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "rows": rows, "errors": errors}, f, indent=1)
    os.replace(tmp, path)
