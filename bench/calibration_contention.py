"""What other busy processes do to phantom's host calibration on this machine.

phantom takes a per-handler-entry overhead off every measured host gap, measured at start-up
(`Simulation._measure_host_calibration`) and kept as a history per code version
(`~/.cache/phantom`). This runs a trivial script under `phantom run` ROUNDS times alone and
ROUNDS times beside BUSY processes that spin (`while True: pass`), alternating, each run with
an empty history of its own (a fresh cache folder holding only the built fake CUDA library, so
every run measures), and reads what each run measured from its cache: the per-entry overhead
in ns of this machine at its best speed, the value a run's history would keep.

    python bench/calibration_contention.py [--rounds 3] [--busy 1] [--out FILE.md]

Run it alone: it is about the machine's other load.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = "import torch\nx = torch.ones(4, device='cuda') + 1\n"


def one_run(busy: int) -> dict:
    from phantom.engine.host import CONTENDED_SUFFIX, DISPATCH_OVERHEAD, code_fingerprint
    from phantom.native.build import library_path

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        if library_path().exists():
            shutil.copy(library_path(), cache / library_path().name)
        script = Path(tmp) / "trivial.py"
        script.write_text(SCRIPT)
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        time.sleep(0.2 if busy else 0.0)
        try:
            proc = subprocess.run([sys.executable, "-m", "phantom.cli", "run", "--gpu", "H200",
                                   str(script)], cwd=REPO, capture_output=True, text=True,
                                  env={**__import__("os").environ, "PHANTOM_CACHE_DIR": str(cache)})
        finally:
            for hog in hogs:
                hog.kill()
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-2000:])
        saved = json.loads(next(cache.glob("host-probe-*.json")).read_text())
        histories = saved[DISPATCH_OVERHEAD]
        fingerprint = code_fingerprint()
        key = fingerprint if fingerprint in histories else fingerprint + CONTENDED_SUFFIX
        return {"busy": busy, "overhead_ns": histories[key][-1], "kept_as": "contended"
                if key.endswith(CONTENDED_SUFFIX) else "alone"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--busy", type=int, default=1, help="spinning processes beside the busy runs")
    p.add_argument("--out")
    args = p.parse_args()
    rows = []
    for _ in range(args.rounds):
        for busy in (0, args.busy):
            rows.append(one_run(busy))
            print(rows[-1], flush=True)
    lines = [f"phantom's per-entry dispatch overhead as measured at start-up, alone and beside "
             f"{args.busy} spinning process(es), alternating ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}):",
             "", "| run | busy processes | overhead, ns at best speed | kept as |", "|---|---|---|---|"]
    lines += [f"| {i + 1} | {r['busy']} | {r['overhead_ns']:.0f} | {r['kept_as']} |" for i, r in enumerate(rows)]
    for busy in (0, args.busy):
        values = [r["overhead_ns"] for r in rows if r["busy"] == busy]
        lines.append(f"\n{busy} busy: median {statistics.median(values):.0f} ns ({len(values)} runs)")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
