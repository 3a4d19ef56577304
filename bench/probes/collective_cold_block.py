"""Host time of a small transformer block, alone and right after a collective.

    python bench/probes/collective_cold_block.py sim --out cold_block_sim                          # phantom, 2 ranks
    python bench/probes/collective_cold_block.py real --out DIR                                    # torchrun, 2 GPUs
    torchrun --nproc-per-node 2 bench/probes/collective_cold_block.py worker                       # one measurement

The worker times `block` (LayerNorm, Linear, GELU, add on a 64 x 1024 bf16 tensor: a
transformer block's kinds of op) with `time.perf_counter`, four blocks in a row, 200 times:
once with nothing before them and once right after an `all_gather_into_tensor` of 128 KiB.
On a GPU host the collective is an NCCL enqueue that returns at once, so the block costs
the same either way. Under phantom each collective is a blocking round trip to the
coordinator, during which other processes run on the rank's core; the first block after it
used to be charged ~2.5x. `sim` runs the worker under phantom with the path to
the handler warmed after each round trip (the default) and without (`PHANTOM_NO_REWARM=1`),
three rounds each, and writes a table of the medians.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BLOCKS = 4
REPEATS = 200
ROUNDS = 3


def worker() -> None:
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    dev, dt = "cuda", torch.bfloat16
    layers = [(torch.nn.LayerNorm(1024, device=dev, dtype=dt), torch.nn.Linear(1024, 1024, device=dev, dtype=dt))
              for _ in range(2)]
    x = torch.randn(64, 1024, device=dev, dtype=dt)
    gathered = torch.empty(64 * dist.get_world_size(), 1024, device=dev, dtype=dt)

    def block(j: int) -> torch.Tensor:
        norm, linear = layers[j % 2]
        return x + torch.nn.functional.gelu(linear(norm(x)))

    def timed(after_collective: bool) -> list[float]:
        totals = [0.0] * BLOCKS
        for _ in range(REPEATS):
            if after_collective:
                dist.all_gather_into_tensor(gathered, x)
            for j in range(BLOCKS):
                t0 = time.perf_counter()
                block(j)
                totals[j] += time.perf_counter() - t0
        return [t / REPEATS * 1e6 for t in totals]

    timed(False), timed(True)  # warm-up
    rows = [{"alone": timed(False), "after": timed(True)} for _ in range(ROUNDS)]
    torch.cuda.synchronize()
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(rows), flush=True)
    dist.destroy_process_group()


def _run(cmd: list[str], env: dict) -> list[dict]:
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise SystemExit(f"no result (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")


def _medians(rows: list[dict], key: str) -> list[float]:
    return [round(statistics.median(r[key][j] for r in rows), 1) for j in range(BLOCKS)]


def _table(results: dict[str, list[dict]]) -> list[str]:
    lines = ["| run | block 1-4 alone (us) | block 1-4 after a collective (us) | first block after / alone |",
             "|---|---|---|---|"]
    for name, rows in results.items():
        alone, after = _medians(rows, "alone"), _medians(rows, "after")
        lines.append(f"| {name} | {', '.join(map(str, alone))} | {', '.join(map(str, after))} | "
                     f"{after[0] / alone[0]:.2f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("worker")
    for name in ("sim", "real"):
        q = sub.add_parser(name)
        q.add_argument("--out", required=True)
        q.add_argument("--gpu", default="H200")
    args = ap.parse_args()
    if args.cmd == "worker":
        return worker()
    me = str(Path(__file__).resolve())
    if args.cmd == "sim":
        base = [sys.executable, "-m", "phantom.cli", "run", "--nproc-per-node", "2", "--gpu", args.gpu,
                "--quiet", me, "worker"]
        results = {"phantom, warmed after each round trip (default)": _run(base, {}),
                   "phantom, PHANTOM_NO_REWARM=1": _run(base, {"PHANTOM_NO_REWARM": "1"})}
    else:
        results = {"real": _run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                 "--nproc-per-node", "2", me, "worker"], {})}
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    Path(args.out + ".json").write_text(json.dumps({"date": date, "results": results}, indent=1))
    text = [f"`collective_cold_block.py {args.cmd}` ({date}): medians of {ROUNDS} rounds of "
            f"{REPEATS} repetitions, simulated-host us under phantom, host us for real.", "",
            *_table(results)]
    Path(args.out + ".md").write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
