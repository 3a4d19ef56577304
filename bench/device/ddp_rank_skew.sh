#!/bin/bash
# Session 18: each rank's host timeline of the SD UNet DDP step on 1 and 2 GPUs
# (bench/ddp_rank_skew.py), to see where the 2-GPU step's extra 40-58 ms goes. Carry .whl
# (diffusers). Usage on the device: bash bench/device/ddp_rank_skew.sh
CALL_BUDGET_S=300 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for n in 1 2 1 2; do
  step "unet ddp x$n"
  timeout $(left 100) python -m torch.distributed.run --standalone --nproc-per-node $n bench/ddp_rank_skew.py \
    --out $W/skew_x${n}_$SECONDS.json >> $log 2>&1
done
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
