"""Kernel database: measured median kernel times keyed by normalised op signature.

One JSON file per GPU:

    {"schema": "phantom.kerneldb/1",
     "header": {"gpu": "H100", "device_name": ..., "driver": ..., "cuda": ..., "torch": ...,
                "date": ISO-8601, "host": ..., "method": ...},
     "rows": {"<op_key>": {"op": "aten.mm.default", "ns": 123.4, "repeats": 15, "date": ISO-8601,
                           "origin": "profile" | "sweep"}}}

`op_key` (phantom/cost/signature.py) builds the keys. Lookup is a plain dict. Shipped databases
live in phantom/cost/data/db/<GPU>.json (GPU = the preset name, e.g. H100).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "phantom.kerneldb/1"
SHIPPED_DIR = Path(__file__).resolve().parent / "data" / "db"
HEADER_FIELDS = ("gpu", "device_name", "driver", "cuda", "torch", "date", "host")


class KernelDBError(ValueError):
    """A database file is missing, malformed, or cannot be combined with another."""


@dataclass
class Row:
    op: str  # OpOverload as str(), e.g. "aten.mm.default"
    ns: float  # median kernel time
    repeats: int  # timed repeats the median is over
    date: str  # when it was measured (ISO 8601): merge keeps the newest
    origin: str = "profile"  # "profile" (a script's op) or "sweep" (the standard grid)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "ns": round(self.ns, 1), "repeats": self.repeats, "date": self.date,
                "origin": self.origin}


@dataclass
class KernelDB:
    header: dict[str, Any]
    rows: dict[str, Row] = field(default_factory=dict)
    path: str | None = None

    @property
    def gpu(self) -> str:
        return str(self.header.get("gpu", ""))

    def lookup(self, key: str) -> Row | None:
        return self.rows.get(key)

    def add(self, key: str, row: Row) -> None:
        self.rows[key] = row

    def ops(self) -> Counter:
        return Counter(r.op for r in self.rows.values())

    def save(self, path: str | os.PathLike) -> None:
        data = {"schema": SCHEMA, "header": self.header,
                "rows": {k: self.rows[k].to_json() for k in sorted(self.rows)}}
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=0, separators=(",", ":"))
            f.write("\n")
        os.replace(tmp, path)  # a run killed mid-write leaves the previous file intact


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _bad(path: str, what: str, expected: str) -> KernelDBError:
    return KernelDBError(f"{path}: {what}: expected {expected}")


def load_db(path: str | os.PathLike) -> KernelDB:
    """Read and validate a database file (errors name the file, the field and what was expected)."""
    p = str(path)
    try:
        with open(p) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise KernelDBError(f"{p}: no such kernel database file") from None
    except json.JSONDecodeError as e:
        raise _bad(p, f"not JSON ({e})", f"a {SCHEMA} JSON object") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise _bad(p, f"field 'schema' is {got!r}", repr(SCHEMA))
    header = data.get("header")
    if not isinstance(header, dict) or not header.get("gpu"):
        raise _bad(p, "field 'header.gpu' missing", "the GPU preset name, e.g. \"H100\"")
    rows_in = data.get("rows")
    if not isinstance(rows_in, dict):
        raise _bad(p, "field 'rows'", "an object mapping op keys to rows")
    rows: dict[str, Row] = {}
    for key, r in rows_in.items():
        try:
            rows[key] = Row(op=str(r["op"]), ns=float(r["ns"]), repeats=int(r["repeats"]),
                            date=str(r.get("date", header.get("date", ""))), origin=str(r.get("origin", "profile")))
        except (KeyError, TypeError, ValueError) as e:
            raise _bad(p, f"row {key!r} ({type(e).__name__}: {e})",
                       "{\"op\": str, \"ns\": number, \"repeats\": int, \"date\": str}") from None
        if not rows[key].ns > 0:
            raise _bad(p, f"row {key!r} field 'ns' is {rows[key].ns}", "a positive number of nanoseconds")
    return KernelDB(header=header, rows=rows, path=p)


def new_db(gpu: str, **header: Any) -> KernelDB:
    h = {"gpu": gpu, "date": now_iso()}
    h.update(header)
    return KernelDB(header=h)


def shipped_db_path(gpu_name: str) -> Path:
    return SHIPPED_DIR / f"{gpu_name}.json"


def resolve(path_or_gpu: str) -> str:
    """A file path, or a GPU preset name whose shipped database is meant."""
    if os.path.exists(path_or_gpu):
        return path_or_gpu
    shipped = shipped_db_path(path_or_gpu)
    if shipped.exists():
        return str(shipped)
    known = sorted(p.stem for p in SHIPPED_DIR.glob("*.json")) if SHIPPED_DIR.is_dir() else []
    raise KernelDBError(f"{path_or_gpu}: neither a file nor a GPU with a shipped database "
                        f"(shipped: {', '.join(known) or 'none'})")


def merge(dbs: list[KernelDB]) -> KernelDB:
    """One database holding every key of `dbs`; for a key in several, the newest row wins.

    Refuses databases of different GPUs: a time measured on one GPU is wrong for another."""
    if not dbs:
        raise KernelDBError("merge: no input databases")
    gpus = {db.gpu for db in dbs}
    if len(gpus) > 1:
        detail = ", ".join(f"{db.path or '?'}: {db.gpu}" for db in dbs)
        raise KernelDBError(f"merge: databases of different GPUs ({detail}); merge one GPU at a time")
    newest = max(dbs, key=lambda d: str(d.header.get("date", "")))
    out = KernelDB(header=dict(newest.header))
    out.header["merged_from"] = [
        {k: db.header.get(k) for k in ("device_name", "driver", "torch", "date")} | {"path": db.path}
        for db in dbs]
    for db in dbs:
        for key, row in db.rows.items():
            old = out.rows.get(key)
            if old is None or row.date >= old.date:  # ISO dates compare as strings; later input wins ties
                out.rows[key] = row
    return out
