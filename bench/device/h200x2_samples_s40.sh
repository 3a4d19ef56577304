#!/bin/bash
# Session 40, lent 2 x H200: more real samples of the rows whose real time moves most between
# runs (bench/ground_truth_spread.py): DeepSpeed ZeRO-3 z3-1b (twice) and z3-1b-ga2, ZeRO-2 z2-1b,
# Megatron tp2-sp and tp2-sp-sdpa (bench/megatron.py real, no wrapper), with the reference step
# before, between and after. Carry .whl (megatron-core 0.16.1, deepspeed 0.19.8, hjson, pydantic
# and its parts). Usage on the device: bash bench/device/h200x2_samples_s40.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=570 source bench/device/call_lib.sh
record_env
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
build_fused_adam
step deepspeed-r1
timeout $(left 200) python bench/deepspeed.py real --configs z3-1b,z2-1b,z3-1b-ga2 --out $W/session40_r1_deepspeed_real_h200x2.json >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_between.json 2>> $log
step megatron
timeout $(left 130) python bench/megatron.py real --configs tp2-sp,tp2-sp-sdpa --out $W/session40_megatron_real_h200x2.json >> $log 2>&1
step deepspeed-r2
timeout $(left 80) python bench/deepspeed.py real --configs z3-1b --out $W/session40_r2_deepspeed_real_h200x2.json >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
grep -h "median_iter_ms\|ms/iter\|median" $log | cut -c1-160 | tail -20
