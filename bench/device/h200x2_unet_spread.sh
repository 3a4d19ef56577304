#!/bin/bash
# Session 38, lent 2 x H200, second call: the SD UNet under DDP on 1 and 2 GPUs, three rounds
# (h200x2_spread.sh's UNet runs failed: the carried torchao made diffusers' import fail). Carry
# .whl without torchao (diffusers 0.36.0). Usage: bash bench/device/h200x2_unet_spread.sh.
CALL_BUDGET_S=420 source bench/device/call_lib.sh
record_env
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for round in 1 2 3; do
  step "unet-$round"
  timeout $(left 130) python bench/nonllm.py real --only unet --out $W/session38_unet_r${round}_real_nonllm_h200x2.json >> $log 2>&1
done
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
