"""Transformer Engine, simulated: the `transformer_engine` package phantom offers a script
where the real one is not installed (a CPU machine cannot build it: it needs a CUDA build of
torch and nvcc).

Megatron-Core's default layer spec, and Megatron-LM's default `--transformer-impl`, are
Transformer Engine's modules: fused norm + GEMM (`LayerNormLinear`), TP-aware `Linear` with
gradient accumulation fused into the weight-gradient GEMM, cuDNN/flash `DotProductAttention`,
TE's `FusedAdam` and multi-tensor kernels. This package answers for the parts of TE's public
API those paths use, doing the same GPU work (the same GEMMs, norms, attention kernels and
tensor-parallel collectives, in TE's order and on its streams) through torch ops that phantom
prices, so a TE spec script runs unchanged. What it covers and what it refuses is listed in
docs/frameworks.md ("Megatron-Core", Transformer Engine). FP8 execution is not simulated: a script that
turns it on gets a clear error.

The directory holding this file is put on the import path for the name `transformer_engine`
only (phantom/adapters/__init__.py, `_AdapterFinder`), and only when no real Transformer
Engine is importable.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent
