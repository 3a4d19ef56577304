"""Which speed probe follows this machine's speed for phantom-like host work?

phantom scales measured host time by a pure-Python probe (engine/host.py `_probe_ns`). Session 38
found runs of one host-bound step 1.4x apart whose probe readings did not differ. This script
interleaves, for `--seconds`, three timings on one core: the pure-Python probe, the reference
CPU training step (`training_step("cpu")`: PyTorch's Python and C++ host path), and the same
step on fake tensors under torch's FakeTensorMode (Python dispatch, as under phantom), and
reports how well each probe's ups and downs follow the fake-tensor step's (Pearson correlation
of the per-window medians, and of their logs).

    python bench/probe_tracking.py --seconds 120 --out bench/data/session38/probe_tracking/run1.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from phantom.engine.host import _probe_ns, training_step  # noqa: E402

CLOCK = time.process_time_ns


def timed(fn, n: int = 1) -> float:
    t0 = CLOCK()
    for _ in range(n):
        fn()
    return (CLOCK() - t0) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=120)
    p.add_argument("--window", type=int, default=5, help="samples per window (medians compared)")
    p.add_argument("--out")
    args = p.parse_args()
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch.set_num_threads(1)
    cpu_step = training_step("cpu")
    mode = FakeTensorMode()  # one mode: its tensors cannot meet another's
    with mode:
        fake_step = training_step("cpu")
    cpu_step()
    with mode:
        fake_step()
    samples = []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        probe = timed(_probe_ns)
        ref = timed(cpu_step, 2)
        with mode:
            fake = timed(fake_step, 2)
        samples.append((probe, ref, fake))
    w = args.window
    windows = [[statistics.median(s[i] for s in samples[k:k + w]) for i in range(3)]
               for k in range(0, len(samples) - w + 1, w)]
    probe, ref, fake = ([x[i] for x in windows] for i in range(3))
    logs = {name: [math.log(x) for x in v] for name, v in (("probe", probe), ("reference_step", ref), ("fake", fake))}
    result = {
        "samples": len(samples), "windows": len(windows),
        "spread_max_over_min": {name: max(v) / min(v) for name, v in
                                (("probe", probe), ("reference_step", ref), ("fake_step", fake))},
        "corr_with_fake_step": {"probe": statistics.correlation(probe, fake),
                                "reference_step": statistics.correlation(ref, fake)},
        "corr_log_with_fake_step": {name: statistics.correlation(logs[name], logs["fake"])
                                    for name in ("probe", "reference_step")},
        "windows_ns": windows,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "windows_ns"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
