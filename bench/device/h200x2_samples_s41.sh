#!/bin/bash
# Session 41, lent 2 x H200: second real samples of the acceptance rows that had one or two
# (DeepSpeed z3-3b-ac and z2-3b-ac, Megatron dp2-distopt), one more of z3-1b-ga2 and tp2-sp,
# with the reference CPU step (python -m phantom.engine.host) timed between every two runs: the
# host's speed at the moment of each sample, and more timings for the lent hosts' typical
# reference step (bench/host_reference_survey.py). Carry .whl (megatron-core 0.16.1, deepspeed
# 0.19.8, hjson, pydantic and its parts). Usage on the device: bash
# bench/device/h200x2_samples_s41.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=570 source bench/device/call_lib.sh
record_env
reference() { python -m phantom.engine.host > $W/host_reference_$1.json 2>> $log; }
reference before
build_fused_adam
step deepspeed-3b
timeout $(left 200) python bench/deepspeed.py real --configs z3-3b-ac,z2-3b-ac --out $W/session41_3b_deepspeed_real_h200x2.json >> $log 2>&1
reference after_3b
step megatron
timeout $(left 130) python bench/megatron.py real --configs dp2-distopt,tp2-sp --out $W/session41_megatron_real_h200x2.json >> $log 2>&1
reference after_megatron
step deepspeed-1b
timeout $(left 120) python bench/deepspeed.py real --configs z3-1b-ga2,z3-1b --out $W/session41_1b_deepspeed_real_h200x2.json >> $log 2>&1
reference after
step done
grep -h "median_iter_ms\|ms/iter\|median" $log | cut -c1-160 | tail -20
