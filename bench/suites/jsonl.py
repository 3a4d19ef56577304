"""JSON-lines results shared by the benchmarks that run one script on a GPU and under phantom
(`flex_attention.py`, `offload.py`): a header line naming the device, then one line a row."""
from __future__ import annotations

import json
from typing import Iterable


def emit(rows: Iterable[dict], out: str | None) -> None:
    """Print each row as it is measured; append them all, after the device header, to `out`."""
    import torch

    lines = [json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__})]
    for row in rows:
        lines.append(json.dumps(row))
        print(lines[-1], flush=True)
    if out:
        with open(out, "a") as f:
            f.write("\n".join(lines) + "\n")


def rows_by(path: str, *key: str) -> dict:
    """The rows of a results file (headers left out), keyed by the values of `key`."""
    rows = (json.loads(line) for line in open(path) if line.strip())
    return {tuple(r[k] for k in key): r for r in rows if all(k in r for k in key)}
