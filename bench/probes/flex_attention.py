"""FlexAttention (torch.compile'd `flex_attention` with a block mask) on one GPU, real and simulated.

The same script runs on a GPU (`python bench/probes/flex_attention.py`) and under phantom (`phantom run
--gpu H200 bench/probes/flex_attention.py`). For each shape and mask it times, with CUDA events, ten
forwards back to back and ten forward + backward steps (GPU-bound: the kernels are long enough
to hide the host), and prints one JSON line per config. `--compare REAL SIM` makes the table.

    python bench/probes/flex_attention.py --out real.jsonl                       # on the GPU
    phantom run --gpu H200 bench/probes/flex_attention.py --out sim.jsonl       # here
    python bench/probes/flex_attention.py --compare real.jsonl sim.jsonl
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suites"))  # jsonl.py
from jsonl import emit, rows_by  # noqa: E402

SHAPES = {  # name: batch, heads, sequence, head dim
    "b4-h16-s4096-d64": (4, 16, 4096, 64),
    "b1-h32-s8192-d128": (1, 32, 8192, 128),
}
MASKS = ("dense", "causal", "window1024", "prefix_lm")
REPS = 10


def mask_mod(name: str):
    if name == "dense":
        return lambda b, h, q, k: q >= 0
    if name == "causal":
        return lambda b, h, q, k: q >= k
    if name == "window1024":
        return lambda b, h, q, k: (q >= k) & (q - k < 1024)
    if name == "prefix_lm":  # bidirectional over the first quarter, causal after it
        return lambda b, h, q, k: (q >= k) | (k < 1024)
    raise ValueError(name)


def measure(shape: tuple[int, int, int, int], mask_name: str) -> dict:
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, h, s, d = shape
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    mask = create_block_mask(mask_mod(mask_name), None, None, s, s, device="cuda")
    # a fresh compile per config: past Dynamo's recompile limit (8 shapes or masks of one
    # function) flex_attention silently runs its unfused eager path
    torch._dynamo.reset()
    flex = torch.compile(flex_attention)

    def timed(fn) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPS):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / REPS

    fwd = timed(lambda: flex(q, k, v, block_mask=mask))
    step = timed(lambda: flex(q, k, v, block_mask=mask).backward(grad))
    return {"shape": "b{}-h{}-s{}-d{}".format(*shape), "mask": mask_name,
            "density": round(1.0 - mask.sparsity() / 100, 4) if mask_name != "dense" else 1.0,
            "fwd_ms": round(fwd, 4), "bwd_ms": round(step - fwd, 4), "step_ms": round(step, 4)}


def compare(real_path: str, sim_path: str) -> str:
    real, sim = rows_by(real_path, "shape", "mask"), rows_by(sim_path, "shape", "mask")
    rows = ["| shape | mask | density | real fwd ms | phantom | error | real bwd ms | phantom | error |",
            "|---|---|---|---|---|---|---|---|---|"]
    errs = []
    for key, r in real.items():
        p = sim.get(key)
        if p is None:
            continue
        ef = (p["fwd_ms"] / r["fwd_ms"] - 1) * 100
        eb = (p["bwd_ms"] / r["bwd_ms"] - 1) * 100
        errs += [abs(ef), abs(eb)]
        rows.append(f"| {key[0]} | {key[1]} | {r['density']:.3f} | {r['fwd_ms']:.3f} | {p['fwd_ms']:.3f} | "
                    f"{ef:+.1f}% | {r['bwd_ms']:.3f} | {p['bwd_ms']:.3f} | {eb:+.1f}% |")
    if errs:
        rows.append(f"\nkernel time |error|: mean {sum(errs) / len(errs):.1f}%, max {max(errs):.1f}% "
                    f"({len(errs)} kernels)")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="append the JSON lines to this file too")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--masks", default=",".join(MASKS))
    p.add_argument("--compare", nargs=2, metavar=("REAL", "SIM"))
    a = p.parse_args()
    if a.compare:
        print(compare(*a.compare))
        return
    emit((measure(SHAPES[shape], mask) for shape in a.shapes.split(",")
          for mask in a.masks.split(",")), a.out)

if __name__ == "__main__":
    sys.exit(main())
