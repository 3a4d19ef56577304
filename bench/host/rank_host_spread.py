"""How much the ranks of one real multi-GPU step differ in host time: the straggler spread.

    python bench/host/rank_host_spread.py [--out FILE.md]

Every rank of a data- or tensor-parallel step runs the same host code, yet on the lent GPU
hosts one rank's Python takes 5-30% longer than the other's in the same step, mostly the same
rank all run long. The step then ends when the slower
rank's work is done. This reads every real run that recorded each rank's host time per step
(`tp_rank_desync.py`, `ddp_rank_skew.py`) and fits one number: the spread sigma of a rank's
host time in a lognormal model, from the mean over steps of (slowest rank / mean of the ranks),
which for W ranks is exp(sigma * E[max of W standard normals]). phantom's
`HOST_RANK_SPREAD` (phantom/hardware/gpus.py) is the median over these runs.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from phantom.host.steady import expected_max_normal, straggler_pace  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
# (file, host): each file's `steps` hold every rank's host ms per step (the two scripts write the
# same field: from the step's start to the optimizer step's return)
RUNS = [
    ("rank_steps_h200x2_a_desync_1b_s2048.json", "H200 x2"),
    ("rank_steps_h200x2_a_desync_gpt2-350m_s128.json", "H200 x2"),
    ("rank_steps_h200x2_a_desync_3b_s2048.json", "H200 x2"),
    ("rank_steps_h200x2_a_skew_x2_357.json", "H200 x2"),
    ("rank_steps_h200x2_b_desync_1b_s2048.json", "H200 x2 (another)"),
    ("rank_steps_h200x2_b_desync_gpt2-350m_s128.json", "H200 x2 (another)"),
    ("rank_steps_h200x2_b_desync_3b_s2048.json", "H200 x2 (another)"),
    ("rank_steps_h200x2_b_skew_x2.json", "H200 x2 (another)"),
    ("rank_steps_h100x2_skew_x2_57.json", "H100 x2"),
    ("rank_steps_h100x2_skew_x2_135.json", "H100 x2"),
] + [  # one 4 x H100 host, the same TP steps with 2 and with 4 ranks, alternating
    (f"rank_steps_h100x4_desync_{cfg}_x{w}_r{r}.json", f"H100 x4 host, {w} ranks")
    for r in (1, 2) for cfg in ("1b_s2048", "gpt2-350m_s128", "3b_s2048") for w in (2, 4)
]


def host_ms_per_step(path: Path) -> list[list[float]]:
    return [s["host_ms"] for s in json.loads(path.read_text())["steps"]]


def run_spread(steps: list[list[float]]) -> tuple[float, float]:
    """(mean over steps of slowest / mean rank, sigma that gives it)."""
    ratio = statistics.mean(max(s) / statistics.mean(s) for s in steps)
    return ratio, math.log(ratio) / expected_max_normal(len(steps[0]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = ["| run | host | steps | rank host ms (medians) | slowest / mean | sigma |", "|---|---|---|---|---|---|"]
    sigmas = []
    for rel, host in RUNS:
        steps = host_ms_per_step(DATA / rel)
        ratio, sigma = run_spread(steps)
        sigmas.append(sigma)
        medians = " / ".join(f"{statistics.median(s[r] for s in steps):.0f}" for r in range(len(steps[0])))
        lines.append(f"| `{rel}` | {host} | {len(steps)} | {medians} | {ratio:.3f} | {sigma:.3f} |")
    median = statistics.median(sigmas)
    by_world: dict[int, list[tuple[float, float]]] = {}
    for (rel, _), sigma in zip(RUNS, sigmas):
        steps = host_ms_per_step(DATA / rel)
        by_world.setdefault(len(steps[0]), []).append((run_spread(steps)[0], sigma))
    for world, runs in sorted(by_world.items()):
        lines.append(f"\n{world} ranks: {len(runs)} runs, slowest / mean median "
                     f"{statistics.median(r for r, _ in runs):.3f} (straggler_pace with the median sigma: "
                     f"{straggler_pace(world, median):.3f}), sigma median {statistics.median(s for _, s in runs):.3f}")
    lines += ["", f"median sigma {median:.3f}; a W-rank step's slowest host, against the mean one: "
              + ", ".join(f"W={w} x{straggler_pace(w, median):.3f}" for w in (2, 8, 16, 64, 256))]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
