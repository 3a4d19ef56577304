#!/bin/bash
# Session 40, lent 2 x H200: bench/layer_host_times.py with the backward call timed as well
# (BACKWARD_US), for Megatron tp2-sp and the 1-GPU replica, and DTensor tp-1b-s2k, to see which
# phase phantom's host charge is off in. Carry .whl (megatron_core). Out: $OUT/call.tgz.
CALL_BUDGET_S=420 source bench/device/call_lib.sh
record_env
export CUDA_DEVICE_MAX_CONNECTIONS=1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
T="python -m torch.distributed.run --standalone"
MEG="examples/megatron/pretrain_gpt.py --preset gpt-1.7b --seq-length 2048 --micro-batch-size 2 --global-batch-size 8 --train-iters 6"
REP="examples/megatron/pretrain_gpt.py --preset gpt-1.7b --seq-length 512 --micro-batch-size 1 --global-batch-size 4 --train-iters 8 --use-distributed-optimizer --core-attention sdpa --hidden-size 256 --ffn-hidden-size 1024 --num-attention-heads 4 --vocab-size 4096"
for round in 1 2; do
  step tp2-sp-$round
  timeout $(left 100) $T --nproc-per-node 2 bench/layer_host_times.py $MEG --tp 2 --sequence-parallel > $W/tp2-sp_$round.log 2>&1
  step tp-1b-s2k-$round
  LAYER_CLASS=gpt_train:Block timeout $(left 80) $T --nproc-per-node 2 bench/layer_host_times.py \
    examples/dist_train.py --parallel tp --preset 1b --seq-len 2048 --batch-size 8 --steps 10 --warmup 3 > $W/tp-1b-s2k_$round.log 2>&1
done
step replica-1
timeout $(left 80) $T --nproc-per-node 1 bench/layer_host_times.py $REP > $W/replica_1.log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
grep -h "LAYER_FWD_US\|BACKWARD_US\|summary:" $W/*.log | cut -c1-200 >> $log
