#!/bin/bash
# Session 46, lent 1 x H200, third call: a second real sample of the optimizer rows (z2-1b-lion,
# z0-1b-lamb, z2-1b on one GPU, one round), and the node's side of two host costs phantom
# charges too much in optimizer-step microbenchmarks: torch's Optimizer.step wrapper (its
# record_function) against the bare FusedLion step, and 64 `.data` reads inside and after a
# record_function (the probes of data/session46, run as plain scripts). Carry .whl.
# Usage: bash bench/device/h200_ds_optimizers_again_s46.sh
CALL_BUDGET_S=400 source bench/device/call_lib.sh
record_env
build_ds_ops FusedAdamBuilder FusedLionBuilder FusedLambBuilder
step probes
timeout $(left 60) python bench/data/session46/optimizer_step_wrapper_ab.py > $W/wrapper_ab.txt 2>&1
timeout $(left 60) python bench/data/session46/record_function_ab.py > $W/record_function_ab.txt 2>&1
step round3
timeout $(left 200) python bench/deepspeed.py real --nproc 1 --configs z2-1b-lion,z0-1b-lamb,z2-1b \
  --no-adam-kernels --out $W/ds_opt_1gpu_real_r3.json --log $W/round3.log >> $log 2>&1
step done
cat $W/wrapper_ab.txt $W/record_function_ab.txt
grep -h "^summary" $W/round3.log | cut -c1-110
