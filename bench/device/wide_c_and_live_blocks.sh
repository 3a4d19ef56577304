#!/bin/bash
# Session 27: (1) kernels/measure.py's gemm_wide_c grid (wgrad GEMMs with a bf16 output and
# with an fp32 C accumulated in the same call, 48 shapes), twice; (2) live_blocks.py: what the
# allocator holds between cuda_graphs.py's rows, by allocation site, batch 2 and 16.
# Usage: bash bench/device/wide_c_and_live_blocks.sh
source bench/device/call_lib.sh
record_env
for round in 1 2; do
  step wide_c_round$round
  timeout $(left 150) python bench/kernels/measure.py --only gemm_wide_c --budget-s 130 \
    --out $W/wide_c_round$round.json >> $log 2>&1
done
for b in 2 16; do
  step live_blocks_b$b
  timeout $(left 120) python bench/live_blocks.py --batch $b --out $W/live_blocks_b$b.json >> $log 2>&1
done
step done
