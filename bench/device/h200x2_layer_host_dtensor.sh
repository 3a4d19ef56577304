#!/bin/bash
# Session 40, lent 2 x H200: unprofiled host time per Block forward of examples/dist_train.py's
# DTensor tensor-parallel GPT (issue 4's tp-1b-s2k row) through bench/layer_host_times.py, two
# rounds, to set beside the Megatron layers of h200x2_layer_host.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=300 source bench/device/call_lib.sh
record_env
export CUDA_DEVICE_MAX_CONNECTIONS=1 LAYER_CLASS=gpt_train:Block
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for round in 1 2; do
  step tp-1b-s2k-$round
  timeout $(left 120) python -m torch.distributed.run --standalone --nproc-per-node 2 bench/layer_host_times.py \
    examples/dist_train.py --parallel tp --preset 1b --seq-len 2048 --batch-size 8 --steps 10 --warmup 3 \
    > $W/tp-1b-s2k_$round.log 2>&1
done
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
grep -h "LAYER_FWD_US\|summary:" $W/*.log | cut -c1-200 >> $log
