#!/bin/bash
# Session 40, lent 2 x H200: unprofiled host time per Block forward of examples/dist_train.py's
# DTensor tensor-parallel GPT (issue 4's tp-1b-s2k row) through bench/layer_host_times.py, two
# rounds, to set beside the Megatron layers of h200x2_layer_host.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=300 source bench/device/call_lib.sh
record_env
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step tp-1b-s2k
timeout $(left 240) python bench/layer_host_times.py real --out $W --configs tp-1b-s2k --rounds 2 >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
