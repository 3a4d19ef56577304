#!/bin/bash
# Session 19, lent 2 x H200, fifth call: the ranks' host spread once more, on whatever machine
# comes (GPUSpec.host_rank_spread is the median over every such run: bench/rank_host_spread.py):
# each rank's host marks through three TP steps (bench/tp_rank_desync.py) and the SD UNet DDP
# step (bench/ddp_rank_skew.py), the reference step before and after. Carry .whl (diffusers).
# Usage on the device: bash bench/device/h200x2_rank_spread_again.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=240 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; nproc; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for cfg in "1b 2048 8" "gpt2-350m 128 2" "3b 2048 4"; do
  set -- $cfg
  step "tp desync $1 s$2"
  timeout $(left 60) python -m torch.distributed.run --standalone --nproc-per-node 2 bench/tp_rank_desync.py \
    --preset $1 --seq-len $2 --batch-size $3 --steps 12 --out $W/desync_$1_s$2.json >> $log 2>&1
done
step "unet ddp x2"
timeout $(left 70) python -m torch.distributed.run --standalone --nproc-per-node 2 bench/ddp_rank_skew.py \
  --out $W/skew_x2.json >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
