#!/bin/bash
# Session 20, one lent GPU: host time by phase of a small, host-bound GPT step
# (bench/host_phases.py: forward, backward, clipping, optimizer, zero_grad), twice, with the
# host's reference step before and after. Usage on the device: bash bench/device/h200_host_phases.sh.
# Out: $OUT/call.tgz.
CALL_BUDGET_S=240 source bench/device/call_lib.sh
export CUDA_VISIBLE_DEVICES=0
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch; print(torch.__version__)"; lscpu | grep "Model name"; } > $W/env.txt 2>&1
step "reference before"
timeout $(left 60) python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for round in 1 2; do
  step "phases round $round"
  timeout $(left 80) python bench/host_phases.py --out $W/host_phases_real_round$round.json >> $log 2>&1
done
step "reference after"
timeout $(left 60) python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
