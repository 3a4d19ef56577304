#!/bin/bash
# Session 39: host us per call of single eager CUDA ops (bench/host_op_costs.py), two rounds, with
# the host reference step before and after. Usage on the device: bash bench/device/host_op_costs.sh
# Out: $OUT/call.tgz
CALL_BUDGET_S=200 source bench/device/call_lib.sh
record_env
step host_reference_before; python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for round in 1 2; do
  step round$round
  timeout $(left 60) python bench/host_op_costs.py --out $W/real_$round.json >> $log 2>&1
done
step host_reference_after; python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
