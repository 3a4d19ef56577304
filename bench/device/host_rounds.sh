#!/bin/bash
# One lent GPU: a host-time benchmark run twice (`python SCRIPT --out $W/NAME_round{1,2}.json`),
# with the host's reference step before and after (python -m phantom.engine.host), as
# bench/device/h200_list_ops.sh and h200_host_phases.sh call it.
# Usage on the device: bash bench/device/host_rounds.sh SCRIPT NAME. Out: $OUT/call.tgz.
script=$1 name=$2
CALL_BUDGET_S=240 source bench/device/call_lib.sh
export CUDA_VISIBLE_DEVICES=0
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch; print(torch.__version__)"; lscpu | grep "Model name"; } > $W/env.txt 2>&1
step "reference before"
timeout $(left 60) python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for round in 1 2; do
  step "$name round $round"
  timeout $(left 90) python $script --out $W/${name}_round$round.json >> $log 2>&1
done
step "reference after"
timeout $(left 60) python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
