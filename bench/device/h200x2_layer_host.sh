#!/bin/bash
# Session 40, lent 2 x H200: unprofiled host time per Megatron-Core layer forward (bench/layer_host_times.py)
# for issue 8's tp2-sp and tp2-sp-sdpa rows and the 1-GPU host-bound replica, two rounds, and the host
# time of a small block alone and right after a collective (bench/collective_cold_block.py real). The
# reference step before and after. Carry .whl (megatron_core). Out: $OUT/call.tgz.
CALL_BUDGET_S=560 source bench/device/call_lib.sh
record_env
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step cold-block
timeout $(left 120) python bench/collective_cold_block.py real --out $W/cold_block_real >> $log 2>&1
step layers
timeout $(left 420) python bench/layer_host_times.py real --out $W --configs tp2-sp,tp2-sp-sdpa,replica --rounds 2 >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
