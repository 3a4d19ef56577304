#!/bin/bash
# Session 42, lent 2 x H200: issue 8's and 9's 2-GPU rows at batches that keep the GPUs busy
# (Megatron TP2 + SP tp2-sp-mb8 and tp2-sp-sdpa-s4k; DeepSpeed z3-1b-s4k and z2-1b-s4k: the same
# models as the host-bound rows, 4-8x the tokens per micro-batch) and DeepSpeed's pipeline engine
# on two stages (pp2-1b, added in session 45), two rounds, with the reference
# CPU step (python -m phantom.engine.host) before, between and after. Carry .whl (megatron-core
# 0.16.1, deepspeed 0.19.8, hjson, pydantic and its parts).
# Usage on the device: bash bench/device/h200x2_gpu_bound_s42.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=575 source bench/device/call_lib.sh
record_env
reference() { python -m phantom.engine.host > $W/host_reference_$1.json 2>> $log; }
reference before
build_fused_adam
for r in 1 2; do
  step megatron-r$r
  timeout $(left 150) python bench/megatron.py real --configs tp2-sp-mb8,tp2-sp-sdpa-s4k --out $W/s42_r${r}_megatron_real_h200x2.json >> $log 2>&1
  step deepspeed-r$r
  timeout $(left 200) python bench/deepspeed.py real --configs z3-1b-s4k,z2-1b-s4k,pp2-1b --out $W/s42_r${r}_deepspeed_real_h200x2.json --log $W/s42_r${r}_deepspeed.log >> $log 2>&1
  reference after_r$r
done
step done
grep -h "elapsed time per iteration\|median_iter_ms" $log $W/*.log | cut -c1-170 | tail -24
