"""torchtitan 0.3.0's trainer with the RMSNorm that torchtitan's December 2024 H100 numbers ran.

    phantom run --gpu H100-96GB --nproc-per-node 8 bench/torchtitan_norm_dec2024.py <torchtitan flags>

Why: torchtitan's published H100 rows (benchmarks/llama3_h100_202412_torchtitan.md) name their
versions: torchtitan 9dec370 (2024-12-26) and a torch nightly of 2024-12-23. That torchtitan's
llama3_8b.toml sets `norm_type = "rmsnorm"`, its own module (torchtitan/models/norms.py):

    def _norm(self, x):  return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
    def forward(self, x): return self._norm(x.float()).type_as(x) * self.weight

which runs as separate elementwise and reduction kernels, not torch's fused `_fused_rms_norm`
(torch 2.8, May 2025) that torchtitan 0.3.0's `nn.RMSNorm` reaches on a current CUDA build. This
entry point gives 0.3.0's RMSNorm that forward, so the simulation runs the kernels those rows ran.
Nothing else changes; the script is torchtitan's own `python -m torchtitan.train`.
(The April 2024 A100 rows set `norm_type = "fused_rmsnorm"`, a fused Triton kernel, and run
through `-m torchtitan.train` unchanged.)
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

# bench/ holds torchtitan.py, the benchmark, which would shadow the torchtitan package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import torch  # noqa: E402
from torchtitan.models.common import nn_modules  # noqa: E402


def _rmsnorm_dec2024(self, x: torch.Tensor) -> torch.Tensor:
    normed = x.float()
    normed = normed * torch.rsqrt(normed.pow(2).mean(-1, keepdim=True) + self.eps)
    return normed.type_as(x) * self.weight


nn_modules.RMSNorm.forward = _rmsnorm_dec2024

if __name__ == "__main__":
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
