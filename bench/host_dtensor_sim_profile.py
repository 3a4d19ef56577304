"""cProfile of `host_dtensor_sim.py`'s step under phantom, rank 0: where phantom's own process
spends its time on each torch version (bench/README, distributed.py, session 13).

    phantom run --nproc-per-node 2 --gpu H100 bench/host_dtensor_sim_profile.py tp_dtensor
"""
from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_dtensor_sim import build_step  # noqa: E402


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "tp_dtensor"
    step = build_step(name)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        step()
    prof.disable()
    if dist.get_rank() == 0:
        print(f"torch {torch.__version__}, python {sys.version.split()[0]}: {name}, 5 steps")
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
