#!/bin/bash
# Session 27, lent 4-GPU machine: does the ranks' host spread grow with the ranks of a host as
# phantom assumes? phantom.engine.host.straggler_pace extrapolates the slowest rank's pace from
# 2-rank runs to W ranks (exp(sigma * E[max of W normals])). Here the same TP steps
# (bench/tp_rank_desync.py) run with 2 and then 4 ranks on one host, alternating, twice, with
# the reference step before and after. Usage on the device: bash bench/device/rank_spread_x4.sh
CALL_BUDGET_S=500 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; nproc; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for round in 1 2; do
  for cfg in "1b 2048 8" "gpt2-350m 128 2" "3b 2048 4"; do
    set -- $cfg
    for world in 2 4; do
      step "round $round tp desync $1 s$2 x$world"
      timeout $(left 70) python -m torch.distributed.run --standalone --nproc-per-node $world bench/tp_rank_desync.py \
        --preset $1 --seq-len $2 --batch-size $3 --steps 12 --out $W/desync_$1_s$2_x${world}_r$round.json >> $log 2>&1
    done
  done
done
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
