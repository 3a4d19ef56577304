"""`phantom db show PATH|GPU` and `phantom db merge OUT IN...`."""
from __future__ import annotations

import sys
from collections import Counter

from phantom.cost.db import HEADER_FIELDS, KernelDB, KernelDBError, load_db, merge, resolve
from phantom.cost.roofline import classify

USAGE = """usage: phantom db show PATH|GPU [--all]
       phantom db merge OUT IN [IN...]

show   a database's header, rows per op class and per op, and where the rows came from
       (GPU: the shipped database of that preset, e.g. H100); --all lists every key
merge  write OUT with every row of the INs; for a key in several, the newest row wins;
       refuses databases of different GPUs"""


def _op_class(op: str) -> str:
    from phantom.cost.profile.rebuild import Unrebuildable, resolve_op

    try:
        return classify(resolve_op(op)).op_class or "none"
    except Unrebuildable:
        return "unknown op"


def show(db: KernelDB, list_all: bool = False) -> str:
    lines = [f"kernel database {db.path}"]
    for k in HEADER_FIELDS + ("method",):
        if k in db.header:
            lines.append(f"  {k:<12} {db.header[k]}")
    if "merged_from" in db.header:
        lines.append(f"  merged from  {len(db.header['merged_from'])} databases")
    ops = db.ops()
    classes: Counter = Counter()
    for op, n in ops.items():
        classes[_op_class(op)] += n
    origins = Counter(r.origin for r in db.rows.values())
    lines.append(f"  rows         {len(db.rows)} ({', '.join(f'{o} {n}' for o, n in origins.most_common())})")
    lines.append("  by class     " + ", ".join(f"{c} {n}" for c, n in classes.most_common()))
    lines.append(f"  {'op':<58} {'rows':>5} {'min us':>9} {'max us':>9}")
    for op, n in ops.most_common():
        ns = [r.ns for r in db.rows.values() if r.op == op]
        lines.append(f"  {op:<58} {n:>5} {min(ns) / 1e3:>9.2f} {max(ns) / 1e3:>9.2f}")
    if list_all:
        lines.append("")
        for key in sorted(db.rows):
            r = db.rows[key]
            lines.append(f"  {r.ns / 1e3:>10.2f} us  {key}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "show" and len(rest) in (1, 2) and (len(rest) == 1 or rest[1] == "--all"):
            print(show(load_db(resolve(rest[0])), list_all=len(rest) == 2))
            return 0
        if cmd == "merge" and len(rest) >= 2:
            out, ins = rest[0], rest[1:]
            merged = merge([load_db(resolve(p)) for p in ins])
            merged.save(out)
            print(f"{out}: {len(merged.rows)} rows from {len(ins)} databases ({merged.gpu})")
            return 0
    except KernelDBError as e:
        print(f"phantom db: error: {e}", file=sys.stderr)
        return 2
    print(f"phantom db: error: bad arguments {argv!r}\n\n{USAGE}", file=sys.stderr)
    return 2
