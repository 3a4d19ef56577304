#!/bin/bash
# Session 44, lent 1 x H200: what the pace process (`phantom run --host-pace process`,
# phantom/engine/pace.py) reads on a GPU node, idle and beside real DeepSpeed ZeRO-3 training on
# the same host (z3-1b, z3-3b-ac on one GPU), against the node's best reference step: the node's
# own pace-statistic slowdown under a training run's host load, which a pace-converted run would
# put on top of this machine's. Carry .whl. Usage on the device: bash bench/device/h200_pace_node_s44.sh
CALL_BUDGET_S=480 source bench/device/call_lib.sh
record_env
reference() { step "reference $1"; python -m phantom.engine.host > $W/host_reference_$1.json 2>> $log; }
reference before
step pace-log
python bench/pace_log.py $W/pace_log.jsonl 2>> $log &
PACE=$!
sleep 45
step train-start
build_fused_adam
step train
timeout $(left 240) python bench/deepspeed.py real --nproc 1 --configs z3-1b,z3-3b-ac \
  --out $W/pace_node_real.json --log $W/train.log >> $log 2>&1
step train-end
sleep 30
kill $PACE
reference after
step done
grep -h "^summary" $W/train.log | cut -c1-100
wc -l $W/pace_log.jsonl
