#!/bin/bash
# Session 19, lent 2 x H200, second call: DeepSpeed 0.19.8 ZeRO-2/3 (issue 9's acceptance; wheels
# in .whl), the host-bound suite (the real steps' spread between machines of one kind), and the
# SD UNet DDP step's per-rank host timeline (bench/ddp_rank_skew.py) on 1 and 2 GPUs.
# Usage on the device, carrying .whl: bash bench/device/h200x2_followup.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=560 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step deepspeed
timeout $(left 360) python bench/deepspeed.py real --out $W/deepspeed_real_h200x2.json --log $W/deepspeed_real_h200x2.log >> $log 2>&1
step host-bound-2gpu
timeout $(left 120) python bench/distributed.py real --suite host-bound --steps 12 --out $W/real_host_bound_h200x2.json >> $log 2>&1
for n in 1 2; do
  step "unet ddp x$n"
  timeout $(left 60) python -m torch.distributed.run --standalone --nproc-per-node $n bench/ddp_rank_skew.py \
    --out $W/skew_x${n}_$SECONDS.json >> $log 2>&1
done
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
