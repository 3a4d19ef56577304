#!/bin/bash
# Session 27: kernels/measure.py's gemm_wide_c grid (wgrad GEMMs with a bf16 output and with an
# fp32 C accumulated in the same call, 48 shapes), twice. The call that produced
# data/session27/device_wide_c_live_h100/ then ran bench/device/live_blocks.sh's loop too (its
# live_blocks output there is superseded). Usage: bash bench/device/wide_c_and_live_blocks.sh
source bench/device/call_lib.sh
record_env
for round in 1 2; do
  step wide_c_round$round
  timeout $(left 150) python bench/kernels/measure.py --only gemm_wide_c --budget-s 130 \
    --out $W/wide_c_round$round.json >> $log 2>&1
done
step done
