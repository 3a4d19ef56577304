#!/bin/bash
# Session 38, lent 2 x H200 (one host): a third real sample, in two rounds minutes apart, of the
# acceptance rows of issues 4, 8, 9 and 10 whose real time depends on the host (DTensor TP,
# Megatron TP2 + SP, DeepSpeed ZeRO-3, the SD UNet under DDP), with the host's reference step
# before, between and after. bench/ground_truth_spread.py reads the results with the earlier
# samples. Carry .whl (megatron-core 0.16.1, deepspeed 0.19.8 with hjson/pydantic, diffusers
# 0.36.0). Usage on the device: bash bench/device/h200x2_spread.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=570 source bench/device/call_lib.sh
record_env
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for round in 1 2; do
  step "distributed-tp-$round"
  timeout $(left 110) python bench/distributed.py real --configs tp-1b-s2k,tp-3b-s2k --steps 10 \
    --out $W/session38_r${round}_real_distributed_h200x2.json >> $log 2>&1
  step "megatron-tp2-sp-$round"
  timeout $(left 70) python bench/megatron.py real --configs tp2-sp --out $W/session38_r${round}_megatron_real_h200x2.json >> $log 2>&1
  step "unet-$round"
  timeout $(left 110) python bench/nonllm.py real --only unet --out $W/session38_r${round}_real_nonllm_h200x2.json >> $log 2>&1
  python -m phantom.engine.host > $W/host_reference_r${round}.json 2>> $log
done
step deepspeed-zero3
timeout $(left 200) python bench/deepspeed.py real --configs z3-1b,z3-1b-ga2 --out $W/session38_deepspeed_real_h200x2.json \
  --log $W/deepspeed_real_h200x2.log >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
