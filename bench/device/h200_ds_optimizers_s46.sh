#!/bin/bash
# Session 46, lent 1 x H200: DeepSpeed's other fused optimizers. Builds FusedAdam, FusedLion and
# FusedLamb (nvcc, in parallel), times one step of each kernel and their host cost per call
# (bench/kernels/deepspeed_optimizers.py), then the end-to-end rows z2-1b-lion (ZeRO-2, bf16,
# FusedLion) and z0-1b-lamb (fp16, FusedLamb) with z2-1b (FusedAdam) beside them, on ONE GPU,
# two rounds. Carry .whl. Usage: bash bench/device/h200_ds_optimizers_s46.sh
CALL_BUDGET_S=560 source bench/device/call_lib.sh
record_env
build_ds_ops FusedAdamBuilder FusedLionBuilder FusedLambBuilder
step kernels
timeout $(left 150) python bench/kernels/deepspeed_optimizers.py --out $W/ds_optimizers_real.json >> $log 2>&1
for r in 1 2; do
  step round$r
  timeout $(left 150) python bench/deepspeed.py real --nproc 1 --configs z2-1b-lion,z0-1b-lamb,z2-1b \
    --no-adam-kernels --out $W/ds_opt_1gpu_real_r$r.json --log $W/round$r.log >> $log 2>&1
done
step done
grep -h "^summary\|OVERFLOW\|overflow" $W/round*.log | cut -c1-140 | head -20
