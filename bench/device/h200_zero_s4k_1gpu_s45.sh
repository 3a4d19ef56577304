#!/bin/bash
# Session 45, lent 1 x H200: the GPU-bound ZeRO rows on ONE GPU (z3-1b-s4k, z2-1b-s4k: Llama 1B,
# 6 x 4096 tokens a step; their 2-GPU real runs wait for a 2-GPU machine), two rounds, with
# pp1-1b once more in each. Carry .whl. Usage: bash bench/device/h200_zero_s4k_1gpu_s45.sh
CALL_BUDGET_S=330 source bench/device/call_lib.sh
record_env
build_fused_adam
for r in 1 2; do
  step round$r
  timeout $(left 140) python bench/deepspeed.py real --nproc 1 --configs z3-1b-s4k,z2-1b-s4k,pp1-1b \
    --no-adam-kernels --out $W/s4k_1gpu_real_r$r.json --log $W/round$r.log >> $log 2>&1
done
step done
grep -h "^summary" $W/round*.log | cut -c1-110
