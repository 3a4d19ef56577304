"""Runs shared by the report tests, each made once per test session (they take 10-25 s).

Not a conftest: plain functions with a cache, so that every test module that needs the 2-rank
FSDP run gets the same directory.
"""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
import textwrap
from pathlib import Path

from conftest import REPO, run_phantom

# Four 1024x1024 fp32 linears: parameters are 4 x (4 MiB weight + 4 KiB bias) exactly, as
# allocator blocks (both sizes are already multiples of the allocator's rounding).
TRAIN = textwrap.dedent("""
    import torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(5):
        x = torch.randn(256, 1024, device="cuda")
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.3f}")
    torch.cuda.synchronize()
""")
TRAIN_PARAM_BYTES = 4 * (4 * 2**20 + 4 * 2**10)

DDP = textwrap.dedent("""
    import os, torch, torch.nn as nn, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    model = DDP(nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(4):
        loss = model(torch.randn(512, 1024, device="cuda")).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.all_reduce(torch.ones(1024, device="cuda"))
    torch.cuda.synchronize()
    dist.destroy_process_group()
""")

_ROOT = Path(tempfile.mkdtemp(prefix="phantom-report-tests-"))
atexit.register(shutil.rmtree, _ROOT, True)


def _check(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


@functools.lru_cache(maxsize=None)
def single_run() -> tuple[Path, Path]:
    """(run directory, separate --trace file) of TRAIN, iterations 1 and 2 traced."""
    d = _ROOT / "single"
    d.mkdir()
    script = d / "train.py"
    script.write_text(TRAIN)
    out, trace = d / "run", d / "extra-trace.json"
    _check(run_phantom(["run", "--out", str(out), "--trace", str(trace), "--trace-iters", "1:3",
                        str(script)], cwd=d, timeout=300))
    return out, trace


@functools.lru_cache(maxsize=None)
def fsdp_run() -> Path:
    """A 2-rank FSDP2 run of examples/dist_train.py (GPT-2 124M, short sequences), all traced."""
    out = _ROOT / "fsdp"
    _check(run_phantom(["run", "--nproc-per-node", "2", "--gpu", "H200", "--out", str(out),
                        "examples/dist_train.py", "--parallel", "fsdp", "--preset", "gpt2-124m",
                        "--seq-len", "256", "--batch-size", "4", "--steps", "3", "--warmup", "1"],
                       cwd=REPO, timeout=400))
    return out


@functools.lru_cache(maxsize=None)
def ddp_trace_rank1() -> Path:
    """A 2-rank DDP run with only `--trace` (no run directory), rank 1 traced."""
    d = _ROOT / "ddp"
    d.mkdir()
    script = d / "ddp.py"
    script.write_text(DDP)
    trace = d / "trace.json"
    _check(run_phantom(["run", "--nproc-per-node", "2", "--trace", str(trace), "--trace-ranks", "1",
                        str(script)], cwd=d, timeout=300))
    return trace
