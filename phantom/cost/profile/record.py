"""Record step of `phantom profile`: the signatures a simulated run saw, written as JSON.

Runs inside the simulated rank process (bootstrap), after the script: the DatabaseCostModel
recorded a call spec for every distinct database key (phantom/cost/dbmodel.py).
"""
from __future__ import annotations

import json
import os
from typing import Any

RECORDS_SCHEMA = "phantom.opsigs/1"


def records_path_for_rank(path: str, rank: int) -> str:
    """Rank 0 writes `path`; other ranks (distributed runs) write `path` + `.rank<N>`."""
    return path if rank == 0 else f"{path}.rank{rank}"


def write_records(sim: Any, path: str, rank: int = 0) -> str:
    model = sim.cost_model
    if not hasattr(model, "records"):
        raise RuntimeError("phantom profile: the run's cost model records no signatures "
                           "(expected a DatabaseCostModel with record=True)")
    out = records_path_for_rank(path, rank)
    data = {"schema": RECORDS_SCHEMA, "gpu": sim.gpu.name, "rank": rank, "records": model.records()}
    with open(out, "w") as f:
        json.dump(data, f)
        f.write("\n")
    return out


def load_records(path: str) -> dict[str, Any]:
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or data.get("schema") != RECORDS_SCHEMA:
        raise ValueError(f"{path}: field 'schema': expected {RECORDS_SCHEMA!r} "
                         f"(a file written by `phantom profile --record-only`)")
    return data


def merge_records(paths: list[str]) -> list[dict[str, Any]]:
    """Distinct signatures of several record files; simulated GPU time summed per key."""
    by_key: dict[str, dict[str, Any]] = {}
    for p in paths:
        for r in load_records(p)["records"]:
            old = by_key.get(r["key"])
            if old is None:
                by_key[r["key"]] = dict(r)
            else:
                old["calls"] += r["calls"]
                old["sim_gpu_ns"] += r["sim_gpu_ns"]
    return sorted(by_key.values(), key=lambda r: -r["sim_gpu_ns"])
