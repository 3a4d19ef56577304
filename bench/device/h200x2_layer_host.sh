#!/bin/bash
# Session 40, lent 2 x H200: unprofiled host time per Megatron-Core layer forward (bench/layer_host_times.py)
# for issue 8's tp2-sp and tp2-sp-sdpa rows and the 1-GPU host-bound replica, and the host time of
# a small block alone and right after a collective (bench/collective_cold_block.py real). The
# reference step before and after. Carry .whl (megatron_core). Out: $OUT/call.tgz.
CALL_BUDGET_S=560 source bench/device/call_lib.sh
record_env
export CUDA_DEVICE_MAX_CONNECTIONS=1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step cold-block
timeout $(left 120) python bench/collective_cold_block.py real --out $W/cold_block_real >> $log 2>&1
T="python -m torch.distributed.run --standalone"
MEG="examples/megatron/pretrain_gpt.py --preset gpt-1.7b --seq-length 2048 --micro-batch-size 2 --global-batch-size 8 --train-iters 6"
REP="examples/megatron/pretrain_gpt.py --preset gpt-1.7b --seq-length 512 --micro-batch-size 1 --global-batch-size 4 --train-iters 8 --use-distributed-optimizer --core-attention sdpa --hidden-size 256 --ffn-hidden-size 1024 --num-attention-heads 4 --vocab-size 4096"
for round in 1 2; do
  step tp2-sp-$round
  timeout $(left 110) $T --nproc-per-node 2 bench/layer_host_times.py $MEG --tp 2 --sequence-parallel > $W/tp2-sp_$round.log 2>&1
  step tp2-sp-sdpa-$round
  timeout $(left 110) $T --nproc-per-node 2 bench/layer_host_times.py $MEG --tp 2 --sequence-parallel --core-attention sdpa > $W/tp2-sp-sdpa_$round.log 2>&1
  step replica-$round
  timeout $(left 90) $T --nproc-per-node 1 bench/layer_host_times.py $REP > $W/replica_$round.log 2>&1
done
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
grep -h "LAYER_FWD_US\|elapsed time per iteration" $W/*.log | cut -c1-200 >> $log
