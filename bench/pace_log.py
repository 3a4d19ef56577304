"""Log the pace process's reading (engine/pace.py: the reference CPU step, fastest of 5 blocks of
4) every PERIOD_S to a JSONL file, until killed: what `--host-pace process` would read on this
machine, idle or beside a real training run (bench/device/h200_pace_node_s44.sh).

    python bench/pace_log.py OUT.jsonl
"""
from __future__ import annotations

import json
import sys
import time

import torch

sys.path.insert(0, ".")
from phantom.engine.host import training_step  # noqa: E402
from phantom.engine.pace import PERIOD_S, time_reference_step  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    step = training_step("cpu")
    with open(sys.argv[1], "a") as out:
        while True:
            out.write(json.dumps({"t": time.time(), "step_ns": time_reference_step(step)}) + "\n")
            out.flush()
            time.sleep(PERIOD_S)


if __name__ == "__main__":
    main()
