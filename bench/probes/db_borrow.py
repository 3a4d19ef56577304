"""How well one Hopper GPU's measured kernel rows predict the other's: the check behind
`GPUSpec.kernel_db_from` for a GPU that has a database of its own (H100 <-> H200).

For every recorded signature (bench/profile/records/*) measured on both GPUs, these predictions
of the target GPU's time are compared with its measured row:

  borrowed   what phantom charges a signature missing from the target's own database: the other
             GPU's measured row, as it is for a tensor-core class (same SMs, same clock), else
             plus the calibrated roofline's difference of the two GPUs for that call, bounded by
             its ratio (dbmodel.borrow_ns)
  ratio      the other GPU's measured row x the roofline's ratio, whatever the class
  unscaled   the other GPU's measured row as it is
  roofline   the target GPU's calibrated roofline alone (the fallback before borrowing)
  by_ratio   the earlier rule: the ratio, except for the tensor-core classes

No GPU needed: the calls are rebuilt on meta tensors from the recorded specs.

    python bench/probes/db_borrow.py --out db_borrow.md
"""
from __future__ import annotations

import argparse
import glob
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from phantom.cost.db import load_db, shipped_db_path  # noqa: E402
from phantom.cost.dbmodel import SAME_CLOCK_CLASSES, borrow_ns  # noqa: E402
from phantom.cost.profile.rebuild import Unrebuildable, rebuild  # noqa: E402
from phantom.cost.profile.record import merge_records  # noqa: E402
from phantom.cost.roofline import RooflineCostModel  # noqa: E402
from phantom.hardware.gpus import get_gpu  # noqa: E402

PAIRS = [("H100", "H200"), ("H200", "H100")]  # (measured, target)


def model_ns(model: RooflineCostModel, func, args, kwargs) -> float | None:
    try:
        out = func(*args, **kwargs)
        cost = model.estimate(func, args, kwargs, out)
    except Exception:  # noqa: BLE001 (an op with no meta kernel: not comparable)
        return None
    return cost.gpu_ns if cost is not None and cost.gpu_ns > 0 else None


def compare(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    rows = {g: load_db(shipped_db_path(g)).rows for g in ("H100", "H200")}
    models = {g: RooflineCostModel(get_gpu(g)) for g in ("H100", "H200")}
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for rec in records:
        key = rec["key"]
        if key not in rows["H100"] or key not in rows["H200"]:
            continue
        try:
            func, make, _ = rebuild(rec, device="meta")
            args, kwargs = make()
        except (Unrebuildable, Exception):  # noqa: BLE001
            continue
        est = {g: model_ns(models[g], func, args, kwargs) for g in models}
        if None in est.values():
            continue
        for measured, target in PAIRS:
            real = rows[target][key].ns
            there = rows[measured][key].ns
            ratio = est[target] / est[measured]
            cls = rec.get("op_class", "?")
            out[(measured, target)].append({
                "key": key, "class": cls, "real_ns": real,
                "borrowed": there if cls in SAME_CLOCK_CLASSES else borrow_ns(there, est[measured], est[target]),
                "ratio": there * ratio, "unscaled": there, "roofline": est[target],
                "by_ratio": there * (1.0 if cls in SAME_CLOCK_CLASSES else ratio)})
    return out


def err(pred: float, real: float) -> float:
    return 100.0 * abs(pred - real) / real


def summary_lines(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    lines = ["| measured -> target | op class | signatures | borrowed: median abs err | ratio | unscaled | "
             "roofline alone | scaled by the ratio (before) | borrowed: time-weighted abs err | "
             "roofline alone, time-weighted | scaled by the ratio, time-weighted |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (measured, target), rows in results.items():
        by_class = defaultdict(list)
        for r in rows:
            by_class[r["class"]].append(r)
        for cls, rs in [("all", rows)] + sorted(by_class.items(), key=lambda kv: -len(kv[1])):
            if len(rs) < 5 and cls != "all":
                continue
            med = {m: statistics.median(err(r[m], r["real_ns"]) for r in rs)
                   for m in ("borrowed", "ratio", "unscaled", "roofline", "by_ratio")}
            total = sum(r["real_ns"] for r in rs)
            weighted = {m: 100.0 * sum(abs(r[m] - r["real_ns"]) for r in rs) / total
                        for m in ("borrowed", "roofline", "by_ratio")}
            lines.append(f"| {measured} -> {target} | {cls} | {len(rs)} | {med['borrowed']:.1f}% | "
                         f"{med['ratio']:.1f}% | {med['unscaled']:.1f}% | {med['roofline']:.1f}% | {med['by_ratio']:.1f}% | "
                         f"{weighted['borrowed']:.1f}% | {weighted['roofline']:.1f}% | {weighted['by_ratio']:.1f}% |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", default=str(REPO / "bench" / "profile" / "records" / "*"))
    ap.add_argument("--out", help="write the markdown table here")
    args = ap.parse_args(argv)
    torch.set_default_device("cpu")
    records = merge_records(sorted(glob.glob(args.records)))
    results = compare(records)
    lines = [f"Signatures measured on both GPUs (shipped databases, {len(records)} recorded "
             "signatures read): each GPU's time predicted from the other's row", "",
             *summary_lines(results)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
