#!/bin/bash
# Session 40, lent 2 x H200: bench/layer_host_times.py with the backward call timed as well
# (BACKWARD_US), for Megatron tp2-sp and DTensor tp-1b-s2k (two rounds) and the 1-GPU replica
# (one), to see which phase phantom's host charge is off in. Carry .whl (megatron_core).
# Out: $OUT/call.tgz.
CALL_BUDGET_S=420 source bench/device/call_lib.sh
record_env
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step layers
timeout $(left 300) python bench/layer_host_times.py real --out $W --configs tp2-sp,tp-1b-s2k --rounds 2 >> $log 2>&1
timeout $(left 90) python bench/layer_host_times.py real --out $W --configs replica >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
